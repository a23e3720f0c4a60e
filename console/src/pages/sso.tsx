// A tenant admin's single sign-on: the OpenID Connect provider (checked when saved),
// its client, which of its groups get which role, and which projects.
import { useEffect, useState } from "preact/hooks";
import { del, get, put } from "../api";
import { ErrorNote, Field, Form, useAction, useLoad } from "../ui";

interface Sso {
  issuer: string;
  clientID: string;
  groupRoles: Record<string, string>;
  groupProjects: Record<string, string[]>;
  defaultRole: string | null;
  createUsers: boolean;
  cliSignIn: boolean;
  passwordSignIn: boolean;
  redirectUri: string;
}

/** `group=role` pairs, comma-separated, as the form takes them. */
const pairs = (text: string): Record<string, string> =>
  Object.fromEntries(
    text
      .split(",")
      .map((pair) => pair.split("=").map((part) => part.trim()))
      .filter(([group, role]) => group && role),
  );

/** `group=project` pairs, comma-separated: a group may be named again for another project. */
const projectPairs = (text: string): Record<string, string[]> => {
  const mapped: Record<string, string[]> = {};
  for (const pair of text.split(",")) {
    const [group, project] = pair.split("=").map((part) => part.trim());
    if (group && project) mapped[group] = [...(mapped[group] ?? []), project];
  }
  return mapped;
};

export function SingleSignOn() {
  const current = useLoad(() => get<Sso>("/tenant/sso").catch(() => null), []);
  const [issuer, setIssuer] = useState("");
  const [clientID, setClientID] = useState("");
  const [secret, setSecret] = useState("");
  const [groups, setGroups] = useState("");
  const [groupProjects, setGroupProjects] = useState("");
  const [fallback, setFallback] = useState("");
  const [createUsers, setCreateUsers] = useState(true);
  const [cliSignIn, setCliSignIn] = useState(false);
  const [passwordSignIn, setPasswordSignIn] = useState(true);
  // The form starts from what is set, so saving a change keeps the rest as it was.
  useEffect(() => {
    const set = current.data;
    if (!set) return;
    setIssuer(set.issuer);
    setClientID(set.clientID);
    setGroups(Object.entries(set.groupRoles).map(([group, role]) => `${group}=${role}`).join(", "));
    setGroupProjects(Object.entries(set.groupProjects).flatMap(([group, ids]) => ids.map((id) => `${group}=${id}`)).join(", "));
    setFallback(set.defaultRole ?? "");
    setCreateUsers(set.createUsers);
    setCliSignIn(set.cliSignIn);
    setPasswordSignIn(set.passwordSignIn);
  }, [current.data]);
  const action = useAction();
  const save = (e: Event) => {
    e.preventDefault();
    void action.run(async () => {
      await put("/tenant/sso", {
        issuer, clientID, clientSecret: secret, groupRoles: pairs(groups), groupProjects: projectPairs(groupProjects),
        defaultRole: fallback || null,
        createUsers,
        cliSignIn,
        passwordSignIn,
      });
      setSecret("");
      current.reload();
    });
  };
  const shown = current.data;
  return (
    <section class="card" aria-labelledby="sso-title">
      <h2 id="sso-title">Single sign-on</h2>
      {shown ? (
        <p>
          Signing in through <code>{shown.issuer}</code> as client <code>{shown.clientID}</code>
          {shown.createUsers ? "" : " (users an admin added only)"}; register{" "}
          <code data-testid="redirect-uri">{shown.redirectUri}</code> there as its redirect URI.{" "}
          <button type="button" class="danger" onClick={() => void action.run(() => del("/tenant/sso").then(current.reload))}>
            Turn off
          </button>
        </p>
      ) : (
        <p class="muted">Off: your users sign in with a password or an API key.</p>
      )}
      <Form action={action} class="inline" onSubmit={save}>
        <Field label="Issuer" name="sso-issuer" value={issuer} onInput={setIssuer} required placeholder="https://login.example.com" />
        <Field label="Client ID" name="sso-clientID" value={clientID} onInput={setClientID} required />
        <Field label="Client secret" name="sso-clientSecret" type="password" value={secret} onInput={setSecret} required autocomplete="off" />
        <Field label="Groups (group=role, …)" name="sso-groupRoles" value={groups} onInput={setGroups} placeholder="ml-admins=tenant-admin, ml-team=tenant-user" />
        <Field label="Groups' projects (group=project, …)" name="sso-groupProjects" value={groupProjects} onInput={setGroupProjects} placeholder="vision-team=vision" />
        <Field label="Role of other users" name="sso-defaultRole" value={fallback} onInput={setFallback} options={["", "tenant-user", "tenant-admin"]} emptyLabel="none: refused" />
        <label>
          <input type="checkbox" name="sso-createUsers" checked={createUsers} onChange={(e) => setCreateUsers((e.target as HTMLInputElement).checked)} />{" "}
          Make a user at their first sign-in
        </label>
        <label title="gpucloud login --sso: a code entered at the provider. Anyone can ask for a code and send it to a member, so it is off unless you allow it.">
          <input type="checkbox" name="sso-cliSignIn" checked={cliSignIn} onChange={(e) => setCliSignIn((e.target as HTMLInputElement).checked)} />{" "}
          Allow the CLI to sign in with a code
        </label>
        <label title="Off: users sign in through the provider alone, so one who leaves it signs in no more; keys they mint from a single sign-on live a day at most.">
          <input type="checkbox" name="sso-passwordSignIn" checked={passwordSignIn} onChange={(e) => setPasswordSignIn((e.target as HTMLInputElement).checked)} />{" "}
          Allow sign-in with a password too
        </label>
        <button type="submit" disabled={action.busy}>
          Save single sign-on
        </button>
      </Form>
      <ErrorNote error={action.error} />
    </section>
  );
}
