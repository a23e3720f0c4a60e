// kubectl for a project's namespace (the tenant's own, for `default`): a short-lived
// credential of the user's own, shown once (and offered as a file): read pods and
// events, logs, exec and port-forward.
import { useState } from "preact/hooks";
import { get, post } from "../api";
import { ErrorNote, Field, Form, ShownOnce, useAction, useLoad, when } from "../ui";
import { type Project, ProjectField } from "./projects";

interface Issued {
  kubeconfig: string;
  namespace: string;
  project: string;
  expiresAt: string;
}

export function KubectlAccess() {
  const [hours, setHours] = useState("1");
  const [project, setProject] = useState("");
  const projects = useLoad(() => get<Project[]>("/projects"), []);
  const [issued, setIssued] = useState<Issued | null>(null);
  const action = useAction();
  const issue = (e: Event) => {
    e.preventDefault();
    void action.run(async () => setIssued(await post<Issued>("/kubeconfig", { hours: Number(hours), ...(project ? { project } : {}) })));
  };
  const file = issued ? URL.createObjectURL(new Blob([issued.kubeconfig], { type: "application/yaml" })) : null;
  return (
    <section class="card" aria-labelledby="kubectl-title">
      <h2 id="kubectl-title">kubectl</h2>
      <p class="muted">
        A credential of your own for a project's namespace (your tenant's own, for <code>default</code>): list pods and
        events, read logs, exec and port-forward. It cannot start pods (start work here, held to your quota), and ends
        when you lose access to the platform or to the project.
      </p>
      {issued && file && (
        <>
          <p>
            Namespace <code>{issued.namespace}</code> of project {issued.project}, until {when(issued.expiresAt)}.{" "}
            <a href={file} download={`kubeconfig-${issued.namespace}.yaml`}>
              Download kubeconfig
            </a>
          </p>
          <ShownOnce label="The kubeconfig" secret={issued.kubeconfig} onDone={() => setIssued(null)} />
        </>
      )}
      <Form action={action} class="inline" onSubmit={issue}>
        <ProjectField name="kubeconfig-project" projects={projects.data ?? []} value={project} onInput={setProject} />
        <Field label="Works for (hours)" name="kubeconfig-hours" value={hours} onInput={setHours} options={["1", "4", "8", "12"]} />
        <button type="submit" disabled={action.busy}>
          Get a kubeconfig
        </button>
      </Form>
      <ErrorNote error={action.error} />
    </section>
  );
}
