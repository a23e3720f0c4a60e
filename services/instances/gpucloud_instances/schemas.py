"""Request and response models of the instances API (field names follow seed 004)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Literal, Self

from fastapi import Query
from pydantic import (
    AfterValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gpucloud_libs.http import ApiModel
from gpucloud_libs.naming import ID_PATTERN, PROJECT_ID_PATTERN, storage_claim_name

DnsLabel = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")]


#: An instance id is a field of its hosts (libs naming): no `--` in it.
InstanceId = Annotated[str, Field(pattern=ID_PATTERN, max_length=40)]


#: Values that end up as Kubernetes label values (GPU product, zone).
#: A project of the tenant (decision 138): `default`, or one a tenant admin made.
ProjectRef = Annotated[str, Field(pattern=PROJECT_ID_PATTERN)]
#: A listing's `project` filter: only that project's work (a key of one project sees
#: its own alone, asked or not).
ProjectFilter = Annotated[
    str | None,
    Query(pattern=PROJECT_ID_PATTERN, description="Only this project's work"),
]
LabelValue = Annotated[str, Field(pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")]


StorageId = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")]


Quantity = Annotated[
    str, Field(pattern=r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$", max_length=32)
]


class PortSpec(ApiModel):
    port: int = Field(ge=1, le=65535)
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    is_public: bool = False
    is_probe: bool = False
    #: Path prefix the workload serves under; also the HTTP readiness path of the probe port.
    base_url: str | None = Field(default=None, pattern=r"^/[\x21-\x7e]*$", max_length=256)

    @model_validator(mode="after")
    def _probed_over_tcp(self, info: ValidationInfo) -> Self:
        # Kubernetes probes readiness over TCP (or HTTP on it): a UDP server would never
        # be ready. A port stored before this rule stays readable.
        stored = (info.context or {}).get("stored")
        if self.is_probe and self.protocol != "TCP" and not stored:
            raise ValueError(f"a readiness probe (isProbe) needs a TCP port, not {self.protocol}")
        return self


#: Environment names that select GPUs or driver capabilities below the allocation:
#: with the NVIDIA container toolkit's defaults, `NVIDIA_VISIBLE_DEVICES=all` in a
#: pod's env reaches every GPU of the node, other tenants' included (docs/security.md).
#: The device plugin sets these; a tenant may not.
_DEVICE_SELECTORS = re.compile(
    r"^(NVIDIA_.*|CUDA_VISIBLE_DEVICES|CUDA_MPS_.*|GPU_DEVICE_ORDINAL|ROCR_VISIBLE_DEVICES"
    r"|HIP_VISIBLE_DEVICES)$",
    re.IGNORECASE,
)


#: Validation context for what the service reads back from its own documents: rules
#: added for requests since (device selectors) do not make an old record unreadable.
STORED = {"stored": True}


def is_device_selector(name: str) -> bool:
    """Whether an environment variable chooses GPUs or driver features itself."""
    return _DEVICE_SELECTORS.match(name) is not None


class EnvVar(ApiModel):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)
    value: str = Field(max_length=32768)

    @field_validator("name")
    @classmethod
    def _not_a_device_selector(cls, name: str, info: ValidationInfo) -> str:
        if not (info.context or {}).get("stored") and is_device_selector(name):
            raise ValueError(
                f"{name} selects GPUs or driver features below the allocation; the platform "
                "sets it from the GPUs the workload was given"
            )
        return name


class VolumeSpec(ApiModel):
    name: DnsLabel
    mount_path: str = Field(pattern=r"^/[^\x00]*$", max_length=512)
    read_only: bool = False
    #: A volume storage of the tenant, mounted as its PVC; without one, scratch space.
    storage_id: StorageId | None = Field(default=None, alias="storageID")

    @property
    def claim_name(self) -> str | None:
        return storage_claim_name(self.storage_id) if self.storage_id else None


def mounts_storages(volumes: Sequence[VolumeSpec]) -> bool:
    """Whether any of the volumes is a volume storage (placed with it: placement)."""
    return any(volume.storage_id for volume in volumes)


#: The user the container runs as, when the image's own is root or a name: tenant pods
#: run with runAsNonRoot, and a kubelet starts such an image only with a non-zero uid.
RunAsUser = Annotated[int | None, Field(default=None, ge=1, le=2**31 - 1, alias="runAsUser")]


class InstanceTemplate(ApiModel):
    ports: list[PortSpec] = Field(default_factory=list, max_length=16)
    envs: list[EnvVar] = Field(default_factory=list, max_length=128)
    #: A shell command line, run with `/bin/sh -c` (seed 004's `cmd`)...
    cmd: str | None = Field(default=None, max_length=16384)
    #: ...or the container's entrypoint and arguments as lists, as Kubernetes and the
    #: catalog's templates give them (no shell; either may be left to the image).
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, max_length=256
    )
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(default=None, max_length=256)
    volumes: list[VolumeSpec] = Field(default_factory=list, max_length=16)
    run_as_user: RunAsUser = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.cmd and (self.command or self.args):
            raise ValueError("give either `cmd` (a shell line) or `command`/`args`, not both")
        ports = [port.port for port in self.ports]
        if len(set(ports)) != len(ports):
            raise ValueError("port numbers must be unique")
        if sum(port.is_probe for port in self.ports) > 1:
            raise ValueError("at most one port can be the readiness probe (isProbe)")
        _check_env_and_volumes(self.envs, self.volumes)
        return self


def _check_env_and_volumes(envs: list[EnvVar], volumes: list[VolumeSpec]) -> None:
    """What an instance's and a job's containers both need: unique names and mounts."""
    if len({env.name for env in envs}) != len(envs):
        raise ValueError("environment variable names must be unique")
    if len({volume.name for volume in volumes}) != len(volumes):
        raise ValueError("volume names must be unique")
    if len({volume.mount_path for volume in volumes}) != len(volumes):
        raise ValueError("volume mount paths must be unique")


#: A container image reference, as Kubernetes takes it.
DOCKER_HUB = "docker.io"


#: Registry names that only mean something on the node's own network.
_LOCAL_SUFFIXES = (
    ".local",
    ".localhost",
    ".localdomain",
    ".internal",
    ".svc",
    ".lan",
    ".home.arpa",
)


_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


def image_registry(image: str) -> str:
    """The registry host of an image reference, as the container runtime reads it: the
    first path part when it holds a `.`, a `:` or a capital letter (a repository name
    cannot), or is `localhost`, else Docker Hub."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        return first.lower()
    return DOCKER_HUB


def _pulled_by_public_name(image: str) -> str:
    """The kubelet pulls from the node's network, outside the tenant's egress policy and
    with whatever the node may reach (review M10): a registry must be named by a public
    DNS name, never an address (cloud metadata, a node port) or a local name."""
    registry = image_registry(image)
    host = registry if registry.startswith("[") else registry.rsplit(":", 1)[0]
    labels = host.split(".")
    if (
        host.startswith("[")
        or len(labels) < 2
        or all(_NUMERIC_LABEL.match(label) for label in labels)
        or host.endswith(_LOCAL_SUFFIXES)
    ):
        raise ValueError(
            f"the image's registry {registry!r} is an address or a local name, which the "
            "node would pull from on its own network: name the registry by its public DNS name"
        )
    return image


ImageRef = Annotated[
    str,
    Field(min_length=1, max_length=512, pattern=r"^\S+$"),
    AfterValidator(_pulled_by_public_name),
]


class QueuePosition(ApiModel):
    """Why a queued job or instance waits, and what is ahead of it."""

    #: 1 for the tenant's next workload (job or instance) to be admitted.
    position: int
    #: `quota`: the tenant's quota has no room yet; `capacity`: no free GPUs of its
    #: type (or a bigger workload of that type waits ahead of it); `priority`: a
    #: workload of higher priority of the same tenant goes first; `reclaim`: GPUs
    #: borrowed by another tenant are being taken back for it; `user_limit`: the user
    #: who started it holds their own GPU limit; `project_quota`: its project holds
    #: its share of the tenant's quota; `admission`: not yet placed.
    reason: str
    #: GPUs the tenant's workloads ahead of it ask for.
    gpus_ahead: int


class Transition(ApiModel):
    state: str
    at: datetime
    reason: str | None = None


class ProjectUse(ApiModel):
    """A project's share of the tenant's quota (None: only the tenant's holds it), what
    its batch jobs may borrow past it, and the GPUs its workloads hold."""

    project: str
    max_gpus: int | None
    borrow_gpus: int
    gpus_in_use: int


class QuotaUse(ApiModel):
    """The caller's tenant's quota and what its workloads hold of it now: what a start
    may still take."""

    max_gpus: int
    max_instances: int
    #: GPUs beyond maxGpus its jobs may borrow while other tenants' GPUs sit idle.
    borrow_gpus: int
    #: GPUs held by its instances, jobs' runs and services' replicas.
    gpus_in_use: int
    #: Workloads holding quota (an instance, a job, a service each count once).
    workloads_in_use: int
    #: The caller's own limits inside it, where a tenant admin set any, and the GPUs
    #: the caller's workloads hold.
    your_max_gpus: int | None = None
    your_monthly_spend_cents: int | None = None
    your_gpus_in_use: int = 0
    #: The projects the caller may start work in (`default` and theirs; every one to
    #: a tenant admin), each with its share and what its workloads hold.
    projects: list[ProjectUse] = Field(default_factory=list)
