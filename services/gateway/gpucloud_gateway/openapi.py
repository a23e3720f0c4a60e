"""One OpenAPI document for the whole platform: the gateway's routes plus every
forwarded route, taken from the owning service's own document.

Forwarded operations are rewritten as the public sees them: the /v1 prefix,
bearer authentication instead of the internal identity header, and the roles
and scope the gateway enforces. Schema names that two services both use with
different content are prefixed with the service name.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from .routes import FORWARDED, ServiceName
from .upstream import Upstream, UpstreamUnreachable

Doc = dict[str, Any]

BEARER = "bearer"
_REF = "#/components/schemas/"
_PROBLEM_RESPONSE = {
    "description": "A problem (RFC 9457)",
    "content": {"application/problem+json": {"schema": {"$ref": f"{_REF}Problem"}}},
}
PROBLEM_SCHEMA: Doc = {
    "title": "Problem",
    "type": "object",
    "required": ["type", "title", "status", "code"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "code": {"type": "string", "description": "Machine-readable; switch on this."},
        "instance": {"type": "string"},
    },
    "additionalProperties": True,
}


def _rename_refs(node: Any, renames: dict[str, str]) -> Any:
    if isinstance(node, dict):
        return {
            key: (
                _REF + renames.get(value.removeprefix(_REF), value.removeprefix(_REF))
                if key == "$ref" and isinstance(value, str) and value.startswith(_REF)
                else _rename_refs(value, renames)
            )
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_rename_refs(item, renames) for item in node]
    return node


def _public_operation(operation: Doc, roles: frozenset[str], scope: str) -> Doc:
    operation = copy.deepcopy(operation)
    operation["security"] = [{BEARER: []}]
    operation["parameters"] = [
        parameter
        for parameter in operation.get("parameters", [])
        if parameter.get("name", "").lower() != "x-gpucloud-identity"
    ]
    if not operation["parameters"]:
        del operation["parameters"]
    operation["x-gpucloud-roles"] = sorted(roles)
    operation["x-gpucloud-scope"] = scope
    responses = operation.setdefault("responses", {})
    # The services' validation errors are problem documents, not FastAPI's default shape.
    responses.pop("422", None)
    for status in ("401", "403", "404", "422", "429"):
        responses.setdefault(status, _PROBLEM_RESPONSE)
    return operation


def aggregate(gateway: Doc, services: dict[ServiceName, Doc]) -> Doc:
    """The public document: `gateway`'s own paths plus the forwarded ones from `services`."""
    merged = copy.deepcopy(gateway)
    merged["openapi"] = gateway.get("openapi", "3.1.0")
    paths: Doc = {
        path: item for path, item in merged.get("paths", {}).items() if path.startswith("/v1/")
    }
    schemas: Doc = merged.setdefault("components", {}).setdefault("schemas", {})
    schemas["Problem"] = PROBLEM_SCHEMA
    schemes = merged["components"].setdefault("securitySchemes", {})
    schemes.clear()
    schemes[BEARER] = {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key (`gpc_...`) or a token from POST /v1/tokens (`gpt_...`).",
    }
    for service, document in services.items():
        their_schemas: Doc = document.get("components", {}).get("schemas", {})
        renames = {
            name: f"{service}.{name}"
            for name, schema in their_schemas.items()
            if name in schemas and schemas[name] != schema
        }
        for name, schema in their_schemas.items():
            schemas[renames.get(name, name)] = _rename_refs(schema, renames)
        for route in FORWARDED:
            if route.service != service:
                continue
            operation = (
                document.get("paths", {}).get(route.upstream_path, {}).get(route.method.lower())
            )
            if operation is None:
                continue
            public = _public_operation(_rename_refs(operation, renames), route.roles, route.scope)
            paths.setdefault(route.path, {})[route.method.lower()] = public
    merged["paths"] = dict(sorted(paths.items()))
    merged.pop("security", None)
    return merged


class OpenApiAggregator:
    """Fetches the services' documents and caches the aggregate for a minute."""

    def __init__(self, upstream: Upstream, base_urls: dict[ServiceName, str]) -> None:
        self.upstream = upstream
        self.base_urls = base_urls
        self._cached: tuple[float, Doc] | None = None

    async def document(self, gateway: Doc) -> Doc:
        if self._cached is not None and self._cached[0] > time.monotonic():
            return self._cached[1]
        wanted = sorted({route.service for route in FORWARDED})
        services: dict[ServiceName, Doc] = {}
        missing: list[str] = []
        for service in wanted:
            try:
                services[service] = await self.upstream.get_json(
                    f"{self.base_urls[service]}/openapi.json", headers=[]
                )
            except UpstreamUnreachable:
                missing.append(service)
        document = aggregate(gateway, services)
        if missing:
            # Say so rather than silently publishing a partial API; retry next time.
            document["x-gpucloud-unavailable-services"] = missing
        else:
            self._cached = (time.monotonic() + 60.0, document)
        return document
