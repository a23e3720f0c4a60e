// Admin: users and their roles, API keys (the secret is shown once), the audit log.
import { useState } from "preact/hooks";
import { del, enc, get, items, patch, post, put, type Principal } from "../api";
import { KubectlAccess } from "./kubectl";
import { type Project, Projects } from "./projects";
import { SingleSignOn } from "./sso";
import { ErrorNote, Field, confirmed, Page, Show, ShownOnce, StateBadge, Table, useAction, useLoad, when, Form } from "../ui";

interface User {
  userID: string;
  email: string;
  name: string;
  role: string;
  status: string;
  hasPassword: boolean;
  createdAt: string;
}

interface ApiKey {
  keyID: string;
  name: string;
  userID: string | null;
  role: string;
  scopes: string[];
  createdAt: string;
  expiresAt: string | null;
  revokedAt: string | null;
  lastUsedAt: string | null;
  /** The one project it acts in; null: any its user may. */
  project: string | null;
}

interface AuditEntry {
  auditID: string;
  tenantID: string | null;
  actor: string;
  actorName: string | null;
  action: string;
  resource: string;
  result: number;
  at: string;
}

export function AdminPage(props: { principal: Principal }) {
  const admin = props.principal.role !== "tenant-user";
  return (
    <Page title="Admin">
      {admin && <Users principal={props.principal} />}
      {props.principal.role === "tenant-admin" && <Invitations />}
      {props.principal.role === "tenant-admin" && <TenantQuota />}
      {props.principal.role === "tenant-admin" && <UserLimits />}
      {props.principal.role === "tenant-admin" && <SingleSignOn />}
      {props.principal.role !== "platform-admin" && <Projects admin={props.principal.role === "tenant-admin"} />}
      <Keys admin={admin} self={props.principal.userID} tenant={props.principal.role !== "platform-admin"} />
      {props.principal.role !== "platform-admin" && <KubectlAccess />}
      {admin && <Audit />}
      {!admin && <p class="muted">Users and the audit log are for your tenant's admins.</p>}
    </Page>
  );
}

/** Users and a form to add one: the caller's own tenant's (or the operators'), or with
 * `tenantID` that tenant's, as an operator sees them (adding only; its admins manage them). */
export function Users(props: { principal: Principal; tenantID?: string }) {
  const path = props.tenantID ? `/tenants/${enc(props.tenantID)}/users` : "/users";
  const users = useLoad(() => get<{ items: User[] }>(`${path}?limit=200`).then(items), [path]);
  const manage = !props.tenantID;
  const roles = props.principal.role === "platform-admin" && manage ? ["platform-admin"] : ["tenant-user", "tenant-admin"];
  const [email, setEmail] = useState("");
  const [name, setName] = useState("");
  const [role, setRole] = useState(roles[0]);
  const [password, setPassword] = useState("");
  const action = useAction();
  const create = (e: Event) => {
    e.preventDefault();
    void action.run(async () => {
      await post(path, { email, name, role, password: password || undefined });
      setEmail("");
      setName("");
      setPassword("");
      users.reload();
    });
  };
  const change = (user: User, body: Record<string, string>) =>
    void action.run(() => patch(`/users/${enc(user.userID)}`, body).then(users.reload));
  return (
    <section class="card" aria-labelledby="users-title">
      <h2 id="users-title">{props.tenantID ? `Users of ${props.tenantID}` : "Users"}</h2>
      <Form action={action} class="inline" onSubmit={create}>
        <Field label="Email" name="user-email" type="email" value={email} onInput={setEmail} required />
        <Field label="Name" name="user-name" value={name} onInput={setName} required />
        <Field label="Role" name="user-role" value={role} onInput={setRole} options={roles} />
        <Field label="Password (optional)" name="user-password" type="password" value={password} onInput={setPassword} autocomplete="new-password" />
        <button type="submit" disabled={action.busy}>
          Add user
        </button>
      </Form>
      <ErrorNote error={action.error} />
      <Show loaded={users} empty={(rows) => !rows.length} emptyText="No users.">
        {(rows) => (
          <Table
            caption={props.tenantID ? `Users of ${props.tenantID}` : "Users"}
            rows={rows}
            rowKey={(u) => u.userID}
            columns={[
              { label: "Email", cell: (u) => u.email },
              { label: "Name", cell: (u) => u.name },
              { label: "Role", cell: (u) => u.role },
              { label: "Status", cell: (u) => <StateBadge state={u.status} /> },
              { label: "Added", cell: (u) => when(u.createdAt) },
              {
                label: "Actions",
                cell: (u) =>
                  manage &&
                  u.userID !== props.principal.userID && (
                    <div class="row-actions">
                      {roles.length > 1 && (
                        <button
                          type="button"
                          onClick={() => change(u, { role: u.role === "tenant-admin" ? "tenant-user" : "tenant-admin" })}
                        >
                          {u.role === "tenant-admin" ? "Make user" : "Make admin"}
                        </button>
                      )}
                      <button type="button" onClick={() => change(u, { status: u.status === "active" ? "disabled" : "active" })}>
                        {u.status === "active" ? "Disable" : "Enable"}
                      </button>
                    </div>
                  ),
              },
            ]}
          />
        )}
      </Show>
    </section>
  );
}

interface Invitation {
  invitationID: string;
  email: string;
  role: string;
  projects: string[];
  status: string;
  expiresAt: string;
}

/** Invite people by email with a role: the link is shown once, to send them; it works
 * once, until it expires, and may be revoked before. */
function Invitations() {
  const invitations = useLoad(() => get<Invitation[]>("/invitations"), []);
  const [email, setEmail] = useState("");
  const [role, setRole] = useState("tenant-user");
  const [chosen, setChosen] = useState<string[]>([]);
  const [link, setLink] = useState<string | null>(null);
  const projects = useLoad(() => get<Project[]>("/projects"), []);
  const offered = (projects.data ?? []).filter((p) => !p.everyone);
  const action = useAction();
  const invite = (e: Event) => {
    e.preventDefault();
    void action.run(async () => {
      const made = await post<{ path: string }>("/invitations", { email, role, projects: chosen });
      setLink(`${location.origin}${made.path}`);
      setEmail("");
      setChosen([]);
      invitations.reload();
    });
  };
  const toggle = (projectID: string, on: boolean) =>
    setChosen(on ? [...chosen, projectID] : chosen.filter((p) => p !== projectID));
  return (
    <section class="card" aria-labelledby="invitations-title">
      <h2 id="invitations-title">Invitations</h2>
      {link && <ShownOnce label="The invitation's link" secret={link} onDone={() => setLink(null)} />}
      <Form action={action} class="inline" onSubmit={invite}>
        <Field label="Email to invite" name="invite-email" type="email" value={email} onInput={setEmail} required />
        <Field label="Role" name="invite-role" value={role} onInput={setRole} options={["tenant-user", "tenant-admin"]} />
        {offered.length > 0 && (
          <fieldset>
            <legend>Projects they join</legend>
            {offered.map((p) => (
              <label key={p.projectID}>
                <input type="checkbox" name="invite-projects" value={p.projectID} checked={chosen.includes(p.projectID)} onChange={(e) => toggle(p.projectID, (e.target as HTMLInputElement).checked)} />{" "}
                {p.projectID}
              </label>
            ))}
          </fieldset>
        )}
        <button type="submit" disabled={action.busy}>
          Invite
        </button>
      </Form>
      <ErrorNote error={action.error} />
      <Show loaded={invitations} empty={(rows) => !rows.length} emptyText="No invitations.">
        {(rows) => (
          <Table
            caption="Invitations"
            rows={rows}
            rowKey={(i) => i.invitationID}
            columns={[
              { label: "Email", cell: (i) => i.email },
              { label: "Role", cell: (i) => i.role },
              { label: "Projects", cell: (i) => i.projects.join(", ") || "—" },
              { label: "Status", cell: (i) => <StateBadge state={i.status} /> },
              { label: "Expires", cell: (i) => when(i.expiresAt) },
              {
                label: "Actions",
                cell: (i) =>
                  i.status === "pending" && (
                    <button type="button" class="danger" onClick={() => confirmed(`Revoke the invitation of ${i.email}? Its link stops working at once.`) && void action.run(() => del(`/invitations/${enc(i.invitationID)}`).then(invitations.reload))}>
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

interface Limits {
  maxGpus: number | null;
  monthlySpendCents: number | null;
}

interface Ceilings {
  maxGpus: number | null;
  maxInstances: number | null;
  maxStorageBytes: number | null;
  monthlySpendCapCents: number | null;
}

const GIB = 1024 ** 3;

/** The tenant admin's own quota, within the platform's limits: a field left empty
 * follows the platform's. The GPUs may not go below the projects' shares. */
function TenantQuota() {
  const tenant = useLoad(() => get<{ limits: Ceilings; selfQuota: Ceilings; quota: Ceilings }>("/tenant"), []);
  const [gpus, setGpus] = useState<string | null>(null);
  const [instances, setInstances] = useState<string | null>(null);
  const [storage, setStorage] = useState<string | null>(null);
  const [spend, setSpend] = useState<string | null>(null);
  const action = useAction();
  const own = tenant.data?.selfQuota;
  // A field shows what is set until it is edited.
  const shown = (edited: string | null, saved: number | null | undefined, unit = 1) =>
    edited ?? (saved == null ? "" : String(saved / unit));
  const number = (value: string, unit = 1) => (value.trim() === "" ? null : Math.round(Number(value) * unit));
  const save = (e: Event) => {
    e.preventDefault();
    void action.run(async () => {
      await put("/tenant/quota", {
        maxGpus: number(shown(gpus, own?.maxGpus)),
        maxInstances: number(shown(instances, own?.maxInstances)),
        maxStorageBytes: number(shown(storage, own?.maxStorageBytes, GIB), GIB),
        monthlySpendCapCents: number(shown(spend, own?.monthlySpendCapCents)),
      });
      setGpus(null);
      setInstances(null);
      setStorage(null);
      setSpend(null);
      tenant.reload();
    });
  };
  const limit = (value: number | null, unit = 1) => (value == null ? "none" : String(value / unit));
  return (
    <section class="card" aria-labelledby="tenant-quota-title">
      <h2 id="tenant-quota-title">Tenant quota</h2>
      <p class="muted">Your own ceilings, within the platform's limits. Leave a field empty to follow the platform's.</p>
      <Form action={action} class="inline" onSubmit={save}>
        <Field label="Max GPUs" name="own-maxGpus" type="number" value={shown(gpus, own?.maxGpus)} onInput={setGpus} />
        <Field label="Max workloads" name="own-maxInstances" type="number" value={shown(instances, own?.maxInstances)} onInput={setInstances} />
        <Field label="Storage (GiB)" name="own-maxStorageBytes" type="number" value={shown(storage, own?.maxStorageBytes, GIB)} onInput={setStorage} />
        <Field label="Monthly spend cap (cents)" name="own-monthlySpendCapCents" type="number" value={shown(spend, own?.monthlySpendCapCents)} onInput={setSpend} />
        <button type="submit" disabled={action.busy || !tenant.data}>
          Set quota
        </button>
      </Form>
      <ErrorNote error={action.error} />
      <Show loaded={tenant}>
        {(t) => (
          <Table
            caption="Tenant quota"
            rows={[
              { what: "The platform's limits", ...t.limits },
              { what: "Your own", ...t.selfQuota },
              { what: "Enforced", ...t.quota },
            ]}
            rowKey={(r) => r.what}
            columns={[
              { label: "Ceiling", cell: (r) => r.what },
              { label: "GPUs", cell: (r) => limit(r.maxGpus), numeric: true },
              { label: "Workloads", cell: (r) => limit(r.maxInstances), numeric: true },
              { label: "Storage (GiB)", cell: (r) => limit(r.maxStorageBytes, GIB), numeric: true },
              { label: "Monthly spend cap (cents)", cell: (r) => limit(r.monthlySpendCapCents), numeric: true },
            ]}
          />
        )}
      </Show>
    </section>
  );
}

/** A tenant admin's limits on each user, inside the tenant's quota: GPUs at once and
 * spend per month, enforced when the user's workloads are admitted. */
function UserLimits() {
  const users = useLoad(() => get<{ items: User[] }>("/users?limit=200").then(items), []);
  const tenant = useLoad(() => get<{ userLimits: Record<string, Limits> }>("/tenant"), []);
  const [holder, setHolder] = useState("");
  const [gpus, setGpus] = useState("");
  const [spend, setSpend] = useState("");
  const action = useAction();
  const emailOf = (userID: string) => (users.data ?? []).find((u) => u.userID === userID)?.email ?? userID;
  const number = (value: string) => (value.trim() === "" ? null : Number(value));
  const choose = (userID: string) => {
    const limits = tenant.data?.userLimits[userID];
    setHolder(userID);
    setGpus(limits?.maxGpus?.toString() ?? "");
    setSpend(limits?.monthlySpendCents?.toString() ?? "");
  };
  const save = (e: Event) => {
    e.preventDefault();
    void action.run(async () => {
      await put(`/users/${enc(holder)}/limits`, { maxGpus: number(gpus), monthlySpendCents: number(spend) });
      tenant.reload();
    });
  };
  const rows = Object.entries(tenant.data?.userLimits ?? {}).map(([userID, limits]) => ({ userID, ...limits }));
  return (
    <section class="card" aria-labelledby="limits-title">
      <h2 id="limits-title">User limits</h2>
      <p class="muted">Each user's own ceiling inside the tenant's quota. Leave a field empty for no limit of the user's own.</p>
      <Form action={action} class="inline" onSubmit={save}>
        <Field label="User" name="limits-user" value={holder} onInput={choose} options={["", ...(users.data ?? []).map((u) => u.userID)]} emptyLabel="choose a user" optionLabel={emailOf} required />
        <Field label="Max GPUs at once" name="limits-maxGpus" type="number" value={gpus} onInput={setGpus} />
        <Field label="Monthly spend (cents)" name="limits-monthlySpendCents" type="number" value={spend} onInput={setSpend} />
        <button type="submit" disabled={action.busy || !holder}>
          Set limits
        </button>
      </Form>
      <ErrorNote error={action.error} />
      <Show loaded={tenant} empty={() => !rows.length} emptyText="No user has limits of their own.">
        {() => (
          <Table
            caption="User limits"
            rows={rows}
            rowKey={(r) => r.userID}
            columns={[
              { label: "User", cell: (r) => emailOf(r.userID) },
              { label: "Max GPUs", cell: (r) => r.maxGpus ?? "—" },
              { label: "Monthly spend (cents)", cell: (r) => r.monthlySpendCents ?? "—" },
            ]}
          />
        )}
      </Show>
    </section>
  );
}

/** The caller's keys; an admin sees the tenant's and mints keys for its users, who
 * then need not sign in to get one (the secret is shown once, to hand over). A key
 * may be of one project: it acts in that project alone (decision 139). */
function Keys(props: { admin: boolean; self: string | null; tenant: boolean }) {
  const keys = useLoad(() => get<{ items: ApiKey[] }>("/api-keys?limit=200").then(items), []);
  const projects = useLoad(() => (props.tenant ? get<Project[]>("/projects") : Promise.resolve([] as Project[])), [props.tenant]);
  const [project, setProject] = useState("");
  const users = useLoad(
    () => (props.admin ? get<{ items: User[] }>("/users?limit=200").then(items) : Promise.resolve([] as User[])),
    [props.admin],
  );
  const [name, setName] = useState("");
  const [holder, setHolder] = useState("");
  const [secret, setSecret] = useState<string | null>(null);
  const action = useAction();
  const others = (users.data ?? []).filter((u) => u.userID !== props.self && u.status === "active");
  const emailOf = (userID: string | null) => (users.data ?? []).find((u) => u.userID === userID)?.email ?? userID ?? "—";
  const create = (e: Event) => {
    e.preventDefault();
    const path = holder ? `/users/${enc(holder)}/api-keys` : "/api-keys";
    void action.run(async () => {
      const made = await post<{ secret: string }>(path, { name, ...(project ? { project } : {}) });
      setSecret(made.secret);
      setName("");
      setProject("");
      keys.reload();
    });
  };
  return (
    <section class="card" aria-labelledby="keys-title">
      <h2 id="keys-title">API keys</h2>
      {secret && <ShownOnce label="The new API key" secret={secret} onDone={() => setSecret(null)} />}
      <Form action={action} class="inline" onSubmit={create}>
        <Field label="Key name" name="key-name" value={name} onInput={setName} required />
        {props.admin && (
          <Field
            label="For"
            name="key-holder"
            value={holder}
            onInput={setHolder}
            options={["", ...others.map((u) => u.userID)]}
            emptyLabel="yourself"
            optionLabel={emailOf}
          />
        )}
        {(projects.data ?? []).length > 1 && (
          <Field
            label="Project"
            name="key-project"
            field="project"
            value={project}
            onInput={setProject}
            options={["", ...(projects.data ?? []).map((p) => p.projectID)]}
            emptyLabel="any of theirs"
          />
        )}
        <button type="submit" disabled={action.busy}>
          New API key
        </button>
      </Form>
      <ErrorNote error={action.error} />
      <Show loaded={keys} empty={(rows) => !rows.length} emptyText="No API keys.">
        {(rows) => (
          <Table
            caption="API keys"
            rows={rows}
            rowKey={(k) => k.keyID}
            columns={[
              { label: "Name", cell: (k) => k.name },
              ...(props.admin ? [{ label: "User", cell: (k: ApiKey) => emailOf(k.userID) }] : []),
              { label: "Key id", cell: (k) => <code>{k.keyID}</code> },
              { label: "Role", cell: (k) => k.role },
              { label: "Project", cell: (k) => k.project ?? "any" },
              { label: "Last used", cell: (k) => when(k.lastUsedAt) },
              { label: "Expires", cell: (k) => when(k.expiresAt) },
              {
                label: "Actions",
                cell: (k) =>
                  k.revokedAt ? (
                    `revoked ${when(k.revokedAt)}`
                  ) : (
                    <button type="button" class="danger" onClick={() => confirmed(`Revoke key ${k.name ?? k.keyID}? It stops working at once.`) && void action.run(() => del(`/api-keys/${enc(k.keyID)}`).then(keys.reload))}>
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

function Audit() {
  const audit = useLoad(() => get<{ items: AuditEntry[] }>("/audit?limit=50").then(items), [], 15_000);
  return (
    <section class="card" aria-labelledby="audit-title">
      <h2 id="audit-title">Audit log</h2>
      <Show loaded={audit} empty={(rows) => !rows.length} emptyText="Nothing audited yet.">
        {(rows) => (
          <Table
            caption="Audit log"
            rows={rows}
            rowKey={(a) => a.auditID}
            columns={[
              { label: "When", cell: (a) => when(a.at) },
              { label: "Who", cell: (a) => <span title={a.actor}>{a.actorName ?? a.actor}</span> },
              { label: "Action", cell: (a) => a.action },
              { label: "Resource", cell: (a) => <code>{a.resource}</code> },
              { label: "Result", cell: (a) => a.result, numeric: true },
            ]}
          />
        )}
      </Show>
    </section>
  );
}
