// The operator's clusters: each with its region, state, health and GPUs; registered
// with a kubeconfig (sealed by the platform, never shown again), cordoned, drained
// and removed once no workload runs in it.
import { useState } from "preact/hooks";
import { del, enc, get, post } from "../api";
import { ErrorNote, Field, Form, Page, Show, StateBadge, Table, confirmed, useAction, useLoad } from "../ui";

interface ClusterGpus {
  gpuType: string;
  resource: string;
  capacity: number;
}

interface ClusterHealth {
  reachable: boolean;
  checkedAt: string;
  unreachableSince: string | null;
  version: string | null;
  nodes: number;
  readyNodes: number;
  zones: string[];
  gpus: ClusterGpus[];
  error: string | null;
}

interface Cluster {
  name: string;
  region: string;
  zones: string[];
  home: boolean;
  state: string;
  workloads: number;
  health: ClusterHealth | null;
}

const REFRESH_MS = 10_000;

function health(cluster: Cluster): string {
  const h = cluster.health;
  if (!h) return "not looked at yet";
  if (!h.reachable) return `unreachable since ${new Date(h.unreachableSince ?? h.checkedAt).toLocaleString()}: ${h.error ?? ""}`;
  return `${h.readyNodes}/${h.nodes} nodes ready`;
}

/** `16 x NVIDIA-B200`; a shared kind says which: `28 x NVIDIA-A100 (mig-1g.5gb)`. */
function units(g: ClusterGpus): string {
  const kind = g.resource.replace(/^nvidia\.com\//, "");
  return `${g.capacity} x ${g.gpuType}` + (kind === "gpu" ? "" : ` (${kind})`);
}

export function ClustersPage() {
  const clusters = useLoad(() => get<Cluster[]>("/clusters"), [], REFRESH_MS);
  const action = useAction();
  const setState = (cluster: Cluster, verb: string, question: string) =>
    confirmed(question) && void action.run(() => post(`/clusters/${enc(cluster.name)}/${verb}`, {}).then(clusters.reload));
  return (
    <Page title="Clusters">
      <NewCluster onRegistered={clusters.reload} />
      <ErrorNote error={action.error} />
      <Show loaded={clusters} empty={(rows) => !rows.length} emptyText="No clusters yet.">
        {(rows) => (
          <Table
            caption="Clusters"
            rows={rows}
            rowKey={(c) => c.name}
            columns={[
              { label: "Cluster", cell: (c) => (c.home ? `${c.name} (home)` : c.name) },
              { label: "Region", cell: (c) => c.region },
              { label: "Zones", cell: (c) => (c.zones.length ? c.zones : c.health?.zones ?? []).join(", ") || "—" },
              { label: "State", cell: (c) => <StateBadge state={c.state} /> },
              { label: "Health", cell: health },
              { label: "Version", cell: (c) => c.health?.version ?? "—" },
              { label: "GPUs", cell: (c) => (c.health?.gpus ?? []).map(units).join(", ") || "—" },
              { label: "Workloads", cell: (c) => c.workloads, numeric: true },
              {
                label: "Actions",
                cell: (c) => (
                  <span class="actions">
                    {c.state === "active" ? (
                      <>
                        <button type="button" onClick={() => setState(c, "cordon", `Cordon ${c.name}? No new workload is placed in it; those in it go on.`)}>
                          Cordon
                        </button>
                        <button type="button" onClick={() => setState(c, "drain", `Drain ${c.name}? No new workload is placed in it, before it is removed.`)}>
                          Drain
                        </button>
                      </>
                    ) : (
                      <button type="button" onClick={() => setState(c, "uncordon", `Place new workloads in ${c.name} again?`)}>
                        Uncordon
                      </button>
                    )}
                    {!c.home && (
                      <button
                        type="button"
                        class="danger"
                        onClick={() => confirmed(`Remove cluster ${c.name}? Its kubeconfig is thrown away.`) && void action.run(() => del(`/clusters/${enc(c.name)}`).then(clusters.reload))}
                      >
                        Remove
                      </button>
                    )}
                  </span>
                ),
              },
            ]}
          />
        )}
      </Show>
    </Page>
  );
}

function NewCluster(props: { onRegistered: () => void }) {
  const [name, setName] = useState("");
  const [region, setRegion] = useState("");
  const [zones, setZones] = useState("");
  const [kubeconfig, setKubeconfig] = useState("");
  const action = useAction();
  const register = (e: Event) => {
    e.preventDefault();
    const body = { name, region, zones: zones.split(",").map((z) => z.trim()).filter(Boolean), kubeconfig };
    void action.run(() => post("/clusters", body).then(() => (setName(""), setKubeconfig(""), props.onRegistered())));
  };
  return (
    <Form action={action} class="card form-grid" onSubmit={register} aria-labelledby="new-cluster-title">
      <h2 id="new-cluster-title">Register a cluster</h2>
      <Field label="Cluster name" name="cluster-name" field="name" value={name} onInput={setName} required placeholder="gpu-east-1" />
      <Field label="Region" name="cluster-region" field="region" value={region} onInput={setRegion} required placeholder="us-east" />
      <Field label="Zones (comma-separated)" name="cluster-zones" field="zones" value={zones} onInput={setZones} required placeholder="us-east-1a, us-east-1b" />
      <label class="field" for="field-cluster-kubeconfig">
        <span>Kubeconfig (sealed, never shown again)</span>
        <input
          id="field-cluster-kubeconfig"
          name="cluster-kubeconfig"
          type="file"
          required
          onChange={(e) => {
            const file = e.currentTarget.files?.[0];
            if (file) void file.text().then(setKubeconfig);
          }}
        />
      </label>
      <ErrorNote error={action.error} />
      <button type="submit" disabled={action.busy || !kubeconfig}>
        Register cluster
      </button>
    </Form>
  );
}
