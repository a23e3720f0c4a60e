// Storages: create one, browse its objects by prefix, upload from the browser straight
// to the store (presigned, multipart for large files, with progress), download, and
// manage its S3 accessors (the secret is shown once).
import { useState } from "preact/hooks";
import { del, enc, get, items, post } from "../api";
import { Link } from "../nav";
import { ErrorNote, Field, confirmed, Page, Progress, Show, ShownOnce, StateBadge, Table, bytes, useAction, useLoad, when, Form } from "../ui";
import { type Project, ProjectField } from "./projects";

interface Storage {
  storageID: string;
  kind: string;
  state: string;
  sizeBytes: number;
  usedBytes: number | null;
  attachedTo: string[];
  createdAt: string;
  /** The project it belongs to (decision 140): its members see it. */
  project: string;
}

interface ObjectEntry {
  key: string;
  sizeBytes: number;
  lastModified: string | null;
}

interface Listing {
  objects: ObjectEntry[];
  prefixes: string[];
  nextCursor: string | null;
}

interface UploadPlan {
  url: string | null;
  uploadID: string | null;
  partSizeBytes: number | null;
  parts: { partNumber: number; url: string }[];
}

interface Accessor {
  accessorID: string;
  name: string | null;
  mode: string;
  expiresAt: string | null;
  instanceID: string | null;
  createdAt: string;
}

const GIB = 1024 ** 3;
/** Parts in flight at once: the browser's per-host connection limit is six. */
const PARTS_IN_FLIGHT = 4;

export function StoragesPage() {
  const list = useLoad(() => get<{ items: Storage[] }>("/storages?limit=100").then(items), [], 5000);
  const [storageID, setStorageID] = useState("");
  const [kind, setKind] = useState("object");
  const [sizeGiB, setSizeGiB] = useState("10");
  const projects = useLoad(() => get<Project[]>("/projects"), []);
  const [project, setProject] = useState("");
  const action = useAction();
  const create = (e: Event) => {
    e.preventDefault();
    const body = { storageID, kind, sizeBytes: Math.round(Number(sizeGiB) * GIB), ...(project ? { project } : {}) };
    void action.run(async () => {
      await post("/storages", body);
      setStorageID("");
      list.reload();
    });
  };
  return (
    <Page title="Storages">
      <Form action={action} class="card form-grid" onSubmit={create} aria-labelledby="create-storage">
        <h2 id="create-storage">Create a storage</h2>
        <Field label="Name (id)" name="storageID" value={storageID} onInput={setStorageID} required placeholder="models" />
        <Field label="Kind" name="kind" value={kind} onInput={setKind} options={["object", "volume"]} />
        <Field label="Size (GiB)" name="sizeGiB" field="sizeBytes" type="number" value={sizeGiB} onInput={setSizeGiB} required />
        <ProjectField name="storage-project" projects={projects.data ?? []} value={project} onInput={setProject} />
        <ErrorNote error={action.error} />
        <button type="submit" disabled={action.busy}>
          Create
        </button>
      </Form>
      <h2>Your storages</h2>
      <Show loaded={list} empty={(rows) => !rows.length} emptyText="No storages yet.">
        {(rows) => (
          <Table
            caption="Storages"
            rows={rows}
            rowKey={(s) => s.storageID}
            columns={[
              {
                label: "Storage",
                cell: (s) => (s.kind === "object" ? <Link href={`/storages/${enc(s.storageID)}`}>{s.storageID}</Link> : s.storageID),
              },
              { label: "Kind", cell: (s) => s.kind },
              { label: "State", cell: (s) => <StateBadge state={s.state} /> },
              { label: "Used", cell: (s) => `${bytes(s.usedBytes)} of ${bytes(s.sizeBytes)}`, numeric: true },
              { label: "Attached to", cell: (s) => s.attachedTo.join(", ") || "—" },
              ...((projects.data ?? []).length > 1 ? [{ label: "Project", cell: (s: Storage) => s.project }] : []),
              {
                label: "Actions",
                cell: (s) => (
                  <button type="button" class="danger" onClick={() => confirmed(`Delete storage ${s.storageID} and everything in it?`) && void action.run(() => del(`/storages/${enc(s.storageID)}?force=true`).then(list.reload))}>
                    Delete
                  </button>
                ),
              },
            ]}
          />
        )}
      </Show>
    </Page>
  );
}

export function StoragePage(props: { storageID: string }) {
  const base = `/storages/${enc(props.storageID)}`;
  const [prefix, setPrefix] = useState("");
  const [cursor, setCursor] = useState<string | null>(null);
  const listing = useLoad(
    () => get<Listing>(`${base}/objects?delimiter=%2F&limit=200&prefix=${enc(prefix)}${cursor ? `&cursor=${enc(cursor)}` : ""}`),
    [prefix, cursor],
  );
  const action = useAction();
  const go = (next: string) => {
    setPrefix(next);
    setCursor(null);
  };
  const download = (key: string) =>
    action.run(async () => {
      const link = await post<{ url: string }>(`${base}/downloads`, { key });
      const anchor = document.createElement("a");
      anchor.href = link.url;
      anchor.download = key.split("/").pop() ?? key;
      anchor.click();
    });
  const crumbs = prefix.split("/").filter(Boolean);
  return (
    <Page title={`Storage ${props.storageID}`} actions={<Link href="/storages">All storages</Link>}>
      <Uploader base={base} prefix={prefix} onUploaded={listing.reload} />
      <nav aria-label="Prefix" class="crumbs">
        <button type="button" class="link" onClick={() => go("")}>
          {props.storageID}
        </button>
        {crumbs.map((part, i) => (
          <>
            {" / "}
            <button type="button" class="link" onClick={() => go(`${crumbs.slice(0, i + 1).join("/")}/`)}>
              {part}
            </button>
          </>
        ))}
      </nav>
      <ErrorNote error={action.error} />
      <Show loaded={listing} empty={(l) => !l.objects.length && !l.prefixes.length} emptyText="No objects under this prefix.">
        {(l) => (
          <>
            {l.prefixes.length > 0 && (
              <ul class="prefixes" aria-label="Folders">
                {l.prefixes.map((p) => (
                  <li>
                    <button type="button" class="link" onClick={() => go(p)}>
                      {p.slice(prefix.length)}
                    </button>
                  </li>
                ))}
              </ul>
            )}
            <Table
              caption="Objects"
              rows={l.objects}
              rowKey={(o) => o.key}
              columns={[
                { label: "Object", cell: (o) => o.key.slice(prefix.length) },
                { label: "Size", cell: (o) => bytes(o.sizeBytes), numeric: true },
                { label: "Modified", cell: (o) => when(o.lastModified) },
                {
                  label: "Actions",
                  cell: (o) => (
                    <button type="button" onClick={() => void download(o.key)} aria-label={`Download ${o.key}`}>
                      Download
                    </button>
                  ),
                },
              ]}
            />
            {l.nextCursor && (
              <button type="button" onClick={() => setCursor(l.nextCursor)}>
                Next page
              </button>
            )}
          </>
        )}
      </Show>
      <Accessors base={base} />
    </Page>
  );
}

function Uploader(props: { base: string; prefix: string; onUploaded: () => void }) {
  const [files, setFiles] = useState<File[]>([]);
  const [sent, setSent] = useState(0);
  const [done, setDone] = useState<string | null>(null);
  const action = useAction();
  const total = files.reduce((sum, f) => sum + f.size, 0);
  const upload = (e: Event) => {
    e.preventDefault();
    setSent(0);
    setDone(null);
    let before = 0;
    void action.run(async () => {
      for (const file of files) {
        const base = before;
        await uploadFile(props.base, props.prefix + file.name, file, (n) => setSent(base + n));
        before += file.size;
      }
      setDone(`Uploaded ${files.length} file${files.length === 1 ? "" : "s"} (${bytes(total)}).`);
      props.onUploaded();
    });
  };
  return (
    <Form action={action} class="card" onSubmit={upload} aria-labelledby="upload-title">
      <h2 id="upload-title">Upload to {props.prefix || "the top"}</h2>
      <label class="field" for="upload-files">
        <span>Files</span>
        <input id="upload-files" type="file" multiple onChange={(e) => setFiles(Array.from(e.currentTarget.files ?? []))} />
      </label>
      {(action.busy || sent > 0) && <Progress value={sent} max={total} label="Upload progress" />}
      {done && <p role="status">{done}</p>}
      <ErrorNote error={action.error} />
      <button type="submit" disabled={action.busy || !files.length}>
        {action.busy ? "Uploading…" : "Upload"}
      </button>
    </Form>
  );
}

/** One file: a single presigned PUT when small, else presigned multipart with a few parts
 * in flight; `progress` gets the bytes sent so far. */
async function uploadFile(base: string, key: string, file: File, progress: (sent: number) => void) {
  const plan = await post<UploadPlan>(`${base}/uploads`, { key, sizeBytes: file.size });
  if (plan.url) {
    await putBlob(plan.url, file, progress);
    return;
  }
  const partSize = plan.partSizeBytes!;
  const count = Math.ceil(file.size / partSize);
  const urls = new Map(plan.parts.map((p) => [p.partNumber, p.url]));
  const missing = Array.from({ length: count }, (_, i) => i + 1).filter((n) => !urls.has(n));
  for (let i = 0; i < missing.length; i += 100) {
    const more = await post<{ parts: { partNumber: number; url: string }[] }>(`${base}/uploads/${enc(plan.uploadID!)}/parts`, {
      partNumbers: missing.slice(i, i + 100),
    });
    more.parts.forEach((p) => urls.set(p.partNumber, p.url));
  }
  const sentByPart = new Map<number, number>();
  const etags = new Map<number, string>();
  const queue = Array.from({ length: count }, (_, i) => i + 1);
  const worker = async () => {
    for (let number = queue.shift(); number !== undefined; number = queue.shift()) {
      const part = file.slice((number - 1) * partSize, number * partSize);
      const n = number;
      etags.set(
        n,
        await putBlob(urls.get(n)!, part, (sent) => {
          sentByPart.set(n, sent);
          progress([...sentByPart.values()].reduce((a, b) => a + b, 0));
        }),
      );
    }
  };
  await Promise.all(Array.from({ length: Math.min(PARTS_IN_FLIGHT, count) }, worker));
  const parts = [...etags.entries()].sort((a, b) => a[0] - b[0]).map(([partNumber, etag]) => ({ partNumber, etag }));
  await post(`${base}/uploads/${enc(plan.uploadID!)}/complete`, { parts });
}

/** A PUT to a presigned URL with upload progress (fetch has none); answers the ETag. */
function putBlob(url: string, body: Blob, progress: (sent: number) => void): Promise<string> {
  return new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open("PUT", url);
    request.upload.onprogress = (e) => progress(e.loaded);
    request.onload = () => {
      if (request.status >= 200 && request.status < 300) {
        progress(body.size);
        resolve(request.getResponseHeader("ETag") ?? "");
      } else {
        const code = /<Code>([^<]+)<\/Code>/.exec(request.responseText)?.[1] ?? `HTTP ${request.status}`;
        reject(new Error(`The object store refused a part: ${code}`));
      }
    };
    request.onerror = () => reject(new Error("The object store cannot be reached from this browser."));
    request.send(body);
  });
}

function Accessors(props: { base: string }) {
  const list = useLoad(() => get<{ items: Accessor[] }>(`${props.base}/accessors`).then(items), [props.base]);
  const [mode, setMode] = useState("read-only");
  const [secret, setSecret] = useState<string | null>(null);
  const action = useAction();
  const create = (e: Event) => {
    e.preventDefault();
    void action.run(async () => {
      const made = await post<{ accessorID: string; secretAccessKey: string; endpoint: string; bucket: string }>(
        `${props.base}/accessors`,
        { mode },
      );
      setSecret(`access key ${made.accessorID}\nsecret key ${made.secretAccessKey}\nendpoint ${made.endpoint}\nbucket ${made.bucket}`);
      list.reload();
    });
  };
  return (
    <section class="card" aria-labelledby="accessors-title">
      <h2 id="accessors-title">S3 accessors</h2>
      <p class="muted">Credentials for this storage alone, for tools that speak S3.</p>
      {secret && <ShownOnce label="The new accessor's secret" secret={secret} onDone={() => setSecret(null)} />}
      <Form action={action} class="inline" onSubmit={create}>
        <Field label="Mode" name="mode" value={mode} onInput={setMode} options={["read-only", "read-write"]} />
        <button type="submit" disabled={action.busy}>
          New accessor
        </button>
      </Form>
      <ErrorNote error={action.error} />
      <Show loaded={list} empty={(rows) => !rows.length} emptyText="No accessors.">
        {(rows) => (
          <Table
            caption="Accessors"
            rows={rows}
            rowKey={(a) => a.accessorID}
            columns={[
              { label: "Access key", cell: (a) => <code>{a.accessorID}</code> },
              { label: "Mode", cell: (a) => a.mode },
              { label: "For", cell: (a) => a.instanceID ?? "you" },
              { label: "Created", cell: (a) => when(a.createdAt) },
              { label: "Expires", cell: (a) => when(a.expiresAt) },
              {
                label: "Actions",
                cell: (a) => (
                  <button type="button" class="danger" onClick={() => confirmed(`Revoke credentials ${a.accessorID}? They stop working at once.`) && void action.run(() => del(`${props.base}/accessors/${enc(a.accessorID)}`).then(list.reload))}>
                    Revoke
                  </button>
                ),
              },
            ]}
          />
        )}
      </Show>
    </section>
  );
}
