// Monitoring: live GPU charts of each running instance, job or inference service (utilisation, memory,
// temperature, power) that refresh by themselves; alert rules and alerts.
import { useState } from "preact/hooks";
import { del, enc, get, items, post } from "../api";
import { ErrorNote, Field, confirmed, LineChart, Page, Show, StateBadge, Table, useAction, useLoad, when, Form } from "../ui";

interface Instance {
  instanceID: string;
  state: string;
}

interface MetricPoint {
  start: string;
  utilizationGpuPct: number;
  memoryUsedMib: number;
  temperatureC: number;
  powerW: number;
}

interface AlertRule {
  ruleID: string;
  tenantID: string | null;
  name: string;
  metric: string;
  comparison: string;
  threshold: number;
  durationS: number;
  severity: string;
  action: string;
  enabled?: boolean;
}

interface Alert {
  alertID: string;
  state: string;
  severity: string;
  node: string;
  instanceID: string | null;
  metric: string;
  value: number;
  threshold: number;
  firedAt: string;
  resolvedAt: string | null;
}

const METRICS = ["utilization_gpu_pct", "utilization_memory_pct", "memory_used_mib", "temperature_c", "power_w"];
const REFRESH_MS = 10_000;

/** Charts for tenants; alerts and rules for those who may manage them (admins). */
export function MonitoringPage(props: { operator: boolean; admin: boolean }) {
  return (
    <Page title={props.operator ? "Alerts" : "Monitoring"}>
      {!props.operator && <WorkloadCharts />}
      <Alerts />
      {props.admin && <Rules operator={props.operator} />}
      {!props.admin && (
        <p class="muted">Alert rules are your tenant admins' to set.</p>
      )}
    </Page>
  );
}

interface Workload {
  /** The API collection its metrics read is under, and how the picker shows it. */
  collection: "gpu-instances" | "jobs" | "inference-services";
  id: string;
  label: string;
}

/** The running instances, jobs and inference services: whatever holds GPUs now. */
async function runningWorkloads(): Promise<Workload[]> {
  const [instances, jobs, services] = await Promise.all([
    get<{ items: Instance[] }>("/gpu-instances?limit=100").then(items),
    get<{ items: { jobID: string; state: string }[] }>("/jobs?limit=100").then(items),
    get<{ items: { serviceID: string; readyReplicas?: number; replicas?: number }[] }>("/inference-services?limit=100").then(items),
  ]);
  return [
    ...instances.filter((i) => i.state === "running").map((i) => ({ collection: "gpu-instances" as const, id: i.instanceID, label: `instance ${i.instanceID}` })),
    ...jobs.filter((j) => j.state === "running").map((j) => ({ collection: "jobs" as const, id: j.jobID, label: `job ${j.jobID}` })),
    ...services.map((s) => ({ collection: "inference-services" as const, id: s.serviceID, label: `service ${s.serviceID}` })),
  ];
}

function WorkloadCharts() {
  const running = useLoad(runningWorkloads, [], 30_000);
  const [picked, setPicked] = useState("");
  const workloads = running.data ?? [];
  const chosen = workloads.find((w) => w.label === picked) ?? workloads[0];
  return (
    <section class="card" aria-labelledby="charts-title">
      <h2 id="charts-title">GPU metrics</h2>
      <ErrorNote error={running.error} />
      {chosen ? (
        <>
          <Field label="Workload" name="metrics-workload" value={chosen.label} onInput={setPicked} options={workloads.map((w) => w.label)} />
          <Charts path={`/${chosen.collection}/${enc(chosen.id)}/metrics`} />
        </>
      ) : (
        <p class="muted">{running.loading ? "Loading…" : "Nothing running: an instance's, job's or service's GPU charts show here while it runs."}</p>
      )}
    </section>
  );
}

function Charts(props: { path: string }) {
  const series = useLoad(
    () => {
      const start = new Date(Date.now() - 3_600_000).toISOString();
      return get<{ points: MetricPoint[] }>(`${props.path}?resolution=1m&start=${enc(start)}`);
    },
    [props.path],
    REFRESH_MS,
  );
  return (
    <Show loaded={series}>
      {(s) => {
        const line = (name: string, pick: (p: MetricPoint) => number) => [
          { name, points: s.points.map((p) => ({ x: Date.parse(p.start), y: pick(p) })) },
        ];
        return (
          <div class="grid-2" data-testid="gpu-charts">
            <LineChart title="Utilisation" unit="%" yMax={100} series={line("GPU", (p) => p.utilizationGpuPct)} />
            <LineChart title="Memory used" unit="MiB" series={line("memory", (p) => p.memoryUsedMib)} />
            <LineChart title="Temperature" unit="°C" series={line("temperature", (p) => p.temperatureC)} />
            <LineChart title="Power" unit="W" series={line("power", (p) => p.powerW)} />
          </div>
        );
      }}
    </Show>
  );
}

function Alerts() {
  const alerts = useLoad(() => get<{ items: Alert[] } | Alert[]>("/alerts?limit=50").then(items), [], REFRESH_MS);
  return (
    <section class="card" aria-labelledby="alerts-title">
      <h2 id="alerts-title">Alerts</h2>
      <Show loaded={alerts} empty={(rows) => !rows.length} emptyText="No alerts.">
        {(rows) => (
          <Table
            caption="Alerts"
            rows={rows}
            rowKey={(a) => a.alertID}
            columns={[
              { label: "State", cell: (a) => <StateBadge state={a.state} /> },
              { label: "Severity", cell: (a) => a.severity },
              { label: "What", cell: (a) => `${a.metric} ${a.value.toFixed(1)} (threshold ${a.threshold})` },
              { label: "Where", cell: (a) => a.instanceID ?? a.node },
              { label: "Fired", cell: (a) => when(a.firedAt) },
              { label: "Resolved", cell: (a) => when(a.resolvedAt) },
            ]}
          />
        )}
      </Show>
    </section>
  );
}

function Rules(props: { operator: boolean }) {
  const rules = useLoad(() => get<{ items: AlertRule[] } | AlertRule[]>("/alert-rules").then(items), []);
  const [name, setName] = useState("");
  const [metric, setMetric] = useState(METRICS[0]);
  const [threshold, setThreshold] = useState("90");
  const [duration, setDuration] = useState("60");
  const [comparison, setComparison] = useState(">");
  const [then, setThen] = useState("notify");
  const action = useAction();
  const create = (e: Event) => {
    e.preventDefault();
    const body = { name, metric, comparison, threshold: Number(threshold), durationS: Number(duration), action: then };
    void action.run(async () => {
      await post("/alert-rules", body);
      setName("");
      rules.reload();
    });
  };
  return (
    <section class="card" aria-labelledby="rules-title">
      <h2 id="rules-title">{props.operator ? "Fleet alert rules" : "Alert rules on your instances"}</h2>
      <Form action={action} class="inline" onSubmit={create}>
        <Field label="Name" name="rule-name" value={name} onInput={setName} required />
        <Field label="Metric" name="rule-metric" value={metric} onInput={setMetric} options={METRICS} />
        <Field label="Comparison" name="rule-comparison" value={comparison} onInput={setComparison} options={[">", ">=", "<", "<="]} />
        <Field label="Threshold" name="rule-threshold" type="number" value={threshold} onInput={setThreshold} required />
        <Field label="For (s)" name="rule-duration" field="durationS" type="number" value={duration} onInput={setDuration} />
        {!props.operator && (
          <Field label="Then" name="rule-action" value={then} onInput={setThen} options={["notify", "stop_instance"]} />
        )}
        <button type="submit" disabled={action.busy}>
          Add rule
        </button>
      </Form>
      <ErrorNote error={action.error} />
      <Show loaded={rules} empty={(rows) => !rows.length} emptyText="No alert rules.">
        {(rows) => (
          <Table
            caption="Alert rules"
            rows={rows}
            rowKey={(r) => r.ruleID}
            columns={[
              { label: "Rule", cell: (r) => r.name },
              { label: "Condition", cell: (r) => `${r.metric} ${r.comparison} ${r.threshold} for ${r.durationS} s` },
              { label: "Then", cell: (r) => (r.action === "stop_instance" ? "stop the instance" : "notify") },
              { label: "Severity", cell: (r) => r.severity },
              {
                label: "Actions",
                cell: (r) => (
                  <button type="button" class="danger" onClick={() => confirmed(`Delete alert rule ${r.name}?`) && void action.run(() => del(`/alert-rules/${enc(r.ruleID)}`).then(rules.reload))}>
                    Delete
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
