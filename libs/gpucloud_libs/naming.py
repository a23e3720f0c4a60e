"""Names more than one service derives from the same ids: a contract, kept in one place.

A tenant's Kubernetes namespace is used by the instances and storage services,
as are the names of the claims and Secrets through which storages reach instances;
an instance's public host is built by the instances service (its `urls`) and
parsed by the gateway, which serves every instance host.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

NAMESPACE_PREFIX = "gpc-"

#: Labels on the Kubernetes objects gpucloud makes; other services select by them
#: (the GPU simulator and the node agent find instance pods by INSTANCE_LABEL).
MANAGED_LABEL = "gpucloud.io/managed"
TENANT_LABEL = "gpucloud.io/tenant"
#: On a project's namespace (decision 138): which of the tenant's projects it is.
PROJECT_LABEL = "gpucloud.io/project"
INSTANCE_LABEL = "gpucloud.io/instance"
#: On a batch job's Kubernetes Job and on each of its pods.
JOB_LABEL = "gpucloud.io/job"
#: On an inference service's Deployment and on each of its replicas' pods.
SERVICE_LABEL = "gpucloud.io/inference-service"
STORAGE_LABEL = "gpucloud.io/storage"
#: The ClusterRole the storage service holds in each tenant namespace, and nowhere
#: else (its claims and credential Secrets): bound there by the instances service.
TENANT_STORAGE_ROLE = "gpucloud-tenant-storage"
#: The ClusterRole a user's kubectl credential holds in their tenant's namespace, and
#: nowhere else: read pods, events and logs, exec and port-forward; never create pods.
TENANT_KUBECTL_ROLE = "gpucloud-tenant-kubectl"
#: A user's own ServiceAccount in a tenant namespace (`gpucloud kubeconfig`).
USER_ACCOUNT_PREFIX = "gpc-user-"
#: What the NVIDIA GPU operator puts on nodes, read by placement and monitoring.
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
ZONE_LABEL = "topology.kubernetes.io/zone"


def gpu_product(nvml_name: str) -> str:
    """A GPU's product as GPU feature discovery labels its node (`nvidia.com/gpu.product`,
    which specs name): NVML's name with each run of spaces a dash, so `NVIDIA H100 80GB
    HBM3` from a node's agent and `NVIDIA-H100-80GB-HBM3` from its labels are one type."""
    return "-".join(nvml_name.split())


#: What a DNS-1123 label holds besides `-`: ASCII only (`isalnum` takes `é`).
_LABEL_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


def tenant_namespace(tenant_id: str) -> str:
    """DNS-1123 label: readable when the id allows it, hashed when it is long or odd
    (never, for ids the gateway takes: `ID_PATTERN`, at most 32 characters). No `--`:
    it separates the fields of instance and service hosts."""
    safe = "".join(ch if ch in _LABEL_CHARACTERS else "-" for ch in tenant_id.lower())
    safe = re.sub("-+", "-", safe).strip("-")
    name = f"{NAMESPACE_PREFIX}{safe}"
    if len(name) > 63 or safe != tenant_id:
        digest = hashlib.sha256(tenant_id.encode()).hexdigest()[:10]
        name = f"{NAMESPACE_PREFIX}{safe[:40]}-{digest}".replace("--", "-")
    return name


def _tenant_label(tenant_id: str) -> str:
    return tenant_namespace(tenant_id).removeprefix(NAMESPACE_PREFIX)


#: Between the fields of an instance host. No id may hold it (`ID_PATTERN`), so a
#: host reads exactly one way.
HOST_SEPARATOR = "--"
#: Instance and tenant ids: lowercase DNS words joined by single dashes.
ID_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"
#: A project's id (decision 138): a DNS label of at most 20 characters, as it joins
#: the tenant's in the project's namespace name.
PROJECT_ID_PATTERN = r"^[a-z]([a-z0-9-]{0,18}[a-z0-9])?$"
#: The project of every workload that names none.
DEFAULT_PROJECT = "default"


def project_namespace(tenant_id: str, project: str) -> str:
    """The namespace of a tenant's project (decision 138): `default`'s is the tenant's
    own, another's `gpc-<tenant>--<project>`. No tenant namespace holds `--`, so no
    project's reads as a tenant's (`acme`'s `vision` and tenant `acme-vision` differ);
    with tenant ids of at most 32 characters and project ids of at most 20 it is a
    DNS label (63), and a longer one (never made by the gateway) is hashed."""
    base = tenant_namespace(tenant_id)
    if project == DEFAULT_PROJECT:
        return base
    name = f"{base}{HOST_SEPARATOR}{project}"
    if len(name) > 63:
        digest = hashlib.sha256(f"{tenant_id}/{project}".encode()).hexdigest()[:10]
        name = f"{base[:40].rstrip('-')}{HOST_SEPARATOR}{project[:10].rstrip('-')}-{digest}"
    return name


def public_origin(scheme: str, host: str, port: int | None) -> str:
    """`scheme://host[:port]`, the port left out where it is the scheme's own: how
    instance and service URLs are written (the local stack's carry the gateway's port)."""
    default = {"https": 443, "http": 80}.get(scheme)
    return f"{scheme}://{host}" + ("" if port in {None, default} else f":{port}")


def instance_host(instance_id: str, tenant_id: str, port: int, domain: str) -> str:
    """`<instance>--<port>--<tenant>.<domain>`: one host per public port of an instance."""
    return HOST_SEPARATOR.join((instance_id, str(port), _tenant_label(tenant_id))) + f".{domain}"


def parse_instance_host(host: str, tenant_id: str, domain: str) -> tuple[str, int] | None:
    """The (instance id, port) a host names, if it is one of `tenant_id`'s hosts.

    Ids never hold the separator, so a host splits into its three fields one way
    only: no tenant can make a host that reads as another tenant's.
    """
    label, dot, rest = host.partition(".")
    if not dot or rest != domain:
        return None
    fields = label.split(HOST_SEPARATOR)
    if len(fields) != 3:
        return None
    instance_id, port, tenant_label = fields
    if tenant_label != _tenant_label(tenant_id) or not instance_id:
        return None
    if not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return instance_id, int(port)


def service_host(service_id: str, tenant_id: str, domain: str) -> str:
    """`<service>--<tenant>.<domain>`: an inference service's one stable host. Two
    fields where an instance host has three, so neither reads as the other."""
    return HOST_SEPARATOR.join((service_id, _tenant_label(tenant_id))) + f".{domain}"


def parse_service_host(host: str, tenant_id: str, domain: str) -> str | None:
    """The service id a host names, if it is one of `tenant_id`'s service hosts."""
    label, dot, rest = host.partition(".")
    if not dot or rest != domain:
        return None
    fields = label.split(HOST_SEPARATOR)
    if len(fields) != 2 or not fields[0] or fields[1] != _tenant_label(tenant_id):
        return None
    return fields[0]


def storage_claim_name(storage_id: str) -> str:
    """The PersistentVolumeClaim of a volume storage, in its tenant's namespace."""
    return f"gpc-storage-{storage_id}"


def storage_secret_name(storage_id: str, instance_id: str) -> str:
    """The Secret holding an object storage's credentials for one instance. Both ids may
    hold dashes (storage `a` with instance `b-c`, storage `a-b` with `c`), so a digest
    of the pair keeps two pairs from one name (review L8)."""
    digest = hashlib.sha256(f"{storage_id}/{instance_id}".encode()).hexdigest()[:12]
    return f"gpc-storage-{storage_id}-{instance_id}-{digest}"


def job_workload_id(job_id: str) -> str:
    """A batch job's name where instance ids go: its quota claim, its storages'
    attachment and its credentials' Secret. `--` is in no instance id, so the two
    never meet, and the Secret's name stays a valid Kubernetes name."""
    return f"job--{job_id}"


def service_workload_id(service_id: str) -> str:
    """An inference service's name where instance ids go (its quota claim, its
    storages' attachment), as `job_workload_id` is a job's."""
    return f"svc--{service_id}"


def storage_env_prefix(storage_id: str) -> str:
    """The prefix of an object storage's variables in an instance, e.g. STORAGE_MODELS_."""
    return "STORAGE_" + storage_id.upper().replace("-", "_") + "_"


def workload_of(labels: Mapping[str, str]) -> tuple[str, str] | None:
    """(tenant, workload id) of a pod the platform made: an instance's id, a batch
    job's `job--<job>`, an inference service's `svc--<service>`; None for another pod.
    Telemetry attributes a GPU to its workload by this, whichever kind it is."""
    tenant = labels.get(TENANT_LABEL)
    if not tenant:
        return None
    if instance := labels.get(INSTANCE_LABEL):
        return tenant, instance
    if job := labels.get(JOB_LABEL):
        return tenant, job_workload_id(job)
    if service := labels.get(SERVICE_LABEL):
        return tenant, service_workload_id(service)
    return None
