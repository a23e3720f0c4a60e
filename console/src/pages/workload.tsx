// One instance or one batch job on a page of its own: what it is, where it runs, its
// history with the reasons the API gives, its log (read or followed), and what may be
// done with it now.
import type { ComponentChildren } from "preact";
import { useEffect, useState } from "preact/hooks";
import { ApiError, del, describe, enc, get, getText, post } from "../api";
import { Link, navigate } from "../nav";
import { ErrorNote, confirmed, Page, Show, StateBadge, Table, useAction, useLoad, when } from "../ui";

export interface Transition {
  state: string;
  at: string;
  reason?: string | null;
}

/** Where a queued workload stands in its tenant's admission queue. */
export interface QueuePosition {
  position: number;
  reason: string;
  gpusAhead: number;
}

export const inQueue = (q: QueuePosition | null) =>
  q ? `#${q.position} (${q.reason}, ${q.gpusAhead} GPUs ahead)` : "—";

export interface Instance {
  instanceID: string;
  tenantID: string;
  state: string;
  queue: QueuePosition | null;
  reason: string | null;
  message: string | null;
  specName: string;
  gpuType: string;
  gpuCount: number;
  image: string;
  /** The cluster it was placed in. */
  cluster: string;
  /** The tenant's project it runs in (`default` unless one was named). */
  project: string;
  node: string | null;
  zone: string | null;
  urls: string[];
  createdAt: string;
  history: Transition[];
}

interface JobRun {
  runID: string;
  state: string;
  node: string | null;
  exitCode: number | null;
  scheduledAt: string | null;
  startedAt: string | null;
  endedAt: string | null;
}

export interface Job {
  jobID: string;
  state: string;
  reason: string | null;
  /** The reason in words, where the API gives more than a code. */
  message: string | null;
  exitCode: number | null;
  queue: QueuePosition | null;
  specName: string;
  gpuCount: number;
  gpuType: string;
  /** A multi-node job's nodes, each with the spec's GPUs. */
  nodes: number | null;
  image: string;
  cluster: string;
  project: string;
  command?: string[] | null;
  args?: string[] | null;
  retryLimit?: number;
  runs?: JobRun[];
  createdAt: string;
  history?: Transition[];
}

export const ENDED = new Set(["stopped", "failed", "deleted", "succeeded", "cancelled"]);
const LIVE_MS = 3000;

/** Every GPU the job holds: a 4-node job of a 1-GPU spec holds 4. */
export const jobGpus = (j: Job): string => {
  const nodes = j.nodes ?? 1;
  return `${nodes * j.gpuCount} x ${j.gpuType}` + (nodes > 1 ? ` (${nodes} nodes)` : "");
};

/** Why a job ended as it did (or waits), as the API says it: its reason, the words
 * the API gives with it, and the exit code. */
export function jobReason(job: Job): string {
  const parts = [job.reason, job.message].filter((part): part is string => Boolean(part));
  const exit = job.exitCode !== null && job.exitCode !== undefined ? `exit code ${job.exitCode}` : "";
  return [...parts, exit].filter(Boolean).join(", ");
}

/** The ports an instance URL serves, from the URLs the API gives:
 * `<instance>--<port>--<tenant>.<domain>`. */
export function portsOf(instance: Instance): number[] {
  const [prefix, suffix] = [`${instance.instanceID}--`, `--${instance.tenantID}`];
  return instance.urls
    .map((url) => new URL(url).hostname.split(".")[0])
    .filter((label) => label.startsWith(prefix) && label.endsWith(suffix))
    .map((label) => Number(label.slice(prefix.length, label.length - suffix.length)))
    .filter((port) => Number.isInteger(port) && port > 0);
}

/** The one-minute link that opens an instance's port, in a new tab. */
export async function openPort(instance: Instance, port: number): Promise<void> {
  const link = await post<{ url: string }>(`/gpu-instances/${enc(instance.instanceID)}/ports/${port}/session`);
  window.open(link.url, "_blank", "noopener");
}

function History(props: { name: string; history: Transition[] }) {
  return (
    <section aria-label={`History of ${props.name}`} class="card">
      <h2>History</h2>
      <ol class="history">
        {props.history.map((t) => (
          <li>
            <StateBadge state={t.state} /> {when(t.at)} {t.reason ? `— ${t.reason}` : ""}
          </li>
        ))}
      </ol>
    </section>
  );
}

/** A log: its last 200 lines, read again every few seconds; or, with Follow, streamed
 * as it grows until the workload ends (a tenant follows at most four logs at once). */
function Log(props: { path: string; title: string }) {
  const [follow, setFollow] = useState(false);
  const tail = useLoad(() => (follow ? Promise.resolve("") : getText(`${props.path}?tailLines=200`)), [props.path, follow], 3000);
  const [streamed, setStreamed] = useState("");
  const [streamError, setStreamError] = useState<string | null>(null);
  useEffect(() => {
    if (!follow) return;
    const stop = new AbortController();
    setStreamed("");
    setStreamError(null);
    void (async () => {
      try {
        const response = await fetch(`/v1${props.path}?follow=true&tailLines=200`, {
          headers: { accept: "text/plain, application/problem+json" },
          credentials: "same-origin",
          signal: stop.signal,
        });
        if (!response.ok || !response.body) {
          const problem = (await response.json().catch(() => ({}))) as { title?: string; detail?: string };
          throw new ApiError(response.status, problem.title ?? `HTTP ${response.status}`, problem.detail ?? "");
        }
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          setStreamed((text) => (text + value).slice(-200_000));
        }
      } catch (error) {
        if (!stop.signal.aborted) setStreamError(describe(error));
      }
    })();
    return () => stop.abort();
  }, [props.path, follow]);
  const text = follow ? streamed : (tail.data ?? (tail.loading ? "Loading…" : ""));
  return (
    <section class="card" aria-label={props.title}>
      <div class="row-actions">
        <h2>{props.title}</h2>
        <label>
          <input type="checkbox" checked={follow} onChange={(e) => setFollow((e.target as HTMLInputElement).checked)} /> Follow
        </label>
      </div>
      <ErrorNote error={follow ? streamError : tail.error} />
      <pre class="log" data-testid="log">{text}</pre>
    </section>
  );
}

/** A workload's state, with its place in the queue while it waits there. */
export function Queued(props: { state: string; queue: QueuePosition | null }) {
  return (
    <>
      <StateBadge state={props.state} />
      {props.queue && <span class="muted"> {inQueue(props.queue)}</span>}
    </>
  );
}

function Facts(props: { rows: [string, ComponentChildren][] }) {
  return (
    <dl class="facts">
      {props.rows.map(([name, value]) => (
        <>
          <dt>{name}</dt>
          <dd>{value}</dd>
        </>
      ))}
    </dl>
  );
}

export function InstancePage(props: { instanceID: string }) {
  const id = props.instanceID;
  const instance = useLoad(() => get<Instance>(`/gpu-instances/${enc(id)}`), [id], LIVE_MS);
  const action = useAction();
  const act = (run: () => Promise<unknown>) => void action.run(async () => {
    await run();
    instance.reload();
  });
  return (
    <Page title={`Instance ${id}`}>
      <p>
        <Link href="/instances">← All instances</Link>
      </p>
      <Show loaded={instance}>
          {(i) => (
            <>
              <section class="card" aria-label="Instance">
                <Facts
                  rows={[
                    ["State", <Queued state={i.state} queue={i.queue} />],
                    ...(i.reason || i.message ? [["Why", [i.reason, i.message].filter(Boolean).join(": ")] as [string, string]] : []),
                    ["Spec", `${i.specName} (${i.gpuCount}× ${i.gpuType})`],
                    ["Image", <code>{i.image}</code>],
                    ["Node", i.node ? `${i.node}${i.zone ? ` (${i.zone})` : ""}` : "—"],
                    ["Created", when(i.createdAt)],
                  ]}
                />
                <div class="row-actions">
                  {i.state === "running" &&
                    portsOf(i).map((port) => (
                      <button type="button" onClick={() => void action.run(() => openPort(i, port))}>
                        Open :{port}
                      </button>
                    ))}
                  {!ENDED.has(i.state) && (
                    <button type="button" class="danger" onClick={() => confirmed(`Stop ${id}? Its GPUs are released and its billing ends.`) && act(() => post(`/gpu-instances/${enc(id)}/stop`))}>
                      Stop
                    </button>
                  )}
                  {(i.state === "stopped" || i.state === "failed") && (
                    <>
                      <button type="button" onClick={() => act(() => post(`/gpu-instances/${enc(id)}/start`))}>
                        Start again
                      </button>
                      <button type="button" class="danger" onClick={() => confirmed(`Delete the record of ${id}? Its history stays in your bills.`) && void action.run(() => del(`/gpu-instances/${enc(id)}`).then(() => navigate("/instances")))}>
                        Delete
                      </button>
                    </>
                  )}
                </div>
                <ErrorNote error={action.error} />
              </section>
              <History name={id} history={i.history} />
              {/* The kubelet serves a log while the container runs. */}
              {["ready", "running", "stopping"].includes(i.state) && <Log path={`/gpu-instances/${enc(id)}/logs`} title="Log" />}
            </>
          )}
      </Show>
    </Page>
  );
}

export function JobPage(props: { jobID: string }) {
  const id = props.jobID;
  const job = useLoad(() => get<Job>(`/jobs/${enc(id)}`), [id], LIVE_MS);
  const action = useAction();
  return (
    <Page title={`Job ${id}`}>
      <p>
        <Link href="/instances">← All workloads</Link>
      </p>
      <Show loaded={job}>
          {(j) => (
            <>
              <section class="card" aria-label="Job">
                <Facts
                  rows={[
                    ["State", <Queued state={j.state} queue={j.queue} />],
                    ...(jobReason(j) ? [["Why", jobReason(j)] as [string, string]] : []),
                    ["Spec", `${j.specName}: ${jobGpus(j)}`],
                    ["Image", <code>{j.image}</code>],
                    ["Command", <code>{[...(j.command ?? []), ...(j.args ?? [])].join(" ") || "(the image's own)"}</code>],
                    ["Retries", String(j.retryLimit ?? 0)],
                    ["Submitted", when(j.createdAt)],
                  ]}
                />
                {!ENDED.has(j.state) && (
                  <button type="button" class="danger" onClick={() => confirmed(`Cancel job ${id}?`) && void action.run(() => del(`/jobs/${enc(id)}`).then(job.reload))}>
                    Cancel
                  </button>
                )}
                <ErrorNote error={action.error} />
              </section>
              {j.runs && j.runs.length > 0 && (
                <section class="card" aria-labelledby="runs-title">
                  <h2 id="runs-title">Runs</h2>
                  <Table
                    caption="Runs"
                    rows={j.runs}
                    rowKey={(r) => r.runID}
                    columns={[
                      { label: "Run", cell: (r) => r.runID },
                      { label: "State", cell: (r) => <StateBadge state={r.state} /> },
                      { label: "Node", cell: (r) => r.node ?? "—" },
                      { label: "Exit", cell: (r) => (r.exitCode ?? "—").toString(), numeric: true },
                      { label: "Started", cell: (r) => (r.startedAt ? when(r.startedAt) : "—") },
                      { label: "Ended", cell: (r) => (r.endedAt ? when(r.endedAt) : "—") },
                    ]}
                  />
                </section>
              )}
              <History name={id} history={j.history ?? []} />
              {j.state !== "queued" && <Log path={`/jobs/${enc(id)}/logs`} title="Log of the latest run" />}
            </>
          )}
      </Show>
    </Page>
  );
}
