"""Storages against the real stack: the object store (MinIO, or Ceph RGW under
`make test-ceph`) enforces accessors, quotas and presigned expiry; volumes are
claims on the real API server. The tests marked `object_store` are the contract
both stores pass with the same assertions; where the stores word a refusal
differently, the test names both (docs/storage.md, "MinIO and Ceph RGW")."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlparse, urlsplit

import httpx
import pytest
from kubernetes_asyncio import client as k8s
from minio import Minio, MinioAdmin
from minio.credentials.credentials import Credentials
from minio.credentials.providers import StaticProvider
from minio.error import MinioAdminException, S3Error
from minio.signer import sign_v4_s3

from gpucloud_libs.events import InstanceStateChanged
from gpucloud_libs.kafka import create_broker, publish_event
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.naming import storage_claim_name, storage_secret_name, tenant_namespace
from gpucloud_libs.topics import INSTANCE_LIFECYCLE, STORAGE_USAGE

from .conftest import stack_service_env
from .platform import MIB, Platform, assert_problem, bearer
from .s3_support import get, put, s3_as, s3_error
from .support import consumed, eventually, read_topic, unique


@pytest.mark.object_store
async def test_object_storage_lifecycle(platform: Platform, s3_admin: Minio) -> None:
    account = await platform.tenant()
    headers = bearer(account.admin_key)
    storage = await platform.storage(account, size_bytes=8 * MIB)
    path = f"/v1/storages/{storage['storageID']}"
    assert storage["kind"] == "object"
    assert storage["sizeBytes"] == 8 * MIB
    assert await asyncio.to_thread(s3_admin.bucket_exists, storage["bucket"])

    others = [await platform.storage(account) for _ in range(2)]
    first = await platform.http.get("/v1/storages", params={"limit": 2}, headers=headers)
    second = await platform.http.get(
        "/v1/storages", params={"limit": 2, "cursor": first.json()["nextCursor"]}, headers=headers
    )
    listed = [s["storageID"] for s in first.json()["items"] + second.json()["items"]]
    assert sorted(listed) == sorted([storage["storageID"], *(s["storageID"] for s in others)])
    assert second.json()["nextCursor"] is None

    grown = await platform.http.patch(path, json={"sizeBytes": 16 * MIB}, headers=headers)
    assert grown.status_code == 200, grown.text
    assert grown.json()["sizeBytes"] == 16 * MIB
    again = await platform.http.post(
        "/v1/storages",
        json={"storageID": storage["storageID"], "kind": "object", "sizeBytes": MIB},
        headers=headers,
    )
    assert_problem(again, 409)
    over = await platform.http.post(
        "/v1/storages", json={"kind": "object", "sizeBytes": 10**12}, headers=headers
    )
    assert_problem(over, 422, "quota_exceeded")
    wrong = await platform.http.post(
        "/v1/storages",
        json={"kind": "object", "sizeBytes": MIB, "storageClass": "fast"},
        headers=headers,
    )
    assert_problem(wrong, 422)

    deleted = await platform.http.delete(path, headers=headers)
    assert deleted.status_code == 204, deleted.text
    assert not await asyncio.to_thread(s3_admin.bucket_exists, storage["bucket"])
    assert_problem(await platform.http.get(path, headers=headers), 404, "not_found")


@pytest.mark.object_store
async def test_an_accessor_reaches_its_own_storage_only(platform: Platform) -> None:
    account = await platform.tenant()
    headers = bearer(account.admin_key)
    a, b = await platform.storage(account), await platform.storage(account)
    created = await platform.http.post(
        f"/v1/storages/{a['storageID']}/accessors",
        json={"mode": "read-write", "name": "trainer"},
        headers=headers,
    )
    assert created.status_code == 201, created.text
    writer = created.json()
    client = s3_as(writer)

    await asyncio.to_thread(put, client, a["bucket"], "w.bin", b"weights")
    assert await asyncio.to_thread(get, client, a["bucket"], "w.bin") == b"weights"
    # The store itself refuses the other storage of the same tenant.
    assert await s3_error(lambda: put(client, b["bucket"], "x", b"x")) == "AccessDenied"
    assert await s3_error(lambda: get(client, b["bucket"], "w.bin")) == "AccessDenied"
    assert await s3_error(lambda: list(client.list_objects(b["bucket"]))) == "AccessDenied"
    assert await s3_error(lambda: client.make_bucket(unique("own").lower())) == "AccessDenied"

    reader = (
        await platform.http.post(
            f"/v1/storages/{a['storageID']}/accessors", json={"mode": "read-only"}, headers=headers
        )
    ).json()
    assert await asyncio.to_thread(get, s3_as(reader), a["bucket"], "w.bin") == b"weights"
    assert await s3_error(lambda: put(s3_as(reader), a["bucket"], "y", b"y")) == "AccessDenied"

    listed = await platform.http.get(f"/v1/storages/{a['storageID']}/accessors", headers=headers)
    assert {x["accessorID"] for x in listed.json()["items"]} == {
        writer["accessorID"],
        reader["accessorID"],
    }
    assert "secretAccessKey" not in listed.text
    assert writer["secretAccessKey"] not in listed.text
    on_volume = await platform.http.post(
        "/v1/storages/nope/accessors", json={"mode": "read-only"}, headers=headers
    )
    assert_problem(on_volume, 404)
    too_soon = await platform.http.post(
        f"/v1/storages/{a['storageID']}/accessors",
        json={"expiresAt": "2020-01-01T00:00:00Z"},
        headers=headers,
    )
    assert_problem(too_soon, 422)


@pytest.mark.object_store
async def test_a_revoked_accessor_stops_working_at_once(platform: Platform) -> None:
    account = await platform.tenant()
    headers = bearer(account.admin_key)
    storage = await platform.storage(account)
    accessor = await platform.http.post(
        f"/v1/storages/{storage['storageID']}/accessors",
        json={"mode": "read-write", "expiresAt": "2099-01-01T00:00:00Z"},
        headers=headers,
    )
    assert_problem(accessor, 422)  # more than a year ahead
    accessor = await platform.http.post(
        f"/v1/storages/{storage['storageID']}/accessors",
        json={"mode": "read-write"},
        headers=headers,
    )
    created = accessor.json()
    client = s3_as(created)
    await asyncio.to_thread(put, client, storage["bucket"], "a", b"1")

    revoked = await platform.http.delete(
        f"/v1/storages/{storage['storageID']}/accessors/{created['accessorID']}", headers=headers
    )
    assert revoked.status_code == 204
    code = await s3_error(lambda: put(client, storage["bucket"], "b", b"2"))
    assert code in {"InvalidAccessKeyId", "AccessDenied"}
    gone = await platform.http.delete(
        f"/v1/storages/{storage['storageID']}/accessors/{created['accessorID']}", headers=headers
    )
    assert_problem(gone, 404)


@pytest.mark.object_store
async def test_the_store_enforces_the_quota(platform: Platform) -> None:
    account = await platform.tenant()
    headers = bearer(account.admin_key)
    storage = await platform.storage(account, size_bytes=2 * MIB)
    uploads = f"/v1/storages/{storage['storageID']}/uploads"
    too_big = await platform.http.post(
        uploads, json={"key": "big", "sizeBytes": 3 * MIB}, headers=headers
    )
    assert_problem(too_big, 422, "quota_exceeded")

    async def presigned_put(key: str, size: int) -> httpx.Response:
        plan = await platform.http.post(uploads, json={"key": key}, headers=headers)
        assert plan.status_code == 200, plan.text
        return await platform.http.put(plan.json()["url"], content=os.urandom(size))

    # One object above the quota: the store refuses it (the URL does not know the size).
    refused = await presigned_put("big", 3 * MIB)
    assert refused.status_code >= 400, refused.text
    assert "QuotaExceeded" in refused.text, refused.text
    assert (await presigned_put("half", 3 * MIB // 2)).status_code == 200

    async def full() -> bool:
        # Together above the quota: refused once the store has counted what is stored.
        response = await presigned_put("more", MIB)
        return response.status_code >= 400 and "QuotaExceeded" in response.text

    await eventually(full, timeout=90, interval=2)


@pytest.mark.object_store
async def test_a_presigned_url_expires(
    platform: Platform, s3_admin: Minio, stack_env: dict[str, str]
) -> None:
    account = await platform.tenant()
    storage = await platform.storage(account)
    await asyncio.to_thread(put, s3_admin, storage["bucket"], "notes.txt", b"hello")
    link = await platform.http.post(
        f"/v1/storages/{storage['storageID']}/downloads",
        json={"key": "notes.txt", "expiresInS": 2},
        headers=bearer(account.admin_key),
    )
    assert link.status_code == 200, link.text
    url = link.json()["url"]
    fresh = await platform.http.get(url)
    assert fresh.status_code == 200
    assert fresh.content == b"hello"
    await asyncio.sleep(3)
    expired = await platform.http.get(url)
    assert expired.status_code == 403, expired.text
    # The same URL was good 3 s ago; MinIO says why it no longer is, RGW does not.
    if stack_env["GPUCLOUD_OBJECT_STORE"] == "minio":
        assert "expired" in expired.text.lower(), expired.text
    else:
        assert "<Code>AccessDenied</Code>" in expired.text, expired.text


@pytest.mark.object_store
async def test_multipart_upload_of_a_large_object(platform: Platform) -> None:
    account = await platform.tenant()
    headers = bearer(account.admin_key)
    storage = await platform.storage(account, size_bytes=512 * MIB)
    base = f"/v1/storages/{storage['storageID']}"
    payload = os.urandom(70 * MIB)
    plan = await platform.http.post(
        f"{base}/uploads", json={"key": "models/llm.safetensors", "sizeBytes": len(payload)},
        headers=headers,
    )  # fmt: skip
    assert plan.status_code == 200, plan.text
    body = plan.json()
    assert body["url"] is None
    assert body["partSizeBytes"] == 64 * MIB
    assert len(body["parts"]) == 2
    size = body["partSizeBytes"]
    parts = []
    for part in body["parts"]:
        number = part["partNumber"]
        chunk = payload[(number - 1) * size : number * size]
        uploaded = await platform.http.put(part["url"], content=chunk)
        assert uploaded.status_code == 200, uploaded.text
        parts.append({"partNumber": number, "etag": uploaded.headers["etag"]})
    complete = f"{base}/uploads/{body['uploadID']}/complete"
    done = await platform.http.post(complete, json={"parts": parts}, headers=headers)
    assert done.status_code == 200, done.text
    assert done.json()["sizeBytes"] == len(payload)

    link = await platform.http.post(
        f"{base}/downloads", json={"key": "models/llm.safetensors"}, headers=headers
    )
    downloaded = await platform.http.get(link.json()["url"])
    assert hashlib.sha256(downloaded.content).digest() == hashlib.sha256(payload).digest()
    assert_problem(await platform.http.post(complete, json={"parts": parts}, headers=headers), 404)

    # An aborted upload cannot be completed.
    second = (
        await platform.http.post(
            f"{base}/uploads", json={"key": "other", "sizeBytes": 100 * MIB}, headers=headers
        )
    ).json()
    aborted = await platform.http.delete(f"{base}/uploads/{second['uploadID']}", headers=headers)
    assert aborted.status_code == 204
    after = await platform.http.post(
        f"{base}/uploads/{second['uploadID']}/complete", json={"parts": parts}, headers=headers
    )
    assert_problem(after, 404)


@pytest.mark.object_store
async def test_an_upload_resumes_with_fresh_urls_for_its_missing_parts(
    platform: Platform,
) -> None:
    account = await platform.tenant()
    headers = bearer(account.admin_key)
    storage = await platform.storage(account, size_bytes=512 * MIB)
    base = f"/v1/storages/{storage['storageID']}"
    payload = os.urandom(130 * MIB)
    plan = (
        await platform.http.post(
            f"{base}/uploads", json={"key": "ckpt.bin", "sizeBytes": len(payload)}, headers=headers
        )
    ).json()
    size = plan["partSizeBytes"]
    assert len(plan["parts"]) == 3
    # The client sent part 1, then was cut off; later it asks for the other two again.
    first = await platform.http.put(plan["parts"][0]["url"], content=payload[:size])
    etags = {1: first.headers["etag"]}
    fresh = await platform.http.post(
        f"{base}/uploads/{plan['uploadID']}/parts", json={"partNumbers": [3, 2]}, headers=headers
    )
    assert fresh.status_code == 200, fresh.text
    assert fresh.json()["key"] == "ckpt.bin"
    assert [part["partNumber"] for part in fresh.json()["parts"]] == [2, 3]
    for part in fresh.json()["parts"]:
        number = part["partNumber"]
        sent = await platform.http.put(
            part["url"], content=payload[(number - 1) * size : number * size]
        )
        etags[number] = sent.headers["etag"]
    parts = [{"partNumber": n, "etag": etags[n]} for n in sorted(etags)]
    done = await platform.http.post(
        f"{base}/uploads/{plan['uploadID']}/complete", json={"parts": parts}, headers=headers
    )
    assert done.status_code == 200, done.text
    assert done.json()["sizeBytes"] == len(payload)
    assert_problem(
        await platform.http.post(
            f"{base}/uploads/nope/parts", json={"partNumbers": [1]}, headers=headers
        ),
        404,
    )


@pytest.mark.object_store
async def test_many_small_objects_are_signed_in_one_call(platform: Platform) -> None:
    account = await platform.tenant()
    headers = bearer(account.admin_key)
    storage = await platform.storage(account, size_bytes=256 * MIB)
    base = f"/v1/storages/{storage['storageID']}"
    payloads = {f"shard/{n:04d}.txt": os.urandom(n + 1) for n in range(50)}
    signed = await platform.http.post(
        f"{base}/upload-urls",
        json={"objects": [{"key": k, "sizeBytes": len(v)} for k, v in payloads.items()]},
        headers=headers,
    )
    assert signed.status_code == 200, signed.text
    assert [u["key"] for u in signed.json()["urls"]] == list(payloads)
    for item in signed.json()["urls"]:
        assert (await platform.http.put(item["url"], content=payloads[item["key"]])).is_success
    links = await platform.http.post(
        f"{base}/download-urls", json={"keys": list(payloads)}, headers=headers
    )
    assert links.status_code == 200, links.text
    for item in links.json()["urls"]:
        assert (await platform.http.get(item["url"])).content == payloads[item["key"]]

    # One part at most per object, and never past the quota: the rest is refused whole.
    too_big = {"objects": [{"key": "a", "sizeBytes": 1}, {"key": "b", "sizeBytes": 65 * MIB}]}
    refused = await platform.http.post(f"{base}/upload-urls", json=too_big, headers=headers)
    assert "'b'" in assert_problem(refused, 422, "validation_failed")["detail"]
    many = {"objects": [{"key": f"k{n}", "sizeBytes": 60 * MIB} for n in range(5)]}
    refused = await platform.http.post(f"{base}/upload-urls", json=many, headers=headers)
    assert_problem(refused, 422, "quota_exceeded")


@pytest.mark.object_store
async def test_listing_by_prefix_a_page_at_a_time(platform: Platform, s3_admin: Minio) -> None:
    account = await platform.tenant()
    headers = bearer(account.admin_key)
    storage = await platform.storage(account)
    keys = [f"data/shard-{i:03}.bin" for i in range(25)] + ["logs/a.txt", "logs/b.txt", "README"]

    def seed() -> None:
        for key in keys:
            put(s3_admin, storage["bucket"], key, b"x")

    await asyncio.to_thread(seed)
    path = f"/v1/storages/{storage['storageID']}/objects"
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"prefix": "data/", "limit": 10}
        if cursor:
            params["cursor"] = cursor
        page = (await platform.http.get(path, params=params, headers=headers)).json()
        seen += [obj["key"] for obj in page["objects"]]
        pages += 1
        cursor = page["nextCursor"]
        if not cursor:
            break
    assert seen == sorted(k for k in keys if k.startswith("data/"))
    assert pages == 3
    top = (await platform.http.get(path, params={"delimiter": "/"}, headers=headers)).json()
    assert top["prefixes"] == ["data/", "logs/"]
    assert [o["key"] for o in top["objects"]] == ["README"]
    folders = (
        await platform.http.get(path, params={"delimiter": "/", "limit": 2}, headers=headers)
    ).json()
    following = (
        await platform.http.get(
            path, params={"delimiter": "/", "limit": 5, "cursor": folders["nextCursor"]},
            headers=headers,
        )
    ).json()  # fmt: skip
    # "README" sorts first; the next page resumes after every key under "data/".
    assert folders["prefixes"] == ["data/"]
    assert following["prefixes"] == ["logs/"]
    assert following["objects"] == []
    assert following["nextCursor"] is None


@pytest.mark.object_store
async def test_a_bucket_holding_objects_needs_force(platform: Platform, s3_admin: Minio) -> None:
    account = await platform.tenant()
    headers = bearer(account.admin_key)
    storage = await platform.storage(account)
    await asyncio.to_thread(put, s3_admin, storage["bucket"], "keep.txt", b"data")
    path = f"/v1/storages/{storage['storageID']}"
    assert_problem(await platform.http.delete(path, headers=headers), 409, "storage_not_empty")
    assert (await platform.http.get(path, headers=headers)).json()["state"] == "ready"

    forced = await platform.http.delete(path, params={"force": "true"}, headers=headers)
    assert forced.status_code in {202, 204}, forced.text

    async def gone() -> bool:
        return (await platform.http.get(path, headers=headers)).status_code == 404

    await eventually(gone, timeout=30)
    assert not await asyncio.to_thread(s3_admin.bucket_exists, storage["bucket"])


@pytest.mark.object_store
async def test_usage_is_sampled_and_published(
    platform: Platform, s3_admin: Minio, kafka: KafkaConnection
) -> None:
    account = await platform.tenant()
    headers = bearer(account.admin_key)
    storage = await platform.storage(account)
    await asyncio.to_thread(put, s3_admin, storage["bucket"], "blob", os.urandom(300_000))
    path = f"/v1/storages/{storage['storageID']}"

    async def counted() -> bool:
        found = (await platform.http.get(path, headers=headers)).json()
        return bool(found["usedBytes"] == 300_000)

    await eventually(counted, timeout=90, interval=1)
    deleted = await platform.http.delete(path, params={"force": "true"}, headers=headers)
    assert deleted.status_code in {202, 204}

    async def closing_sample() -> list[dict[str, Any]] | None:
        records = await read_topic(kafka, STORAGE_USAGE.name, expect=10**9, timeout=3)
        payloads = [json.loads(record.value) for record in records]  # binary mode: the data
        samples = [
            data
            for data in payloads
            if data["storage_id"] == storage["storageID"] and data["tenant_id"] == account.tenant_id
        ]
        return samples if samples and samples[-1]["bytes_used"] == 0 else None

    samples = await eventually(closing_sample, timeout=60, interval=1)
    assert 300_000 in {sample["bytes_used"] for sample in samples}
    assert samples[0]["kind"] == "object"


async def test_a_volume_storage_is_a_claim(platform: Platform, kube: k8s.ApiClient) -> None:
    account = await platform.tenant()
    headers = bearer(account.admin_key)
    storage = await platform.storage(account, kind="volume", size_bytes=10 * 1024**3)
    assert storage["claimName"] == storage_claim_name(storage["storageID"])
    assert storage["storageClass"] == "gpucloud-standard"
    # A class is the operator's to offer: where the bytes live, who shares the disks (L5).
    elsewhere = await platform.http.post(
        "/v1/storages",
        json={"kind": "volume", "sizeBytes": 10 * 1024**3, "storageClass": "local-path"},
        headers=headers,
    )
    problem = assert_problem(elsewhere, 422, "validation_failed")
    assert problem["errors"][0]["loc"] == ["body", "storageClass"]
    assert "choose one of gpucloud-standard" in problem["detail"]
    core = k8s.CoreV1Api(kube)
    namespace = tenant_namespace(account.tenant_id)
    claim = await core.read_namespaced_persistent_volume_claim(storage["claimName"], namespace)
    assert claim.spec.resources.requests["storage"] == str(10 * 1024**3)
    assert claim.spec.storage_class_name == "gpucloud-standard"
    assert claim.spec.access_modes == ["ReadWriteOnce"]

    path = f"/v1/storages/{storage['storageID']}"
    # Kubernetes resizes bound claims only: an unbound one is refused clearly.
    unbound = await platform.http.patch(path, json={"sizeBytes": 20 * 1024**3}, headers=headers)
    assert_problem(unbound, 409, "resize_refused")
    volume = unique("pv")
    # A statically provisioned volume, as an operator makes for a class without a provisioner.
    persistent_volume: Any = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume},
        "spec": {
            "capacity": {"storage": "40Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "gpucloud-standard",
            "hostPath": {"path": f"/srv/gpucloud-test/{volume}"},
            "claimRef": {"namespace": namespace, "name": storage["claimName"]},
        },
    }
    await core.create_persistent_volume(persistent_volume)
    try:

        async def bound() -> bool:
            found = await core.read_namespaced_persistent_volume_claim(
                storage["claimName"], namespace
            )
            return bool(found.status.phase == "Bound")

        await eventually(bound, timeout=60)
        shrink = await platform.http.patch(path, json={"sizeBytes": 1024**3}, headers=headers)
        assert_problem(shrink, 422)
        grown = await platform.http.patch(path, json={"sizeBytes": 20 * 1024**3}, headers=headers)
        assert grown.status_code == 200, grown.text
        claim = await core.read_namespaced_persistent_volume_claim(storage["claimName"], namespace)
        assert claim.spec.resources.requests["storage"] == str(20 * 1024**3)
        no_accessors = await platform.http.post(
            f"{path}/accessors", json={"mode": "read-only"}, headers=headers
        )
        assert_problem(no_accessors, 422)

        deleted = await platform.http.delete(path, headers=headers)
        assert deleted.status_code == 204, deleted.text

        async def claim_gone() -> bool:
            claims = await core.list_namespaced_persistent_volume_claim(namespace)
            return all(c.metadata.name != storage["claimName"] for c in claims.items)

        await eventually(claim_gone, timeout=30)
    finally:
        await core.delete_persistent_volume(volume)


async def test_storages_attached_to_an_instance(platform: Platform, kube: k8s.ApiClient) -> None:
    """Contract with the instances service: a volume storage mounts as its claim; an
    object storage arrives as S3 credentials in env, revoked when the instance stops."""
    account = await platform.tenant()
    other = await platform.tenant()
    headers = bearer(account.admin_key)
    spec = await platform.spec(gpus=1)
    bucket = await platform.storage(account)
    other_bucket = await platform.storage(account)
    volume = await platform.storage(account, kind="volume", size_bytes=4 * 1024**3)
    foreign = await platform.storage(other)
    template = {
        "volumes": [{"name": "data", "mountPath": "/data", "storageID": volume["storageID"]}]
    }

    async def start(body: dict[str, Any]) -> httpx.Response:
        return await platform.start_instance(
            account, {"image": "trainer", "specName": spec, **body}
        )

    unmounted = await start({"storageIDs": [volume["storageID"]]})
    assert_problem(unmounted, 422)
    mounted_bucket = await start(
        {
            "template": {
                "volumes": [{"name": "b", "mountPath": "/b", "storageID": bucket["storageID"]}]
            }
        }
    )
    assert_problem(mounted_bucket, 422)
    assert_problem(await start({"storageIDs": [foreign["storageID"]]}), 422)

    started = await start({"storageIDs": [bucket["storageID"]], "template": template})
    assert started.status_code == 202, started.text
    instance_id = started.json()["instanceID"]
    core = k8s.CoreV1Api(kube)
    namespace = tenant_namespace(account.tenant_id)

    async def pod() -> Any:
        pods = await core.list_namespaced_pod(namespace)
        return next((p for p in pods.items if p.metadata.name == f"inst-{instance_id}"), None)

    created = await eventually(pod, timeout=60)
    volumes = {v.name: v for v in created.spec.volumes}
    assert volumes["data"].persistent_volume_claim.claim_name == volume["claimName"]
    secret_name = storage_secret_name(bucket["storageID"], instance_id)
    env_from = created.spec.containers[0].env_from
    assert [(e.prefix, e.secret_ref.name) for e in env_from] == [
        (None, secret_name),
        ("STORAGE_" + bucket["storageID"].upper().replace("-", "_") + "_", secret_name),
    ]
    secret = await core.read_namespaced_secret(secret_name, namespace)
    values = {k: base64.b64decode(v).decode() for k, v in secret.data.items()}
    assert values["BUCKET"] == bucket["bucket"]
    credentials = {
        "accessorID": values["AWS_ACCESS_KEY_ID"],
        "secretAccessKey": values["AWS_SECRET_ACCESS_KEY"],
        "endpoint": values["AWS_ENDPOINT_URL"],
        "region": values["AWS_REGION"],
    }
    client = s3_as(credentials)
    await asyncio.to_thread(put, client, bucket["bucket"], "checkpoint", b"step-1")
    assert await s3_error(lambda: put(client, other_bucket["bucket"], "x", b"x")) == "AccessDenied"
    listed = await platform.http.get(
        f"/v1/storages/{bucket['storageID']}/accessors", headers=headers
    )
    assert [a["instanceID"] for a in listed.json()["items"]] == [instance_id]
    described = await platform.http.get(f"/v1/storages/{bucket['storageID']}", headers=headers)
    assert described.json()["attachedTo"] == [instance_id]

    for attached in (bucket, volume):
        refused = await platform.http.delete(
            f"/v1/storages/{attached['storageID']}", params={"force": "true"}, headers=headers
        )
        assert_problem(refused, 409, "storage_attached")

    stopped = await platform.http.delete(f"/v1/gpu-instances/{instance_id}", headers=headers)
    assert stopped.status_code == 202, stopped.text

    async def released() -> bool:
        secrets = await core.list_namespaced_secret(namespace)
        return all(s.metadata.name != secret_name for s in secrets.items)

    await eventually(released, timeout=60)
    code = await s3_error(lambda: put(client, bucket["bucket"], "after", b"x"))
    assert code in {"InvalidAccessKeyId", "AccessDenied"}
    deleted = await platform.http.delete(
        f"/v1/storages/{bucket['storageID']}", params={"force": "true"}, headers=headers
    )
    assert deleted.status_code in {202, 204}, deleted.text


async def test_concurrent_resizes_cannot_pass_the_quota(platform: Platform) -> None:
    """Each resize alone fits the tenant's 1 TB; all of them at once do not. However
    they interleave, they pass as if they came one by one: two fit, the rest are
    refused, and the sizes the tenant ends up with stay within the quota."""
    account = await platform.tenant()
    headers = bearer(account.admin_key)
    storages = [await platform.storage(account, size_bytes=MIB) for _ in range(6)]
    asked = 10**12 // 3

    async def resize(storage: dict[str, Any]) -> int:
        path = f"/v1/storages/{storage['storageID']}"
        response = await platform.http.patch(path, json={"sizeBytes": asked}, headers=headers)
        assert response.status_code in {200, 422}, response.text
        return response.status_code

    answers = await asyncio.gather(*(resize(storage) for storage in storages))
    listed = await platform.http.get("/v1/storages", params={"limit": 100}, headers=headers)
    total = sum(item["sizeBytes"] for item in listed.json()["items"])
    assert total <= 10**12, answers
    # Two thirds of a TB and five MiB fit; a third third does not. Refusing everyone
    # would keep the quota too, and was what racing checks did on a slow machine.
    assert answers.count(200) == 2, answers


async def test_concurrent_creates_pass_as_if_one_by_one(platform: Platform) -> None:
    """Five storages of a third of the tenant's 1 TB asked for at once: three fit."""
    account = await platform.tenant()
    asked = 10**12 // 3

    async def create() -> int:
        body = {"storageID": unique("st"), "kind": "object", "sizeBytes": asked}
        response = await platform.post_as_tenant(account, "/v1/storages", body)
        assert response.status_code in {201, 422}, response.text
        return response.status_code

    answers = await asyncio.gather(*(create() for _ in range(5)))
    assert answers.count(201) == 3, answers


def _signed_by(url: str) -> str:
    """The access key id a presigned URL names (X-Amz-Credential=<key>/<scope>)."""
    credential = parse_qs(urlparse(url).query)["X-Amz-Credential"][0]
    return credential.split("/")[0]


@pytest.mark.object_store
async def test_presigned_urls_are_signed_per_storage_and_can_be_revoked(
    platform: Platform, s3_admin: Minio, stack_env: dict[str, str]
) -> None:
    account = await platform.tenant()
    headers = bearer(account.admin_key)
    first, second = await platform.storage(account), await platform.storage(account)
    await asyncio.to_thread(put, s3_admin, first["bucket"], "notes.txt", b"hello")

    async def link(storage: dict[str, Any]) -> str:
        made = await platform.http.post(
            f"/v1/storages/{storage['storageID']}/downloads",
            json={"key": "notes.txt", "expiresInS": 3600},
            headers=headers,
        )
        assert made.status_code == 200, made.text
        url: str = made.json()["url"]
        return url

    url = await link(first)
    signer = _signed_by(url)
    service_key = stack_service_env("storage")["GPUCLOUD_S3_ACCESS_KEY"]
    assert signer not in {
        stack_env["GPUCLOUD_S3_ACCESS_KEY"],
        service_key,
    }  # neither root nor the service's
    assert _signed_by(await link(first)) == signer  # one key per storage...
    assert _signed_by(await link(second)) != signer  # ...and another for another storage
    assert (await platform.http.get(url)).status_code == 200

    revoked = await platform.http.post(
        f"/v1/storages/{first['storageID']}/revoke-urls", headers=headers
    )
    assert revoked.status_code == 204, revoked.text
    refused = await platform.http.get(url)  # valid for another hour, void now
    assert refused.status_code == 403, refused.text
    fresh = await link(first)
    assert _signed_by(fresh) != signer
    assert (await platform.http.get(fresh)).content == b"hello"


async def test_the_storage_service_is_no_minio_root(stack_env: dict[str, str]) -> None:
    """Its own user reaches the platform's buckets and nothing else (MinIO: on Ceph,
    RGW's super user is the cluster's admin keyring, which no service holds)."""
    own = stack_service_env("storage")
    assert own["GPUCLOUD_S3_ACCESS_KEY"] != stack_env["GPUCLOUD_S3_ACCESS_KEY"]
    for name in ("instances", "metering", "monitoring", "gateway"):
        assert "GPUCLOUD_S3_SECRET_KEY" not in stack_service_env(name), name
    client = Minio(
        urlparse(own["GPUCLOUD_S3_ENDPOINT"]).netloc, access_key=own["GPUCLOUD_S3_ACCESS_KEY"],
        secret_key=own["GPUCLOUD_S3_SECRET_KEY"], secure=False,
    )  # fmt: skip
    bucket = unique("outside").lower()
    with pytest.raises(S3Error) as denied:
        await asyncio.to_thread(client.make_bucket, bucket)
    assert denied.value.code == "AccessDenied"


@pytest.mark.object_store
async def test_the_storage_service_cannot_list_the_stores_users(
    stack_env: dict[str, str],
) -> None:
    """Its identity reaches the admin calls it makes and not the store's directory of
    users: on MinIO its policy names three admin actions; on Ceph its RGW caps are
    `buckets`, `users` and `user-policy`, without `metadata` (review M5)."""
    own = stack_service_env("storage")
    endpoint = urlparse(own["GPUCLOUD_S3_ENDPOINT"])
    credentials = Credentials(own["GPUCLOUD_S3_ACCESS_KEY"], own["GPUCLOUD_S3_SECRET_KEY"])
    if stack_env["GPUCLOUD_OBJECT_STORE"] == "minio":
        provider = StaticProvider(credentials.access_key, credentials.secret_key)
        admin = MinioAdmin(endpoint=endpoint.netloc, credentials=provider, secure=False)
        with pytest.raises(MinioAdminException) as denied:
            await asyncio.to_thread(admin.user_list)
        assert "Status: 403" in str(denied.value), denied.value
        return
    status = await asyncio.to_thread(_rgw_admin_get, endpoint, credentials, "/admin/metadata/user")
    assert status == 403
    # What it does need answers: the statistics of its own buckets.
    stats = await asyncio.to_thread(
        _rgw_admin_get, endpoint, credentials, "/admin/bucket",
        {"stats": "true", "uid": credentials.access_key},
    )  # fmt: skip
    assert stats == 200


def _rgw_admin_get(
    endpoint: Any, credentials: Credentials, path: str, query: dict[str, str] | None = None
) -> int:
    """The status of one SigV4-signed RGW admin-ops GET, as the storage service signs it."""
    url = urlsplit(f"{endpoint.scheme}://{endpoint.netloc}{path}")
    url = url._replace(query=urlencode(query or {}, quote_via=quote, safe="-_.~"))
    now = datetime.now(UTC)
    headers: dict[str, str | list[str] | tuple[str]] = {
        "Host": url.netloc, "x-amz-date": now.strftime("%Y%m%dT%H%M%SZ"),
        "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
    }  # fmt: skip
    signed = sign_v4_s3(
        method="GET", url=url, region="us-east-1", headers=headers, credentials=credentials,
        content_sha256="UNSIGNED-PAYLOAD", date=now,
    )  # fmt: skip
    flat = {
        name: value if isinstance(value, str) else ",".join(value) for name, value in signed.items()
    }
    return int(httpx.get(url.geturl(), headers=flat, timeout=30).status_code)


async def test_an_instance_started_again_keeps_its_new_credentials_when_the_old_end_arrives_late(
    platform: Platform, kube: k8s.ApiClient, kafka: KafkaConnection
) -> None:
    """A start again is a new stay, whose storage credentials are its own: the end of the
    last stay, heard late or again (a redelivery), releases nothing of it."""
    account = await platform.tenant()
    headers = bearer(account.admin_key)
    spec = await platform.spec(gpus=1)
    bucket = await platform.storage(account)
    started = await platform.start_instance(
        account, {"image": "trainer", "specName": spec, "storageIDs": [bucket["storageID"]]}
    )
    assert started.status_code == 202, started.text
    instance_id = started.json()["instanceID"]
    path = f"/v1/gpu-instances/{instance_id}"
    core = k8s.CoreV1Api(kube)
    namespace = tenant_namespace(account.tenant_id)
    secret_name = storage_secret_name(bucket["storageID"], instance_id)

    async def state_is(wanted: str) -> dict[str, Any] | None:
        got: dict[str, Any] = (await platform.http.get(path, headers=headers)).json()
        return got if got["state"] == wanted else None

    async def secret() -> dict[str, str] | None:
        try:
            found = await core.read_namespaced_secret(secret_name, namespace)
        except k8s.ApiException:
            return None
        return {k: base64.b64decode(v).decode() for k, v in found.data.items()}

    await eventually(lambda: state_is("running"), timeout=60)
    assert (await platform.http.post(f"{path}/stop", headers=headers)).status_code == 202
    stopped = await eventually(lambda: state_is("stopped"), timeout=60)
    await eventually(lambda: _gone(secret), timeout=60)  # the first stay's end released it
    assert (await platform.http.post(f"{path}/start", headers=headers)).status_code == 202
    await eventually(lambda: state_is("running"), timeout=60)
    values = await eventually(secret, timeout=60)

    # The first stay's `stopped`, delivered again.
    end = next(n for n, step in enumerate(stopped["history"], 1) if step["state"] == "stopped")
    late = InstanceStateChanged(
        instance_id=instance_id, tenant_id=account.tenant_id, spec_name=spec,
        gpu_type=stopped["gpuType"], gpu_count=stopped["gpuCount"], state="stopped",
        previous_state="stopping", sequence=end, at=stopped["history"][end - 1]["at"],
    )  # fmt: skip
    broker = create_broker(kafka, client_id=unique("test-redelivery"))
    await broker.start()
    try:
        await publish_event(broker, INSTANCE_LIFECYCLE, late, source="/tests",
                            event_id=f"{account.tenant_id}/{instance_id}#{end}")  # fmt: skip
    finally:
        await broker.stop()
    await consumed(kafka, "gpucloud-storage", INSTANCE_LIFECYCLE.name)  # it was processed...
    assert await secret() == values  # ...and changed nothing
    credentials = {"accessorID": values["AWS_ACCESS_KEY_ID"],
                   "secretAccessKey": values["AWS_SECRET_ACCESS_KEY"],
                   "endpoint": values["AWS_ENDPOINT_URL"], "region": values["AWS_REGION"]}  # fmt: skip
    await asyncio.to_thread(put, s3_as(credentials), bucket["bucket"], "after-restart", b"ok")
    await platform.http.post(f"{path}/stop", headers=headers)


async def _gone(read: Any) -> bool:
    return await read() is None
