"""A project is a boundary for the tenant's other members (decision 142; review N3).

Ada, a member of project `vision`, runs an instance, a job and an inference service
there and keeps an object storage in it; the monitoring service holds her instance's
GPU history. Bob is a user of the same tenant and no member of `vision`. Walking the
whole API as Bob, generated from the OpenAPI document as the isolation matrix is, so
that a new route cannot skip it:

- every operation that names one of `vision`'s resources in its path is refused (403
  or 404, a problem document), reads and changes alike;
- every other answer names none of them (listings, usage, GPUs, alerts);

and afterwards Ada's work is as she left it. The tenant admin sees it all; the CLI
tells Bob in his own terms that the work is not in his projects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s

from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.naming import job_workload_id, service_workload_id

from .cli_support import cli_for
from .platform import MIB, Platform, TenantAccount, assert_problem, bearer
from .support import eventually, unique
from .telemetry_support import gpu_history

PASSWORD = "a project is a boundary"
PORT = 8888
SERVICE_IMAGE = "registry.test/vision-llm:1"

#: Path parameters that name one of `vision`'s resources: the attribute of `Vision`
#: that holds it. Every operation with one of these is refused to Bob.
OF_VISION = {
    "instance_id": "instance",
    "job_id": "job",
    "service_id": "service",
    "storage_id": "storage",
    "accessor_id": "accessor",
    "upload_id": "upload",
    "gpu_uuid": "gpu",
    "project_id": "project",
}
#: Every other path parameter, with a value that names nothing of `vision`'s. A new
#: parameter fails the walk until it is named here or above.
NEUTRAL = {
    "port": str(PORT),
    "tenant_id": "t-nobody",
    "user_id": "u-nobody",
    "key_id": "k-nobody",
    "name": "nothing",
    "spec_name": "nothing",
    "template_id": "nothing",
    "credential_id": "nothing",
    "invitation_id": "nothing",
    "node": "nothing",
    "rule_id": "nothing",
    "price_id": "nothing",
    "invoice_id": "nothing",
    "period": "2026-01",
    "cluster": "nothing",
    "cluster_name": "nothing",
    "tenant": "nothing",
    "part_number": "1",
}
#: Valid bodies for the changes that name `vision`'s resources: a body the route would
#: take from a member, so that a refusal is the boundary's, not the validation's.
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("PATCH", "/v1/inference-services/{service_id}"): {"image": "registry.test/bob:1"},
    ("POST", "/v1/inference-services/{service_id}/rollback"): {"revision": 1},
    ("PATCH", "/v1/storages/{storage_id}"): {"sizeBytes": 128 * MIB},
    ("POST", "/v1/storages/{storage_id}/accessors"): {"mode": "read-write"},
    ("POST", "/v1/storages/{storage_id}/downloads"): {"key": "data.bin"},
    ("POST", "/v1/storages/{storage_id}/download-urls"): {"keys": ["data.bin"]},
    ("POST", "/v1/storages/{storage_id}/upload-urls"): {
        "objects": [{"key": "data.bin", "sizeBytes": 1}]
    },
    ("POST", "/v1/storages/{storage_id}/revoke-urls"): {},
    ("POST", "/v1/storages/{storage_id}/uploads"): {"key": "bob.bin", "sizeBytes": MIB},
    ("POST", "/v1/storages/{storage_id}/uploads/{upload_id}/parts"): {"partNumbers": [1]},
    ("POST", "/v1/storages/{storage_id}/uploads/{upload_id}/complete"): {
        "parts": [{"partNumber": 1, "etag": "x"}]
    },
    ("PATCH", "/v1/projects/{project_id}"): {"name": "Bob's now"},
}


@dataclass
class Vision:
    http: httpx.AsyncClient
    account: TenantAccount
    ada: dict[str, str]
    bob: dict[str, str]
    bob_id: str
    instance: str
    job: str
    service: str
    storage: str
    accessor: str
    upload: str
    gpu: str
    #: Ada's job as she submitted it, for Bob to send again under its id.
    job_body: dict[str, Any]
    project: str = "vision"

    @property
    def names(self) -> list[str]:
        """What of `vision`'s no answer to Bob may name."""
        return [self.instance, self.job, self.service, self.storage, self.accessor, self.upload,
                self.gpu]  # fmt: skip


async def _signed_in(http: httpx.AsyncClient, email: str) -> dict[str, str]:
    """A token of the user's password: only the tenant's (generous) rate limit applies."""
    token = await http.post("/v1/tokens", json={"email": email, "password": PASSWORD})
    assert token.status_code == 201, token.text
    return bearer(token.json()["token"])


async def _user(platform: Platform, account: TenantAccount, name: str) -> tuple[str, str]:
    email = f"{name}@{account.tenant_id}.test"
    made = await platform.http.post(
        "/v1/users", json={"email": email, "name": name, "role": "tenant-user",
                           "password": PASSWORD},
        headers=bearer(account.admin_key),
    )  # fmt: skip
    assert made.status_code == 201, made.text
    return made.json()["userID"], email


async def _as_ada(platform: Platform, ada: dict[str, str], path: str, body: dict[str, Any]) -> Any:
    """POST as Ada in `vision`, once her membership reached the service that answers."""

    async def answered() -> httpx.Response | None:
        response = await platform.http.post(path, json=body, headers=ada)
        return None if response.status_code in {404, 409} else response

    response = await eventually(answered, timeout=30)
    assert response.status_code in {200, 201, 202}, response.text
    return response.json()


@pytest.fixture
async def vision(platform: Platform, kafka: KafkaConnection, kube: k8s.ApiClient) -> Vision:
    account = await platform.tenant(
        max_gpus=16, rate_limit={"requestsPerS": 10_000, "burst": 10_000}
    )
    admin = bearer(account.admin_key)
    ada_id, ada_email = await _user(platform, account, "ada")
    bob_id, bob_email = await _user(platform, account, "bob")
    made = await platform.http.post(
        "/v1/projects", json={"projectID": "vision", "name": "Vision", "maxGpus": 8},
        headers=admin,
    )  # fmt: skip
    assert made.status_code == 201, made.text
    joined = await platform.http.put(f"/v1/projects/vision/members/{ada_id}", headers=admin)
    assert joined.status_code == 200, joined.text
    ada = await _signed_in(platform.http, ada_email)
    spec = await platform.spec(gpus=1)
    instance = await _as_ada(platform, ada, "/v1/gpu-instances", {
        "image": "jupyter", "specName": spec, "project": "vision",
        "template": {"ports": [{"port": PORT, "isPublic": True}]},
    })  # fmt: skip
    job, service = unique("vision-job"), unique("vision-svc")
    job_body = {
        "jobID": job, "image": "busybox", "specName": spec, "project": "vision",
        "env": [{"name": "GPUCLOUD_SIM_RUN_FOR", "value": "600s"}],
    }  # fmt: skip
    await _as_ada(platform, ada, "/v1/jobs", job_body)
    await _as_ada(platform, ada, "/v1/inference-services", {
        "serviceID": service, "image": SERVICE_IMAGE, "specName": spec, "port": 8000,
        "project": "vision",
    })  # fmt: skip
    storage = (await platform.storage(account, project="vision", size_bytes=256 * MIB))["storageID"]
    accessor = await _as_ada(
        platform, ada, f"/v1/storages/{storage}/accessors", {"mode": "read-write"}
    )
    upload = await _as_ada(
        platform, ada, f"/v1/storages/{storage}/uploads", {"key": "big.bin", "sizeBytes": 100 * MIB}
    )
    instance_id = instance["instanceID"]
    gpu, *_ = await gpu_history(
        platform, account, kafka, kube, instance_id, job_workload_id(job),
        service_workload_id(service),
    )  # fmt: skip
    return Vision(
        platform.http, account, ada, await _signed_in(platform.http, bob_email), bob_id,
        instance_id, job, service, storage, accessor["accessorID"], upload["uploadID"], gpu,
        job_body,
    )  # fmt: skip


def _operations(document: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted(
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    )


def _filled(path: str, vision: Vision) -> tuple[str, bool]:
    """The path with its parameters given, and whether it names a `vision` resource."""
    names_vision = False

    def value(match: re.Match[str]) -> str:
        nonlocal names_vision
        param = match.group(1)
        if param in OF_VISION:
            names_vision = True
            return str(getattr(vision, OF_VISION[param]))
        assert param in NEUTRAL, f"name the path parameter {param!r} in OF_VISION or NEUTRAL"
        return NEUTRAL[param]

    return re.sub(r"\{([a-z_]+)\}", value, path), names_vision


async def _walk(vision: Vision, method: str, path: str) -> None:
    filled, names_vision = _filled(path, vision)
    body = BODIES.get((method, path))
    answer = await vision.http.request(method, filled, json=body, headers=vision.bob)
    assert answer.status_code < 500, answer.text
    if names_vision:
        assert answer.status_code != 422, f"give {method} {path} a valid body in BODIES"
        assert answer.status_code in {403, 404}, answer.text
        assert_problem(answer, answer.status_code)
    # A refusal may say back the id Bob named; nothing else of `vision`'s.
    leaked = [name for name in vision.names if name in answer.text and name not in filled]
    assert not leaked, f"the answer names {leaked}: {answer.text[:500]}"


@pytest.mark.object_store
async def test_another_projects_member_is_refused_every_route_of_its_work(
    vision: Vision, platform: Platform
) -> None:
    document = (await platform.http.get("/v1/openapi.json")).json()
    assert "x-gpucloud-unavailable-services" not in document
    walked = 0
    for method, path in _operations(document):
        try:
            await _walk(vision, method, path)
        except AssertionError as error:
            raise AssertionError(f"{method} {path}: {error}") from error
        walked += 1
    assert walked > 100
    # Ada's own request sent again by Bob is no replay of hers: her job's id is taken,
    # and nothing of it is said (a replay answers the workload it made).
    for body in (vision.job_body, {**vision.job_body, "project": None}):
        again = await vision.http.post("/v1/jobs", json=body, headers=vision.bob)
        assert "is taken; choose another id" in assert_problem(again, 409)["detail"], again.text
        assert vision.instance not in again.text
        assert "GPUCLOUD_SIM_RUN_FOR" not in again.text

    # Ada's work is as she left it: nothing of Bob's walk changed or stopped it.
    instance = await vision.http.get(f"/v1/gpu-instances/{vision.instance}", headers=vision.ada)
    assert instance.json()["state"] in {"pending", "running"}, instance.text
    service = await vision.http.get(f"/v1/inference-services/{vision.service}", headers=vision.ada)
    assert service.json()["image"] == SERVICE_IMAGE, service.text
    job = await vision.http.get(f"/v1/jobs/{vision.job}", headers=vision.ada)
    assert job.json()["state"] not in {"cancelled", "deleting"}, job.text
    storage = await vision.http.get(f"/v1/storages/{vision.storage}", headers=vision.ada)
    assert storage.json()["sizeBytes"] == 256 * MIB, storage.text
    accessors = await vision.http.get(
        f"/v1/storages/{vision.storage}/accessors", headers=vision.ada
    )
    assert [a["accessorID"] for a in accessors.json()["items"]] == [vision.accessor]
    # Ada reads her instance's GPUs; Bob was refused them above.
    metrics = await vision.http.get(
        f"/v1/gpu-instances/{vision.instance}/metrics", headers=vision.ada
    )
    assert metrics.status_code == 200, metrics.text


async def test_a_listing_of_another_project_is_refused_in_the_users_terms(
    vision: Vision, platform: Platform, tmp_path: Path
) -> None:
    for path in ("/v1/gpu-instances", "/v1/jobs", "/v1/inference-services"):
        refused = await vision.http.get(path, params={"project": "vision"}, headers=vision.bob)
        detail = assert_problem(refused, 404)["detail"]
        assert "project 'vision' is not one of yours; you are in default" in detail
        mine = await vision.http.get(path, params={"project": "vision"}, headers=vision.ada)
        assert (
            vision.instance in mine.text or vision.job in mine.text or vision.service in mine.text
        )
    admin = bearer(vision.account.admin_key)
    listed = await vision.http.get("/v1/gpu-instances", headers=admin)
    assert vision.instance in listed.text  # a tenant admin sees every project's

    # The CLI says it as Bob would: the instance is not in his projects.
    key = await vision.http.post("/v1/api-keys", json={"name": "laptop"}, headers=vision.bob)
    assert key.status_code == 201, key.text
    bob = cli_for(tmp_path / "bob", platform)
    assert (await bob.login(key.json()["secret"])).code == 0
    ls = await bob.ok("instances", "ls")
    assert vision.instance not in ls.out
    shown = await bob.run("instances", "get", vision.instance)
    assert shown.code == 1
    assert f"instance '{vision.instance}' does not exist in your projects (default)" in shown.err
