"""The `gpucloud` command's journeys beyond one resource at a time: declaring instances
and services in a file, SSH from ~/.ssh/config, copies that skip what is already there,
deleting a storage, and where a stored key may be sent. The installed console script,
run as a subprocess against the real stack."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s
from minio import Minio

from .cli_support import Cli, Ran, cli_for, ready_tenant, ssh_instance, ssh_through
from .platform import MIB, Platform
from .support import eventually, loopback_server


def said(ran: Ran) -> str:
    """What the command said on stderr, as one line: notes are folded to the terminal."""
    return " ".join(ran.err.split())


def write_stack(path: Path, *documents: dict[str, Any]) -> Path:
    """A YAML file of several documents (JSON is YAML)."""
    path.write_text("\n---\n".join(json.dumps(document) for document in documents) + "\n")
    return path


async def test_apply_creates_then_leaves_unchanged_then_configures(
    platform: Platform, tmp_path: Path
) -> None:
    account = await platform.tenant()
    spec = await platform.spec()
    await ready_tenant(platform, account)
    cli = cli_for(tmp_path, platform)
    assert (await cli.login(account.admin_key)).code == 0
    notebook = {"kind": "instance", "instanceID": "notebook", "image": "busybox",
                "specName": spec, "template": {"ports": [{"port": 8888, "isPublic": True}]}}  # fmt: skip
    chat = {"kind": "service", "serviceID": "chat", "image": "hashicorp/http-echo",
            "specName": spec, "port": 5678, "readinessPath": "/"}  # fmt: skip
    train = {"kind": "job", "jobID": "train", "image": "busybox", "specName": spec,
             "command": ["sh", "-c", "echo trained"]}  # fmt: skip
    stack = write_stack(tmp_path / "stack.yaml", notebook, chat, train)

    first = (await cli.ok("-o", "json", "apply", "-f", str(stack))).json()
    assert [(r["kind"], r["name"], r["result"]) for r in first] == [
        ("instance", "notebook", "created"),
        ("service", "chat", "created"),
        ("job", "train", "created"),
    ]
    created = (await cli.ok("-o", "json", "instances", "get", "notebook")).json()
    job = (await cli.ok("-o", "json", "jobs", "get", "train")).json()
    assert job["command"] == ["sh", "-c", "echo trained"]

    # The same file again: nothing is made twice, nothing changes.
    again = await cli.ok("apply", "-f", str(stack))
    assert again.out.splitlines()[0].startswith("instance/notebook unchanged ("), again
    assert again.out.splitlines()[1].startswith("service/chat unchanged ("), again
    assert again.out.splitlines()[2].startswith("job/train unchanged ("), again
    listed = (await cli.ok("-o", "json", "instances", "ls")).json()
    assert [(i["instanceID"], i["createdAt"]) for i in listed] == [
        ("notebook", created["createdAt"])
    ]
    jobs = (await cli.ok("-o", "json", "jobs", "ls")).json()
    assert [(j["jobID"], j["createdAt"]) for j in jobs] == [("train", job["createdAt"])]
    write_stack(stack, notebook, chat, {**train, "image": "busybox:1.36"})
    told = await cli.ok("apply", "-f", str(stack))
    assert (
        "job/train: the file's image differs from the job's; a job is not changed in place: "
        "give the file's job another jobID"
    ) in said(told), told

    # A new image and more replicas: the service is patched with those two alone (and
    # the ceiling its floor now passes); the instance, which has no update, is left and
    # the difference told.
    write_stack(
        stack,
        {**notebook, "image": "busybox:1.36"},
        {**chat, "image": "hashicorp/http-echo:1.0", "minReplicas": 2},
    )
    configured = await cli.ok("apply", "-f", str(stack))
    assert configured.out.splitlines()[0].startswith("instance/notebook unchanged ("), configured
    assert configured.out.splitlines()[1].startswith(
        "service/chat configured: image, maxReplicas, minReplicas ("
    ), configured
    assert (
        "instance/notebook: the file's image differs from the instance's; an instance is not "
        "changed in place: stop and delete it, then apply again"
    ) in said(configured), configured
    assert (await cli.ok("-o", "json", "instances", "get", "notebook")).json()["image"] == "busybox"
    service = (await cli.ok("-o", "json", "services", "get", "chat")).json()
    assert (service["image"], service["minReplicas"], service["maxReplicas"]) == (
        "hashicorp/http-echo:1.0", 2, 2,
    )  # fmt: skip
    assert service["revision"] == 2
    settled = (await cli.ok("-o", "json", "apply", "-f", str(stack))).json()
    assert [r["result"] for r in settled] == ["unchanged", "unchanged"]

    # What the API fixes at creation is refused before anything is written.
    other_spec = await platform.spec()
    write_stack(stack, {**chat, "specName": other_spec, "minReplicas": 3})
    fixed = await cli.run("apply", "-f", str(stack))
    assert fixed.code == 1, fixed
    [line] = fixed.err.strip().splitlines()
    assert f"service/chat cannot change specName '{spec}' to '{other_spec}' in place" in line
    assert (await cli.ok("-o", "json", "services", "get", "chat")).json()["minReplicas"] == 2

    # A field the API does not know: its 422 names the field, and says why.
    typo = write_stack(tmp_path / "typo.yaml", {**chat, "serviceID": "typo", "comand": ["x"]})
    refused = await cli.run("apply", "-f", str(typo))
    assert refused.code == 1, refused
    assert "(validation_failed, HTTP 422)" in refused.err, refused
    assert "  comand: Extra inputs are not permitted" in refused.err, refused


async def test_apply_refuses_a_bad_file_in_one_line_and_sends_nothing(
    platform: Platform, tmp_path: Path
) -> None:
    account = await platform.tenant()
    await ready_tenant(platform, account)
    cli = cli_for(tmp_path, platform)
    assert (await cli.login(account.admin_key)).code == 0
    good = {"kind": "instance", "instanceID": "fine", "image": "busybox", "specName": "h100-1"}
    (tmp_path / "broken.yaml").write_text("kind: instance\nimage: [busybox\n")
    (tmp_path / "list.yaml").write_text("- kind: instance\n")
    (tmp_path / "empty.yaml").write_text("# nothing\n")
    write_stack(tmp_path / "pod.yaml", good, {"kind": "pod", "name": "x"})
    write_stack(tmp_path / "kindless.yaml", {"image": "busybox"})
    write_stack(tmp_path / "nameless.yaml", {"kind": "service", "image": "x", "port": 80})
    write_stack(tmp_path / "twice.yaml", good, good)

    expected = {
        "pod.yaml": "error: pod.yaml, document 2: unknown kind 'pod'; apply takes kind: "
        "instance, job or service",
        "broken.yaml": "error: broken.yaml: not valid YAML: expected ',' or ']', but got "
        "'<stream end>' (line 3, column 1)",
        "list.yaml": "error: list.yaml: a document must be a mapping of fields, not list",
        "empty.yaml": "error: empty.yaml: no documents; each needs a kind: instance, job or "
        "service",
        "kindless.yaml": "error: kindless.yaml: no kind; give kind: instance, job or service",
        "nameless.yaml": "error: nameless.yaml: a service needs its name as serviceID, so "
        "that the next apply finds it",
        "twice.yaml": "error: twice.yaml, document 2: instance/fine is declared twice",
        "missing.yaml": "error: cannot read missing.yaml: No such file or directory",
    }
    for name, line in expected.items():
        ran = await cli.run("apply", "-f", name)
        assert (ran.code, ran.err.splitlines()) == (1, [line]), (name, ran)
        assert not ran.out
    # The valid document beside the unknown kind was not started either.
    assert (await cli.ok("-o", "json", "instances", "ls")).json() == []


async def test_ssh_config_prints_a_host_block_that_ssh_uses_through_the_tunnel(
    platform: Platform, kube: k8s.ApiClient, tmp_path: Path
) -> None:
    """The printed block, appended to an ssh config, is all `ssh gpc-<id>` needs: its
    ProxyCommand is this CLI's tunnel, which reaches a real SSH server (asyncssh)
    listening on the pod's loopback address through the gateway."""
    async with ssh_instance(platform, kube) as (account, instance_id):
        cli = cli_for(tmp_path, platform)
        assert (await cli.login(account.admin_key, profile="work")).code == 0
        printed = await cli.ok("instances", "ssh-config", instance_id, "--user", "ada")
        lines = printed.out.splitlines()
        assert lines[1:6] == [
            f"Host gpc-{instance_id}",
            f"  HostName {instance_id}",
            "  User ada",
            "  Port 2222",
            f"  HostKeyAlias gpucloud-{instance_id}",
        ], printed
        keyword, _, proxy = lines[6].strip().partition(" ")
        assert keyword == "ProxyCommand"
        # The CLI itself, pinned to the profile in use, tunnelling to the SSH port.
        assert shlex.split(proxy)[1:] == [
            "-m", "gpucloud_cli.main", "--profile", "work", "tunnel", instance_id,
            "--port", "2222",
        ]  # fmt: skip

        config = tmp_path / "ssh_config"
        config.write_text(
            printed.out + "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
            "  BatchMode yes\n  LogLevel ERROR\n"
        )
        ran = await ssh_through(config, f"gpc-{instance_id}", "nvidia-smi -L", cli.env)
        assert (ran.code, ran.out) == (0, "ada ran: nvidia-smi -L\n"), ran

        unknown = await cli.run("instances", "ssh-config", "i-nope")
        assert unknown.code == 1
        assert "instance 'i-nope' does not exist" in unknown.err, unknown


def _objects(s3: Minio, bucket: str) -> dict[str, tuple[str, Any]]:
    """Each object's ETag and last-modified time, straight from MinIO."""
    return {
        str(o.object_name): (str(o.etag), o.last_modified)
        for o in s3.list_objects(bucket, recursive=True)
    }


async def test_cp_sends_only_what_changed_and_a_rerun_sends_nothing(
    platform: Platform, s3_admin: Minio, tmp_path: Path
) -> None:
    account = await platform.tenant()
    storage = await platform.storage(account, size_bytes=512 * MIB)
    name, bucket = storage["storageID"], storage["bucket"]
    cli = cli_for(tmp_path, platform)
    assert (await cli.login(account.admin_key)).code == 0
    tree = tmp_path / "dataset"
    (tree / "shard").mkdir(parents=True)
    for index in range(3):
        (tree / "shard" / f"{index}.txt").write_bytes(os.urandom(1000 + index))
    # Above one part (64 MiB): a multipart ETag, not the file's MD5.
    (tree / "weights.bin").write_bytes(os.urandom(70 * MIB))

    sent = await cli.ok("cp", "-r", str(tree), f"gpc://{name}/data/")
    assert "4 files" in said(sent), sent
    before = await asyncio.to_thread(_objects, s3_admin, bucket)
    assert before["data/weights.bin"][0].endswith("-2"), before

    rerun = await cli.ok("cp", "-r", str(tree), f"gpc://{name}/data/")
    assert f"0 files, 0 B → gpc://{name}/data/; 4 unchanged, skipped" in said(rerun), rerun
    assert await asyncio.to_thread(_objects, s3_admin, bucket) == before

    # One file's bytes change (not its size) and one is new: those two go, alone.
    (tree / "shard" / "1.txt").write_bytes(os.urandom(1001))
    (tree / "shard" / "new.txt").write_bytes(b"new")
    changed = await cli.ok("cp", "-r", str(tree), f"gpc://{name}/data/")
    assert "2 files" in said(changed), changed
    assert "3 unchanged, skipped" in said(changed), changed
    after = await asyncio.to_thread(_objects, s3_admin, bucket)
    assert {key for key in after if after[key] != before.get(key)} == {
        "data/shard/1.txt", "data/shard/new.txt",
    }  # fmt: skip

    one = await cli.ok("cp", str(tree / "weights.bin"), f"gpc://{name}/data/")
    assert "unchanged: skipped 1 file" in said(one), one
    assert await asyncio.to_thread(_objects, s3_admin, bucket) == after

    # Downloads skip too: a rerun rewrites no file, and a changed file is fetched back.
    back = tmp_path / "back"
    fetched = await cli.ok("cp", "-r", f"gpc://{name}/data/", str(back))
    assert "(5 files" in said(fetched), fetched
    files = [path for path in back.rglob("*") if path.is_file()]
    written = {path: path.stat().st_mtime_ns for path in files}
    refetched = await cli.ok("cp", "-r", f"gpc://{name}/data/", str(back))
    assert "(0 files, 0 B; 5 unchanged, skipped)" in said(refetched), refetched
    assert {path: path.stat().st_mtime_ns for path in files} == written
    (back / "shard" / "0.txt").write_bytes(b"edited here")
    restored = await cli.ok("cp", "-r", f"gpc://{name}/data/", str(back))
    assert "(1 files" in said(restored), restored
    assert (back / "shard" / "0.txt").read_bytes() == (tree / "shard" / "0.txt").read_bytes()
    single = await cli.ok("cp", f"gpc://{name}/data/weights.bin", str(back))
    assert "unchanged: skipped 1 file" in said(single), single


async def test_storages_rm_asks_then_deletes_the_storage(
    platform: Platform, s3_admin: Minio, tmp_path: Path
) -> None:
    account = await platform.tenant()
    storage = await platform.storage(account)
    name, bucket = storage["storageID"], storage["bucket"]
    cli = cli_for(tmp_path, platform)
    assert (await cli.login(account.admin_key)).code == 0
    (tmp_path / "a.txt").write_text("a")
    await cli.ok("cp", str(tmp_path / "a.txt"), f"gpc://{name}/a.txt")

    one_object = await cli.run("storages", "rm", f"gpc://{name}/a.txt", "--yes")
    assert one_object.code == 2, one_object
    assert "the API deletes whole storages only" in one_object.err
    declined = await cli.run("storages", "rm", name, stdin="n\n")
    assert declined.code == 1, declined
    assert f"Delete storage {name}?" in declined.err
    holding = await cli.run("storages", "rm", name, "--yes")
    assert holding.code == 1, holding
    assert holding.err.splitlines() == [
        f"error: storage {name} holds objects: `gpucloud storages rm {name} --force` deletes "
        "it with them"
    ]
    assert (await cli.ok("-o", "json", "storages", "get", name)).json()["state"] == "ready"
    assert await asyncio.to_thread(s3_admin.bucket_exists, bucket)

    deleted = await cli.ok("storages", "rm", f"gpc://{name}", "--force", stdin="y\n")
    assert f"Delete storage {name} and every object in it?" in deleted.err
    assert f"storage {name} deleted" in deleted.err

    async def gone() -> bool:
        missing = await cli.run("storages", "get", name)
        return missing.code == 1 and "not_found" in missing.err

    await eventually(gone, timeout=30)
    assert not await asyncio.to_thread(s3_admin.bucket_exists, bucket)


async def test_a_stored_key_is_sent_only_to_the_endpoint_it_was_stored_for(
    platform: Platform, tmp_path: Path
) -> None:
    account = await platform.tenant()
    cli = cli_for(tmp_path, platform)
    assert (await cli.login(account.admin_key)).code == 0
    heard: list[str] = []

    async def whoami(request: web.Request) -> web.Response:
        heard.append(request.headers.get("Authorization", ""))
        return web.json_response({"role": "tenant-admin", "tenantID": "elsewhere",
                                  "userID": "u", "keyID": "k", "scopes": []})  # fmt: skip

    app = web.Application()
    app.router.add_get("/v1/whoami", whoami)
    async with loopback_server(app) as port:
        elsewhere = f"http://127.0.0.1:{port}"
        for profile in ([], ["-p", "default"]):
            cli.env["GPUCLOUD_ENDPOINT"] = elsewhere
            refused = await cli.run(*profile, "whoami")
            assert refused.code == 1, refused
            assert refused.err.splitlines() == [
                f"error: GPUCLOUD_ENDPOINT is {elsewhere}, but profile 'default' holds a key "
                f"for {cli.endpoint} and sends it nowhere else: set GPUCLOUD_API_KEY too, or "
                f"`gpucloud login --endpoint {elsewhere}`"
            ]
        assert heard == []

        # The endpoint it was stored for, however spelled, still gets it.
        cli.env["GPUCLOUD_ENDPOINT"] = cli.endpoint.upper().replace("HTTP", "http") + "/"
        same = await cli.ok("-o", "json", "whoami")
        assert same.json()["tenantID"] == account.tenant_id

        # Another endpoint with a key of its own: that key goes, not the stored one.
        cli.env.update(GPUCLOUD_ENDPOINT=elsewhere, GPUCLOUD_API_KEY="gpc_for_elsewhere")
        assert (await cli.ok("-o", "json", "whoami")).json()["tenantID"] == "elsewhere"
        assert heard == ["Bearer gpc_for_elsewhere"]


@pytest.mark.parametrize(
    "endpoint",
    ["http://192.0.2.10:8000", "http://gpu.example.com", "http://[2001:db8::1]:8000",
     "http://127.0.0.1.example.com"],
)  # fmt: skip
async def test_plain_http_is_refused_unless_the_endpoint_is_loopback(
    endpoint: str, tmp_path: Path
) -> None:
    """Refused before any connection: nothing here leaves the machine, no name is looked up."""
    cli = Cli(tmp_path, endpoint)
    login = await cli.login("gpc_would_cross_in_clear")
    assert login.code == 1, login
    https = (
        f"error: refusing {endpoint}: an API key would cross the network in clear; use "
        "https:// (http:// only to a loopback address: 127.0.0.0/8, ::1, localhost)"
    )
    assert login.err.splitlines() == [https], login
    assert not cli.config.exists()

    cli.env.update(GPUCLOUD_ENDPOINT=endpoint, GPUCLOUD_API_KEY="gpc_would_cross_in_clear")
    assert (await cli.run("whoami")).err.splitlines() == [https]

    # A profile stored before this check is refused too, and logout still forgets it.
    del cli.env["GPUCLOUD_ENDPOINT"], cli.env["GPUCLOUD_API_KEY"]
    cli.config.write_text(json.dumps({"current": "old", "profiles": {
        "old": {"endpoint": endpoint, "apiKey": "gpc_would_cross_in_clear"}}}))  # fmt: skip
    assert (await cli.run("instances", "ls")).err.splitlines() == [https]
    forgotten = await cli.ok("logout")
    assert "the key may still be valid on the server" in forgotten.err
    assert json.loads(cli.config.read_text())["profiles"] == {}


@pytest.mark.parametrize(
    "endpoint",
    ["http://127.0.0.1:9", "http://127.42.0.7:9", "http://localhost:9", "http://[::1]:9"],
)
async def test_plain_http_to_loopback_is_accepted(endpoint: str, tmp_path: Path) -> None:
    cli = Cli(tmp_path, endpoint)
    cli.env.update(GPUCLOUD_ENDPOINT=endpoint, GPUCLOUD_API_KEY="gpc_x")
    ran = await cli.run("whoami")
    assert ran.code == 1
    assert ran.err.startswith(f"error: cannot reach the API at {endpoint}"), ran


async def test_an_endpoint_that_is_not_a_url_is_named(tmp_path: Path) -> None:
    cli = Cli(tmp_path, "127.0.0.1:8000")
    for endpoint in ("127.0.0.1:8000", "ftp://127.0.0.1"):
        ran = await cli.run("login", "-e", endpoint, "--api-key-stdin", stdin="gpc_x\n")
        assert ran.err.splitlines() == [
            f"error: {endpoint!r} is not an https:// URL (https://gpu.example.com)"
        ], ran
