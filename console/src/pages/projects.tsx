// A tenant's projects (decision 138): each with members, a share of the tenant's GPUs
// and a monthly budget. A tenant admin makes and changes them; a user sees `default`
// and the projects they are in.
import { useState } from "preact/hooks";
import { del, enc, get, items, post, put } from "../api";
import { ErrorNote, Field, Form, Show, Table, confirmed, useAction, useLoad } from "../ui";

interface Member {
  userID: string;
  email: string;
  name: string;
}

export interface Project {
  projectID: string;
  name: string;
  maxGpus: number | null;
  borrowGpus: number;
  monthlyBudgetCents: number | null;
  everyone: boolean;
  members: Member[];
}

interface User {
  userID: string;
  email: string;
}

/** The project picker of a start or a kubeconfig: `default`, or a project of the caller's (GET
 * /v1/projects lists those). Hidden while `default` is the only one. */
/** A project picker, shown once there is more than one to pick. An empty value is the
 * caller's first project (`default`, or a project key's own): the form then names no
 * project, and the API picks that one. */
export function ProjectField(props: { name: string; projects: Project[]; value: string; onInput: (value: string) => void }) {
  if (props.projects.length < 2) return null;
  return (
    <Field
      label="Project"
      name={props.name}
      field="project"
      value={props.value || props.projects[0].projectID}
      onInput={props.onInput}
      options={props.projects.map((p) => p.projectID)}
    />
  );
}

const number = (value: string) => (value.trim() === "" ? null : Number(value));

export function Projects(props: { admin: boolean }) {
  const projects = useLoad(() => get<Project[]>("/projects"), []);
  const users = useLoad(
    () => (props.admin ? get<{ items: User[] }>("/users?limit=200").then(items) : Promise.resolve([] as User[])),
    [props.admin],
  );
  const [projectID, setProjectID] = useState("");
  const [gpus, setGpus] = useState("");
  const [budget, setBudget] = useState("");
  const [chosen, setChosen] = useState("");
  const [member, setMember] = useState("");
  const action = useAction();
  const create = (e: Event) => {
    e.preventDefault();
    void action.run(async () => {
      await post("/projects", { projectID, name: projectID, maxGpus: number(gpus), monthlyBudgetCents: number(budget) });
      setProjectID("");
      projects.reload();
    });
  };
  const addMember = (e: Event) => {
    e.preventDefault();
    void action.run(async () => {
      await put(`/projects/${enc(chosen)}/members/${enc(member)}`, {});
      projects.reload();
    });
  };
  const own = (projects.data ?? []).filter((p) => !p.everyone);
  const emailOf = (userID: string) => (users.data ?? []).find((u) => u.userID === userID)?.email ?? userID;
  return (
    <section class="card" aria-labelledby="projects-title">
      <h2 id="projects-title">Projects</h2>
      <p class="muted">Each project's share of the tenant's GPUs, its budget and its members; "default" holds everyone and what the others do not carve.</p>
      {props.admin && (
        <>
          <Form action={action} class="inline" onSubmit={create}>
            <Field label="Project ID" name="project-id" value={projectID} onInput={setProjectID} required placeholder="vision" />
            <Field label="GPU share" name="project-maxGpus" type="number" value={gpus} onInput={setGpus} />
            <Field label="Monthly budget (cents)" name="project-budget" type="number" value={budget} onInput={setBudget} />
            <button type="submit" disabled={action.busy}>
              Make project
            </button>
          </Form>
          <Form action={action} class="inline" onSubmit={addMember}>
            <Field label="Project" name="member-project" value={chosen} onInput={setChosen} options={["", ...own.map((p) => p.projectID)]} emptyLabel="choose a project" required />
            <Field label="Member" name="member-user" value={member} onInput={setMember} options={["", ...(users.data ?? []).map((u) => u.userID)]} emptyLabel="choose a user" optionLabel={emailOf} required />
            <button type="submit" disabled={action.busy || !chosen || !member}>
              Add member
            </button>
          </Form>
        </>
      )}
      <ErrorNote error={action.error} />
      <Show loaded={projects} empty={(rows) => !rows.length} emptyText="No projects.">
        {(rows) => (
          <Table
            caption="Projects"
            rows={rows}
            rowKey={(p) => p.projectID}
            columns={[
              { label: "Project", cell: (p) => p.projectID },
              { label: "GPU share", cell: (p) => p.maxGpus ?? "the tenant's" },
              { label: "Monthly budget (cents)", cell: (p) => p.monthlyBudgetCents ?? "—" },
              { label: "Members", cell: (p) => (p.everyone ? "everyone" : p.members.map((m) => m.email).join(", ") || "none yet") },
              {
                label: "",
                cell: (p) =>
                  props.admin && !p.everyone ? (
                    <button
                      type="button"
                      class="danger"
                      onClick={() => confirmed(`Remove project ${p.projectID}?`) && void action.run(() => del(`/projects/${enc(p.projectID)}`).then(projects.reload))}
                    >
                      Remove
                    </button>
                  ) : null,
              },
            ]}
          />
        )}
      </Show>
    </section>
  );
}
