"""Storages of workloads in the second cluster: an instance started from the CLI on the
second cluster's B200s gets its object storage's credentials in its tenant namespace
there (written by the storage service, with its own access to that cluster, which
`up` gave it as an operator would), works with them, and loses them when it stops;
a workload that mounts a volume stays in the home cluster, where volumes are.

The second cluster's nodes are kwok's, standing in for a second region's GPU servers;
the object store is the stack's own (MinIO or Ceph RGW), reached at its public
endpoint as a pod there would."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from gpucloud_libs.naming import storage_secret_name, tenant_namespace

from .cli_support import cli_for, ready_tenant
from .clusters_support import SECOND, second_cluster_api
from .platform import Platform, assert_problem, bearer
from .s3_support import put, s3_as, s3_error
from .support import eventually

B200 = "NVIDIA-B200"


@pytest.fixture
async def second_admin() -> AsyncIterator[k8s.ApiClient]:
    async with second_cluster_api(as_operator=True) as api:
        yield api


async def test_an_instance_in_the_second_cluster_gets_its_object_storage_there(
    platform: Platform, tmp_path: Path, kube: k8s.ApiClient, second_admin: k8s.ApiClient
) -> None:
    account = await platform.tenant()
    await ready_tenant(platform, account)
    bucket = await platform.storage(account)
    spec = await platform.spec(gpus=1, gpu_type=B200)
    cli = cli_for(tmp_path, platform)
    assert (await cli.login(account.admin_key)).code == 0
    created = await cli.ok(
        "-o", "json", "instances", "create", "--spec", spec, "--image", "trainer",
        "--cmd", "sleep 3600", "--storage", bucket["storageID"],
    )  # fmt: skip
    instance = created.json()
    assert (instance["cluster"], instance["state"]) == (SECOND, "running"), instance
    instance_id = instance["instanceID"]
    namespace = tenant_namespace(account.tenant_id)
    secret_name = storage_secret_name(bucket["storageID"], instance_id)
    there, home = k8s.CoreV1Api(second_admin), k8s.CoreV1Api(kube)

    pod = await there.read_namespaced_pod(f"inst-{instance_id}", namespace)
    assert secret_name in [e.secret_ref.name for e in pod.spec.containers[0].env_from]
    secret = await there.read_namespaced_secret(secret_name, namespace)
    values = {key: base64.b64decode(value).decode() for key, value in secret.data.items()}
    assert values["BUCKET"] == bucket["bucket"]
    home_secrets = await home.list_namespaced_secret(namespace)
    assert secret_name not in [s.metadata.name for s in home_secrets.items]
    client = s3_as({
        "accessorID": values["AWS_ACCESS_KEY_ID"], "secretAccessKey": values["AWS_SECRET_ACCESS_KEY"],
        "endpoint": values["AWS_ENDPOINT_URL"], "region": values["AWS_REGION"],
    })  # fmt: skip
    await asyncio.to_thread(put, client, bucket["bucket"], "checkpoint", b"step-1")

    await cli.ok("instances", "stop", instance_id)

    async def released() -> bool:
        secrets = await there.list_namespaced_secret(namespace)
        return all(s.metadata.name != secret_name for s in secrets.items)

    await eventually(released, timeout=60, interval=0.5)
    code = await s3_error(lambda: put(client, bucket["bucket"], "after", b"x"))
    assert code in {"InvalidAccessKeyId", "AccessDenied"}


async def test_a_workload_mounting_a_volume_stays_where_volumes_are(platform: Platform) -> None:
    account = await platform.tenant()
    volume = await platform.storage(account, kind="volume", size_bytes=4 * 1024**3)
    template = {
        "volumes": [{"name": "data", "mountPath": "/data", "storageID": volume["storageID"]}]
    }
    body: dict[str, Any] = {"image": "trainer", "template": template}
    elsewhere = await platform.start_instance(
        account, {**body, "specName": await platform.spec(gpus=1, gpu_type=B200)}
    )
    problem = assert_problem(elsewhere, 422)
    assert "volumes are mounted there alone" in problem["detail"]
    listed = await platform.http.get("/v1/gpu-instances", headers=bearer(account.admin_key))
    assert listed.json()["items"] == []


async def test_the_operator_sees_and_takes_back_the_storage_services_access(
    platform: Platform,
) -> None:
    """`up` gave the storage service its access to the second cluster; the operator
    lists it (never the kubeconfig), and a malformed one is refused with the reason."""
    listed = await platform.http.get("/v1/storage-clusters", headers=platform.admin)
    assert listed.status_code == 200, listed.text
    [second] = [c for c in listed.json() if c["name"] == SECOND]
    assert second["server"].startswith("https://127.")
    assert "kubeconfig" not in second
    refused = await platform.http.put(
        "/v1/storage-clusters/elsewhere", json={"kubeconfig": "clusters: []"},
        headers=platform.admin,
    )  # fmt: skip
    assert_problem(refused, 422)
    missing = await platform.http.delete("/v1/storage-clusters/nowhere", headers=platform.admin)
    assert_problem(missing, 404)
