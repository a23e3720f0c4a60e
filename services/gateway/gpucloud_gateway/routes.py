"""The public routes the gateway forwards to the services, with who may call them.

Every forwarded route is listed here with the roles and the scope it needs;
anything else under /v1 that the gateway does not serve itself is a 404. The
services check the forwarded identity again (defence in depth), and a test
keeps this table and the services' OpenAPI documents in step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from gpucloud_libs.identity import Role

from .schemas import Scope

ServiceName = Literal["instances", "storage", "metering", "monitoring"]

EVERYONE: frozenset[Role] = frozenset({"platform-admin", "tenant-admin", "tenant-user"})
TENANT_MEMBERS: frozenset[Role] = frozenset({"tenant-admin", "tenant-user"})
PLATFORM_ADMIN: frozenset[Role] = frozenset({"platform-admin"})
ADMINS: frozenset[Role] = frozenset({"platform-admin", "tenant-admin"})
TENANT_ADMIN: frozenset[Role] = frozenset({"tenant-admin"})
API_PREFIX = "/v1"
STORAGE = "/v1/storages/{storage_id}"
SERVICE = "/v1/inference-services/{service_id}"
CREDENTIAL = "/v1/registry-credentials/{credential_id}"
CLUSTER = "/v1/clusters/{name}"
STORAGE_CLUSTER = "/v1/storage-clusters/{name}"


@dataclass(frozen=True)
class Reference:
    """A body field naming another service's resource, checked before forwarding: a
    price for a spec that does not exist is refused rather than stored."""

    #: The field's names as the service accepts them (its alias and its own name).
    fields: tuple[str, ...]
    service: ServiceName
    #: The resource's path at that service, `{}` standing for the field's value.
    path: str
    noun: str


SPEC_OF_PRICE = Reference(("specName", "spec_name"), "instances", "/specs/{}", "spec")


@dataclass(frozen=True)
class ForwardedRoute:
    method: str
    #: Public path template, e.g. /v1/gpu-instances/{instance_id}.
    path: str
    service: ServiceName
    roles: frozenset[Role]
    scope: Scope
    #: The answer is passed on as it comes (a followed log) instead of read whole.
    streams: bool = False
    references: tuple[Reference, ...] = ()
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        segments = [
            "[^/]+" if part.startswith("{") else re.escape(part) for part in self.path.split("/")
        ]
        object.__setattr__(self, "pattern", re.compile("^" + "/".join(segments) + "$"))

    @property
    def upstream_path(self) -> str:
        """The service's own path template: the public one without the version prefix."""
        return self.path.removeprefix(API_PREFIX)


FORWARDED: tuple[ForwardedRoute, ...] = (
    ForwardedRoute("GET", "/v1/quota", "instances", TENANT_MEMBERS, "instances:read"),
    ForwardedRoute("POST", "/v1/kubeconfig", "instances", TENANT_MEMBERS, "instances:connect"),
    ForwardedRoute("GET", "/v1/specs", "instances", EVERYONE, "instances:read"),
    ForwardedRoute("POST", "/v1/specs", "instances", PLATFORM_ADMIN, "instances:write"),
    ForwardedRoute("GET", "/v1/specs/{name}", "instances", EVERYONE, "instances:read"),
    ForwardedRoute("DELETE", "/v1/specs/{name}", "instances", PLATFORM_ADMIN, "instances:write"),
    ForwardedRoute("GET", "/v1/stocks", "instances", PLATFORM_ADMIN, "instances:read"),
    ForwardedRoute("POST", "/v1/stocks", "instances", PLATFORM_ADMIN, "instances:write"),
    ForwardedRoute("DELETE", "/v1/stocks", "instances", PLATFORM_ADMIN, "instances:write"),
    ForwardedRoute("GET", "/v1/regions", "instances", EVERYONE, "instances:read"),
    ForwardedRoute("POST", "/v1/clusters", "instances", PLATFORM_ADMIN, "instances:write"),
    ForwardedRoute("GET", "/v1/clusters", "instances", PLATFORM_ADMIN, "instances:read"),
    ForwardedRoute("GET", CLUSTER, "instances", PLATFORM_ADMIN, "instances:read"),
    ForwardedRoute("DELETE", CLUSTER, "instances", PLATFORM_ADMIN, "instances:write"),
    *(
        ForwardedRoute("POST", f"{CLUSTER}/{verb}", "instances", PLATFORM_ADMIN, "instances:write")
        for verb in ("cordon", "drain", "uncordon")
    ),
    ForwardedRoute("POST", "/v1/gpu-instances", "instances", TENANT_MEMBERS, "instances:write"),
    ForwardedRoute("GET", "/v1/gpu-instances", "instances", EVERYONE, "instances:read"),
    ForwardedRoute(
        "GET",
        "/v1/gpu-instances/{instance_id}/logs",
        "instances",
        TENANT_MEMBERS,
        "instances:read",
        streams=True,
    ),
    ForwardedRoute(
        "GET", "/v1/gpu-instances/{instance_id}", "instances", TENANT_MEMBERS, "instances:read"
    ),
    ForwardedRoute(
        "DELETE", "/v1/gpu-instances/{instance_id}", "instances", TENANT_MEMBERS, "instances:write"
    ),
    ForwardedRoute(
        "POST",
        "/v1/gpu-instances/{instance_id}/stop",
        "instances",
        TENANT_MEMBERS,
        "instances:write",
    ),
    ForwardedRoute(
        "POST",
        "/v1/gpu-instances/{instance_id}/start",
        "instances",
        TENANT_MEMBERS,
        "instances:write",
    ),
    # A batch job is a workload like an instance: the same roles and scopes.
    ForwardedRoute("POST", "/v1/jobs", "instances", TENANT_MEMBERS, "instances:write"),
    ForwardedRoute("GET", "/v1/jobs", "instances", EVERYONE, "instances:read"),
    ForwardedRoute("GET", "/v1/jobs/{job_id}", "instances", TENANT_MEMBERS, "instances:read"),
    ForwardedRoute("DELETE", "/v1/jobs/{job_id}", "instances", TENANT_MEMBERS, "instances:write"),
    ForwardedRoute(
        "GET", "/v1/jobs/{job_id}/logs", "instances", TENANT_MEMBERS, "instances:read", streams=True
    ),
    ForwardedRoute("GET", "/v1/templates", "instances", EVERYONE, "instances:read"),
    # Registry logins: every member reads them (no password); admins change them.
    ForwardedRoute(
        "POST", "/v1/registry-credentials", "instances", TENANT_ADMIN, "instances:write"
    ),
    ForwardedRoute(
        "GET", "/v1/registry-credentials", "instances", TENANT_MEMBERS, "instances:read"
    ),
    ForwardedRoute("GET", CREDENTIAL, "instances", TENANT_MEMBERS, "instances:read"),
    ForwardedRoute("DELETE", CREDENTIAL, "instances", TENANT_ADMIN, "instances:write"),
    ForwardedRoute("GET", "/v1/templates/{template_id}", "instances", EVERYONE, "instances:read"),
    # An inference service is a workload too: the instances' roles and scopes.
    ForwardedRoute(
        "POST", "/v1/inference-services", "instances", TENANT_MEMBERS, "instances:write"
    ),
    ForwardedRoute("GET", "/v1/inference-services", "instances", EVERYONE, "instances:read"),
    ForwardedRoute("GET", SERVICE, "instances", TENANT_MEMBERS, "instances:read"),
    # The operator reads a tenant's replica runs too (tenantID=), as its usage: bills are
    # checked against them.
    ForwardedRoute("GET", f"{SERVICE}/replicas", "instances", EVERYONE, "instances:read"),
    ForwardedRoute("PATCH", SERVICE, "instances", TENANT_MEMBERS, "instances:write"),
    ForwardedRoute("DELETE", SERVICE, "instances", TENANT_MEMBERS, "instances:write"),
    ForwardedRoute("POST", f"{SERVICE}/rollback", "instances", TENANT_MEMBERS, "instances:write"),
    ForwardedRoute("GET", "/v1/storage-clusters", "storage", PLATFORM_ADMIN, "storage:read"),
    *(
        ForwardedRoute(method, STORAGE_CLUSTER, "storage", PLATFORM_ADMIN, "storage:write")
        for method in ("PUT", "DELETE")
    ),
    ForwardedRoute("POST", "/v1/storages", "storage", TENANT_MEMBERS, "storage:write"),
    ForwardedRoute("GET", "/v1/storages", "storage", TENANT_MEMBERS, "storage:read"),
    ForwardedRoute("GET", STORAGE, "storage", TENANT_MEMBERS, "storage:read"),
    ForwardedRoute("PATCH", STORAGE, "storage", TENANT_MEMBERS, "storage:write"),
    ForwardedRoute("DELETE", STORAGE, "storage", TENANT_MEMBERS, "storage:write"),
    ForwardedRoute("POST", f"{STORAGE}/accessors", "storage", TENANT_MEMBERS, "storage:write"),
    ForwardedRoute("GET", f"{STORAGE}/accessors", "storage", TENANT_MEMBERS, "storage:read"),
    ForwardedRoute(
        "DELETE",
        f"{STORAGE}/accessors/{{accessor_id}}",
        "storage",
        TENANT_MEMBERS,
        "storage:write",
    ),
    ForwardedRoute("GET", f"{STORAGE}/objects", "storage", TENANT_MEMBERS, "storage:read"),
    # A presigned GET is a read, though it is asked for with POST.
    ForwardedRoute("POST", f"{STORAGE}/downloads", "storage", TENANT_MEMBERS, "storage:read"),
    ForwardedRoute("POST", f"{STORAGE}/download-urls", "storage", TENANT_MEMBERS, "storage:read"),
    ForwardedRoute("POST", f"{STORAGE}/upload-urls", "storage", TENANT_MEMBERS, "storage:write"),
    ForwardedRoute("POST", f"{STORAGE}/revoke-urls", "storage", TENANT_MEMBERS, "storage:write"),
    ForwardedRoute("POST", f"{STORAGE}/uploads", "storage", TENANT_MEMBERS, "storage:write"),
    ForwardedRoute(
        "POST", f"{STORAGE}/uploads/{{upload_id}}/parts", "storage", TENANT_MEMBERS, "storage:write"
    ),
    ForwardedRoute(
        "POST",
        f"{STORAGE}/uploads/{{upload_id}}/complete",
        "storage",
        TENANT_MEMBERS,
        "storage:write",
    ),
    ForwardedRoute(
        "DELETE", f"{STORAGE}/uploads/{{upload_id}}", "storage", TENANT_MEMBERS, "storage:write"
    ),
    ForwardedRoute("GET", "/v1/gpus", "monitoring", EVERYONE, "monitoring:read"),
    ForwardedRoute("GET", "/v1/gpus/{gpu_uuid}/metrics", "monitoring", EVERYONE, "monitoring:read"),
    ForwardedRoute(
        "GET", "/v1/gpu-instances/{instance_id}/metrics", "monitoring", EVERYONE, "monitoring:read"
    ),
    ForwardedRoute("GET", "/v1/jobs/{job_id}/metrics", "monitoring", EVERYONE, "monitoring:read"),
    ForwardedRoute(
        "GET",
        "/v1/inference-services/{service_id}/metrics",
        "monitoring",
        EVERYONE,
        "monitoring:read",
    ),
    ForwardedRoute("GET", "/v1/metrics/tenant", "monitoring", EVERYONE, "monitoring:read"),
    ForwardedRoute("GET", "/v1/capacity", "monitoring", EVERYONE, "monitoring:read"),
    ForwardedRoute("GET", "/v1/nodes", "monitoring", PLATFORM_ADMIN, "monitoring:read"),
    ForwardedRoute(
        "GET", "/v1/nodes/{node}/metrics", "monitoring", PLATFORM_ADMIN, "monitoring:read"
    ),
    ForwardedRoute(
        "POST", "/v1/nodes/{node}/release", "monitoring", PLATFORM_ADMIN, "monitoring:write"
    ),
    ForwardedRoute(
        "POST", "/v1/nodes/{node}/quarantine", "monitoring", PLATFORM_ADMIN, "monitoring:write"
    ),
    ForwardedRoute("GET", "/v1/fleet", "monitoring", PLATFORM_ADMIN, "monitoring:read"),
    ForwardedRoute("POST", "/v1/alert-rules", "monitoring", ADMINS, "monitoring:write"),
    ForwardedRoute("GET", "/v1/alert-rules", "monitoring", ADMINS, "monitoring:read"),
    ForwardedRoute("GET", "/v1/alert-rules/{rule_id}", "monitoring", ADMINS, "monitoring:read"),
    ForwardedRoute("PATCH", "/v1/alert-rules/{rule_id}", "monitoring", ADMINS, "monitoring:write"),
    ForwardedRoute("DELETE", "/v1/alert-rules/{rule_id}", "monitoring", ADMINS, "monitoring:write"),
    ForwardedRoute(
        "POST", "/v1/alert-rules/{rule_id}/webhook-secret", "monitoring", ADMINS, "monitoring:write"
    ),
    ForwardedRoute("GET", "/v1/alerts", "monitoring", EVERYONE, "monitoring:read"),
    ForwardedRoute("GET", "/v1/prices", "metering", EVERYONE, "billing:read"),
    ForwardedRoute(
        "POST",
        "/v1/prices",
        "metering",
        PLATFORM_ADMIN,
        "billing:write",
        references=(SPEC_OF_PRICE,),
    ),
    ForwardedRoute("DELETE", "/v1/prices/{price_id}", "metering", PLATFORM_ADMIN, "billing:write"),
    ForwardedRoute("GET", "/v1/usage", "metering", ADMINS, "billing:read"),
    # A member's own spend: what they started.
    ForwardedRoute("GET", "/v1/usage/mine", "metering", TENANT_MEMBERS, "billing:read"),
    ForwardedRoute("GET", "/v1/usage.csv", "metering", ADMINS, "billing:read"),
    ForwardedRoute(
        "GET", "/v1/usage/instances/{instance_id}", "metering", TENANT_MEMBERS, "billing:read"
    ),
    ForwardedRoute("GET", "/v1/usage/jobs/{job_id}", "metering", TENANT_MEMBERS, "billing:read"),
    ForwardedRoute(
        "GET",
        "/v1/usage/inference-services/{service_id}",
        "metering",
        TENANT_MEMBERS,
        "billing:read",
    ),
    ForwardedRoute("GET", "/v1/revenue", "metering", PLATFORM_ADMIN, "billing:read"),
    ForwardedRoute("POST", "/v1/invoices", "metering", PLATFORM_ADMIN, "billing:write"),
    ForwardedRoute("GET", "/v1/invoices", "metering", ADMINS, "billing:read"),
    ForwardedRoute("GET", "/v1/invoices/{invoice_id}", "metering", ADMINS, "billing:read"),
    ForwardedRoute("GET", "/v1/invoice-drafts/{period}", "metering", ADMINS, "billing:read"),
    ForwardedRoute("GET", "/v1/budget", "metering", TENANT_ADMIN, "billing:read"),
    ForwardedRoute("PUT", "/v1/budget", "metering", TENANT_ADMIN, "billing:write"),
)


@dataclass(frozen=True)
class RouteMatch:
    route: ForwardedRoute | None
    #: Methods the path allows, for a 405 when the method is not one of them.
    allowed: tuple[str, ...]


def match(method: str, path: str) -> RouteMatch:
    matching = [route for route in FORWARDED if route.pattern.match(path)]
    found = next((route for route in matching if route.method == method), None)
    return RouteMatch(found, tuple(route.method for route in matching))
