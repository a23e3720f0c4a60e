// The operator's pages: the fleet (quarantine and release), tenants with their quotas and
// rate limits, prices, revenue and warm stocks.
import { useState } from "preact/hooks";
import { api, del, enc, get, items, patch, post, type Principal } from "../api";
import { Users } from "./admin";
import { BarChart, ErrorNote, Field, confirmed, Page, Show, ShownOnce, StateBadge, Table, money, useAction, useLoad, when, Form } from "../ui";

interface FleetGroup {
  zone: string;
  gpuType: string;
  nodes: number;
  gpus: number;
  gpusInUse: number;
  utilizationGpuPct: number | null;
  quarantinedNodes: number;
}

interface FleetSummary {
  nodes: number;
  gpus: number;
  gpusInUse: number;
  byHealth: Record<string, number>;
  groups: FleetGroup[];
}

interface NodeView {
  node: string;
  /** The cluster its agent says it is in. */
  cluster: string | null;
  zone: string | null;
  gpuType: string | null;
  gpus: number;
  gpusInUse: number;
  health: string;
  healthReasons: string[];
  healthSince: string | null;
  utilizationGpuPct: number | null;
  telemetry: string | null;
}

interface Tenant {
  tenantID: string;
  name: string;
  status: string;
  limits: {
    maxGpus: number;
    maxInstances: number;
    maxStorageBytes: number;
    monthlySpendCapCents: number | null;
    borrowGpus: number;
  };
  rateLimit: { requestsPerS: number; burst: number };
  queueWeight: number;
}

interface Spec {
  name: string;
  gpuType: string;
  gpuNum: number;
  cpu: string;
  memory: string;
}

interface Price {
  priceID: string;
  meter: string;
  specName: string | null;
  amount: string;
  effectiveFrom: string;
}

interface Stock {
  cluster: string;
  specName: string;
  target: number;
  available: number;
  placing: number;
  images: string[];
}

const pct = (n: number | null) => (n === null ? "—" : `${n.toFixed(0)} %`);
const REFRESH_MS = 10_000;

export function FleetPage() {
  const summary = useLoad(() => get<FleetSummary>("/fleet"), [], REFRESH_MS);
  const nodes = useLoad(() => get<NodeView[]>("/nodes"), [], REFRESH_MS);
  const [reason, setReason] = useState("maintenance");
  const action = useAction();
  // The request is applied by the telemetry consumer, in order with the node's samples
  // (202): read the node until it shows the new health, then the summary with it.
  const settle = async (node: string, health: string) => {
    for (let tries = 0; tries < 30; tries++) {
      const fresh = await get<NodeView[]>("/nodes");
      if (fresh.find((n) => n.node === node)?.health === health) break;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    await Promise.all([nodes.reload(), summary.reload()]);
  };
  const quarantine = (node: string) =>
    void action.run(() => post(`/nodes/${enc(node)}/quarantine`, { reason }).then(() => settle(node, "quarantined")));
  const release = (node: string) =>
    void action.run(() => post(`/nodes/${enc(node)}/release`).then(() => settle(node, "healthy")));
  return (
    <Page title="Fleet">
      <Show loaded={summary}>
        {(s) => (
          <>
            <p>
              {s.nodes} nodes, {s.gpusInUse} of {s.gpus} GPUs in use;{" "}
              {Object.entries(s.byHealth)
                .map(([health, n]) => `${n} ${health}`)
                .join(", ")}
              .
            </p>
            <Table
              caption="Fleet by zone and GPU type"
              rows={s.groups}
              rowKey={(g) => `${g.zone}/${g.gpuType}`}
              columns={[
                { label: "Zone", cell: (g) => g.zone },
                { label: "GPU type", cell: (g) => g.gpuType },
                { label: "Nodes", cell: (g) => g.nodes, numeric: true },
                { label: "GPUs in use", cell: (g) => `${g.gpusInUse} / ${g.gpus}`, numeric: true },
                { label: "Utilisation", cell: (g) => pct(g.utilizationGpuPct), numeric: true },
                { label: "Quarantined", cell: (g) => g.quarantinedNodes, numeric: true },
              ]}
            />
          </>
        )}
      </Show>
      <h2>Nodes</h2>
      <Form action={action} class="inline" onSubmit={(e) => e.preventDefault()}>
        <Field label="Quarantine reason" name="quarantine-reason" value={reason} onInput={setReason} required />
      </Form>
      <ErrorNote error={action.error} />
      <Show loaded={nodes} empty={(rows) => !rows.length} emptyText="No nodes report yet.">
        {(rows) => (
          <Table
            caption="Nodes"
            rows={rows}
            rowKey={(n) => n.node}
            columns={[
              { label: "Node", cell: (n) => n.node },
              { label: "Cluster", cell: (n) => n.cluster ?? "—" },
              { label: "Zone", cell: (n) => n.zone ?? "—" },
              { label: "GPU type", cell: (n) => n.gpuType ?? "—" },
              { label: "GPUs in use", cell: (n) => `${n.gpusInUse} / ${n.gpus}`, numeric: true },
              { label: "Utilisation", cell: (n) => pct(n.utilizationGpuPct), numeric: true },
              { label: "Health", cell: (n) => <StateBadge state={n.health} /> },
              { label: "Why", cell: (n) => n.healthReasons.join("; ") || "—" },
              {
                label: "Actions",
                cell: (n) =>
                  n.health === "healthy" ? (
                    <button type="button" class="danger" onClick={() => confirmed(`Quarantine ${n.node}? Nothing new is placed on it.`) && quarantine(n.node)} aria-label={`Quarantine ${n.node}`}>
                      Quarantine
                    </button>
                  ) : (
                    <button type="button" onClick={() => release(n.node)} aria-label={`Release ${n.node}`}>
                      Release
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

export function TenantsPage(props: { principal: Principal }) {
  const tenants = useLoad(() => get<{ items: Tenant[] }>("/tenants?limit=200").then(items), []);
  const [editing, setEditing] = useState<string | null>(null);
  const [members, setMembers] = useState<string | null>(null);
  return (
    <Page title="Tenants">
      <NewTenant onCreated={tenants.reload} />
      <Show loaded={tenants} empty={(rows) => !rows.length} emptyText="No tenants yet.">
        {(rows) => (
          <Table
            caption="Tenants"
            rows={rows}
            rowKey={(t) => t.tenantID}
            columns={[
              { label: "Tenant", cell: (t) => `${t.tenantID} (${t.name})` },
              { label: "Status", cell: (t) => <StateBadge state={t.status} /> },
              { label: "GPUs", cell: (t) => t.limits.maxGpus, numeric: true },
              { label: "May borrow", cell: (t) => t.limits.borrowGpus, numeric: true },
              { label: "Instances", cell: (t) => t.limits.maxInstances, numeric: true },
              { label: "Requests/s", cell: (t) => `${t.rateLimit.requestsPerS} (burst ${t.rateLimit.burst})`, numeric: true },
              { label: "Queue weight", cell: (t) => t.queueWeight, numeric: true },
              {
                label: "Actions",
                cell: (t) => (
                  <>
                    <button type="button" onClick={() => setEditing(t.tenantID)}>
                      Edit limits
                    </button>{" "}
                    <button type="button" onClick={() => setMembers(t.tenantID)} aria-label={`Users of ${t.tenantID}`}>
                      Users
                    </button>
                  </>
                ),
              },
            ]}
          />
        )}
      </Show>
      {editing && (
        <TenantLimits
          tenant={tenants.data!.find((t) => t.tenantID === editing)!}
          onDone={() => (setEditing(null), tenants.reload())}
        />
      )}
      {members && <Users principal={props.principal} tenantID={members} />}
    </Page>
  );
}

/** Onboard a customer: the tenant, its limits, and its first admin, whose API key is
 * shown once to hand over (they set a password or make more keys themselves). */
function NewTenant(props: { onCreated: () => void }) {
  const [tenantID, setTenantID] = useState("");
  const [name, setName] = useState("");
  const [maxGpus, setMaxGpus] = useState("8");
  const [maxInstances, setMaxInstances] = useState("8");
  const [storageGib, setStorageGib] = useState("1024");
  const [adminEmail, setAdminEmail] = useState("");
  const [adminName, setAdminName] = useState("");
  const [key, setKey] = useState<string | null>(null);
  const action = useAction();
  const create = (e: Event) => {
    e.preventDefault();
    const body = {
      tenantID,
      name,
      limits: { maxGpus: Number(maxGpus), maxInstances: Number(maxInstances), maxStorageBytes: Number(storageGib) * 1024 ** 3 },
      admin: { email: adminEmail, name: adminName, role: "tenant-admin" },
    };
    void action.run(async () => {
      const created = await post<{ adminKey: { secret: string } }>("/tenants", body);
      setKey(created.adminKey.secret);
      props.onCreated();
    });
  };
  return (
    <Form action={action} class="card form-grid" onSubmit={create} aria-labelledby="new-tenant-title">
      <h2 id="new-tenant-title">New tenant</h2>
      <Field label="Tenant id" name="tenantID" value={tenantID} onInput={setTenantID} required placeholder="acme" />
      <Field label="Name" name="tenantName" field="name" value={name} onInput={setName} required placeholder="Acme Research" />
      <Field label="Max GPUs" name="newMaxGpus" field="limits.maxGpus" type="number" value={maxGpus} onInput={setMaxGpus} required />
      <Field label="Max instances" name="newMaxInstances" field="limits.maxInstances" type="number" value={maxInstances} onInput={setMaxInstances} required />
      <Field label="Storage (GiB)" name="storageGib" field="limits.maxStorageBytes" type="number" value={storageGib} onInput={setStorageGib} required />
      <Field label="Admin's email" name="adminEmail" field="admin.email" type="email" value={adminEmail} onInput={setAdminEmail} required />
      <Field label="Admin's name" name="adminName" field="admin.name" value={adminName} onInput={setAdminName} required />
      <ErrorNote error={action.error} />
      <button type="submit" disabled={action.busy}>
        Create tenant
      </button>
      {key && <ShownOnce label={`API key of ${adminEmail}, the tenant's admin`} secret={key} onDone={() => setKey(null)} />}
    </Form>
  );
}

function TenantLimits(props: { tenant: Tenant; onDone: () => void }) {
  const t = props.tenant;
  const [maxGpus, setMaxGpus] = useState(String(t.limits.maxGpus));
  const [maxInstances, setMaxInstances] = useState(String(t.limits.maxInstances));
  const [borrowGpus, setBorrowGpus] = useState(String(t.limits.borrowGpus));
  const [rate, setRate] = useState(String(t.rateLimit.requestsPerS));
  const [burst, setBurst] = useState(String(t.rateLimit.burst));
  const [weight, setWeight] = useState(String(t.queueWeight));
  const action = useAction();
  const save = (e: Event) => {
    e.preventDefault();
    const body = {
      limits: {
        ...t.limits,
        maxGpus: Number(maxGpus),
        maxInstances: Number(maxInstances),
        borrowGpus: Number(borrowGpus),
      },
      rateLimit: { requestsPerS: Number(rate), burst: Number(burst) },
      queueWeight: Number(weight),
    };
    void action.run(() => patch(`/tenants/${enc(t.tenantID)}`, body).then(props.onDone));
  };
  return (
    <Form action={action} class="card form-grid" onSubmit={save} aria-labelledby="limits-title">
      <h2 id="limits-title">Limits of {t.tenantID}</h2>
      <Field label="Max GPUs" name="maxGpus" type="number" value={maxGpus} onInput={setMaxGpus} required />
      <Field label="Max instances" name="maxInstances" type="number" value={maxInstances} onInput={setMaxInstances} required />
      <Field label="GPUs its jobs may borrow" name="borrowGpus" type="number" value={borrowGpus} onInput={setBorrowGpus} required />
      <Field label="Requests per second" name="rate" type="number" value={rate} onInput={setRate} required />
      <Field label="Burst" name="burst" type="number" value={burst} onInput={setBurst} required />
      <Field label="Queue weight" name="queueWeight" type="number" value={weight} onInput={setWeight} required />
      <ErrorNote error={action.error} />
      <button type="submit" disabled={action.busy}>
        Save limits
      </button>
    </Form>
  );
}

export function PricesPage() {
  const prices = useLoad(() => get<Price[] | { items: Price[] }>("/prices").then(items), []);
  const specs = useLoad(() => get<Spec[] | { items: Spec[] }>("/specs").then(items), []);
  const [specName, setSpecName] = useState("");
  const [amount, setAmount] = useState("");
  const [from, setFrom] = useState("");
  const action = useAction();
  const save = (e: Event) => {
    e.preventDefault();
    // The browser's local time, sent as an instant; empty: from now on.
    const effective = from ? { effectiveFrom: new Date(from).toISOString() } : {};
    const meter = specName ? { meter: "gpu_hour", specName } : { meter: "storage_gb_month" };
    const body = { ...meter, amount, ...effective };
    void action.run(() => post("/prices", body).then(prices.reload));
  };
  return (
    <Page title="Prices">
      <Form action={action} class="inline card" onSubmit={save}>
        <Field
          label="Spec"
          name="price-spec"
          field="specName"
          value={specName}
          onInput={setSpecName}
          options={["", ...(specs.data ?? []).map((spec) => spec.name)]}
          emptyLabel="none: storage, per GB-month"
        />
        <Field label="Amount (USD)" name="price-amount" type="number" step="0.01" value={amount} onInput={setAmount} required />
        <Field label="From (your time; empty: now)" name="price-from" field="effectiveFrom" type="datetime-local" value={from} onInput={setFrom} />
        <button type="submit" disabled={action.busy}>
          Set price
        </button>
      </Form>
      <ErrorNote error={action.error} />
      <Show loaded={prices} empty={(rows) => !rows.length} emptyText="No prices set.">
        {(rows) => (
          <Table
            caption="Prices"
            rows={rows}
            rowKey={(p) => p.priceID}
            columns={[
              { label: "Meter", cell: (p) => (p.meter === "gpu_hour" ? "per GPU-hour" : "per GB-month") },
              { label: "Spec", cell: (p) => p.specName ?? "—" },
              { label: "Amount", cell: (p) => money(p.amount), numeric: true },
              { label: "From", cell: (p) => when(p.effectiveFrom) },
              {
                label: "",
                // A price in effect has billed used time: it is replaced, never withdrawn.
                cell: (p) =>
                  new Date(p.effectiveFrom).getTime() > Date.now() ? (
                    <button
                      type="button"
                      class="danger"
                      aria-label={`Withdraw the price from ${when(p.effectiveFrom)}`}
                      onClick={() =>
                        confirmed(`Withdraw the price of ${money(p.amount)} from ${when(p.effectiveFrom)}?`) &&
                        void action.run(() => del(`/prices/${enc(p.priceID)}`).then(prices.reload))
                      }
                    >
                      Withdraw
                    </button>
                  ) : (
                    "in effect"
                  ),
              },
            ]}
          />
        )}
      </Show>
    </Page>
  );
}

/** The specs tenants start on: a GPU type and count, with CPU and memory. */
export function SpecsPage() {
  const specs = useLoad(() => get<Spec[] | { items: Spec[] }>("/specs").then(items), []);
  const fleet = useLoad(() => get<FleetSummary>("/fleet"), []);
  const [name, setName] = useState("");
  const [gpuType, setGpuType] = useState("");
  const [gpuNum, setGpuNum] = useState("1");
  const [cpu, setCpu] = useState("8");
  const [memory, setMemory] = useState("64Gi");
  const action = useAction();
  const types = [...new Set((fleet.data?.groups ?? []).map((g) => g.gpuType))];
  const create = (e: Event) => {
    e.preventDefault();
    const body = { name, gpuType: gpuType || types[0], gpuNum: Number(gpuNum), cpu, memory };
    void action.run(() => post("/specs", body).then(() => (setName(""), specs.reload())));
  };
  return (
    <Page title="Specs">
      <Form action={action} class="card form-grid" onSubmit={create} aria-labelledby="new-spec-title">
        <h2 id="new-spec-title">New spec</h2>
        <Field label="Spec name" name="specName" field="name" value={name} onInput={setName} required placeholder="h100-1" />
        <Field label="GPU type" name="gpuType" value={gpuType || types[0] || ""} onInput={setGpuType} options={types} />
        <Field label="GPUs" name="gpuNum" type="number" value={gpuNum} onInput={setGpuNum} required />
        <Field label="CPU" name="cpu" value={cpu} onInput={setCpu} required />
        <Field label="Memory" name="memory" value={memory} onInput={setMemory} required />
        <ErrorNote error={action.error} />
        <button type="submit" disabled={action.busy || !types.length}>
          Create spec
        </button>
      </Form>
      <Show loaded={specs} empty={(rows) => !rows.length} emptyText="No specs yet: tenants cannot start anything.">
        {(rows) => (
          <Table
            caption="Specs"
            rows={rows}
            rowKey={(spec) => spec.name}
            columns={[
              { label: "Spec", cell: (spec) => spec.name },
              { label: "GPUs", cell: (spec) => `${spec.gpuNum} x ${spec.gpuType}` },
              { label: "CPU", cell: (spec) => spec.cpu },
              { label: "Memory", cell: (spec) => spec.memory },
              {
                label: "Actions",
                cell: (spec) => (
                  <button type="button" class="danger" onClick={() => confirmed(`Delete spec ${spec.name}? New starts on it are refused; running ones go on.`) && void action.run(() => del(`/specs/${enc(spec.name)}`).then(specs.reload))}>
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

export function RevenuePage() {
  const start = new Date(Date.now() - 30 * 86_400_000).toISOString();
  const revenue = (groupBy: string) =>
    get<{ rows: { key: string; amount: string }[]; total: { amount: string } }>(`/revenue?groupBy=${groupBy}&start=${enc(start)}`);
  const byType = useLoad(() => revenue("gpu_type"), [], 60_000);
  const byZone = useLoad(() => revenue("zone"), [], 60_000);
  const byRegion = useLoad(() => revenue("region"), [], 60_000);
  const byCluster = useLoad(() => revenue("cluster"), [], 60_000);
  const byDay = useLoad(() => revenue("day"), [], 60_000);
  const bars = (rows: { key: string; amount: string }[]) => rows.map((r) => ({ label: r.key, value: Number(r.amount) }));
  return (
    <Page title="Revenue">
      <Show loaded={byDay}>
        {(r) => (
          <section class="card">
            <p>
              Last 30 days: <strong>{money(r.total.amount)}</strong>
            </p>
            <BarChart title="Revenue by day" unit="USD" bars={bars(r.rows)} />
          </section>
        )}
      </Show>
      <div class="grid-2">
        <section class="card">
          <Show loaded={byType}>{(r) => <BarChart title="By GPU type" unit="USD" bars={bars(r.rows)} />}</Show>
        </section>
        <section class="card">
          <Show loaded={byZone}>{(r) => <BarChart title="By zone" unit="USD" bars={bars(r.rows)} />}</Show>
        </section>
        <section class="card">
          <Show loaded={byRegion}>{(r) => <BarChart title="By region" unit="USD" bars={bars(r.rows)} />}</Show>
        </section>
        <section class="card">
          <Show loaded={byCluster}>{(r) => <BarChart title="By cluster" unit="USD" bars={bars(r.rows)} />}</Show>
        </section>
      </div>
    </Page>
  );
}

export function StocksPage() {
  const stocks = useLoad(() => get<Stock[]>("/stocks"), [], REFRESH_MS);
  const specs = useLoad(() => get<Spec[] | { items: Spec[] }>("/specs").then(items), []);
  const clusters = useLoad(() => get<{ name: string; home: boolean }[]>("/clusters"), []);
  const [specName, setSpecName] = useState("");
  const [cluster, setCluster] = useState("");
  const [number, setNumber] = useState("1");
  const action = useAction();
  const change = (add: boolean) => {
    const body = {
      specName,
      number: Number(number),
      operationID: crypto.randomUUID(),
      ...(cluster ? { cluster } : {}),
    };
    void action.run(() => api(add ? "POST" : "DELETE", "/stocks", body).then(stocks.reload));
  };
  return (
    <Page title="Warm stocks">
      <Form action={action} class="inline card" onSubmit={(e) => (e.preventDefault(), change(true))}>
        <Field
          label="Spec"
          name="stock-spec"
          field="specName"
          value={specName}
          onInput={setSpecName}
          options={["", ...(specs.data ?? []).map((spec) => spec.name)]}
          emptyLabel="choose a spec"
          required
        />
        <Field
          label="Cluster"
          name="stock-cluster"
          field="cluster"
          value={cluster}
          onInput={setCluster}
          options={["", ...(clusters.data ?? []).filter((c) => !c.home).map((c) => c.name)]}
          emptyLabel="home cluster"
        />
        <Field label="Units" name="stock-number" field="number" type="number" value={number} onInput={setNumber} required />
        <button type="submit" disabled={action.busy}>
          Add units
        </button>
        <button type="button" class="danger" disabled={action.busy || !specName} onClick={() => change(false)}>
          Remove units
        </button>
      </Form>
      <ErrorNote error={action.error} />
      <Show loaded={stocks} empty={(rows) => !rows.length} emptyText="No warm stocks.">
        {(rows) => (
          <Table
            caption="Warm stocks"
            rows={rows}
            rowKey={(s) => `${s.cluster}/${s.specName}`}
            columns={[
              { label: "Cluster", cell: (s) => s.cluster },
              { label: "Spec", cell: (s) => s.specName },
              { label: "Target", cell: (s) => s.target, numeric: true },
              { label: "Ready", cell: (s) => s.available, numeric: true },
              { label: "Placing", cell: (s) => s.placing, numeric: true },
              { label: "Pre-pulled images", cell: (s) => s.images.join(", ") || "—" },
            ]}
          />
        )}
      </Show>
    </Page>
  );
}
