// The console's shell: sign-in, the navigation for the caller's role, and the page of the
// current path. Paths are real URLs (/instances, /storages/models), served by the
// gateway as this one page.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { del, get, post, useSession, type ConsoleSession } from "./api";
import { ErrorNote, Field, useAction } from "./ui";
import { Link, navigate, usePath } from "./nav";
import { InstancesPage } from "./pages/instances";
import { StoragesPage, StoragePage } from "./pages/storages";
import { InstancePage, JobPage } from "./pages/workload";
import { UsagePage } from "./pages/usage";
import { MonitoringPage } from "./pages/monitoring";
import { AdminPage } from "./pages/admin";
import { JoinPage } from "./pages/join";
import { ClustersPage } from "./pages/clusters";
import { FleetPage, PricesPage, RevenuePage, SpecsPage, StocksPage, TenantsPage } from "./pages/operator";
import "./style.css";

const TENANT_PAGES: [string, string][] = [
  ["/instances", "Instances"],
  ["/storages", "Storages"],
  ["/usage", "Usage and costs"],
  ["/monitoring", "Monitoring"],
  ["/admin", "Admin"],
];
const OPERATOR_PAGES: [string, string][] = [
  ["/fleet", "Fleet"],
  ["/clusters", "Clusters"],
  ["/tenants", "Tenants"],
  ["/specs", "Specs"],
  ["/prices", "Prices"],
  ["/revenue", "Revenue"],
  ["/stocks", "Stocks"],
  ["/monitoring", "Alerts"],
  ["/admin", "Admin"],
];

/** Whether a page is one the caller's role works with: an operator's pages are not a
 * tenant's, nor a tenant's an operator's (their forms would only answer 403). */
/** A tenant's pages of one thing: a storage, an instance, a job. */
const TENANT_DETAIL = /^\/(storages|instances|jobs)\/([^/]+)$/;

function forRole(path: string, operator: boolean): boolean {
  const pages = operator ? OPERATOR_PAGES : TENANT_PAGES;
  return pages.some(([page]) => page === path) || (!operator && TENANT_DETAIL.test(path));
}

function route(path: string, session: ConsoleSession) {
  const operator = session.principal.role === "platform-admin";
  const known = [...TENANT_PAGES, ...OPERATOR_PAGES].some(([page]) => page === path) || TENANT_DETAIL.test(path);
  if (known && !forRole(path, operator)) {
    const home = (operator ? OPERATOR_PAGES : TENANT_PAGES)[0];
    return (
      <section class="page">
        <h1 id="page-title">Not a page for your role</h1>
        <p>
          <code>{path}</code> is {operator ? "a tenant's page" : "the operator's"}; you are signed in as{" "}
          {session.principal.role}. <Link href={home[0]}>Go to {home[1]}</Link>.
        </p>
      </section>
    );
  }
  const detail = TENANT_DETAIL.exec(path);
  if (detail) {
    const id = decodeURIComponent(detail[2]);
    if (detail[1] === "storages") return <StoragePage storageID={id} />;
    if (detail[1] === "instances") return <InstancePage instanceID={id} />;
    return <JobPage jobID={id} />;
  }
  switch (path) {
    case "/instances":
      return <InstancesPage />;
    case "/storages":
      return <StoragesPage />;
    case "/usage":
      return <UsagePage role={session.principal.role} />;
    case "/monitoring":
      return <MonitoringPage operator={operator} admin={session.principal.role !== "tenant-user"} />;
    case "/admin":
      return <AdminPage principal={session.principal} />;
    case "/fleet":
      return <FleetPage />;
    case "/tenants":
      return <TenantsPage principal={session.principal} />;
    case "/specs":
      return <SpecsPage />;
    case "/prices":
      return <PricesPage />;
    case "/revenue":
      return <RevenuePage />;
    case "/stocks":
      return <StocksPage />;
    case "/clusters":
      return <ClustersPage />;
    default:
      return (
        <section class="page">
          <h1 id="page-title">Not found</h1>
          <p>
            No console page at <code>{path}</code>. <Link href="/">Go to the start page</Link>.
          </p>
        </section>
      );
  }
}

function Shell(props: { session: ConsoleSession; onSignOut: () => void }) {
  const path = usePath();
  const principal = props.session.principal;
  const pages = principal.role === "platform-admin" ? OPERATOR_PAGES : TENANT_PAGES;
  const signOut = useAction();
  useEffect(() => {
    if (path === "/" || path === "/sign-in") navigate(pages[0][0]);
  }, [path]);
  return (
    <div class="shell">
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <span class="brand">gpucloud</span>
        <nav aria-label="Console">
          <ul>
            {pages.map(([href, label]) => (
              <li>
                <Link href={href} current={path.startsWith(href)}>
                  {label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <div class="who">
          <span data-testid="who">
            {principal.tenantID ? `${principal.tenantID} · ` : "operator · "}
            {principal.role}
          </span>
          <button
            type="button"
            onClick={() => void signOut.run(() => del("/console/session")).then((ok) => ok && props.onSignOut())}
          >
            Sign out
          </button>
        </div>
      </header>
      <ErrorNote error={signOut.error} />
      <main id="main">{route(path, props.session)}</main>
    </div>
  );
}

function SignIn(props: { onSignedIn: (session: ConsoleSession) => void }) {
  const [method, setMethod] = useState<"password" | "key" | "sso">("password");
  const [tenant, setTenant] = useState("");
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [apiKey, setApiKey] = useState("");
  const action = useAction();
  const submit = (e: Event) => {
    e.preventDefault();
    if (method === "sso") {
      location.assign(`/v1/sso/${encodeURIComponent(tenant.trim())}/start`); // on to the tenant's provider
      return;
    }
    const body = method === "password" ? { email, password } : { apiKey };
    void action.run(async () => props.onSignedIn(await post<ConsoleSession>("/console/session", body)));
  };
  return (
    <main id="main" class="sign-in">
      <form onSubmit={submit} aria-labelledby="sign-in-title">
        <h1 id="sign-in-title">Sign in to gpucloud</h1>
        <fieldset>
          <legend>Sign in with</legend>
          <label>
            <input type="radio" name="method" checked={method === "password"} onChange={() => setMethod("password")} />
            Email and password
          </label>
          <label>
            <input type="radio" name="method" checked={method === "key"} onChange={() => setMethod("key")} />
            An API key
          </label>
          <label>
            <input type="radio" name="method" checked={method === "sso"} onChange={() => setMethod("sso")} />
            Single sign-on
          </label>
        </fieldset>
        {method === "password" ? (
          <>
            <Field label="Email" name="email" type="email" value={email} onInput={setEmail} required autocomplete="username" />
            <Field
              label="Password"
              name="password"
              type="password"
              value={password}
              onInput={setPassword}
              required
              autocomplete="current-password"
            />
          </>
        ) : method === "key" ? (
          <Field label="API key" name="apiKey" type="password" value={apiKey} onInput={setApiKey} required placeholder="gpc_…" />
        ) : (
          <Field label="Tenant" name="tenant" value={tenant} onInput={setTenant} required placeholder="your tenant's id" />
        )}
        <ErrorNote error={action.error} />
        <button type="submit" disabled={action.busy}>
          {action.busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </main>
  );
}

function App() {
  const [session, setSession] = useState<ConsoleSession | null | undefined>(undefined);
  useSession(session ?? null, () => setSession(null));
  useEffect(() => {
    get<ConsoleSession>("/console/session")
      .then(setSession)
      .catch(() => setSession(null));
  }, []);
  if (session === undefined) return <p class="muted">Loading…</p>;
  if (location.pathname === "/join") return <JoinPage onSignedIn={setSession} />;
  if (session === null) return <SignIn onSignedIn={setSession} />;
  return <Shell session={session} onSignOut={() => (setSession(null), navigate("/sign-in"))} />;
}

render(<App />, document.getElementById("app")!);
