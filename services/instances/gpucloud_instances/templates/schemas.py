"""Response models of the template catalog."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
)

from gpucloud_libs.http import ApiModel

from ..schemas import EnvVar


class TemplatePort(ApiModel):
    port: int = Field(ge=1, le=65535)
    #: What the port speaks: `http` is served through instance and service URLs;
    #: `ssh` through `gpucloud ssh`'s tunnel; `grpc` not yet.
    app_protocol: Literal["http", "grpc", "ssh"]
    is_public: bool = False


class SuggestedSpec(ApiModel):
    """What a spec should have for the template to run well."""

    gpu_num: int = Field(ge=1)
    min_gpu_memory_gib: int = Field(ge=0, alias="minGpuMemoryGiB")
    note: str | None = None


class CatalogTemplate(ApiModel):
    template_id: str = Field(alias="templateID")
    name: str
    description: str
    #: What it can start: an instance, an inference service, or either.
    kinds: list[Literal["instance", "service"]]
    image: str
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] = Field(default_factory=list)
    ports: list[TemplatePort]
    #: For a service: the port replicas serve on, and their readiness path.
    serving_port: int | None = None
    readiness_path: str | None = None
    suggested_specs: list[SuggestedSpec]
    #: The uid it runs as (`runAsUser` of what it starts): the image's own user, by
    #: number, so the kubelet's non-root check passes.
    run_as_user: int = Field(alias="runAsUser")
    #: The image's default user and where that is documented: why `runAsUser` is this.
    image_user: str
