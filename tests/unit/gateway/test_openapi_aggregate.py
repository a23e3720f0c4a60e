"""The platform's one OpenAPI document (openapi.aggregate), from small hand-written
service documents: forwarded operations as the public calls them (the /v1 path, bearer
authentication, the roles and scope the gateway enforces, problem answers), nothing a
service serves that the gateway does not forward, and schema names two services use
differently kept apart."""

from __future__ import annotations

import copy
from typing import Any

from gpucloud_gateway.openapi import PROBLEM_SCHEMA, aggregate
from gpucloud_gateway.routes import EVERYONE, PLATFORM_ADMIN, TENANT_MEMBERS, ServiceName

Doc = dict[str, Any]
REF = "#/components/schemas/"
IDENTITY = {"name": "X-Gpucloud-Identity", "in": "header", "required": True}
NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}


def gateway_doc() -> Doc:
    return {
        "openapi": "3.1.0",
        "info": {"title": "gpucloud", "version": "1"},
        "paths": {
            "/v1/tenants": {"get": {"summary": "tenants"}},
            "/healthz": {"get": {"summary": "health"}},
            "/docs": {"get": {"summary": "docs"}},
        },
        "components": {
            "schemas": {"Page": {"type": "object", "properties": {"next": {"type": "string"}}}},
            "securitySchemes": {
                "APIKeyHeader": {"type": "apiKey", "name": "X-Key", "in": "header"}
            },
        },
        "security": [{"APIKeyHeader": []}],
    }


def instances_doc() -> Doc:
    return {
        "paths": {
            "/specs": {
                "get": {
                    "parameters": [IDENTITY],
                    "responses": {
                        "200": {"content": {"application/json": {"schema": {"$ref": f"{REF}Page"}}}}
                    },
                },
                "post": {
                    "parameters": [{**IDENTITY, "name": "x-gpucloud-identity"}],
                    "requestBody": {
                        "content": {"application/json": {"schema": {"$ref": f"{REF}SpecCreate"}}}
                    },
                    "responses": {
                        "201": {"description": "made"},
                        "404": {"description": "no such zone"},
                        "422": {"description": "FastAPI's HTTPValidationError"},
                    },
                },
            },
            "/specs/{name}": {"get": {"parameters": [IDENTITY, NAME]}},
            "/internal/reconcile": {"post": {"summary": "not public"}},
            "/inference-services/load": {"post": {"summary": "the gateway's alone"}},
        },
        "components": {
            "schemas": {
                "Page": {"type": "object", "properties": {"items": {"type": "array"}}},
                "SpecCreate": {
                    "type": "object",
                    "properties": {"page": {"$ref": f"{REF}Page"}, "name": {"type": "string"}},
                },
            }
        },
    }


def storage_doc() -> Doc:
    return {
        "paths": {"/storages": {"get": {"parameters": [IDENTITY]}}},
        "components": {
            "schemas": {
                # The gateway's own Page, the very same: no rename needed.
                "Page": {"type": "object", "properties": {"next": {"type": "string"}}},
                "Storage": {"type": "object"},
            }
        },
    }


def merged(services: dict[ServiceName, Doc]) -> Doc:
    return aggregate(gateway_doc(), services)


def test_only_the_gateways_public_paths_are_kept() -> None:
    paths = merged({})["paths"]
    assert list(paths) == ["/v1/tenants"]


def test_a_forwarded_operation_takes_its_public_path_and_bearer_authentication() -> None:
    document = merged({"instances": instances_doc()})
    listing = document["paths"]["/v1/specs"]["get"]
    assert listing["security"] == [{"bearer": []}]
    assert "parameters" not in listing  # the identity header was its only one
    assert listing["x-gpucloud-roles"] == sorted(EVERYONE)
    assert listing["x-gpucloud-scope"] == "instances:read"
    one = document["paths"]["/v1/specs/{name}"]["get"]
    assert one["parameters"] == [NAME]


def test_the_roles_and_scope_are_those_the_gateway_enforces() -> None:
    creating = merged({"instances": instances_doc()})["paths"]["/v1/specs"]["post"]
    assert (creating["x-gpucloud-roles"], creating["x-gpucloud-scope"]) == (
        sorted(PLATFORM_ADMIN),
        "instances:write",
    )


def test_errors_are_problem_documents_and_a_services_own_words_stay() -> None:
    responses = merged({"instances": instances_doc()})["paths"]["/v1/specs"]["post"]["responses"]
    problem = {"application/problem+json": {"schema": {"$ref": f"{REF}Problem"}}}
    for status in ("401", "403", "422", "429"):
        assert responses[status]["content"] == problem, status
    assert responses["404"] == {"description": "no such zone"}
    assert responses["201"] == {"description": "made"}


def test_what_a_service_serves_but_the_gateway_does_not_forward_is_not_published() -> None:
    paths = merged({"instances": instances_doc()})["paths"]
    assert "/v1/internal/reconcile" not in paths
    assert "/internal/reconcile" not in paths
    assert "/v1/inference-services/load" not in paths
    assert "/specs" not in paths


def test_a_forwarded_route_a_service_does_not_document_is_left_out() -> None:
    paths = merged({"instances": instances_doc()})["paths"]
    assert "/v1/gpu-instances" not in paths
    assert set(paths["/v1/specs"]) == {"get", "post"}


def test_a_schema_name_a_service_uses_differently_is_prefixed_and_its_refs_follow() -> None:
    document = merged({"instances": instances_doc()})
    schemas = document["components"]["schemas"]
    assert schemas["Page"] == gateway_doc()["components"]["schemas"]["Page"]
    assert schemas["instances.Page"] == instances_doc()["components"]["schemas"]["Page"]
    assert schemas["SpecCreate"]["properties"]["page"] == {"$ref": f"{REF}instances.Page"}
    listing = document["paths"]["/v1/specs"]["get"]
    body = listing["responses"]["200"]["content"]["application/json"]["schema"]
    assert body == {"$ref": f"{REF}instances.Page"}
    creating = document["paths"]["/v1/specs"]["post"]
    assert creating["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": f"{REF}SpecCreate"
    }


def test_a_schema_the_same_everywhere_keeps_its_name() -> None:
    schemas = merged({"storage": storage_doc()})["components"]["schemas"]
    assert "storage.Page" not in schemas
    assert set(schemas) == {"Page", "Storage", "Problem"}


def test_the_document_offers_bearer_authentication_alone_and_the_problem_schema() -> None:
    document = merged({"storage": storage_doc()})
    assert list(document["components"]["securitySchemes"]) == ["bearer"]
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert "security" not in document
    assert document["components"]["schemas"]["Problem"] == PROBLEM_SCHEMA
    storages = document["paths"]["/v1/storages"]["get"]
    assert storages["x-gpucloud-roles"] == sorted(TENANT_MEMBERS)
    assert storages["x-gpucloud-scope"] == "storage:read"


def test_paths_are_sorted_and_the_inputs_left_as_they_were() -> None:
    gateway, instances, storage = gateway_doc(), instances_doc(), storage_doc()
    before = copy.deepcopy((gateway, instances, storage))
    document = aggregate(gateway, {"instances": instances, "storage": storage})
    assert list(document["paths"]) == sorted(document["paths"])
    assert (gateway, instances, storage) == before


def test_an_openapi_version_is_always_given() -> None:
    bare = gateway_doc()
    del bare["openapi"]
    assert aggregate(bare, {})["openapi"] == "3.1.0"
    assert aggregate({**bare, "openapi": "3.0.3"}, {})["openapi"] == "3.0.3"
