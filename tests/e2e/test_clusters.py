"""Clusters as the platform admin sees them, through the gateway and the CLI: the
home cluster (the local stack's embedded one) and the second one `up` registers,
with their health and GPUs; the second removed and registered again at run time,
its kubeconfig sealed at rest; a kubeconfig that cannot be used refused with the
reason; a cordoned or draining cluster taking no new workloads; and a tenant kept
out of all of it. Placement across the two is test_placement.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pymongo import AsyncMongoClient

from .cli_support import cli_for
from .clusters_support import HOME, SECOND, kubeconfig_of, second_cluster_kubeconfig
from .platform import Platform, bearer
from .support import eventually, unique


@pytest.fixture
async def home_active(platform: Platform) -> AsyncIterator[None]:
    """Whatever a test does to the home cluster's state, it is active afterwards."""
    yield
    await platform.http.post(f"/v1/clusters/{HOME}/uncordon", headers=platform.admin)


async def test_the_home_cluster_is_listed_with_its_health_and_gpus(platform: Platform) -> None:
    async def looked_at() -> dict[str, Any] | None:
        answer = await platform.http.get(f"/v1/clusters/{HOME}", headers=platform.admin)
        assert answer.status_code == 200, answer.text
        cluster: dict[str, Any] = answer.json()
        return cluster if cluster["health"] else None

    cluster = await eventually(looked_at, timeout=40, interval=1)
    assert (cluster["region"], cluster["zones"], cluster["home"], cluster["state"]) == (
        "local-1", ["zone-a", "zone-b"], True, "active",
    )  # fmt: skip
    health = cluster["health"]
    assert health["reachable"] is True
    assert health["version"].startswith("v1.")
    assert health["readyNodes"] >= 1
    assert {"zone-a", "zone-b"} <= set(health["zones"])
    [h100] = [
        g for g in health["gpus"]
        if (g["gpuType"], g["resource"]) == ("NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu")
    ]  # fmt: skip
    assert h100["capacity"] >= 8
    listed = (await platform.http.get("/v1/clusters", headers=platform.admin)).json()
    assert HOME in [c["name"] for c in listed]
    assert all("kubeconfig" not in c and "sealedKubeconfig" not in c for c in listed)


@pytest.mark.parametrize(
    ("kubeconfig", "status", "says"),
    [
        (lambda: "clusters: [", 422, "not YAML"),
        (
            lambda: kubeconfig_of("instances", server="https://127.0.0.1:1"),
            422,
            "cannot be reached",
        ),
        # The monitoring service's own: it may read nodes and pods, and nothing more.
        (
            lambda: kubeconfig_of("monitoring", server=_by_name()),
            422,
            "lacks rights the platform needs",
        ),
        (lambda: kubeconfig_of("instances"), 409, f"registered as '{HOME}'"),
        # The same cluster by another address is still the same cluster.
        (lambda: kubeconfig_of(None, server=_by_name()), 409, f"registered as '{HOME}'"),
    ],
    ids=["not-yaml", "unreachable", "read-only", "same-address", "same-cluster"],
)
async def test_a_kubeconfig_that_cannot_be_used_is_refused_with_the_reason(
    platform: Platform, kubeconfig: Any, status: int, says: str
) -> None:
    name = unique("c")
    answer = await platform.http.post(
        "/v1/clusters",
        headers=platform.admin,
        json={"name": name, "region": "local-2", "zones": ["zone-c"], "kubeconfig": kubeconfig()},
    )
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert says in answer.json()["detail"]
    if status == 422 and "rights" in says:
        assert "create pods" in answer.json()["missing"]
    assert (
        await platform.http.get(f"/v1/clusters/{name}", headers=platform.admin)
    ).status_code == 404


def _by_name() -> str:
    """The embedded API server by its DNS name (its certificate names localhost)."""
    server: str = yaml.safe_load(kubeconfig_of("instances"))["clusters"][0]["cluster"]["server"]
    return server.replace("127.0.0.1", "localhost")


async def test_a_cordoned_or_draining_cluster_takes_no_new_workloads(
    platform: Platform, home_active: None
) -> None:
    account = await platform.tenant()
    # A100s are the home cluster's alone: with it cordoned, no cluster takes them.
    spec = await platform.spec(gpus=1, gpu_type="NVIDIA-A100-SXM4-40GB")
    user = bearer(account.admin_key)
    start = {"specName": spec, "image": "busybox", "template": {"command": ["sleep", "3600"]}}
    for verb, state in (("cordon", "cordoned"), ("drain", "draining")):
        set_to = await platform.http.post(f"/v1/clusters/{HOME}/{verb}", headers=platform.admin)
        assert (set_to.status_code, set_to.json()["state"]) == (200, state), set_to.text
        refused = await platform.http.post("/v1/gpu-instances", headers=user, json=start)
        assert refused.status_code == 409, refused.text
        assert refused.json()["detail"] == (
            f"no cluster takes new workloads now: cluster '{HOME}' is {state}"
        )
        job = {"specName": spec, "image": "busybox", "command": ["true"]}
        assert (await platform.http.post("/v1/jobs", headers=user, json=job)).status_code == 409
    back = await platform.http.post(f"/v1/clusters/{HOME}/uncordon", headers=platform.admin)
    assert back.json()["state"] == "active"
    started = await platform.http.post("/v1/gpu-instances", headers=user, json=start)
    assert started.status_code in (201, 202), started.text
    assert started.json()["cluster"] == HOME  # where it was placed, shown to its tenant


async def test_the_home_cluster_cannot_be_deleted_and_an_unknown_one_is_not_found(
    platform: Platform,
) -> None:
    kept = await platform.http.delete(f"/v1/clusters/{HOME}", headers=platform.admin)
    assert kept.status_code == 409
    assert "cannot be deleted" in kept.json()["detail"]
    for method, path in (
        ("GET", "/v1/clusters/nowhere"),
        ("DELETE", "/v1/clusters/nowhere"),
        ("POST", "/v1/clusters/nowhere/cordon"),
    ):
        answer = await platform.http.request(method, path, headers=platform.admin)
        assert answer.status_code == 404, (method, path, answer.text)


async def test_a_tenant_cannot_see_or_change_clusters(platform: Platform) -> None:
    """Even a tenant's admin, the most a tenant's key can be."""
    headers = bearer((await platform.tenant()).admin_key)
    for method, path in (
        ("GET", "/v1/clusters"),
        ("GET", f"/v1/clusters/{HOME}"),
        ("POST", f"/v1/clusters/{HOME}/cordon"),
        ("DELETE", f"/v1/clusters/{HOME}"),
    ):
        answer = await platform.http.request(method, path, headers=headers)
        assert answer.status_code == 403, (method, path, answer.text)
    registered = await platform.http.post(
        "/v1/clusters", headers=headers,
        json={"name": "mine", "region": "r", "zones": ["z"], "kubeconfig": "x"},
    )  # fmt: skip
    assert registered.status_code == 403
    state = (await platform.http.get(f"/v1/clusters/{HOME}", headers=platform.admin)).json()
    assert state["state"] == "active"


async def test_the_operator_lists_cordons_and_is_told_why_a_registration_fails_in_the_cli(
    platform: Platform, tmp_path: Path, home_active: None
) -> None:
    cli = cli_for(tmp_path, platform)
    assert (await cli.login(platform.admin_key)).code == 0
    table = await cli.ok("clusters", "ls")
    assert f"{HOME} (home)" in table.out
    assert "active" in table.out
    cordoned = (await cli.ok("-o", "json", "clusters", "cordon", HOME)).json()
    assert cordoned["state"] == "cordoned"
    assert "cordoned" in (await cli.ok("clusters", "get", HOME)).out
    assert (await cli.ok("-o", "json", "clusters", "uncordon", HOME)).json()["state"] == "active"

    unreachable = tmp_path / "unreachable.yaml"
    unreachable.write_text(kubeconfig_of("instances", server="https://127.0.0.1:1"))
    refused = await cli.run(
        "clusters", "register", "east", "--region", "us-east", "--zone", "us-east-1a",
        "--kubeconfig", str(unreachable),
    )  # fmt: skip
    assert refused.code != 0
    assert "cannot be reached" in refused.err
    kept = await cli.run("clusters", "rm", HOME, "--yes")
    assert kept.code != 0
    assert "cannot be deleted" in kept.err


async def looked_at(platform: Platform, name: str) -> dict[str, Any] | None:
    answer = await platform.http.get(f"/v1/clusters/{name}", headers=platform.admin)
    if answer.status_code != 200:
        return None
    cluster: dict[str, Any] = answer.json()
    return cluster if cluster["health"] and cluster["health"]["reachable"] else None


async def test_the_second_cluster_is_registered_by_up_with_gpus_the_first_lacks(
    platform: Platform,
) -> None:
    second = await eventually(lambda: looked_at(platform, SECOND), timeout=40, interval=1)
    assert (second["region"], second["zones"], second["home"], second["state"]) == (
        "local-2", ["zone-c"], False, "active",
    )  # fmt: skip
    assert {(g["gpuType"], g["capacity"]) for g in second["health"]["gpus"]} == {
        ("NVIDIA-B200", 16), ("NVIDIA-H100-80GB-HBM3", 8),
    }  # fmt: skip
    home = await eventually(lambda: looked_at(platform, HOME), timeout=40, interval=1)
    assert "NVIDIA-B200" not in {g["gpuType"] for g in home["health"]["gpus"]}


async def test_a_cluster_removed_and_registered_again_at_run_time_is_looked_at_anew(
    platform: Platform, mongo: AsyncMongoClient[dict[str, Any]], tmp_path: Path
) -> None:
    """Through the CLI, as the operator does: `rm`, then `register` with the file."""
    cli = cli_for(tmp_path, platform)
    assert (await cli.login(platform.admin_key)).code == 0
    kubeconfig = tmp_path / "local-2.yaml"
    kubeconfig.write_text(second_cluster_kubeconfig())
    register = (
        "clusters", "register", SECOND, "--region", "local-2", "--zone", "zone-c",
        "--kubeconfig", str(kubeconfig),
    )  # fmt: skip
    try:
        twice = await cli.run(*register)
        assert twice.code != 0
        assert f"cluster '{SECOND}' is registered" in twice.err
        removed = await cli.ok("clusters", "rm", SECOND, "--yes")
        assert f"cluster {SECOND} removed" in removed.err
        gone = await platform.http.get(f"/v1/clusters/{SECOND}", headers=platform.admin)
        assert gone.status_code == 404
        again = (await cli.ok("-o", "json", *register)).json()
        # Checked as it was registered: it answered, so its first look is shown at once.
        assert (again["name"], again["state"], again["health"]["reachable"]) == (
            SECOND, "active", True,
        )  # fmt: skip
    finally:  # the stack keeps its second cluster whatever happened here
        await platform.http.post(
            "/v1/clusters", headers=platform.admin,
            json={"name": SECOND, "region": "local-2", "zones": ["zone-c"],
                  "kubeconfig": second_cluster_kubeconfig()},
        )  # fmt: skip
    # Sealed at rest: the store holds neither the token nor the kubeconfig's text.
    stored = await mongo["gpucloud_instances"]["clusters"].find_one({"_id": SECOND})
    assert stored is not None
    token = yaml.safe_load(second_cluster_kubeconfig())["users"][0]["user"]["token"]
    assert token not in str(stored)
    assert stored["sealed_kubeconfig"].startswith("gAAAA")  # a Fernet token
    # Looked at again by the leader's next resync, with no restart.
    checked = stored["status"]["checked_at"]

    async def looked_at_again() -> bool:
        now = await mongo["gpucloud_instances"]["clusters"].find_one({"_id": SECOND})
        return now is not None and now["status"]["checked_at"] > checked

    await eventually(looked_at_again, timeout=40, interval=1)


def _hostile(user: dict[str, Any], *, server: str | None = None) -> str:
    """The stack's own kubeconfig of the second cluster, its user replaced by `user`."""
    config: dict[str, Any] = yaml.safe_load(second_cluster_kubeconfig())
    for entry in config["users"]:
        entry["user"] = user
    if server is not None:
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = server
    return yaml.safe_dump(config)


@pytest.mark.parametrize("route", ["register", "storage"])
async def test_a_kubeconfig_that_would_run_read_or_dial_elsewhere_is_refused_unread(
    platform: Platform, tmp_path: Path, route: str
) -> None:
    """Review N2: a registered kubeconfig runs no command (the canary file is never
    made, and nothing of the service's environment comes back), reads no file of the
    service's, and reaches no server outside what the operator allows."""
    canary = tmp_path / "ran"
    token_file = Path(kubeconfig_of("instances")).parent  # any local path will do
    hostile = {
        "exec": _hostile({"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "sh",
            "args": ["-c", f"touch {canary}; env >&2; exit 1"]}}),
        "token file": _hostile({"tokenFile": str(token_file)}),
        "outside": _hostile({"token": "x"}, server="https://198.18.0.1:6443"),
        "plain http": _hostile({"token": "x"}, server="http://127.0.0.1:1"),
    }  # fmt: skip
    for why, kubeconfig in hostile.items():
        name = unique("hostile")
        if route == "register":
            answer = await platform.http.post(
                "/v1/clusters", headers=platform.admin,
                json={"name": name, "region": "r", "zones": ["z"], "kubeconfig": kubeconfig},
            )  # fmt: skip
        else:
            answer = await platform.http.put(
                f"/v1/storage-clusters/{name}", headers=platform.admin,
                json={"kubeconfig": kubeconfig},
            )  # fmt: skip
        assert answer.status_code == 422, (why, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        assert "GPUCLOUD_" not in answer.text, why  # nothing of the environment
    assert not canary.exists()
