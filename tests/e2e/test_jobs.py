"""Batch jobs on the real stack: Kubernetes' Job controller runs them on kwok nodes,
whose stages end each run on cue (deploy/local/gpucloud_stack/kwok_config.yaml);
metering bills every run from the published events."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from datetime import datetime
from typing import Any

from kubernetes_asyncio import client as k8s

from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.naming import job_workload_id, storage_secret_name, tenant_namespace
from gpucloud_libs.topics import JOB_LIFECYCLE
from gpucloud_metering import ledger
from gpucloud_stack import fleet, layout

from .platform import Platform, TenantAccount, assert_problem, bearer
from .support import aggregate_events, eventually, unique

ENDED = {"succeeded", "failed", "cancelled"}
STACK = layout.LOCAL_DIR / "stack.py"


def job_body(
    spec: str, *, run_for: str = "1s", exit_code: int = 0, **fields: Any
) -> dict[str, Any]:
    env = [{"name": "GPUCLOUD_SIM_RUN_FOR", "value": run_for}]
    if exit_code:
        env.append({"name": "GPUCLOUD_SIM_EXIT_CODE", "value": str(exit_code)})
    return {"jobID": unique("job"), "image": "busybox", "specName": spec, "env": env, **fields}


async def submit(platform: Platform, account: TenantAccount, body: dict[str, Any]) -> str:
    response = await platform.post_as_tenant(account, "/v1/jobs", body)
    assert response.status_code == 202, response.text
    assert response.json()["state"] == "queued"
    job_id: str = response.json()["jobID"]
    return job_id


async def job(platform: Platform, account: TenantAccount, job_id: str) -> dict[str, Any]:
    response = await platform.http.get(f"/v1/jobs/{job_id}", headers=bearer(account.admin_key))
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


async def settled(
    platform: Platform, account: TenantAccount, job_id: str, *, timeout: float = 60
) -> dict[str, Any]:
    async def ended() -> dict[str, Any] | None:
        found = await job(platform, account, job_id)
        return found if found["state"] in ENDED else None

    return await eventually(ended, timeout=timeout, interval=0.5)


async def in_state(
    platform: Platform, account: TenantAccount, job_id: str, state: str
) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        found = await job(platform, account, job_id)
        return found if found["state"] == state else None

    return await eventually(reached, timeout=30, interval=0.3)


async def waits_for(
    platform: Platform, account: TenantAccount, job_id: str, reason: str
) -> dict[str, Any]:
    """The job once the admission queue said it waits for `reason`."""

    async def said() -> dict[str, Any] | None:
        found = await job(platform, account, job_id)
        return found if (found.get("queue") or {}).get("reason") == reason else None

    return await eventually(said, timeout=30, interval=0.3)


async def job_events(kafka: KafkaConnection, key: str, expect: int) -> list[dict[str, Any]]:
    """The events published for one job (key `<tenant>/<job>`), in order."""
    return await aggregate_events(kafka, JOB_LIFECYCLE.name, key, expect=expect)


def us(at: str) -> int:
    return ledger.to_us(datetime.fromisoformat(at.replace("Z", "+00:00")))


async def test_a_job_that_succeeds_is_billed_to_its_completion_to_the_microsecond(
    platform: Platform, kafka: KafkaConnection
) -> None:
    account = await platform.tenant(max_gpus=4)
    spec = await platform.spec(gpus=2)
    job_id = await submit(platform, account, job_body(spec, run_for="2s"))

    done = await settled(platform, account, job_id)

    assert done["state"] == "succeeded", done
    assert [h["state"] for h in done["history"]] == ["queued", "admitted", "running", "succeeded"]
    [run] = done["runs"]
    assert run["state"] == "succeeded"
    assert run["exitCode"] == 0
    # kwok ends it 2 s after its start in Kubernetes' whole seconds; the recorded start
    # is never before the job's admission, which may move it into that second.
    assert 1_000_000 < us(run["endedAt"]) - us(run["startedAt"]) <= 2_000_000
    admitted_at = us(done["history"][1]["at"])
    assert admitted_at <= us(run["scheduledAt"]) <= us(run["startedAt"])
    # The job ends at its last run's end: the same instant its billing stops.
    completed_at = us(done["history"][-1]["at"])
    assert completed_at == us(run["endedAt"])
    held_us = completed_at - us(run["scheduledAt"])

    async def billed() -> dict[str, Any] | None:
        usage = await platform.http.get(
            f"/v1/usage/jobs/{job_id}", headers=bearer(account.admin_key)
        )
        if usage.status_code != 200 or usage.json()["total"]["gpuMicroseconds"] != 2 * held_us:
            return None
        report: dict[str, Any] = usage.json()
        return report

    report = await eventually(billed, timeout=30)
    assert [row["key"] for row in report["rows"]] == [job_id]
    # The tenant's report grouped by job shows the same row.
    grouped = await platform.http.get(
        "/v1/usage", params={"groupBy": "job"}, headers=bearer(account.admin_key)
    )
    assert {row["key"]: row["gpuMicroseconds"] for row in grouped.json()["rows"]} == {
        job_id: 2 * held_us
    }
    events = await job_events(kafka, f"{account.tenant_id}/{job_id}", expect=7)
    jobs = [e["state"] for e in events if e["type"].endswith("job.state_changed.v1")]
    runs = [e["state"] for e in events if e["type"].endswith("job.run_state_changed.v1")]
    assert jobs == ["queued", "admitted", "running", "succeeded"]
    assert runs == ["scheduled", "running", "succeeded"]


async def test_a_failing_job_is_retried_up_to_its_limit_then_fails_with_its_exit_code(
    platform: Platform,
) -> None:
    account = await platform.tenant(max_gpus=4)
    spec = await platform.spec(gpus=1)
    job_id = await submit(platform, account, job_body(spec, exit_code=3, retryLimit=1))

    done = await settled(platform, account, job_id, timeout=90)

    assert done["state"] == "failed", done
    assert done["reason"] == "retries_exhausted"
    assert done["exitCode"] == 3
    assert [(r["state"], r["exitCode"]) for r in done["runs"]] == [("failed", 3), ("failed", 3)]
    assert done["failedRuns"] == 2
    assert done["succeededRuns"] == 0
    # Each run is billed for its own time on the GPU, none for the wait between them.
    expected = sum(us(r["endedAt"]) - us(r["scheduledAt"]) for r in done["runs"])

    async def billed() -> bool:
        usage = await platform.http.get(
            f"/v1/usage/jobs/{job_id}", headers=bearer(account.admin_key)
        )
        return usage.status_code == 200 and usage.json()["total"]["gpuMicroseconds"] == expected

    await eventually(billed, timeout=30)


async def test_jobs_wait_in_their_tenants_queue_for_quota_and_see_why(platform: Platform) -> None:
    account = await platform.tenant(max_gpus=2)
    spec = await platform.spec(gpus=1)
    first = await submit(platform, account, job_body(spec, run_for="600s", parallelism=2))
    await in_state(platform, account, first, "running")
    second = await submit(platform, account, job_body(spec, run_for="600s"))
    third = await submit(platform, account, job_body(spec, run_for="600s", parallelism=2))

    waiting = await waits_for(platform, account, second, "quota")
    assert waiting["state"] == "queued"
    assert waiting["queue"] == {"position": 1, "reason": "quota", "gpusAhead": 0}
    behind = await waits_for(platform, account, third, "quota")
    assert behind["queue"] == {"position": 2, "reason": "quota", "gpusAhead": 1}
    listed = await platform.http.get(
        "/v1/jobs", params={"state": "queued"}, headers=bearer(account.admin_key)
    )
    assert [
        item["jobID"]
        for item in sorted(listed.json()["items"], key=lambda i: i["queue"]["position"])
    ] == [second, third]

    # Cancelling the running job frees its GPUs: its runs end, the next job is admitted.
    cancelled = await platform.http.delete(f"/v1/jobs/{first}", headers=bearer(account.admin_key))
    assert cancelled.status_code == 202
    assert cancelled.json()["cancelRequested"] is True
    gone = await settled(platform, account, first)
    assert gone["state"] == "cancelled"
    await in_state(platform, account, second, "running")
    assert (await job(platform, account, third))["queue"]["position"] == 1

    async def runs_ended() -> bool:
        runs = (await job(platform, account, first))["runs"]
        return len(runs) == 2 and all(run["state"] == "failed" and run["endedAt"] for run in runs)

    await eventually(runs_ended, timeout=30)
    # Cancelling an ended job changes nothing.
    again = await platform.http.delete(f"/v1/jobs/{first}", headers=bearer(account.admin_key))
    assert again.status_code == 202
    assert again.json()["state"] == "cancelled"
    for job_id in (second, third):
        await platform.http.delete(f"/v1/jobs/{job_id}", headers=bearer(account.admin_key))
        assert (await settled(platform, account, job_id))["state"] == "cancelled"


async def test_a_job_bigger_than_the_tenants_quota_is_refused_at_once(platform: Platform) -> None:
    account = await platform.tenant(max_gpus=2)
    spec = await platform.spec(gpus=1)
    response = await platform.post_as_tenant(account, "/v1/jobs", job_body(spec, parallelism=3))
    body = assert_problem(response, 422, "quota_exceeded")
    assert body["limit"] == "max_gpus"
    assert body["requested"] == 3


async def test_a_resubmitted_job_is_the_same_job(platform: Platform) -> None:
    account = await platform.tenant(max_gpus=2)
    spec = await platform.spec(gpus=1)
    body = job_body(spec)
    first = await platform.post_as_tenant(account, "/v1/jobs", body)
    again = await platform.post_as_tenant(account, "/v1/jobs", body)
    assert first.status_code == 202
    assert again.status_code == 200
    assert again.json()["jobID"] == first.json()["jobID"]
    changed = await platform.post_as_tenant(account, "/v1/jobs", {**body, "image": "other"})
    assert_problem(changed, 409, "conflict")
    await settled(platform, account, body["jobID"])


async def test_killing_the_service_while_jobs_queue_loses_none_and_admits_none_twice(
    platform: Platform, kube: k8s.ApiClient
) -> None:
    account = await platform.tenant(max_gpus=2)
    spec = await platform.spec(gpus=1)
    ids = [await submit(platform, account, job_body(spec, run_for="3s")) for _ in range(6)]
    os.kill(int(layout.pid_file("instances").read_text()), signal.SIGKILL)
    restart = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(STACK), "up"], capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert restart.returncode == 0, restart.stderr

    done = [await settled(platform, account, job_id, timeout=120) for job_id in ids]

    assert [d["state"] for d in done] == ["succeeded"] * 6
    for found in done:
        assert [h["state"] for h in found["history"]].count("admitted") == 1
        assert len(found["runs"]) == 1, found["runs"]  # one Kubernetes Job, one pod
    # Never more GPUs held at once than the quota: no job was admitted twice.
    edges = sorted(
        [(us(run["scheduledAt"]), 1) for d in done for run in d["runs"]]
        + [(us(run["endedAt"]), -1) for d in done for run in d["runs"]]
    )
    held = peak = 0
    for _, change in edges:
        held += change
        peak = max(peak, held)
    assert peak <= 2
    batch = k8s.BatchV1Api(kube)
    jobs = await batch.list_job_for_all_namespaces(
        label_selector=f"gpucloud.io/tenant={account.tenant_id}"
    )
    assert sorted(job.metadata.labels["gpucloud.io/job"] for job in jobs.items) == sorted(ids)


async def test_a_runs_log_is_read_and_followed_through_the_api(platform: Platform) -> None:
    account = await platform.tenant(max_gpus=1)
    spec = await platform.spec(gpus=1)
    job_id = await submit(platform, account, job_body(spec, run_for="600s"))
    waiting = await submit(platform, account, job_body(spec))
    await in_state(platform, account, job_id, "running")
    headers = bearer(account.admin_key)
    path = f"/v1/jobs/{job_id}/logs"

    whole = await platform.http.get(path, headers=headers)
    assert whole.status_code == 200, whole.text
    assert whole.headers["content-type"].startswith("text/plain")
    # The lines kwok serves for every fake container (kwok_workload.log).
    assert "epoch 1/3 loss=2.3141" in whole.text.splitlines()
    last = await platform.http.get(path, params={"tailLines": 1}, headers=headers)
    assert last.text.splitlines() == ["done"]
    [run] = (await job(platform, account, job_id))["runs"]
    by_run = await platform.http.get(path, params={"run": run["runID"]}, headers=headers)
    assert by_run.text == whole.text
    async with platform.http.stream(
        "GET", path, params={"follow": "true"}, headers=headers
    ) as followed:
        assert followed.status_code == 200
        lines = followed.aiter_lines()
        assert await anext(lines) == "gpucloud simulated workload: starting"

    assert_problem(
        await platform.http.get(path, params={"run": "nope"}, headers=headers), 404, "not_found"
    )
    assert_problem(
        await platform.http.get(f"/v1/jobs/{waiting}/logs", headers=headers), 409, "job_has_no_runs"
    )
    for job_id_ in (job_id, waiting):
        await platform.http.delete(f"/v1/jobs/{job_id_}", headers=headers)


async def test_a_followed_log_ends_when_its_run_ends(platform: Platform) -> None:
    account = await platform.tenant(max_gpus=1)
    spec = await platform.spec(gpus=1)
    job_id = await submit(platform, account, job_body(spec, run_for="3s"))
    await in_state(platform, account, job_id, "running")

    async def read_followed() -> list[str]:
        path = f"/v1/jobs/{job_id}/logs"
        headers = bearer(account.admin_key)
        async with platform.http.stream(
            "GET", path, params={"follow": "true"}, headers=headers, timeout=60
        ) as followed:
            assert followed.status_code == 200
            return [line async for line in followed.aiter_lines()]

    # The stream closes by itself once the run is over, even where the kubelet (here
    # kwok) would keep it open.
    lines = await asyncio.wait_for(read_followed(), timeout=30)
    assert lines[0] == "gpucloud simulated workload: starting"
    assert lines[-1] == "done"
    assert (await settled(platform, account, job_id))["state"] == "succeeded"


async def _flood(
    platform: Platform, kube: k8s.ApiClient, weights: tuple[float, float]
) -> dict[str, float]:
    """Two tenants of these queue weights each flood a 4-GPU node type with 8 one-GPU
    jobs (all of the first tenant's queued first): the GPU time each held while both had
    work waiting, by tenant, in the order of `weights`."""
    core = k8s.CoreV1Api(kube)
    node, product = unique("fair"), unique("TEST-GPU")
    spec = await platform.spec(gpus=1, gpu_type=product)
    tenants = [await platform.tenant(max_gpus=8) for _ in weights]
    for account, weight in zip(tenants, weights, strict=True):
        if weight != 1:
            changed = await platform.http.patch(
                f"/v1/tenants/{account.tenant_id}", json={"queueWeight": weight},
                headers=platform.admin,
            )  # fmt: skip
            assert changed.json()["queueWeight"] == weight, changed.text
    # Both floods queue first (no GPU of the type exists yet), the first in full first.
    jobs = {
        account.tenant_id: [
            await submit(platform, account, job_body(spec, run_for="4s")) for _ in range(8)
        ]
        for account in tenants
    }
    first = tenants[0]
    assert (await waits_for(platform, first, jobs[first.tenant_id][0], "capacity"))["queue"][
        "position"
    ] == 1
    manifest: Any = fleet.gpu_node(
        node, product=product, gpus=4, zone="zone-a", cpu="64", memory="512Gi"
    )
    await core.create_node(manifest)
    try:
        done = {
            account.tenant_id: [
                await settled(platform, account, job_id, timeout=180)
                for job_id in jobs[account.tenant_id]
            ]
            for account in tenants
        }
    finally:
        await core.delete_node(node)
    spans = {
        tenant: [(us(r["scheduledAt"]), us(r["endedAt"])) for d in found for r in d["runs"]]
        for tenant, found in done.items()
    }
    assert all(d["state"] == "succeeded" for found in done.values() for d in found)
    # While both had work waiting: from the first start to the moment the first tenant
    # to run out started its last run. After it, that tenant waits for nothing, and
    # the GPUs its last runs give back rightly go to the other (counted, they made the
    # share drift with how long those last runs took to end).
    start = min(begin for runs in spans.values() for begin, _ in runs)
    end = min(max(begin for begin, _ in runs) for runs in spans.values())
    return {
        tenant: sum(max(min(finish, end) - max(begin, start), 0) for begin, finish in runs)
        for tenant, runs in spans.items()
    }


async def test_two_tenants_flooding_the_queue_share_the_gpus_evenly(
    platform: Platform, kube: k8s.ApiClient
) -> None:
    held = await _flood(platform, kube, (1, 1))
    low, high = sorted(held.values())
    assert high > 0
    assert (high - low) / high <= 0.10, held


async def test_the_operators_queue_weights_divide_the_gpus(
    platform: Platform, kube: k8s.ApiClient
) -> None:
    """Weights 3 and 1 over 4 GPUs: the first tenant holds three quarters while both wait."""
    heavy, light = (await _flood(platform, kube, (3, 1))).values()
    assert heavy + light > 0
    assert abs(heavy / (heavy + light) - 0.75) <= 0.10, (heavy, light)


async def test_an_owner_reclaims_borrowed_gpus_and_the_borrower_runs_again_later(
    platform: Platform, kube: k8s.ApiClient
) -> None:
    """A tenant of quota 1 borrows three more GPUs of an idle 4-GPU node. Another
    tenant's job within its own quota takes two of them back: the borrower's two most
    recently admitted jobs are preempted, billed to their end, and queued again; they
    run again once the owner's job is gone."""
    core = k8s.CoreV1Api(kube)
    node, product = unique("reclaim"), unique("TEST-GPU")
    spec = await platform.spec(gpus=1, gpu_type=product)
    owner_spec = await platform.spec(gpus=2, gpu_type=product)
    borrower = await platform.tenant(max_gpus=1, borrow_gpus=3)
    owner = await platform.tenant(max_gpus=4)
    manifest: Any = fleet.gpu_node(
        node, product=product, gpus=4, zone="zone-a", cpu="64", memory="512Gi"
    )
    await core.create_node(manifest)
    borrowed: list[str] = []
    try:
        for _ in range(4):
            borrowed.append(await submit(platform, borrower, job_body(spec, run_for="600s")))
            await in_state(platform, borrower, borrowed[-1], "running")
        # The quota is 1 GPU and the whole job beyond quota and borrowing is refused.
        too_big = await platform.post_as_tenant(borrower, "/v1/jobs", job_body(spec, parallelism=5))
        assert assert_problem(too_big, 422, "quota_exceeded")["limit_value"] == 4

        owners = await submit(platform, owner, job_body(owner_spec, run_for="600s"))
        await in_state(platform, owner, owners, "running")
        preempted = [await job(platform, borrower, job_id) for job_id in borrowed[2:]]
        for found in preempted:
            assert found["state"] == "queued", found
            states = [(h["state"], h.get("reason")) for h in found["history"]]
            assert states[-2:] == [("preempting", "preempted"), ("queued", "preempted")], states
            [run] = found["runs"]
            assert run["state"] == "failed", run
            expected = us(run["endedAt"]) - us(run["scheduledAt"])

            async def billed(job_id: str = found["jobID"], expected: int = expected) -> bool:
                usage = await platform.http.get(
                    f"/v1/usage/jobs/{job_id}", headers=bearer(borrower.admin_key)
                )
                return usage.status_code == 200 and (
                    usage.json()["total"]["gpuMicroseconds"] == expected
                )

            await eventually(billed, timeout=30)
        # The first two (one within quota, one borrowed) kept running.
        for job_id in borrowed[:2]:
            kept = await job(platform, borrower, job_id)
            assert kept["state"] == "running", kept

        # The owner's job ends: the preempted jobs borrow the GPUs again, as new runs.
        await platform.http.delete(f"/v1/jobs/{owners}", headers=bearer(owner.admin_key))
        assert (await settled(platform, owner, owners))["state"] == "cancelled"
        for job_id in borrowed[2:]:
            again = await in_state(platform, borrower, job_id, "running")
            assert [run["state"] for run in again["runs"]].count("failed") == 1, again["runs"]
            assert len(again["runs"]) == 2
    finally:
        for job_id in borrowed:
            await platform.http.delete(f"/v1/jobs/{job_id}", headers=bearer(borrower.admin_key))
        await core.delete_node(node)


async def instance_now(
    platform: Platform, account: TenantAccount, instance_id: str
) -> dict[str, Any]:
    response = await platform.http.get(
        f"/v1/gpu-instances/{instance_id}", headers=bearer(account.admin_key)
    )
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


async def test_an_instance_waits_in_the_same_queue_as_the_tenants_jobs(
    platform: Platform,
) -> None:
    """A `queue: true` start that finds the quota full waits in the tenant's one line of
    jobs and instances, with its place and reason; a stop ends it without it ever
    holding a GPU; once the quota frees, it starts."""
    account = await platform.tenant(max_gpus=1)
    spec, two_gpus = await platform.spec(gpus=1), await platform.spec(gpus=2)
    holder = await submit(platform, account, job_body(spec, run_for="600s"))
    await in_state(platform, account, holder, "running")
    # One that could never fit the quota is refused at once, queue or not.
    too_big = await platform.start_instance(
        account, {"image": "busybox", "specName": two_gpus, "queue": True}
    )
    assert assert_problem(too_big, 422, "quota_exceeded")["limit"] == "max_gpus"

    started = await platform.start_instance(
        account, {"image": "busybox", "specName": spec, "queue": True}
    )
    assert started.status_code == 202, started.text
    assert started.json()["state"] == "queued"
    waiting = started.json()["instanceID"]
    later_job = await submit(platform, account, job_body(spec))
    dropped = (
        await platform.start_instance(
            account, {"image": "busybox", "specName": spec, "queue": True}
        )
    ).json()["instanceID"]

    async def said_quota() -> dict[str, Any] | None:
        found = await instance_now(platform, account, waiting)
        return found if (found.get("queue") or {}).get("reason") == "quota" else None

    first = await eventually(said_quota, timeout=30, interval=0.3)
    assert first["queue"] == {"position": 1, "reason": "quota", "gpusAhead": 0}
    # One line: the job submitted after the instance stands behind it.
    assert (await waits_for(platform, account, later_job, "quota"))["queue"] == {
        "position": 2, "reason": "quota", "gpusAhead": 1,
    }  # fmt: skip
    assert (await instance_now(platform, account, dropped))["queue"]["position"] == 3

    stop = await platform.http.delete(
        f"/v1/gpu-instances/{dropped}", headers=bearer(account.admin_key)
    )
    assert stop.status_code == 202, stop.text

    async def stopped() -> dict[str, Any] | None:
        found = await instance_now(platform, account, dropped)
        return found if found["state"] == "stopped" else None

    ended = await eventually(stopped, timeout=30, interval=0.3)
    assert [h["state"] for h in ended["history"]] == ["queued", "stopped"]
    assert ended["node"] is None

    # The running job ends: the instance, first in line, takes the GPU; the job waits.
    await platform.http.delete(f"/v1/jobs/{holder}", headers=bearer(account.admin_key))

    async def runs() -> dict[str, Any] | None:
        found = await instance_now(platform, account, waiting)
        return found if found["state"] == "running" else None

    up = await eventually(runs, timeout=60, interval=0.5)
    assert [h["state"] for h in up["history"]][:3] == ["queued", "pending", "scheduled"]
    assert up["queue"] is None

    # The line is redrawn by the admission pass after the instance's: first, now.
    async def first_in_line() -> dict[str, Any] | None:
        found = await job(platform, account, later_job)
        assert found["state"] == "queued", found
        return found if found["queue"]["position"] == 1 else None

    await eventually(first_in_line, timeout=10, interval=0.3)
    await platform.http.delete(f"/v1/gpu-instances/{waiting}", headers=bearer(account.admin_key))
    await platform.http.delete(f"/v1/jobs/{later_job}", headers=bearer(account.admin_key))


async def test_a_jobs_storage_credentials_reach_its_pods_and_are_revoked_when_it_ends(
    platform: Platform, kube: k8s.ApiClient
) -> None:
    account = await platform.tenant(max_gpus=1)
    spec = await platform.spec(gpus=1)
    bucket = await platform.storage(account)
    headers = bearer(account.admin_key)
    body = job_body(spec, run_for="5s", storageIDs=[bucket["storageID"]])
    job_id = await submit(platform, account, body)
    running = await in_state(platform, account, job_id, "running")
    core = k8s.CoreV1Api(kube)
    namespace = tenant_namespace(account.tenant_id)
    secret_name = storage_secret_name(bucket["storageID"], job_workload_id(job_id))
    [run] = running["runs"]
    pod = await core.read_namespaced_pod(f"job-{job_id}-{run['runID']}", namespace)
    assert secret_name in {e.secret_ref.name for e in pod.spec.containers[0].env_from}
    await core.read_namespaced_secret(secret_name, namespace)  # it exists while the job runs
    accessors = await platform.http.get(
        f"/v1/storages/{bucket['storageID']}/accessors", headers=headers
    )
    assert len(accessors.json()["items"]) == 1

    assert (await settled(platform, account, job_id))["state"] == "succeeded"

    async def released() -> bool:
        secrets = await core.list_namespaced_secret(namespace)
        listed = await platform.http.get(
            f"/v1/storages/{bucket['storageID']}/accessors", headers=headers
        )
        return (
            all(s.metadata.name != secret_name for s in secrets.items)
            and listed.json()["items"] == []
        )

    await eventually(released, timeout=60)
