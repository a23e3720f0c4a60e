"""The `gpucloud` command as people run it: the installed console script, run as a
subprocess against the real stack, with its own config file."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s

from gpucloud_libs.naming import tenant_namespace

from .cli_support import Cli, cli_for, ready_tenant, ssh_instance
from .platform import H100, MIB, Platform, bearer
from .support import eventually, unique

REPO = Path(__file__).resolve().parents[2]


def sha256(path: Path) -> str:
    with path.open("rb") as source:
        return hashlib.file_digest(source, "sha256").hexdigest()


def write_random(path: Path, size: int) -> None:
    with path.open("wb") as sink:
        for _ in range(size // MIB):
            sink.write(os.urandom(MIB))
        sink.write(os.urandom(size % MIB))


async def test_a_tenant_runs_an_instance_and_a_job_from_login_to_stop(
    platform: Platform, tmp_path: Path
) -> None:
    account, other = await platform.tenant(), await platform.tenant()
    spec = await platform.spec(gpus=1)
    cli = cli_for(tmp_path, platform)
    await ready_tenant(platform, account)

    logged_in = await cli.login(account.admin_key)
    assert logged_in.code == 0, logged_in
    assert f"tenant {account.tenant_id}" in logged_in.err
    # The key is kept where only its owner can read it.
    assert stat.S_IMODE(cli.config.stat().st_mode) == 0o600
    assert (await cli.ok("-o", "json", "whoami")).json()["tenantID"] == account.tenant_id

    started = await cli.ok(
        "-o", "json", "instances", "create", "--spec", spec, "--image", "busybox",
        "--port", "8888", "--env", "MODE=dev",
    )  # fmt: skip
    instance = started.json()
    assert instance["state"] == "running", instance
    listed = (await cli.ok("-o", "json", "instances", "ls")).json()
    assert [i["instanceID"] for i in listed] == [instance["instanceID"]]
    table = (await cli.ok("instances", "ls")).out
    assert instance["instanceID"] in table
    assert "running" in table
    # What a next start may still take: the running instance's GPU is held.
    held = (await cli.ok("-o", "json", "quota")).json()
    assert (held["gpusInUse"], held["workloadsInUse"]) == (1, 1), held
    assert f"1 of {held['maxGpus']}" in (await cli.ok("quota")).out
    link = await cli.ok("instances", "open", instance["instanceID"], "--print-url")
    assert link.out.startswith("http"), link
    # Its log, the last lines of the simulated workload's.
    log = await cli.ok("instances", "logs", instance["instanceID"], "--tail", "3")
    assert "epoch" in log.out, log
    assert len(log.out.strip().splitlines()) <= 3, log

    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        f"image: busybox\nspecName: {spec}\ncommand: [python, train.py]\n"
        "env:\n  - {name: GPUCLOUD_SIM_RUN_FOR, value: 2s}\n"
    )
    followed = await cli.run("jobs", "submit", str(job_file), "--id", "train-1", timeout=120)
    assert followed.code == 0, followed
    # The run's log is printed as it comes, then the outcome.
    assert "epoch 3/3 loss=1.5532" in followed.out.splitlines()
    assert "job train-1 succeeded" in followed.err
    failing = tmp_path / "failing.yaml"
    failing.write_text(
        f"image: busybox\nspecName: {spec}\nenv:\n  - {{name: GPUCLOUD_SIM_RUN_FOR, value: 1s}}\n"
        "  - {name: GPUCLOUD_SIM_EXIT_CODE, value: '3'}\n"
    )
    failed = await cli.run("jobs", "submit", str(failing), "--id", "broken-1", timeout=120)
    assert failed.code == 1, failed
    assert "job broken-1 failed" in failed.err
    assert "exit code 3" in failed.err
    # A finished run's log, read again later: its last lines.
    log = await cli.ok("jobs", "logs", "train-1", "--tail", "3")
    assert log.out.splitlines() == [
        "epoch 3/3 loss=1.5532",
        "saved checkpoint to /ckpt/final",
        "done",
    ], log
    jobs = {job["jobID"]: job["state"] for job in (await cli.ok("-o", "json", "jobs", "ls")).json()}
    assert jobs == {"train-1": "succeeded", "broken-1": "failed"}
    # A job's GPUs are all it holds, nodes included; every time says its zone.
    wide = tmp_path / "wide.yaml"
    wide.write_text(
        f"image: busybox\nspecName: {spec}\nnodes: 2\n"
        "env:\n  - {name: GPUCLOUD_SIM_RUN_FOR, value: 1s}\n"
    )
    assert (await cli.run("jobs", "submit", str(wide), "--id", "wide-1", timeout=120)).code == 0
    [row] = [line for line in (await cli.ok("jobs", "ls")).out.splitlines() if "wide-1" in line]
    assert re.search(r"2 x \S+ \(2 nodes\)", row), row
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", row), row

    async def billed() -> dict[str, Any] | None:
        report = (await cli.ok("-o", "json", "usage", "--group-by", "job")).json()
        rows = {row["key"]: row for row in report["rows"]}
        return rows.get("train-1") if rows.get("train-1", {}).get("gpuMicroseconds") else None

    # Billed exactly what the job's record says its run held: bound to its end.
    [run] = (await cli.ok("-o", "json", "jobs", "get", "train-1")).json()["runs"]
    held = _us(run["endedAt"]) - _us(run["scheduledAt"])
    assert (await eventually(billed, timeout=30))["gpuMicroseconds"] == held
    # Grouped by user, a row names the person, not their id.
    by_user = (await cli.ok("usage", "--group-by", "user")).out
    assert f"Admin <admin@{account.tenant_id}.test>" in by_user, by_user
    assert account.admin_user_id not in by_user, by_user

    # Another tenant's profile sees none of it.
    assert (await cli.login(other.admin_key, profile="other")).code == 0
    for args in (("instances", "get", instance["instanceID"]), ("jobs", "get", "train-1")):
        refused = await cli.run("-p", "other", *args)
        assert refused.code == 1, refused
        assert "not_found" in refused.err, refused
    assert (await cli.ok("-p", "other", "-o", "json", "instances", "ls")).json() == []

    await cli.ok("profiles", "use", "default")
    stopped = await cli.ok("-o", "json", "instances", "stop", instance["instanceID"], "--wait")
    assert stopped.json()["state"] == "stopped"
    # A second stop is harmless: the record stays, still stopped.
    again = await cli.ok("-o", "json", "instances", "stop", instance["instanceID"])
    assert again.json()["state"] == "stopped"
    await asyncio.sleep(1)  # the controller would have carried out a deletion by now
    kept = await cli.ok("-o", "json", "instances", "get", instance["instanceID"])
    assert kept.json()["state"] == "stopped"
    # Started again: the same instance, a second stay on a node, billed as its own.
    restarted = await cli.ok("-o", "json", "instances", "start", instance["instanceID"])
    assert restarted.json()["state"] == "running", restarted
    assert [t["state"] for t in restarted.json()["history"]][-5:] == [
        "stopped",
        "pending",
        "scheduled",
        "ready",
        "running",
    ]
    again_running = await cli.ok("-o", "json", "instances", "start", instance["instanceID"])
    assert again_running.json()["revision"] == restarted.json()["revision"]  # nothing to do
    stopped = await cli.ok("-o", "json", "instances", "stop", instance["instanceID"], "--wait")
    history = stopped.json()["history"]

    async def billed_both_stays() -> bool:
        report = (await cli.ok("-o", "json", "usage", "--group-by", "instance")).json()
        rows = {row["key"]: row for row in report["rows"]}
        row = rows.get(instance["instanceID"], {})
        return bool(row.get("gpuMicroseconds") == _held_us(history))

    assert len([t for t in history if t["state"] == "scheduled"]) == 2
    await eventually(billed_both_stays, timeout=30)
    deleted = await cli.ok("-o", "json", "instances", "delete", instance["instanceID"])
    assert deleted.json()["instanceID"] == instance["instanceID"]


def _held_us(history: list[dict[str, Any]]) -> int:
    """The microseconds an instance's history says it held its GPUs: each stay from
    `scheduled` to the first state after it that holds none."""
    holding = {"scheduled", "ready", "running", "stopping"}
    held, since = 0, None
    for step in history:
        if step["state"] in holding and since is None:
            since = _us(step["at"])
        elif step["state"] not in holding and since is not None:
            held, since = held + _us(step["at"]) - since, None
    assert since is None, "still holding GPUs"
    return held


async def test_errors_are_one_clear_line_and_a_non_zero_exit(
    platform: Platform, tmp_path: Path
) -> None:
    account = await platform.tenant()
    cli = cli_for(tmp_path, platform)

    not_logged_in = await cli.run("instances", "ls")
    assert not_logged_in.code == 1
    assert not_logged_in.err.startswith("error: not logged in"), not_logged_in

    wrong = await cli.login("gpc_not_a_real_key")
    assert wrong.code == 1, wrong
    assert "unauthenticated" in wrong.err, wrong
    assert not cli.config.exists()  # a refused key is not stored

    assert (await cli.login(account.admin_key)).code == 0
    unknown = await cli.run("instances", "get", "i-nope")
    assert unknown.code == 1
    assert unknown.err.strip().splitlines() == [
        "error: Not found (not_found, HTTP 404): instance 'i-nope' does not exist"
    ], unknown
    assert "Traceback" not in unknown.err

    nowhere = Cli(tmp_path / "nowhere", "http://127.0.0.1:9")
    nowhere.env.update(GPUCLOUD_ENDPOINT="http://127.0.0.1:9", GPUCLOUD_API_KEY="gpc_x")
    unreachable = await nowhere.run("whoami")
    assert unreachable.code == 1
    assert "cannot reach the API at http://127.0.0.1:9" in unreachable.err

    # A refused field is named, with the API's message for it.
    bad_port = await cli.run(
        "instances", "create", "--spec", "h100-1", "--image", "x", "--port", "70000"
    )
    assert bad_port.code == 1, bad_port
    assert "(validation_failed, HTTP 422)" in bad_port.err, bad_port
    assert "  template.ports[0].port: Input should be less than or equal to 65535" in (
        bad_port.err
    ), bad_port

    both_local = await cli.run("cp", "a", "b")
    assert both_local.code == 2
    assert "one side must be local" in both_local.err


async def test_the_operator_onboards_a_customer_who_then_finds_the_priced_spec(
    platform: Platform, tmp_path: Path
) -> None:
    operator = cli_for(tmp_path / "operator", platform)
    assert (await operator.login(platform.admin_key)).code == 0
    spec, tenant_id = unique("cli-spec"), unique("t-cli")
    await operator.ok("specs", "create", spec, "--gpu-type", H100, "--gpus", "2")
    assert spec in (await operator.ok("specs", "ls")).out
    typo = await operator.run("prices", "set", "2.50", "--spec", f"{spec}-typo")
    assert typo.code == 1, typo  # refused by the API, which names the field
    assert f"specName: no spec named '{spec}-typo'" in typo.err, typo
    priced = await operator.ok("-o", "json", "prices", "set", "2.50", "--spec", spec)
    assert priced.json()["amount"] == "2.50"
    # A price set to come may be withdrawn; the one in effect stays.
    next_year = f"{datetime.now(UTC).year + 1}-01-01"
    scheduled = await operator.ok(
        "-o", "json", "prices", "set", "3.75", "--spec", spec, "--from", next_year
    )
    assert scheduled.json()["effectiveFrom"].startswith(next_year)
    kept = await operator.run("prices", "rm", priced.json()["priceID"], "--yes")
    assert kept.code == 1, kept
    assert "add a new price to replace it" in kept.err
    await operator.ok("prices", "rm", scheduled.json()["priceID"], "--yes")
    remaining = (await operator.ok("-o", "json", "prices", "ls")).json()
    assert [p["amount"] for p in remaining if p["specName"] == spec] == ["2.50"]
    created = await operator.ok(
        "tenants", "create", tenant_id, "--name", "CLI Ltd", "--max-gpus", "4",
        "--max-instances", "2", "--admin-email", f"admin@{tenant_id}.test",
        "--admin-name", "First Admin",
    )  # fmt: skip
    platform.tenants.append(tenant_id)
    listed = (await operator.ok("-o", "json", "tenants", "ls")).json()
    assert [t["name"] for t in listed if t["tenantID"] == tenant_id] == ["CLI Ltd"]
    key = created.out.strip().splitlines()[-1]
    assert key.startswith("gpc_"), created
    assert "shown this once" in created.err

    customer = cli_for(tmp_path / "customer", platform)
    assert (await customer.login(key)).code == 0
    offered = (await customer.ok("-o", "json", "offer")).json()
    [row] = [o for o in offered if o["specName"] == spec]
    assert row["gpuNum"] == 2, row
    # How many would start now, in each zone with the spec's GPUs.
    nodes = (await platform.http.get("/v1/nodes", headers=platform.admin)).json()
    zones = {n["zone"] for n in nodes if n["gpuType"] == H100 and n["health"] == "healthy"}
    assert set(row["freeNow"]) == zones, row
    assert all(isinstance(count, int) and count >= 0 for count in row["freeNow"].values())
    table = (await customer.ok("offer")).out
    assert "FREE NOW" in table
    # The operator adds a second admin; the tenant's admin adds a user of their own.
    second = f"second@{tenant_id}.test"
    await operator.ok("users", "add", second, "--name", "Second Admin", "--role",
                      "tenant-admin", "--tenant", tenant_id)  # fmt: skip
    operator_may_not = await operator.run("users", "add", f"op@{tenant_id}.test", "--name",
                                          "Op", "--role", "platform-admin", "--tenant", tenant_id)  # fmt: skip
    assert operator_may_not.code == 1, operator_may_not
    assert "tenant-admin or tenant-user" in operator_may_not.err, operator_may_not
    await customer.ok("users", "add", f"ada@{tenant_id}.test", "--name", "Ada")
    members = (await customer.ok("-o", "json", "users", "ls")).json()
    assert sorted((u["name"], u["role"]) for u in members) == [
        ("Ada", "tenant-user"),
        ("First Admin", "tenant-admin"),
        ("Second Admin", "tenant-admin"),
    ]
    seen = (await operator.ok("-o", "json", "users", "ls", "--tenant", tenant_id)).json()
    assert sorted(u["email"] for u in seen) == sorted(u["email"] for u in members)
    withdrawn = await operator.ok("specs", "delete", spec, "--yes")
    assert f"spec {spec} deleted" in withdrawn.err
    assert spec not in (await operator.ok("specs", "ls")).out


async def test_the_operator_quarantines_and_releases_a_node(
    platform: Platform, tmp_path: Path
) -> None:
    cli = cli_for(tmp_path, platform)
    assert (await cli.login(platform.admin_key)).code == 0
    nodes = (await cli.ok("-o", "json", "fleet", "ls")).json()
    idle = next(n for n in nodes if n["health"] == "healthy" and n["gpusInUse"] == 0)["node"]
    asked = await cli.ok("fleet", "quarantine", idle, "--reason", "fan replacement")
    assert idle in asked.out

    async def health(wanted: str) -> dict[str, Any] | None:
        found = (await cli.ok("-o", "json", "fleet", "ls")).json()
        view: dict[str, Any] = next(n for n in found if n["node"] == idle)
        return view if view["health"] == wanted else None

    quarantined = await eventually(lambda: health("quarantined"), timeout=30, interval=1)
    assert quarantined["healthReasons"] == ["quarantined by an operator: fan replacement"]
    await cli.ok("fleet", "release", idle)
    await eventually(lambda: health("healthy"), timeout=30, interval=1)
    reasonless = await cli.run("fleet", "quarantine", idle)
    assert reasonless.code == 2
    assert "--reason" in reasonless.err


async def test_ssh_reaches_an_instance_through_the_gateway_tunnel(
    platform: Platform, kube: k8s.ApiClient, tmp_path: Path
) -> None:
    """`gpucloud ssh` runs the system's ssh with `gpucloud tunnel` as its ProxyCommand; the
    tunnel is a WebSocket through the gateway to the instance's undeclared-public port,
    where a real SSH server (asyncssh) listens on the pod's loopback address."""
    async with ssh_instance(platform, kube) as (account, instance_id):
        cli = cli_for(tmp_path, platform)
        assert (await cli.login(account.admin_key)).code == 0
        quiet = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                 "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"]  # fmt: skip
        ran = await cli.ok("ssh", instance_id, "--user", "ada", "--", *quiet, "nvidia-smi -L")
        assert ran.out == "ada ran: nvidia-smi -L\n", ran

        unknown = await cli.run("ssh", "i-nope", "--", *quiet, "true")
        assert unknown.code == 1
        assert "instance 'i-nope' does not exist" in unknown.err, unknown
        no_port = await cli.run("tunnel", instance_id, "--port", "2223")
        assert no_port.code == 1
        assert "has no TCP port 2223" in no_port.err, no_port

        # Another tenant's key, or a wrong one, opens nothing.
        other = await platform.tenant()
        outsider = cli_for(tmp_path / "outsider", platform)
        assert (await outsider.login(other.admin_key)).code == 0
        refused = await outsider.run("tunnel", instance_id)
        assert refused.code == 1
        assert "not_found" in refused.err, refused
        config = json.loads(outsider.config.read_text())
        for profile in config["profiles"].values():
            profile["apiKey"] = "gpc_nope_nope"
        outsider.config.write_text(json.dumps(config))
        wrong = await outsider.run("tunnel", instance_id)
        assert wrong.code == 1
        assert "unauthenticated" in wrong.err, wrong


async def test_cp_moves_a_large_file_and_resumes_an_interrupted_upload(
    platform: Platform, tmp_path: Path
) -> None:
    account = await platform.tenant()
    storage = (await platform.storage(account, size_bytes=1024 * MIB))["storageID"]
    cli = cli_for(tmp_path, platform)
    assert (await cli.login(account.admin_key)).code == 0
    big = tmp_path / "model.bin"
    write_random(big, 200 * MIB)

    await cli.ok("cp", str(big), f"gpc://{storage}/models/", timeout=300)
    await cli.ok("cp", f"gpc://{storage}/models/model.bin", str(tmp_path / "back.bin"))
    assert sha256(tmp_path / "back.bin") == sha256(big)

    # One part at a time, cut off with Ctrl-C once a part is in, then run again.
    journals = tmp_path / "state" / "uploads"
    upload = await cli.start("cp", "-j", "1", str(big), f"gpc://{storage}/again.bin")

    async def a_part_is_in() -> bool:
        states = [json.loads(p.read_text()) for p in journals.glob("*.json")]
        return any(state["parts"] for state in states)

    await eventually(a_part_is_in, timeout=60, interval=0.05)
    upload.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(upload.communicate(), 60)
    assert upload.returncode == 130, err
    assert "run the same command again to resume" in err.decode()

    resumed = await cli.ok("cp", str(big), f"gpc://{storage}/again.bin", timeout=300)
    assert "resuming again.bin:" in resumed.err
    assert "of 4 parts already sent" in resumed.err
    assert not list(journals.glob("*.json"))  # a finished upload leaves no journal
    await cli.ok("cp", f"gpc://{storage}/again.bin", str(tmp_path / "again.bin"))
    assert sha256(tmp_path / "again.bin") == sha256(big)


async def test_cp_copies_ten_thousand_small_files_both_ways(
    platform: Platform, tmp_path: Path
) -> None:
    account = await platform.tenant()
    storage = (await platform.storage(account, size_bytes=64 * MIB))["storageID"]
    cli = cli_for(tmp_path, platform)
    assert (await cli.login(account.admin_key)).code == 0
    tree = tmp_path / "dataset"
    files = {}
    for n in range(10_000):
        path = tree / f"shard-{n // 1000}" / f"{n:05d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        files[path.relative_to(tree).as_posix()] = data = os.urandom(16 + n % 64)
        path.write_bytes(data)

    sent = await cli.ok("cp", "-r", str(tree), f"gpc://{storage}/data/", timeout=400)
    assert "10000 files" in sent.err
    listed = await cli.ok("-o", "json", "storages", "objects", f"gpc://{storage}/data/shard-3/")
    assert len(listed.json()) == 1000
    back = tmp_path / "back"
    await cli.ok("cp", "-r", f"gpc://{storage}/data/", str(back), timeout=400)
    received = {
        path.relative_to(back).as_posix(): path.read_bytes()
        for path in back.rglob("*")
        if path.is_file()
    }
    assert received == files


async def test_the_cli_installs_as_one_command(tmp_path: Path) -> None:
    """`uv tool install ./cli` on its own: the CLI needs no other package of the repo."""
    env = {**os.environ, "UV_TOOL_DIR": str(tmp_path / "tools"),
           "UV_TOOL_BIN_DIR": str(tmp_path / "bin")}  # fmt: skip
    install = await asyncio.create_subprocess_exec(
        "python3", "-m", "uv", "tool", "install", "--quiet", str(REPO / "cli"), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(install.communicate(), 240)
    assert install.returncode == 0, output.decode()
    installed = Cli(tmp_path, "http://127.0.0.1:9")
    ran = await asyncio.create_subprocess_exec(
        str(tmp_path / "bin" / "gpucloud"), "completion", "bash", env=installed.env,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    script, _ = await ran.communicate()
    assert ran.returncode == 0
    assert "_GPUCLOUD_COMPLETE=bash_complete" in script.decode()


def _us(stamp: str) -> int:
    """An API time as microseconds since the epoch."""
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


async def test_the_catalog_templates_services_and_a_logout_that_revokes(
    platform: Platform, kube: k8s.ApiClient, tmp_path: Path
) -> None:
    """What a dstack or SkyPilot user reaches for first: what can be rented and at
    what price, starting a catalog app by name, services, and a logout that leaves no
    working key behind."""
    account = await platform.tenant(max_gpus=8, max_instances=4)
    spec = await platform.spec()
    price = {"meter": "gpu_hour", "specName": spec, "amount": "2.50"}
    assert (await platform.http.post("/v1/prices", json=price, headers=platform.admin)).is_success
    _, _, key = await platform.member(account, role="tenant-admin")
    await ready_tenant(platform, account)
    cli = cli_for(tmp_path, platform)
    assert (await cli.login(key)).code == 0

    offered = {o["specName"]: o for o in (await cli.ok("-o", "json", "offer")).json()}
    assert offered[spec]["pricePerHour"] == "$2.50/h"
    assert offered[spec]["gpuNum"] == 1
    listed = {t["templateID"] for t in (await cli.ok("-o", "json", "templates")).json()}
    assert {"jupyter", "ssh-devbox", "vllm-openai"} <= listed

    # A template that reads a public key says so, and takes it from a file.
    keyless = await cli.run("instances", "create", "--spec", spec, "--template", "ssh-devbox")
    assert keyless.code == 2, keyless
    assert "--public-key" in keyless.err
    private_key = tmp_path / "id_ed25519"
    private_key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n")
    leaked = await cli.run("instances", "create", "--spec", spec, "--template", "ssh-devbox",
                           "--public-key", str(private_key))  # fmt: skip
    assert leaked.code == 2, leaked
    assert "a private key never leaves this machine" in leaked.err
    public_key = tmp_path / "id_ed25519.pub"
    public_key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDevBoxKeyForTheTest dev@laptop\n")
    box = (await cli.ok("-o", "json", "instances", "create", "--spec", spec, "--template",
                        "ssh-devbox", "--public-key", str(public_key))).json()  # fmt: skip
    notebook = (await cli.ok("-o", "json", "instances", "create", "--spec", spec,
                             "--template", "jupyter")).json()  # fmt: skip
    core = k8s.CoreV1Api(kube)
    namespace = tenant_namespace(account.tenant_id)
    [box_container] = (
        await core.read_namespaced_pod(f"inst-{box['instanceID']}", namespace)
    ).spec.containers
    assert {e.name: e.value for e in box_container.env}[
        "PUBLIC_KEY"
    ] == public_key.read_text().strip()
    assert [p.container_port for p in box_container.ports] == [2222]
    [lab] = (
        await core.read_namespaced_pod(f"inst-{notebook['instanceID']}", namespace)
    ).spec.containers
    template = (await platform.http.get("/v1/templates/jupyter", headers=bearer(key))).json()
    assert (lab.command, lab.args) == (template["command"], template["args"])
    for instance in (box, notebook):
        await cli.ok("instances", "stop", instance["instanceID"])

    created = (await cli.ok("-o", "json", "services", "create", "chat", "--spec", spec,
                            "--template", "vllm-openai")).json()  # fmt: skip
    assert created["port"] == 8000
    assert [s["serviceID"] for s in (await cli.ok("-o", "json", "services", "ls")).json()] == [
        "chat"
    ]

    async def replica_recorded() -> list[dict[str, Any]] | None:
        runs = (await cli.ok("-o", "json", "services", "replicas", "chat")).json()
        return runs if runs and runs[0]["scheduledAt"] else None

    [run] = await eventually(replica_recorded, timeout=60)
    assert run["endedAt"] is None
    # A new revision, back to the first one's template, and a second replica.
    first_image = created["image"]
    updated = (await cli.ok("-o", "json", "services", "update", "chat", "--image",
                            "vllm/vllm-openai:v0.6.4", "--env", "HF_HOME=/cache")).json()  # fmt: skip
    assert (updated["revision"], updated["image"]) == (2, "vllm/vllm-openai:v0.6.4"), updated
    assert {"name": "HF_HOME", "value": "/cache"} in updated["env"], updated
    nothing = await cli.run("services", "update", "chat")
    assert nothing.code == 2, nothing
    assert "--image, --env or --command" in nothing.err, nothing
    back = (await cli.ok("-o", "json", "services", "rollback", "chat")).json()
    assert (back["revision"], back["image"]) == (3, first_image), back
    scaled = (await cli.ok("-o", "json", "services", "scale", "chat", "--replicas", "2")).json()
    assert scaled["minReplicas"] == 2, scaled
    await cli.ok("services", "delete", "chat", "--yes")

    # Logging out revokes the key: it no longer opens anything, anywhere.
    out = await cli.ok("logout")
    assert "revoked on the server" in out.err
    refused = await platform.http.get("/v1/whoami", headers=bearer(key))
    assert refused.status_code == 401, refused.text
