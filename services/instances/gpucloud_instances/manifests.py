"""Kubernetes objects the instances service owns, built as plain JSON dicts.

Pure functions: no client, no I/O. Names are deterministic so that a retried
or restarted reconcile finds what an earlier attempt created.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpucloud_libs import naming
from gpucloud_libs.gpu_shares import SHARED_GPU_RESOURCE, SHARING_LABEL

from .schemas import InstanceTemplate, is_device_selector

Manifest = dict[str, Any]


MANAGED = naming.MANAGED_LABEL


TENANT = naming.TENANT_LABEL


INSTANCE = naming.INSTANCE_LABEL


JOB = naming.JOB_LABEL


SERVICE = naming.SERVICE_LABEL


#: On an inference service's pod template: the service's revision it runs.
REVISION = "gpucloud.io/revision"


SPEC = "gpucloud.io/spec"


STOCK = "gpucloud.io/stock"


#: On an instance pod bound to the node of the warm unit it claimed; the annotation
#: names the unit, whose hold goes once the pod is seen.
FROM_STOCK = "gpucloud.io/from-stock"


STOCK_UNIT = "gpucloud.io/stock-unit"


#: A warm unit's hold pod: the label, and the scheduling gate that keeps it unbound.
STOCK_HOLD = "gpucloud.io/stock-hold"


HEALTH = "gpucloud.io/health"


GPU_RESOURCE = naming.GPU_RESOURCE


GPU_PRODUCT_LABEL = naming.GPU_PRODUCT_LABEL


ZONE_LABEL = naming.ZONE_LABEL


GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


INSTANCE_PRIORITY_CLASS = "gpucloud-instance"


STOCK_PRIORITY_CLASS = "gpucloud-stock"


#: How long Kubernetes keeps a finished job's Job and pods (its logs), in seconds.
FINISHED_JOB_TTL_S = 24 * 3600


_RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
}


def pod_name(instance_id: str) -> str:
    return f"inst-{instance_id}"


def priority_classes() -> list[Manifest]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": INSTANCE_PRIORITY_CLASS},
            "value": 1000,
            "description": "gpucloud tenant instances; preempt warm-stock placeholders.",
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": STOCK_PRIORITY_CLASS},
            "value": -100,
            "preemptionPolicy": "Never",
            "description": "gpucloud warm-stock placeholders: hold capacity until an instance claims it.",
        },
    ]


def namespace(name: str, labels: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {MANAGED: "true", **_RESTRICTED, **labels}},
    }


def _placement(
    gpu_type: str, zones: list[str], node: str | None, sole_tenant: str | None = None
) -> dict[str, Any]:
    """Where a workload's pods may go. `sole_tenant`: its GPUs are time-sliced, and the
    node's must serve that tenant alone (time-slicing does not fence memory)."""
    terms: list[dict[str, Any]] = [
        {"key": HEALTH, "operator": "NotIn", "values": ["quarantined"]},
    ]
    if zones:
        terms.append({"key": ZONE_LABEL, "operator": "In", "values": zones})
    placement: dict[str, Any] = {"nodeName": node} if node else {}
    affinity: dict[str, Any] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": terms}]
            }
        }
    }
    if sole_tenant is not None:
        # No node holding another tenant's time-sliced pod, in any namespace. The
        # scheduler also checks the pods already there against this one, so the rule
        # holds both ways.
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "kubernetes.io/hostname",
                    "namespaceSelector": {},
                    "labelSelector": {
                        "matchExpressions": [
                            {"key": SHARING_LABEL, "operator": "Exists"},
                            {"key": TENANT, "operator": "NotIn", "values": [sole_tenant]},
                        ]
                    },
                }
            ]
        }
    return placement | {
        "nodeSelector": {GPU_PRODUCT_LABEL: gpu_type},
        "tolerations": [GPU_TOLERATION],
        "affinity": affinity,
    }


def placement_zones(pod: Manifest) -> list[str]:
    """The zones `_placement` limited a pod to; empty: any zone."""
    affinity = pod.get("spec", {}).get("affinity") or {}
    required = affinity.get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}
    )
    return [
        zone
        for term in required.get("nodeSelectorTerms") or []
        for expression in term.get("matchExpressions") or []
        if expression.get("key") == ZONE_LABEL and expression.get("operator") == "In"
        for zone in expression.get("values") or []
    ]


def _resources(cpu: str, memory: str, gpus: int, gpu_resource: str = GPU_RESOURCE) -> Manifest:
    amounts = {"cpu": cpu, "memory": memory, gpu_resource: str(gpus)}
    return {"requests": amounts, "limits": amounts}


def _sharing_labels(gpu_resource: str) -> dict[str, str]:
    return {SHARING_LABEL: "time-sliced"} if gpu_resource == SHARED_GPU_RESOURCE else {}


_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def instance_pod(
    *,
    namespace_name: str,
    tenant_id: str,
    instance_id: str,
    spec_name: str,
    image: str,
    template: InstanceTemplate,
    cpu: str,
    memory: str,
    gpus: int,
    gpu_type: str,
    zones: list[str],
    stock: tuple[str, str] | None = None,
    storage_secrets: list[tuple[str, str]] | None = None,
    pull_secrets: list[str] | None = None,
    gpu_resource: str = GPU_RESOURCE,
) -> Manifest:
    """`stock`: the (unit, node) of the warm unit it claimed, where it is bound;
    `storage_secrets`: (Secret, variable prefix) per object storage, in request order;
    `pull_secrets`: the image pull Secrets of the image's registry; `gpu_resource`: whole
    GPUs, or a shared kind (libs gpu_shares)."""
    unit, node = stock if stock is not None else (None, None)
    probe_port = next((port for port in template.ports if port.is_probe), None)
    container = _workload_container(
        image, template, cpu, memory, (gpu_resource, gpus), storage_secrets
    )
    container["ports"] = [
        {"containerPort": port.port, "protocol": port.protocol, "name": f"p{port.port}"}
        for port in template.ports
    ]
    if template.cmd:
        container["command"] = ["/bin/sh", "-c", template.cmd]
    if template.command:
        container["command"] = list(template.command)
    if template.args:
        container["args"] = list(template.args)
    if probe_port is not None:
        probe_action: dict[str, Any] = (
            {"httpGet": {"port": probe_port.port, "path": probe_port.base_url or "/"}}
            if probe_port.protocol == "TCP" and probe_port.base_url is not None
            else {"tcpSocket": {"port": probe_port.port}}
        )
        container["readinessProbe"] = {**probe_action, "periodSeconds": 5, "failureThreshold": 3}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(instance_id),
            "namespace": namespace_name,
            "labels": {
                MANAGED: "true",
                TENANT: tenant_id,
                INSTANCE: instance_id,
                SPEC: spec_name,
                **({FROM_STOCK: "true"} if node else {}),
                **_sharing_labels(gpu_resource),
            },
            **({"annotations": {STOCK_UNIT: unit}} if unit else {}),
        },
        "spec": _workload_pod_spec(
            container,
            template,
            "Always",
            gpu_type,
            zones,
            node,
            pull_secrets or [],
            _sole_tenant(gpu_resource, tenant_id),
        ),
    }


def job_object_name(job_id: str) -> str:
    return f"job-{job_id}"


@dataclass(frozen=True)
class JobPods:
    """What a batch job's pods are, whichever object runs them (`batch_job`, `job_set`)."""

    namespace_name: str
    tenant_id: str
    job_id: str
    spec_name: str
    image: str
    command: list[str] | None
    args: list[str] | None
    template: InstanceTemplate
    cpu: str
    memory: str
    gpus: int
    gpu_type: str
    zones: list[str]
    retry_limit: int
    deadline_seconds: int | None
    storage_secrets: list[tuple[str, str]] | None = None
    pull_secrets: list[str] | None = None
    gpu_resource: str = GPU_RESOURCE

    @property
    def owner(self) -> dict[str, str]:
        return {TENANT: self.tenant_id, JOB: self.job_id}

    def container(self) -> Manifest:
        return _workload_container(
            self.image, self.template, self.cpu, self.memory, (self.gpu_resource, self.gpus),
            self.storage_secrets, command=self.command, args=self.args,
        )  # fmt: skip

    def metadata(self) -> Manifest:
        """The job's Kubernetes object (a Job, or a JobSet)."""
        return {
            "name": job_object_name(self.job_id),
            "namespace": self.namespace_name,
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
        labels = {MANAGED: "true", **self.owner, SPEC: self.spec_name}
        return {
            "metadata": {"labels": {**labels, **_sharing_labels(self.gpu_resource)}},
            "spec": _workload_pod_spec(
                container, self.template, "Never", self.gpu_type, self.zones, None,
                self.pull_secrets or [], _sole_tenant(self.gpu_resource, self.tenant_id),
            ),
        }  # fmt: skip


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


def deployment_name(service_id: str) -> str:
    return f"isvc-{service_id}"


#: A replica being removed keeps serving what it has for this long after the
#: gateway stops sending it requests (it sees the pod terminating at once).
REPLICA_DRAIN_S = 5


#: How long a replica on an unreachable or not-ready node is kept before Kubernetes
#: evicts it and the Deployment starts a replacement (Kubernetes' default: 300 s).
LOST_NODE_TOLERATION_S = 30


def inference_deployment(
    *,
    namespace_name: str,
    tenant_id: str,
    service_id: str,
    spec_name: str,
    revision: int,
    image: str,
    command: list[str] | None,
    args: list[str] | None,
    template: InstanceTemplate,
    port: int,
    readiness_path: str,
    cpu: str,
    memory: str,
    gpus: int,
    gpu_type: str,
    zones: list[str],
    replicas: int,
    max_surge: int,
    max_unavailable: int,
    storage_secrets: list[tuple[str, str]] | None = None,
    pull_secrets: list[str] | None = None,
    gpu_resource: str = GPU_RESOURCE,
) -> Manifest:
    """An inference service as a Kubernetes Deployment: Kubernetes' own controllers
    roll a new revision out under the strategy and replace lost replicas. Replicas
    prefer distinct nodes and zones, avoid quarantined nodes like every workload,
    and drain for REPLICA_DRAIN_S before they stop."""
    container = _workload_container(
        image, template, cpu, memory, (gpu_resource, gpus), storage_secrets, command=command,
        args=args,
    )  # fmt: skip
    container["ports"] = [{"containerPort": port, "protocol": "TCP", "name": "serve"}]
    container["readinessProbe"] = {
        "httpGet": {"port": port, "path": readiness_path},
        "periodSeconds": 2,
        "failureThreshold": 2,
    }
    container["lifecycle"] = {"preStop": {"sleep": {"seconds": REPLICA_DRAIN_S}}}
    selector = {TENANT: tenant_id, SERVICE: service_id}
    pod_spec = _workload_pod_spec(
        container,
        template,
        "Always",
        gpu_type,
        zones,
        None,
        pull_secrets or [],
        _sole_tenant(gpu_resource, tenant_id),
    )
    pod_spec["terminationGracePeriodSeconds"] = REPLICA_DRAIN_S + 25
    pod_spec["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }
        for key in ("kubernetes.io/hostname", ZONE_LABEL)
    ]
    # The spread above is one score among the scheduler's others (free resources,
    # images), and replicas created at once could still share a node; a strongly
    # weighted preference against a sibling on the same node keeps them apart while
    # nodes allow, and never blocks a replica when they do not.
    pod_spec["affinity"].setdefault("podAntiAffinity", {})[
        "preferredDuringSchedulingIgnoredDuringExecution"
    ] = [
        {
            "weight": 100,
            "podAffinityTerm": {
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": selector},
            },
        }
    ]
    pod_spec["tolerations"] = [
        *pod_spec["tolerations"],
        *(
            {"key": taint, "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": LOST_NODE_TOLERATION_S}
            for taint in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
        ),
    ]  # fmt: skip
    labels = {MANAGED: "true", **selector}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(service_id),
            "namespace": namespace_name,
            "labels": labels,
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "revisionHistoryLimit": 2,  # gpucloud keeps the revisions (ServiceConfigDoc)
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": max_unavailable},
            },
            "template": {
                "metadata": {
                    "labels": {
                        **labels,
                        SPEC: spec_name,
                        REVISION: str(revision),
                        **_sharing_labels(gpu_resource),
                    }
                },
                "spec": pod_spec,
            },
        },
    }


def _workload_container(
    image: str,
    template: InstanceTemplate,
    cpu: str,
    memory: str,
    gpus: tuple[str, int],
    storage_secrets: list[tuple[str, str]] | None,
    *,
    command: list[str] | None = None,
    args: list[str] | None = None,
) -> dict[str, Any]:
    """The tenant's container, as instances, jobs and inference services run it; the
    image's own entrypoint unless `command` or `args` replace it."""
    container: dict[str, Any] = {
        "name": "workload",
        "image": image,
        # Every start asks the registry with this tenant's own pull secret: an image
        # another tenant's credentials pulled onto the node is not this tenant's to
        # run (review H3). Its layers stay cached, so a warm node pulls no bytes.
        "imagePullPolicy": "Always",
        # A record stored before device selectors were refused still never passes one
        # to a pod: the device plugin alone chooses the GPUs (review H1).
        "env": [
            {"name": env.name, "value": env.value}
            for env in template.envs
            if not is_device_selector(env.name)
        ],
        "resources": _resources(cpu, memory, gpus[1], gpus[0]),
        "securityContext": _CONTAINER_SECURITY,
        "volumeMounts": [
            {"name": volume.name, "mountPath": volume.mount_path, "readOnly": volume.read_only}
            for volume in template.volumes
        ],
    }
    if command:
        container["command"] = command
    if args:
        container["args"] = args
    if storage_secrets:
        # The first object storage also without a prefix: S3 SDKs read AWS_* unconfigured.
        # The template's own `envs` win over both (Kubernetes: env overrides envFrom).
        first_secret = storage_secrets[0][0]
        container["envFrom"] = [{"secretRef": {"name": first_secret}}] + [
            {"prefix": prefix, "secretRef": {"name": secret}} for secret, prefix in storage_secrets
        ]
    return container


def _workload_pod_spec(
    container: dict[str, Any],
    template: InstanceTemplate,
    restart_policy: str,
    gpu_type: str,
    zones: list[str],
    node: str | None,
    pull_secrets: list[str],
    sole_tenant: str | None = None,
) -> Manifest:
    volumes = [
        {"name": volume.name, "persistentVolumeClaim": {"claimName": volume.claim_name}}
        if volume.claim_name
        else {"name": volume.name, "emptyDir": {}}
        for volume in template.volumes
    ]
    return {
        "priorityClassName": INSTANCE_PRIORITY_CLASS,
        "restartPolicy": restart_policy,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
            **({"runAsUser": template.run_as_user} if template.run_as_user else {}),
        },
        "containers": [container],
        "volumes": volumes,
        **({"imagePullSecrets": [{"name": name} for name in pull_secrets]} if pull_secrets else {}),
        **_placement(gpu_type, zones, node, sole_tenant),
    }


def _sole_tenant(gpu_resource: str, tenant_id: str) -> str | None:
    return tenant_id if gpu_resource == SHARED_GPU_RESOURCE else None


def instance_service(
    namespace_name: str, tenant_id: str, instance_id: str, template: InstanceTemplate
) -> Manifest | None:
    if not template.ports:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": pod_name(instance_id),
            "namespace": namespace_name,
            "labels": {MANAGED: "true", TENANT: tenant_id, INSTANCE: instance_id},
        },
        "spec": {
            "selector": {INSTANCE: instance_id},
            "ports": [
                {
                    "name": f"p{port.port}",
                    "port": port.port,
                    "targetPort": port.port,
                    "protocol": port.protocol,
                }
                for port in template.ports
            ],
        },
    }


HOLD_SUFFIX = "-hold"
