"""Kubernetes objects of a batch job: a Job, or a JobSet for a multi-node job."""

from __future__ import annotations

from dataclasses import dataclass

from ..manifests import JOB, MANAGED, Manifest, WorkloadPod

#: How long Kubernetes keeps a finished job's Job and pods (its logs), in seconds.
FINISHED_JOB_TTL_S = 24 * 3600


def job_object_name(job_id: str) -> str:
    return f"job-{job_id}"


@dataclass(frozen=True)
class JobPods:
    """What a batch job's pods are, whichever object runs them (`batch_job`, `job_set`)."""

    pod: WorkloadPod
    job_id: str
    retry_limit: int
    deadline_seconds: int | None

    @property
    def owner(self) -> dict[str, str]:
        return self.pod.owner(JOB, self.job_id)

    def container(self) -> Manifest:
        return self.pod.container()

    def metadata(self) -> Manifest:
        """The job's Kubernetes object (a Job, or a JobSet)."""
        return {
            "name": job_object_name(self.job_id),
            "namespace": self.pod.namespace_name,
            "labels": {MANAGED: "true", **self.owner},
        }

    def job_spec(
        self, *, parallelism: int, completions: int, backoff_limit: int, template: Manifest
    ) -> Manifest:
        """A batch/v1 Job's spec for these pods, with the job's deadline."""
        spec: Manifest = {
            "parallelism": parallelism,
            "completions": completions,
            "backoffLimit": backoff_limit,
            "template": template,
        }
        if self.deadline_seconds is not None:
            spec["activeDeadlineSeconds"] = self.deadline_seconds
        return spec

    def pod_template(self, container: Manifest) -> Manifest:
        return {
            "metadata": {"labels": self.pod.labels(self.owner)},
            "spec": self.pod.spec(container, restart_policy="Never"),
        }


def batch_job(pods: JobPods, *, parallelism: int, completions: int) -> Manifest:
    """A batch job as a Kubernetes Job: Kubernetes' own Job controller runs its pods,
    retries failed ones up to `retry_limit` and enforces the deadline. Pods are never
    restarted in place (a run that fails is a new run), and a finished Job stays a
    day for its logs and runs, then Kubernetes removes it."""
    spec = pods.job_spec(
        parallelism=parallelism,
        completions=completions,
        backoff_limit=pods.retry_limit,
        template=pods.pod_template(pods.container()),
    )
    spec["ttlSecondsAfterFinished"] = FINISHED_JOB_TTL_S
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": pods.metadata(), "spec": spec}


#: A multi-node job's one replicated Job in its JobSet.
JOBSET_WORKERS = "workers"


def job_set(pods: JobPods, *, nodes: int) -> Manifest:
    """A multi-node job as a JobSet: one Indexed Job of `nodes` pods, each on a node of
    its own, that JobSet restarts as a whole (up to `retry_limit` times) when a pod
    fails, since a distributed run cannot go on without one of its ranks.

    Each pod finds the others by name: JobSet gives them stable hostnames under a
    headless Service. `GPUCLOUD_LEADER_HOST` is rank 0's, `GPUCLOUD_NODES` the count,
    and Kubernetes sets each pod's rank as `JOB_COMPLETION_INDEX`."""
    name = job_object_name(pods.job_id)
    container = pods.container()
    container["env"] += [
        {"name": "GPUCLOUD_NODES", "value": str(nodes)},
        {"name": "GPUCLOUD_LEADER_HOST", "value": f"{name}-{JOBSET_WORKERS}-0-0.{name}"},
    ]
    template = pods.pod_template(container)
    template["spec"]["affinity"].setdefault("podAntiAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", []
    ).append(
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": pods.owner}}
    )
    # A failed pod fails the Job (no backoff); JobSet restarts them all.
    job_spec = pods.job_spec(
        parallelism=nodes, completions=nodes, backoff_limit=0, template=template
    )
    job_spec["completionMode"] = "Indexed"
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": pods.metadata(),
        "spec": {
            "ttlSecondsAfterFinished": FINISHED_JOB_TTL_S,
            "failurePolicy": {"maxRestarts": pods.retry_limit},
            "successPolicy": {"operator": "All"},
            "network": {"enableDNSHostnames": True},
            # Its Jobs carry no MANAGED label: the JobSet is the one object to watch.
            "replicatedJobs": [
                {"name": JOBSET_WORKERS, "replicas": 1,
                 "template": {"metadata": {"labels": pods.owner}, "spec": job_spec}}
            ],
        },
    }  # fmt: skip
