"""A namespace per project (issue "Tenant self-service", items 1 and 5; decision 138,
slice 3): a project's work runs in `gpc-<tenant>--<project>`; a member's
`gpucloud kubeconfig --project` credential, used by the real kubectl against the real
API server, lists that namespace's pods and is refused in the tenant's own, another
project's and another tenant's; it stops working when the user leaves the project.
An object storage's credentials and a project's volume's claim are in the project's
namespace (decision 140); a volume of `default` is refused to a project's work (409).
A deleted project's work is stopped, and its namespace retired once its volumes are
deleted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kubernetes_asyncio.client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from gpucloud_libs.naming import project_namespace, storage_secret_name, tenant_namespace

from .cli_support import Cli, kubectl
from .platform import Platform, assert_problem, bearer
from .projects_support import started_in_vision, tenant_with_ada
from .support import eventually


async def _kubeconfig(cli: Cli, project: str, path: Path) -> str:
    """`gpucloud kubeconfig --project` written to `path`, once the project's namespace
    is made (by the controller's next pass: till then, a 409 that says to retry)."""

    async def issued() -> str | None:
        ran = await cli.run("kubeconfig", "--project", project, "--file", str(path))
        if ran.code != 0:
            assert "the project's namespace is not ready yet; retry" in ran.err, ran.err
            return None
        return ran.err

    return await eventually(issued, timeout=30)


async def test_a_members_kubectl_reaches_its_projects_namespace_alone(
    platform: Platform, tmp_path: Path
) -> None:
    account, admin, ada = await tenant_with_ada(platform, tmp_path)
    stranger = await platform.tenant()
    await admin.ok("projects", "create", "vision", "--gpus", "4")
    await admin.ok("projects", "create", "nlp", "--gpus", "4")
    await admin.ok("projects", "add-member", "vision", f"ada@{account.tenant_id}.test")
    spec = await platform.spec()
    made = await started_in_vision(ada, spec)
    vision = project_namespace(account.tenant_id, "vision")
    assert vision == f"{tenant_namespace(account.tenant_id)}--vision"

    kubeconfig = tmp_path / "kube" / "vision"
    issued = await _kubeconfig(ada, "vision", kubeconfig)
    assert f"namespace {vision} (project vision)" in issued

    async def pod_listed() -> str | None:
        code, out = await kubectl(kubeconfig, "get", "pods", "-o", "name")
        assert code == 0, out
        return out if made["instanceID"] in out else None

    await eventually(pod_listed, timeout=60)
    elsewhere = (
        tenant_namespace(account.tenant_id),
        project_namespace(account.tenant_id, "nlp"),
        tenant_namespace(stranger.tenant_id),
    )
    for namespace in elsewhere:
        code, out = await kubectl(kubeconfig, "get", "pods", "-n", namespace)
        assert code == 1
        assert "forbidden" in out.lower(), (namespace, out)
    code, out = await kubectl(kubeconfig, "auth", "can-i", "create", "pods")
    assert out.strip() == "no", out
    # Not a member of nlp: as if it were not there.
    refused = await ada.run("kubeconfig", "--project", "nlp")
    assert refused.code == 1
    assert "project 'nlp' is not one of yours; you are in default, vision" in refused.err

    # A tenant admin reaches every project's namespace, a member or not.
    admins = tmp_path / "kube" / "nlp"
    await _kubeconfig(admin, "nlp", admins)

    # Out of the project, her credential for its namespace stops at once; the
    # admin's, made as an admin, outlives the tenant's change.
    await admin.ok("projects", "remove-member", "vision", f"ada@{account.tenant_id}.test")

    async def refused_now() -> bool:
        code, out = await kubectl(kubeconfig, "get", "pods")
        return code == 1 and "unauthorized" in out.lower()

    await eventually(refused_now, timeout=30, interval=1)
    code, out = await kubectl(admins, "get", "pods")
    assert code == 0, out


async def test_a_projects_work_takes_its_storages_in_its_namespace(
    platform: Platform, kube: k8s.ApiClient
) -> None:
    """An object storage's Secret and a volume's claim are in the project's namespace,
    where its pods run; a volume of `default` is not mounted there (409). The project
    deleted, its work stops and its namespace goes once its volume is deleted."""
    account = await platform.tenant(max_gpus=8)
    headers = bearer(account.admin_key)
    made = await platform.http.post(
        "/v1/projects", json={"projectID": "vision", "name": "Vision", "maxGpus": 4},
        headers=headers,
    )  # fmt: skip
    assert made.status_code == 201, made.text
    spec = await platform.spec(gpus=1)
    bucket = await platform.storage(account)
    tenants_volume = await platform.storage(account, kind="volume", size_bytes=4 * 1024**3)

    async def volume_of_vision() -> dict[str, Any]:
        # The project reaches the storage service with the tenant's event; its claim is
        # made once the instances service made the project's namespace.
        async def made() -> dict[str, Any] | None:
            response = await platform.http.post(
                "/v1/storages", headers=headers,
                json={"storageID": "vision-data", "kind": "volume", "sizeBytes": 4 * 1024**3,
                      "project": "vision"},
            )  # fmt: skip
            return None if response.status_code == 404 else response.json()

        found = await eventually(made, timeout=30)
        assert found["project"] == "vision", found

        async def ready() -> dict[str, Any] | None:
            seen = await platform.http.get("/v1/storages/vision-data", headers=headers)
            return seen.json() if seen.json()["state"] == "ready" else None

        return await eventually(ready, timeout=60)

    volume = await volume_of_vision()

    def mounting(storage_id: str) -> dict[str, Any]:
        return {"volumes": [{"name": "data", "mountPath": "/data", "storageID": storage_id}]}

    async def start(body: dict[str, Any]) -> Any:
        async def answered() -> Any:
            response = await platform.start_instance(
                account, {"image": "trainer", "specName": spec, "project": "vision", **body}
            )
            # The project reaches the instances service with the tenant's next event.
            return None if response.status_code == 404 else response

        return await eventually(answered, timeout=30)

    refused = await start({"template": mounting(tenants_volume["storageID"])})
    assert_problem(refused, 409)
    assert "is mounted by the work of its own project alone" in refused.json()["detail"]

    started = await start(
        {"storageIDs": [bucket["storageID"]], "template": mounting(volume["storageID"])}
    )
    assert started.status_code == 202, started.text
    instance_id = started.json()["instanceID"]
    core = k8s.CoreV1Api(kube)
    vision = project_namespace(account.tenant_id, "vision")

    async def pod() -> Any:
        pods = await core.list_namespaced_pod(vision)
        return next((p for p in pods.items if p.metadata.name == f"inst-{instance_id}"), None)

    created = await eventually(pod, timeout=60)
    secret_name = storage_secret_name(bucket["storageID"], instance_id)
    assert created.spec.containers[0].env_from[0].secret_ref.name == secret_name
    secret = await core.read_namespaced_secret(secret_name, vision)
    assert secret.metadata.namespace == vision
    claims = [v.persistent_volume_claim.claim_name for v in created.spec.volumes
              if v.persistent_volume_claim is not None]  # fmt: skip
    assert claims == [volume["claimName"]]
    claim = await core.read_namespaced_persistent_volume_claim(volume["claimName"], vision)
    assert claim.metadata.namespace == vision

    # The project deleted: its work stops, and its namespace goes once it is empty.
    deleted = await platform.http.delete("/v1/projects/vision", headers=headers)
    assert deleted.status_code == 204, deleted.text

    async def stopped() -> bool:
        found = await platform.http.get(f"/v1/gpu-instances/{instance_id}", headers=headers)
        return found.json()["state"] in {"stopped", "deleted", "failed"}

    await eventually(stopped, timeout=60)

    async def retired() -> bool:
        try:
            namespace = await core.read_namespace(vision)
        except ApiException as error:
            return error.status == 404
        return namespace.status.phase == "Terminating"

    # Its volume is the tenant's data: it falls to default, and holds the namespace.
    await asyncio.sleep(3)
    assert await retired() is False
    fallen = await platform.http.get("/v1/storages/vision-data", headers=headers)
    assert fallen.json()["project"] == "default"  # in everyone's reach
    gone = await platform.http.delete("/v1/storages/vision-data", headers=headers)
    assert gone.status_code == 204, gone.text
    await eventually(retired, timeout=90, interval=2)
