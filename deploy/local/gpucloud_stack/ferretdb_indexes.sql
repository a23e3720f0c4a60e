-- Index-backed equality for FerretDB 1.24 on PostgreSQL (decision 60).
--
-- FerretDB hands an equality filter on a top-level field to PostgreSQL as JSONB
-- containment, `_jsonb -> 'field' @> '"value"'`, `_id` included. The btree
-- expression indexes it creates for createIndexes (and for `_id`) cannot serve `@>`,
-- so every such query, a lookup by `_id` too, scans the whole table. A GIN index
-- (jsonb_path_ops) on the same expression serves `@>`. This trigger adds one next to
-- every btree index FerretDB creates, one per indexed field; the last statement adds
-- them to tables made before the trigger existed. Run by the local stack's FerretDB
-- step on every start, as the database's owner; every statement is idempotent.

SET client_min_messages = warning;

CREATE OR REPLACE FUNCTION public.gpucloud_gin_beside(btree oid) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    indexed regclass;
    columns int;
    field text;
BEGIN
    SELECT i.indrelid, i.indnatts INTO indexed, columns
      FROM pg_index i
      JOIN pg_class c ON c.oid = i.indexrelid
      JOIN pg_am am ON am.oid = c.relam
     WHERE i.indexrelid = btree AND am.amname = 'btree';
    IF indexed IS NULL THEN
        RETURN;  -- not a btree (the GIN indexes made here land in this branch)
    END IF;
    FOR k IN 1 .. columns LOOP
        -- FerretDB writes a top-level field's key as `(_jsonb -> 'field'::text)`.
        field := substring(pg_get_indexdef(btree, k, true) FROM '^\(?_jsonb -> ''([^'']+)''::text\)?$');
        CONTINUE WHEN field IS NULL;
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS %I ON %s USING gin ((_jsonb -> %L) jsonb_path_ops)'
            ' WITH (fastupdate = off)',
            'gin_' || left(md5(indexed::text || '/' || field), 20), indexed, field
        );
    END LOOP;
END
$fn$;

CREATE OR REPLACE FUNCTION public.gpucloud_gin_on_create_index() RETURNS event_trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    created record;
BEGIN
    FOR created IN
        SELECT objid FROM pg_event_trigger_ddl_commands() WHERE object_type = 'index'
    LOOP
        PERFORM public.gpucloud_gin_beside(created.objid);
    END LOOP;
END
$fn$;

DROP EVENT TRIGGER IF EXISTS gpucloud_gin_on_create_index;
CREATE EVENT TRIGGER gpucloud_gin_on_create_index ON ddl_command_end
    WHEN TAG IN ('CREATE INDEX')
    EXECUTE FUNCTION public.gpucloud_gin_on_create_index();

DO $backfill$
BEGIN
    PERFORM public.gpucloud_gin_beside(i.indexrelid)
       FROM pg_index i
       JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attname = '_jsonb';
END
$backfill$;
