"""Kubernetes objects the instances service owns, built as plain JSON dicts.

Pure functions: no client, no I/O. Names are deterministic so that a retried
or restarted reconcile finds what an earlier attempt created.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpucloud_libs import naming
from gpucloud_libs.gpu_shares import SHARED_GPU_RESOURCE, SHARING_LABEL, GpuShare

from .documents import InstanceDoc, JobDoc, ServiceDoc
from .schemas import InstanceTemplate, is_device_selector

Manifest = dict[str, Any]


MANAGED = naming.MANAGED_LABEL


TENANT = naming.TENANT_LABEL


PROJECT = naming.PROJECT_LABEL


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


_RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
}


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


def pod_placement(
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
    """The zones `pod_placement` limited a pod to; empty: any zone."""
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


def pod_resources(cpu: str, memory: str, gpus: int, gpu_resource: str = GPU_RESOURCE) -> Manifest:
    amounts = {"cpu": cpu, "memory": memory, gpu_resource: str(gpus)}
    return {"requests": amounts, "limits": amounts}


def _sharing_labels(gpu_resource: str) -> dict[str, str]:
    return {SHARING_LABEL: "time-sliced"} if gpu_resource == SHARED_GPU_RESOURCE else {}


CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


@dataclass(frozen=True)
class WorkloadPod:
    """What a pod of any workload kind is, whichever kind builds it (an instance's pod,
    a job's pods, a service's replicas): whose it is, the spec's resources, the image
    and how it starts, and what it is given (object storages' Secrets as `(Secret,
    variable prefix)` in request order, the image registry's pull Secrets).

    `command` and `args` replace the image's entrypoint; `gpu_resource` is whole GPUs
    or a shared kind (libs gpu_shares)."""

    namespace_name: str
    tenant_id: str
    spec_name: str
    image: str
    template: InstanceTemplate
    cpu: str
    memory: str
    gpus: int
    gpu_type: str
    zones: list[str]
    command: list[str] | None = None
    args: list[str] | None = None
    storage_secrets: list[tuple[str, str]] = field(default_factory=list)
    pull_secrets: list[str] = field(default_factory=list)
    gpu_resource: str = GPU_RESOURCE

    @classmethod
    def of(
        cls,
        doc: InstanceDoc | JobDoc | ServiceDoc,
        *,
        image: str,
        template: InstanceTemplate,
        storage_secrets: list[tuple[str, str]],
        pull_secrets: list[str],
        command: list[str] | None = None,
        args: list[str] | None = None,
    ) -> WorkloadPod:
        """A workload's pod from its stored document: its namespace, owner, spec and
        GPUs; the image and how it starts come from the kind (a service's revision)."""
        return cls(
            namespace_name=doc["namespace"], tenant_id=doc["tenant_id"],
            spec_name=doc["spec_name"], image=image, template=template, cpu=doc["cpu"],
            memory=doc["memory"], gpus=doc["gpu_count"], gpu_type=doc["gpu_type"],
            zones=list(doc["zones"]), command=command, args=args,
            storage_secrets=storage_secrets, pull_secrets=pull_secrets,
            gpu_resource=GpuShare.of(doc).resource,
        )  # fmt: skip

    def container(self) -> Manifest:
        """The tenant's container: every kind's env, resources, mounts and security."""
        container: Manifest = {
            "name": "workload",
            "image": self.image,
            # Every start asks the registry with this tenant's own pull secret: an image
            # another tenant's credentials pulled onto the node is not this tenant's to
            # run (review H3). Its layers stay cached, so a warm node pulls no bytes.
            "imagePullPolicy": "Always",
            # A record stored before device selectors were refused still never passes
            # one to a pod: the device plugin alone chooses the GPUs (review H1).
            "env": [
                {"name": env.name, "value": env.value}
                for env in self.template.envs
                if not is_device_selector(env.name)
            ],
            "resources": pod_resources(self.cpu, self.memory, self.gpus, self.gpu_resource),
            "securityContext": CONTAINER_SECURITY,
            "volumeMounts": [
                {"name": volume.name, "mountPath": volume.mount_path, "readOnly": volume.read_only}
                for volume in self.template.volumes
            ],
        }
        if self.command:
            container["command"] = self.command
        if self.args:
            container["args"] = self.args
        if self.storage_secrets:
            # The first object storage also without a prefix: S3 SDKs read AWS_*
            # unconfigured. The template's own `envs` win over both (Kubernetes: env
            # overrides envFrom).
            first_secret = self.storage_secrets[0][0]
            container["envFrom"] = [{"secretRef": {"name": first_secret}}] + [
                {"prefix": prefix, "secretRef": {"name": secret}}
                for secret, prefix in self.storage_secrets
            ]
        return container

    def owner(self, kind_label: str, workload_id: str) -> dict[str, str]:
        """The labels naming whose pod it is: its tenant, and its workload under the
        kind's own label (`INSTANCE`, `JOB`, `SERVICE`); a service's selector too."""
        return {TENANT: self.tenant_id, kind_label: workload_id}

    def labels(self, owner: dict[str, str]) -> dict[str, str]:
        """A pod's labels: managed, its owner's (`owner`), its spec and, for shared GPUs,
        their kind."""
        return {
            MANAGED: "true",
            **owner,
            SPEC: self.spec_name,
            **_sharing_labels(self.gpu_resource),
        }

    def spec(
        self, container: Manifest, *, restart_policy: str, node: str | None = None
    ) -> Manifest:
        """The pod spec around `container`: `node` binds it there (a warm unit's node)."""
        volumes = [
            {"name": volume.name, "persistentVolumeClaim": {"claimName": volume.claim_name}}
            if volume.claim_name
            else {"name": volume.name, "emptyDir": {}}
            for volume in self.template.volumes
        ]
        run_as = self.template.run_as_user
        return {
            "priorityClassName": INSTANCE_PRIORITY_CLASS,
            "restartPolicy": restart_policy,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
                **({"runAsUser": run_as} if run_as else {}),
            },
            "containers": [container],
            "volumes": volumes,
            **(
                {"imagePullSecrets": [{"name": name} for name in self.pull_secrets]}
                if self.pull_secrets
                else {}
            ),
            **pod_placement(self.gpu_type, self.zones, node, self._sole_tenant()),
        }

    def _sole_tenant(self) -> str | None:
        """Time-sliced GPUs do not fence memory: their node serves this tenant alone."""
        return self.tenant_id if self.gpu_resource == SHARED_GPU_RESOURCE else None


HOLD_SUFFIX = "-hold"
