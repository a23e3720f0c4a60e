// Instances, batch jobs and inference services: start one, watch its state live, open
// its URL, stop it.
import { useEffect, useState } from "preact/hooks";
import { del, enc, get, items, post } from "../api";
import { Link } from "../nav";
import { ErrorNote, Field, confirmed, Page, Show, StateBadge, Table, useAction, useLoad, when, Form } from "../ui";
import { type Project, ProjectField } from "./projects";
import { ENDED, type Instance, type Job, inQueue, jobGpus, jobReason, openPort, portsOf, Queued } from "./workload";

interface Template {
  templateID: string;
  name: string;
  kinds: ("instance" | "service")[];
  image: string;
  command: string[] | null;
  args: string[] | null;
  env: { name: string; value: string }[];
  ports: { port: number; appProtocol: string; isPublic: boolean }[];
  servingPort: number | null;
  readinessPath: string | null;
  /** The uid it runs as: tenant pods never run as root. */
  runAsUser: number;
}

/** The environment variable a template reads the user's SSH public key from. */
const PUBLIC_KEY_ENV = "PUBLIC_KEY";

/** What an instance started from `template` runs: its command, arguments, environment
 * (the user's public key where it takes one), every port it declares, and its
 * readiness probe on the serving port. The HTTP port field may replace the public one. */
function instanceTemplate(template: Template | undefined, port: string, publicKey: string) {
  if (!template) {
    return { ports: port ? [{ port: Number(port), isPublic: true }] : [] };
  }
  const http = template.ports.find((p) => p.appProtocol === "http");
  const ports = template.ports.map((p) => ({
    port: p === http && port ? Number(port) : p.port,
    isPublic: p.isPublic,
    ...(p.port === template.servingPort && template.readinessPath
      ? { isProbe: true, baseUrl: template.readinessPath }
      : {}),
  }));
  const envs = template.env.map((e) => (e.name === PUBLIC_KEY_ENV ? { ...e, value: publicKey.trim() } : e));
  return {
    ports,
    envs,
    ...(template.command ? { command: template.command } : {}),
    ...(template.args ? { args: template.args } : {}),
    runAsUser: template.runAsUser,
  };
}

interface Spec {
  name: string;
  gpuType: string;
  gpuNum: number;
  zones: string[];
  /** "1" for whole GPUs; a shared GPU's units weigh less. */
  gpuWeight: string;
}

/** Free whole GPUs of one type in one zone, each node's apart. */
interface Capacity {
  zone: string;
  gpuType: string;
  freeByNode: number[];
}

interface Service {
  serviceID: string;
  state: string;
  url: string;
  specName: string;
  image: string;
  readyReplicas: number;
  desiredReplicas: number;
  revision: number;
  cluster: string;
}

const LIVE_MS = 3000;

export function InstancesPage() {
  const [tab, setTab] = useState<"instances" | "jobs" | "services">("instances");
  return (
    <Page title="Workloads">
      <div role="tablist" aria-label="Workload kinds" class="tabs">
        {(["instances", "jobs", "services"] as const).map((name) => (
          <button type="button" role="tab" aria-selected={tab === name} onClick={() => setTab(name)}>
            {name === "services" ? "Inference services" : name[0].toUpperCase() + name.slice(1)}
          </button>
        ))}
      </div>
      {tab === "instances" && <Instances />}
      {tab === "jobs" && <Jobs />}
      {tab === "services" && <Services />}
    </Page>
  );
}

function Instances() {
  const list = useLoad(() => get<{ items: Instance[] }>("/gpu-instances?limit=100").then(items), [], LIVE_MS);
  const action = useAction();
  const open = (instance: Instance, port: number) => action.run(() => openPort(instance, port));
  const stop = (instance: Instance) =>
    action.run(async () => {
      await post(`/gpu-instances/${enc(instance.instanceID)}/stop`);
      list.reload();
    });
  const start = (instance: Instance) =>
    action.run(async () => {
      await post(`/gpu-instances/${enc(instance.instanceID)}/start`);
      list.reload();
    });
  const remove = (instance: Instance) =>
    action.run(async () => {
      await del(`/gpu-instances/${enc(instance.instanceID)}`);
      list.reload();
    });
  return (
    <>
      <StartInstance onStarted={list.reload} />
      <ErrorNote error={action.error} />
      <h2>Your instances</h2>
      <Show loaded={list} empty={(rows) => !rows.length} emptyText="No instances yet: start one above.">
        {(rows) => (
          <Table
            caption="Instances"
            rows={rows}
            rowKey={(i) => i.instanceID}
            columns={[
              {
                label: "Instance",
                // Its page: history, reasons, log.
                cell: (i) => <Link href={`/instances/${enc(i.instanceID)}`}>{i.instanceID}</Link>,
              },
              {
                label: "State",
                cell: (i) => <Queued state={i.state} queue={i.queue} />,
              },
              { label: "Spec", cell: (i) => `${i.specName} (${i.gpuCount}× ${i.gpuType})` },
              { label: "Image", cell: (i) => i.image },
              { label: "Project", cell: (i) => i.project },
              { label: "Cluster", cell: (i) => i.cluster },
              { label: "Node", cell: (i) => i.node ?? "—" },
              { label: "Started", cell: (i) => when(i.createdAt) },
              {
                label: "Actions",
                cell: (i) => (
                  <div class="row-actions">
                    {i.state === "running" &&
                      portsOf(i).map((port) => (
                        <button type="button" onClick={() => void open(i, port)}>
                          Open :{port}
                        </button>
                      ))}
                    {!ENDED.has(i.state) && (
                      <button type="button" class="danger" onClick={() => confirmed(`Stop ${i.instanceID}? Its GPUs are released and its billing ends.`) && void stop(i)} aria-label={`Stop ${i.instanceID}`}>
                        Stop
                      </button>
                    )}
                    {(i.state === "stopped" || i.state === "failed") && (
                      <>
                        <button type="button" onClick={() => void start(i)} aria-label={`Start ${i.instanceID} again`}>
                          Start
                        </button>
                        <button type="button" class="danger" onClick={() => confirmed(`Delete the record of ${i.instanceID}? Its history stays in your bills.`) && void remove(i)} aria-label={`Delete ${i.instanceID}`}>
                          Delete
                        </button>
                      </>
                    )}
                  </div>
                ),
              },
            ]}
          />
        )}
      </Show>
    </>
  );
}

function useCatalog() {
  return useLoad(
    async () => {
      const [templates, specs, regions, projects] = await Promise.all([
        get<Template[] | { items: Template[] }>("/templates").then(items),
        get<Spec[] | { items: Spec[] }>("/specs").then(items),
        get<Region[]>("/regions"),
        get<Project[]>("/projects"),
      ]);
      return { templates, specs, regions, projects };
    },
    [],
  );
}

/** Where a workload may be asked to run (GET /v1/regions). */
interface Region {
  name: string;
  zones: string[];
  gpuTypes: string[];
  open: boolean;
}

/** The region picker of a start: any region, or one whose clusters have the spec's
 * GPUs and take new workloads now. */
function RegionField(props: { name: string; regions: Region[]; spec?: Spec; value: string; onInput: (value: string) => void }) {
  const offered = props.regions.filter((r) => r.open && (!props.spec || r.gpuTypes.includes(props.spec.gpuType)));
  if (props.regions.length < 2) return null; // one region: nothing to choose
  return (
    <Field
      label="Region"
      name={props.name}
      field="region"
      value={props.value}
      onInput={props.onInput}
      options={["", ...offered.map((r) => r.name)]}
      emptyLabel="any region with these GPUs"
    />
  );
}

interface QuotaUse {
  maxGpus: number;
  maxInstances: number;
  borrowGpus: number;
  gpusInUse: number;
  workloadsInUse: number;
  /** The caller's projects: each one's share (null: the tenant's quota only) and use. */
  projects: { project: string; maxGpus: number | null; gpusInUse: number }[];
}

/** What a start may still take: the tenant's quota and what its workloads hold now,
 * and each of the caller's projects' share once there are projects. */
function QuotaNote() {
  const quota = useLoad(() => get<QuotaUse>("/quota"), [], LIVE_MS);
  const q = quota.data;
  if (!q) return null;
  const borrow = q.borrowGpus ? `, and up to ${q.borrowGpus} more borrowed by jobs` : "";
  return (
    <p class="note" data-testid="quota">
      Your tenant holds {q.gpusInUse} of {q.maxGpus} GPUs{borrow}, in {q.workloadsInUse} of {q.maxInstances} workloads.
      {q.projects.length > 1 &&
        ` Projects: ${q.projects.map((p) => `${p.project} ${p.gpusInUse}${p.maxGpus === null ? "" : ` of ${p.maxGpus}`}`).join(", ")}.`}
    </p>
  );
}

/** How many of the spec would start now, by zone, as `gpucloud offer` counts them:
 * its GPUs whole, on one node. */
function FreeNote(props: { spec: Spec | undefined }) {
  const capacity = useLoad(() => get<Capacity[]>("/capacity"), [], LIVE_MS);
  const spec = props.spec;
  if (!spec || !capacity.data || spec.gpuWeight !== "1") return null;
  const fits = capacity.data
    .filter((group) => group.gpuType === spec.gpuType && (!spec.zones.length || spec.zones.includes(group.zone)))
    .map((group) => ({ zone: group.zone, count: group.freeByNode.reduce((n, free) => n + Math.floor(free / spec.gpuNum), 0) }));
  const total = fits.reduce((n, fit) => n + fit.count, 0);
  return (
    <p class="note" data-testid="free-now">
      {total
        ? `${total} of ${spec.name} would start now (${fits.map((fit) => `${fit.zone}: ${fit.count}`).join(", ")}).`
        : `No ${spec.name} would start now: the fleet has no ${spec.gpuNum} free ${spec.gpuType} GPUs on one node. Wait in the queue to start when they free up.`}
    </p>
  );
}

function StartInstance(props: { onStarted: () => void }) {
  const catalog = useCatalog();
  const [templateID, setTemplateID] = useState("");
  const [specName, setSpecName] = useState("");
  const [image, setImage] = useState("");
  const [port, setPort] = useState("");
  const [publicKey, setPublicKey] = useState("");
  const [whenShort, setWhenShort] = useState("");
  const [region, setRegion] = useState("");
  const [project, setProject] = useState("");
  const action = useAction();
  const templates = catalog.data?.templates.filter((t) => t.kinds.includes("instance")) ?? [];
  const chosen = templates.find((t) => t.templateID === templateID);
  const takesKey = chosen?.env.some((e) => e.name === PUBLIC_KEY_ENV) ?? false;
  const specs = catalog.data?.specs ?? [];
  useEffect(() => {
    if (!specName && specs.length) setSpecName(specs[0].name);
  }, [specs.length]);
  const pick = (id: string) => {
    setTemplateID(id);
    const template = templates.find((t) => t.templateID === id);
    if (template) {
      setImage(template.image);
      setPort(String(template.ports.find((p) => p.appProtocol === "http")?.port ?? ""));
    }
  };
  const submit = (e: Event) => {
    e.preventDefault();
    const template = image === chosen?.image ? chosen : undefined; // a changed image is the user's own
    const body = {
      image,
      specName,
      template: instanceTemplate(template, port, publicKey),
      queue: whenShort !== "",
      region: region || undefined,
      ...(project ? { project } : {}),
    };
    void action.run(async () => {
      await post("/gpu-instances", body);
      props.onStarted();
    });
  };
  return (
    <Form action={action} class="card form-grid" onSubmit={submit} aria-labelledby="start-title">
      <h2 id="start-title">Start an instance</h2>
      <QuotaNote />
      <ErrorNote error={catalog.error} />
      <Field
        label="Template"
        name="template"
        value={templateID}
        onInput={pick}
        options={["", ...templates.map((t) => t.templateID)]}
        emptyLabel="none: image and port below"
      />
      <Field label="Spec" name="spec" field="specName" value={specName} onInput={setSpecName} options={specs.map((s) => s.name)} required />
      <FreeNote spec={specs.find((s) => s.name === specName)} />
      <RegionField name="region" regions={catalog.data?.regions ?? []} spec={specs.find((s) => s.name === specName)} value={region} onInput={setRegion} />
      <ProjectField name="project" projects={catalog.data?.projects ?? []} value={project} onInput={setProject} />
      <Field label="Image" name="image" value={image} onInput={setImage} required placeholder="jupyter/base-notebook" />
      <Field label="HTTP port (optional)" name="port" type="number" value={port} onInput={setPort} />
      {takesKey && (
        <Field
          label="SSH public key"
          name="publicKey"
          value={publicKey}
          onInput={setPublicKey}
          required
          placeholder="ssh-ed25519 AAAA… you@laptop"
        />
      )}
      <Field
        label="If the quota or free GPUs are short"
        name="whenShort"
        value={whenShort}
        onInput={setWhenShort}
        options={["", "wait in the queue"]}
        emptyLabel="refuse the start"
      />
      <ErrorNote error={action.error} />
      <button type="submit" disabled={action.busy || !specs.length}>
        {action.busy ? "Starting…" : "Start"}
      </button>
      {!specs.length && catalog.data && <p class="muted">No specs yet: the operator adds them.</p>}
    </Form>
  );
}

/** `NAME=value` pairs separated by spaces, as a job's env; a pair without `=` goes as
 * a name with an empty value, for the API to judge. */
function envVars(text: string): { name: string; value: string }[] | undefined {
  const pairs = text.split(/\s+/).filter(Boolean);
  if (!pairs.length) return undefined;
  return pairs.map((pair) => {
    const at = pair.indexOf("=");
    return at < 0 ? { name: pair, value: "" } : { name: pair.slice(0, at), value: pair.slice(at + 1) };
  });
}

function Jobs() {
  const list = useLoad(() => get<{ items: Job[] }>("/jobs?limit=100").then(items), [], LIVE_MS);
  const catalog = useCatalog();
  const [image, setImage] = useState("");
  const [command, setCommand] = useState("");
  const [specName, setSpecName] = useState("");
  const [nodes, setNodes] = useState("");
  const [jobID, setJobID] = useState("");
  const [env, setEnv] = useState("");
  const [region, setRegion] = useState("");
  const [project, setProject] = useState("");
  const action = useAction();
  const specs = catalog.data?.specs ?? [];
  const submit = (e: Event) => {
    e.preventDefault();
    const body = {
      jobID: jobID || undefined,
      image,
      specName: specName || specs[0]?.name,
      command: command ? command.split(" ") : undefined,
      env: envVars(env),
      // A multi-node job: its pods start together, a node each (docs/jobs.md).
      nodes: Number(nodes) > 1 ? Number(nodes) : undefined,
      region: region || undefined,
      ...(project ? { project } : {}),
    };
    void action.run(async () => {
      await post("/jobs", body);
      setJobID("");
      list.reload();
    });
  };
  return (
    <>
      <Form action={action} class="card form-grid" onSubmit={submit} aria-labelledby="submit-title">
        <h2 id="submit-title">Submit a job</h2>
        <QuotaNote />
        <Field label="Spec" name="job-spec" field="specName" value={specName || specs[0]?.name || ""} onInput={setSpecName} options={specs.map((s) => s.name)} />
        <RegionField name="job-region" regions={catalog.data?.regions ?? []} spec={specs.find((s) => s.name === (specName || specs[0]?.name))} value={region} onInput={setRegion} />
        <ProjectField name="job-project" projects={catalog.data?.projects ?? []} value={project} onInput={setProject} />
        <Field label="Image" name="job-image" value={image} onInput={setImage} required placeholder="pytorch/pytorch" />
        <Field label="Command" name="job-command" value={command} onInput={setCommand} placeholder="python train.py" />
        <Field label="Nodes (multi-node, optional)" name="job-nodes" type="number" value={nodes} onInput={setNodes} placeholder="1" />
        <Field label="Job id (optional)" name="jobID" value={jobID} onInput={setJobID} placeholder="train-1" />
        <Field label="Environment (optional)" name="job-env" field="env" value={env} onInput={setEnv} placeholder="EPOCHS=3 LR=0.001" />
        <ErrorNote error={action.error} />
        <button type="submit" disabled={action.busy || !specs.length}>
          Submit
        </button>
      </Form>
      <h2>Your jobs</h2>
      <Show loaded={list} empty={(rows) => !rows.length} emptyText="No jobs yet.">
        {(rows) => (
          <Table
            caption="Jobs"
            rows={rows}
            rowKey={(j) => j.jobID}
            columns={[
              { label: "Job", cell: (j) => <Link href={`/jobs/${enc(j.jobID)}`}>{j.jobID}</Link> },
              { label: "State", cell: (j) => <StateBadge state={j.state} /> },
              {
                label: "Queue",
                cell: (j) => inQueue(j.queue),
              },
              { label: "Spec", cell: (j) => j.specName },
              { label: "Project", cell: (j) => j.project },
              { label: "GPUs", cell: (j) => jobGpus(j) },
              { label: "Cluster", cell: (j) => j.cluster },
              { label: "Submitted", cell: (j) => when(j.createdAt) },
              // Why it failed, or why it waits, as the API says it.
              { label: "Reason", cell: (j) => jobReason(j) },
              {
                label: "Actions",
                cell: (j) => (
                  <div class="row-actions">
                    {!ENDED.has(j.state) && (
                      <button type="button" class="danger" onClick={() => confirmed(`Cancel job ${j.jobID}?`) && void action.run(() => del(`/jobs/${enc(j.jobID)}`).then(list.reload))}>
                        Cancel
                      </button>
                    )}
                  </div>
                ),
              },
            ]}
          />
        )}
      </Show>
    </>
  );
}

function StartService(props: { onStarted: () => void }) {
  const catalog = useCatalog();
  const [templateID, setTemplateID] = useState("");
  const [serviceID, setServiceID] = useState("");
  const [specName, setSpecName] = useState("");
  const [image, setImage] = useState("");
  const [port, setPort] = useState("8000");
  const [readinessPath, setReadinessPath] = useState("/");
  const [replicas, setReplicas] = useState("1");
  const [region, setRegion] = useState("");
  const [project, setProject] = useState("");
  const action = useAction();
  const templates = catalog.data?.templates.filter((t) => t.kinds.includes("service")) ?? [];
  const specs = catalog.data?.specs ?? [];
  const pick = (id: string) => {
    setTemplateID(id);
    const template = templates.find((t) => t.templateID === id);
    if (template) {
      setImage(template.image);
      setPort(String(template.servingPort ?? port));
      setReadinessPath(template.readinessPath ?? "/");
    }
  };
  const submit = (e: Event) => {
    e.preventDefault();
    // The template's command, arguments, variables and user, unless the image was
    // changed to the user's own.
    const picked = templates.find((t) => t.templateID === templateID);
    const template = picked && picked.image === image ? picked : undefined;
    const body = {
      serviceID: serviceID || undefined,
      image,
      specName: specName || specs[0]?.name,
      port: Number(port),
      readinessPath,
      minReplicas: Number(replicas),
      region: region || undefined,
      ...(project ? { project } : {}),
      env: template?.env ?? [],
      ...(template?.command ? { command: template.command } : {}),
      ...(template?.args ? { args: template.args } : {}),
      ...(template ? { runAsUser: template.runAsUser } : {}),
    };
    void action.run(async () => {
      await post("/inference-services", body);
      props.onStarted();
    });
  };
  return (
    <Form action={action} class="card form-grid" onSubmit={submit} aria-labelledby="service-title">
      <h2 id="service-title">Start an inference service</h2>
      <QuotaNote />
      <ErrorNote error={catalog.error} />
      <Field
        label="Template"
        name="service-template"
        value={templateID}
        onInput={pick}
        options={["", ...templates.map((t) => t.templateID)]}
        emptyLabel="none: image and port below"
      />
      <Field label="Service name (id)" name="serviceID" value={serviceID} onInput={setServiceID} placeholder="llama" />
      <Field label="Spec" name="service-spec" field="specName" value={specName || specs[0]?.name || ""} onInput={setSpecName} options={specs.map((s) => s.name)} />
      <RegionField name="service-region" regions={catalog.data?.regions ?? []} spec={specs.find((s) => s.name === (specName || specs[0]?.name))} value={region} onInput={setRegion} />
      <ProjectField name="service-project" projects={catalog.data?.projects ?? []} value={project} onInput={setProject} />
      <Field label="Image" name="service-image" value={image} onInput={setImage} required placeholder="vllm/vllm-openai:v0.6.3" />
      <Field label="Port" name="service-port" type="number" value={port} onInput={setPort} required />
      <Field label="Readiness path" name="readinessPath" value={readinessPath} onInput={setReadinessPath} required />
      <Field label="Replicas" name="replicas" type="number" value={replicas} onInput={setReplicas} required />
      <ErrorNote error={action.error} />
      <button type="submit" disabled={action.busy || !specs.length}>
        Start service
      </button>
    </Form>
  );
}

function Services() {
  const list = useLoad(() => get<{ items: Service[] }>("/inference-services?limit=100").then(items), [], LIVE_MS);
  const action = useAction();
  return (
    <>
      <StartService onStarted={list.reload} />
      <ErrorNote error={action.error} />
      <h2>Your inference services</h2>
      <Show loaded={list} empty={(rows) => !rows.length} emptyText="No inference services yet.">
        {(rows) => (
          <Table
            caption="Inference services"
            rows={rows}
            rowKey={(s) => s.serviceID}
            columns={[
              { label: "Service", cell: (s) => s.serviceID },
              { label: "State", cell: (s) => <StateBadge state={s.state} /> },
              { label: "Cluster", cell: (s) => s.cluster },
              { label: "Replicas", cell: (s) => `${s.readyReplicas} / ${s.desiredReplicas}`, numeric: true },
              { label: "Revision", cell: (s) => s.revision, numeric: true },
              { label: "URL", cell: (s) => <code>{s.url}</code> },
              {
                label: "Actions",
                cell: (s) => (
                  <button type="button" class="danger" onClick={() => confirmed(`Delete service ${s.serviceID}? Its replicas stop and its URL goes.`) && void action.run(() => del(`/inference-services/${enc(s.serviceID)}`).then(list.reload))}>
                    Delete
                  </button>
                ),
              },
            ]}
          />
        )}
      </Show>
    </>
  );
}
