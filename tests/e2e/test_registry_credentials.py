"""Registry credentials: kept sealed, never shown again, and given to the pods whose
image comes from their registry, as an image pull Secret of the tenant's namespace."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from pymongo import AsyncMongoClient

from gpucloud_libs.naming import tenant_namespace

from .platform import Platform, assert_problem, bearer
from .support import eventually, unique

PASSWORD = "nvapi-" + "s3cr3t" * 8
NGC_IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"


async def test_a_login_is_sealed_at_rest_and_never_shown(
    platform: Platform, mongo: AsyncMongoClient[dict[str, object]]
) -> None:
    account = await platform.tenant()
    admin = bearer(account.admin_key)
    body = {"credentialID": "ngc", "registry": "nvcr.io", "username": "$oauthtoken",
            "password": PASSWORD}  # fmt: skip
    made = await platform.post_as_tenant(account, "/v1/registry-credentials", body)
    assert made.status_code == 201, made.text
    assert PASSWORD not in made.text
    assert made.json()["secretName"] == "gpc-registry-ngc"
    assert_problem(
        await platform.http.post("/v1/registry-credentials", json=body, headers=admin), 409
    )

    _, _, user_key = await platform.member(account)
    listed = await platform.http.get("/v1/registry-credentials", headers=bearer(user_key))
    assert [c["credentialID"] for c in listed.json()] == ["ngc"]
    assert PASSWORD not in listed.text
    # Only a tenant admin adds or deletes one.
    assert_problem(
        await platform.http.post(
            "/v1/registry-credentials", json={**body, "credentialID": "mine"},
            headers=bearer(user_key),
        ),
        403,
    )  # fmt: skip
    assert_problem(
        await platform.http.delete("/v1/registry-credentials/ngc", headers=bearer(user_key)), 403
    )
    stored = await mongo["gpucloud_instances"]["registry_credentials"].find_one(
        {"_id": f"{account.tenant_id}/ngc"}
    )
    assert stored is not None
    assert PASSWORD not in json.dumps(stored, default=str)

    other = await platform.tenant()
    for method in ("GET", "DELETE"):
        assert_problem(
            await platform.http.request(
                method, "/v1/registry-credentials/ngc", headers=bearer(other.admin_key)
            ),
            404,
        )
    assert (
        await platform.http.get("/v1/registry-credentials", headers=bearer(other.admin_key))
    ).json() == []
    for wrong in ({"registry": "https://nvcr.io"}, {"password": ""}, {"credentialID": "a--b"}):
        assert_problem(
            await platform.http.post(
                "/v1/registry-credentials", json={**body, **wrong}, headers=admin
            ),
            422,
        )


async def test_pods_from_the_registry_pull_with_the_login_and_others_do_not(
    platform: Platform, kube: k8s.ApiClient
) -> None:
    account = await platform.tenant(max_gpus=8)
    spec = await platform.spec(gpus=1)
    body = {"credentialID": unique("ngc"), "registry": "nvcr.io", "username": "$oauthtoken",
            "password": PASSWORD}  # fmt: skip
    made = await platform.post_as_tenant(account, "/v1/registry-credentials", body)
    assert made.status_code == 201, made.text
    secret_name = made.json()["secretName"]
    namespace = tenant_namespace(account.tenant_id)
    core = k8s.CoreV1Api(kube)

    private = await _instance_pod(platform, account.admin_key, spec, NGC_IMAGE, core, namespace)
    assert [s.name for s in private.spec.image_pull_secrets] == [secret_name]
    public = await _instance_pod(platform, account.admin_key, spec, "busybox:1.37", core, namespace)
    assert not public.spec.image_pull_secrets

    secret = await core.read_namespaced_secret(secret_name, namespace)
    assert secret.type == "kubernetes.io/dockerconfigjson"
    config = json.loads(base64.b64decode(secret.data[".dockerconfigjson"]))
    login = config["auths"]["nvcr.io"]
    assert (login["username"], login["password"]) == ("$oauthtoken", PASSWORD)

    # A job and a service from the registry get it too.
    job = await platform.http.post(
        "/v1/jobs", json={"image": NGC_IMAGE, "specName": spec}, headers=bearer(account.admin_key)
    )
    assert job.status_code == 202, job.text
    batch = k8s.BatchV1Api(kube)

    async def job_template() -> Any:
        found = await batch.list_namespaced_job(namespace)
        return found.items[0].spec.template.spec if found.items else None

    job_spec = await eventually(job_template, timeout=30)
    assert [s.name for s in job_spec.image_pull_secrets] == [secret_name]
    service = await platform.http.post(
        "/v1/inference-services",
        json={"image": NGC_IMAGE, "specName": spec, "port": 8000},
        headers=bearer(account.admin_key),
    )
    assert service.status_code == 201, service.text
    apps = k8s.AppsV1Api(kube)

    async def deployment() -> Any:
        found = await apps.list_namespaced_deployment(namespace)
        return found.items[0].spec.template.spec if found.items else None

    replica_spec = await eventually(deployment, timeout=30)
    assert [s.name for s in replica_spec.image_pull_secrets] == [secret_name]

    deleted = await platform.http.delete(
        f"/v1/registry-credentials/{body['credentialID']}", headers=bearer(account.admin_key)
    )
    assert deleted.status_code == 204, deleted.text
    with pytest.raises(k8s.ApiException) as gone:
        await core.read_namespaced_secret(secret_name, namespace)
    assert gone.value.status == 404  # the pull Secret went with its credential


async def _instance_pod(
    platform: Platform, key: str, spec: str, image: str, core: k8s.CoreV1Api, namespace: str
) -> Any:
    started = await platform.http.post(
        "/v1/gpu-instances", json={"image": image, "specName": spec}, headers=bearer(key)
    )
    assert started.status_code == 202, started.text
    name = f"inst-{started.json()['instanceID']}"

    async def pod() -> Any:
        try:
            return await core.read_namespaced_pod(name, namespace)
        except k8s.ApiException:
            return None

    return await eventually(pod, timeout=30)
