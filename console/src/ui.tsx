// The console's building blocks: loading a resource with its error, tables, forms,
// notices and small SVG charts. No page is ever blank: each shows its data, a
// "nothing yet" line, a loading line or the error in words.
import type { ComponentChildren, JSX } from "preact";
import { createContext } from "preact";
import { useCallback, useContext, useEffect, useRef, useState } from "preact/hooks";
import { describe, fieldMessages, type FieldMessages } from "./api";

export interface Loaded<T> {
  data: T | undefined;
  error: string | null;
  loading: boolean;
  reload: () => void;
}

/** `load` on mount and whenever `deps` change; every `refreshMs` too, if given. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[], refreshMs?: number): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  const reload = useCallback(() => setTick((n) => n + 1), []);
  useEffect(() => {
    let live = true;
    setLoading(true);
    load()
      .then((value) => live && (setData(value), setError(null)))
      .catch((e: unknown) => live && setError(describe(e)))
      .finally(() => live && setLoading(false));
    return () => {
      live = false;
    };
  }, [...deps, tick]);
  useEffect(() => {
    if (!refreshMs) return undefined;
    const timer = setInterval(reload, refreshMs);
    return () => clearInterval(timer);
  }, [refreshMs, reload]);
  return { data, error, loading, reload };
}

/** Runs an action, keeping its error for the page to show. */
export interface Action {
  run: (action: () => Promise<unknown>) => Promise<boolean>;
  error: string | null;
  /** The last refusal's messages for single fields, shown beside them (Form, Field). */
  fields: FieldMessages;
  busy: boolean;
  clear: () => void;
}

const NO_FIELD_MESSAGES: FieldMessages = { byPath: {}, byLast: {} };

export function useAction(): Action {
  const [error, setError] = useState<string | null>(null);
  const [fields, setFields] = useState<FieldMessages>(NO_FIELD_MESSAGES);
  const [busy, setBusy] = useState(false);
  const clear = () => (setError(null), setFields(NO_FIELD_MESSAGES));
  const run = async (action: () => Promise<unknown>) => {
    setBusy(true);
    clear();
    try {
      await action();
      return true;
    } catch (e) {
      setError(describe(e));
      setFields(fieldMessages(e));
      return false;
    } finally {
      setBusy(false);
    }
  };
  return { run, error, fields, busy, clear };
}

const FormMessages = createContext<FieldMessages>(NO_FIELD_MESSAGES);

/** A form whose fields show the API's message about them, from `action`'s last refusal.
 * What was typed stays: only a success clears a form. */
export function Form(props: {
  action: Action;
  onSubmit: (e: Event) => void;
  class?: string;
  "aria-labelledby"?: string;
  children: ComponentChildren;
}) {
  return (
    <FormMessages.Provider value={props.action.fields}>
      <form class={props.class} onSubmit={props.onSubmit} aria-labelledby={props["aria-labelledby"]}>
        {props.children}
      </form>
    </FormMessages.Provider>
  );
}

export function Page(props: { title: string; actions?: ComponentChildren; children: ComponentChildren }) {
  return (
    <section class="page" aria-labelledby="page-title">
      <header class="page-head">
        <h1 id="page-title">{props.title}</h1>
        <div class="page-actions">{props.actions}</div>
      </header>
      {props.children}
    </section>
  );
}

export function ErrorNote(props: { error: string | null }) {
  if (!props.error) return null;
  return (
    <p class="error" role="alert">
      {props.error}
    </p>
  );
}

export function Notice(props: { children: ComponentChildren }) {
  return (
    <p class="notice" role="status">
      {props.children}
    </p>
  );
}

/** A resource's data, or why there is none. */
export function Show<T>(props: {
  loaded: Loaded<T>;
  empty?: (data: T) => boolean;
  emptyText?: string;
  children: (data: T) => ComponentChildren;
}) {
  const { data, error, loading } = props.loaded;
  if (error && data === undefined) return <ErrorNote error={error} />;
  if (data === undefined) return <p class="muted">{loading ? "Loading…" : "Nothing to show."}</p>;
  return (
    <>
      <ErrorNote error={error} />
      {props.empty?.(data) ? <p class="muted">{props.emptyText ?? "Nothing here yet."}</p> : props.children(data)}
    </>
  );
}

export interface Column<T> {
  label: string;
  cell: (row: T) => ComponentChildren;
  numeric?: boolean;
}

export function Table<T>(props: { caption: string; rows: T[]; columns: Column<T>[]; rowKey: (row: T) => string }) {
  return (
    <div class="table-wrap">
      <table>
        <caption class="visually-hidden">{props.caption}</caption>
        <thead>
          <tr>
            {props.columns.map((c) => (
              <th scope="col" class={c.numeric ? "num" : undefined}>
                {c.label}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {props.rows.map((row) => (
            <tr key={props.rowKey(row)}>
              {props.columns.map((c) => (
                <td class={c.numeric ? "num" : undefined} data-label={c.label}>
                  {c.cell(row)}
                </td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** Ask before an action that cannot be undone: stop, delete, revoke, quarantine. */
export function confirmed(question: string): boolean {
  return window.confirm(question);
}

export function Field(props: {
  label: string;
  name: string;
  value: string;
  onInput: (value: string) => void;
  type?: string;
  /** A number field's granularity: "0.01" for money, "any" for fractions. */
  step?: string;
  required?: boolean;
  placeholder?: string;
  autocomplete?: string;
  /** A select's values; the empty value reads `emptyLabel`, others `optionLabel`'s
   * (by default the value itself). */
  options?: string[];
  emptyLabel?: string;
  optionLabel?: (value: string) => string;
  /** The body field the API names in its errors (`admin.email`); by default the
   * name's last part (`user-email`: `email`). */
  field?: string;
}) {
  const id = `field-${props.name}`;
  const messages = useContext(FormMessages);
  const own = props.field ?? props.name.split("-").pop() ?? props.name;
  // Its own path, a part of it (`env.0.name` for `env`), or, named by default, any path ending in it.
  const message =
    messages.byPath[own] ??
    Object.entries(messages.byPath).find(([path]) => path.startsWith(`${own}.`))?.[1] ??
    (props.field ? undefined : messages.byLast[own]);
  const invalid = message
    ? { "aria-invalid": true as const, "aria-describedby": `${id}-error` }
    : {};
  const onInput = (e: JSX.TargetedEvent<HTMLInputElement | HTMLSelectElement>) =>
    props.onInput(e.currentTarget.value);
  return (
    <label class="field" for={id}>
      <span>{props.label}</span>
      {props.options ? (
        <select id={id} name={props.name} value={props.value} onChange={onInput} required={props.required} {...invalid}>
          {props.options.map((o) => (
            <option value={o}>{o ? (props.optionLabel?.(o) ?? o) : props.emptyLabel || "—"}</option>
          ))}
        </select>
      ) : (
        <input
          id={id}
          name={props.name}
          type={props.type ?? "text"}
          step={props.step}
          value={props.value}
          onInput={onInput}
          required={props.required}
          placeholder={props.placeholder}
          autocomplete={props.autocomplete}
          {...invalid}
        />
      )}
      {message && (
        <small id={`${id}-error`} class="field-error">
          {message}
        </small>
      )}
    </label>
  );
}

export function StateBadge(props: { state: string }) {
  return <span class={`badge state-${props.state.replace(/[^a-z_]/g, "")}`}>{props.state}</span>;
}

/** A secret shown once, with a way to copy it. */
export function ShownOnce(props: { label: string; secret: string; onDone: () => void }) {
  return (
    <div class="once" role="status">
      <p>
        <strong>{props.label}</strong> — shown this once; keep it now.
      </p>
      <code data-testid="secret">{props.secret}</code>
      <div>
        <button type="button" onClick={() => void navigator.clipboard?.writeText(props.secret)}>
          Copy
        </button>
        <button type="button" onClick={props.onDone}>
          Done
        </button>
      </div>
    </div>
  );
}

/** A moment in the reader's own time, saying which zone that is, the year in full. */
export const when = (iso: string | null | undefined): string =>
  iso
    ? new Date(iso).toLocaleString(undefined, {
        year: "numeric",
        month: "short",
        day: "numeric",
        hour: "2-digit",
        minute: "2-digit",
        second: "2-digit",
        timeZoneName: "short",
      })
    : "—";

export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

export const money = (amount: string | number): string => `$${Number(amount).toFixed(2)}`;
export const cents = (n: number): string => `$${(n / 100).toFixed(2)}`;

export interface Series {
  name: string;
  points: { x: number; y: number }[];
}

const PALETTE = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2"];

/** A line chart in SVG: time on x, one line per series, with its own legend. */
export function LineChart(props: { title: string; unit: string; series: Series[]; yMax?: number }) {
  const all = props.series.flatMap((s) => s.points);
  if (!all.length) return <p class="muted">No samples yet for {props.title.toLowerCase()}.</p>;
  const [w, h, pad] = [480, 160, 28];
  const xs = all.map((p) => p.x);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const yMax = props.yMax ?? Math.max(1, ...all.map((p) => p.y)) * 1.1;
  const sx = (x: number) => pad + ((x - x0) / Math.max(1, x1 - x0)) * (w - 2 * pad);
  const sy = (y: number) => h - pad - (y / yMax) * (h - 2 * pad);
  const latest = props.series[0]?.points.at(-1);
  return (
    <figure class="chart">
      <figcaption>
        {props.title} ({props.unit}){latest && <span class="latest">, latest {latest.y.toFixed(1)}</span>}
      </figcaption>
      <svg
        viewBox={`0 0 ${w} ${h}`}
        role="img"
        aria-label={`${props.title} over time`}
        data-points={all.length}
      >
        <line x1={pad} y1={h - pad} x2={w - pad} y2={h - pad} class="axis" />
        <line x1={pad} y1={pad} x2={pad} y2={h - pad} class="axis" />
        <text x={2} y={pad} class="tick">
          {yMax.toFixed(0)}
        </text>
        <text x={2} y={h - pad} class="tick">
          0
        </text>
        {props.series.map((s, i) => (
          <polyline
            fill="none"
            stroke={PALETTE[i % PALETTE.length]}
            stroke-width="2"
            points={s.points.map((p) => `${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" ")}
          />
        ))}
        {props.series.flatMap((s, i) =>
          s.points.map((p) => <circle cx={sx(p.x)} cy={sy(p.y)} r="3" fill={PALETTE[i % PALETTE.length]} />),
        )}
      </svg>
      {props.series.length > 1 && (
        <ul class="legend">
          {props.series.map((s, i) => (
            <li>
              <span class="swatch" ref={swatch(PALETTE[i % PALETTE.length])} />
              {s.name}
            </li>
          ))}
        </ul>
      )}
    </figure>
  );
}

/** A bar chart in SVG: one bar per label. */
export function BarChart(props: { title: string; unit: string; bars: { label: string; value: number }[] }) {
  if (!props.bars.length) return <p class="muted">No data yet for {props.title.toLowerCase()}.</p>;
  const [w, barH, labelW] = [480, 22, 150];
  const max = Math.max(...props.bars.map((b) => b.value), 1e-9);
  return (
    <figure class="chart">
      <figcaption>
        {props.title} ({props.unit})
      </figcaption>
      <svg viewBox={`0 0 ${w} ${props.bars.length * (barH + 6)}`} role="img" aria-label={props.title}>
        {props.bars.map((b, i) => {
          const y = i * (barH + 6);
          const width = ((w - labelW - 70) * b.value) / max;
          return (
            <g>
              <text x={0} y={y + 15} class="tick">
                {b.label.length > 22 ? `${b.label.slice(0, 21)}…` : b.label}
              </text>
              <rect x={labelW} y={y} width={Math.max(width, 1)} height={barH} fill={PALETTE[0]} />
              <text x={labelW + width + 6} y={y + 15} class="tick">
                {b.value.toFixed(2)}
              </text>
            </g>
          );
        })}
      </svg>
    </figure>
  );
}

/** Colours set through the DOM, which the content security policy allows (no inline styles). */
function swatch(colour: string) {
  return (el: HTMLElement | null) => el?.style.setProperty("background", colour);
}

/** A progress bar whose width is set through the DOM, for the same reason. */
export function Progress(props: { value: number; max: number; label: string }) {
  const bar = useRef<HTMLProgressElement>(null);
  return (
    <label class="progress">
      <span>{props.label}</span>
      <progress ref={bar} value={props.value} max={props.max} aria-label={props.label} />
      <span>{Math.floor((100 * props.value) / Math.max(1, props.max))} %</span>
    </label>
  );
}
