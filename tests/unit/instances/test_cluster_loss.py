"""What becomes of a lost cluster's workloads (decision 130), decided without the
cluster: an instance fails at the cluster's last answer, a job's runs and a service's
replicas end there, never before what was recorded; a queued workload waits; the
controller's view of which clusters are lost."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from gpucloud_instances.controller.cache import ClusterCache
from gpucloud_instances.controller.runtimes import ClusterRuntime, ClusterRuntimes
from gpucloud_instances.documents import InstanceDoc, ServiceDoc
from gpucloud_instances.inference.lost import ended_with_cluster
from gpucloud_instances.instances.lost import lost_steps
from gpucloud_instances.jobs.observation import end_runs
from gpucloud_instances.lifecycle import State
from gpucloud_instances.settings import InstancesSettings
from gpucloud_instances.stocks.reconciler import StockPool
from gpucloud_instances.tenancy.reconciler import TenantReconciler
from gpucloud_instances.workloads.reconciler import ClusterLost
from gpucloud_libs.kube import KubeClient

from .test_job_observation import a_job, recorded

SILENT = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
LOST = ClusterLost("local-2", SILENT)


def an_instance(state: str, at: datetime, **fields: Any) -> InstanceDoc:
    doc = {
        "_id": "acme/nb", "tenant_id": "acme", "instance_id": "nb", "state": state,
        "admitted": True, "history": [{"state": state, "at": at, "reason": None}], **fields,
    }  # fmt: skip
    return cast(InstanceDoc, doc)


def test_a_running_instance_fails_at_the_clusters_last_answer() -> None:
    [step] = lost_steps(an_instance("running", SILENT - timedelta(minutes=5)), LOST, deleted=False)
    assert (step.state, step.at, step.reason) == (State.FAILED, SILENT, "cluster_lost")
    assert LOST.message == "cluster 'local-2' stopped answering at 2026-11-27T12:00:00+00:00"


def test_an_instance_that_moved_after_the_silence_fails_no_earlier_than_that() -> None:
    later = SILENT + timedelta(seconds=3)
    [step] = lost_steps(an_instance("pending", later), LOST, deleted=False)
    assert step.at == later


def test_a_queued_instance_waits_and_an_ended_one_is_deleted_only_if_asked() -> None:
    assert lost_steps(an_instance("queued", SILENT), LOST, deleted=False) == []
    assert lost_steps(an_instance("failed", SILENT), LOST, deleted=False) == []
    [deleted] = lost_steps(an_instance("failed", SILENT), LOST, deleted=True)
    assert deleted.state == State.DELETED
    assert lost_steps(an_instance("deleted", SILENT), LOST, deleted=True) == []


def test_a_jobs_live_runs_end_at_the_silence_and_an_ended_run_is_left_alone() -> None:
    t0 = SILENT - timedelta(minutes=1)
    job = a_job(runs={
        "live": recorded("running", sequence=2, scheduled_at=t0, started_at=t0),
        "late": recorded("scheduled", sequence=1, scheduled_at=SILENT + timedelta(seconds=2)),
        "done": recorded("succeeded", sequence=3, scheduled_at=t0, ended_at=t0),
    })  # fmt: skip
    runs = dict(job["runs"])
    events = end_runs(job, runs, SILENT)
    ended = [(json.loads(e["value"])["run_id"], json.loads(e["value"])["state"]) for e in events]
    assert ended == [("live", "failed"), ("late", "failed")]
    assert runs["live"]["ended_at"] == SILENT
    assert runs["late"]["ended_at"] == SILENT + timedelta(seconds=2)  # never before it began
    assert runs["done"] == job["runs"]["done"]


def test_a_services_replicas_end_at_the_silence() -> None:
    run = {"state": "running", "sequence": 2, "revision": 1, "node": "b200-zone-c-0",
           "zone": "zone-c", "scheduled_at": SILENT - timedelta(minutes=2), "ended_at": None}  # fmt: skip
    doc = cast(ServiceDoc, {
        "_id": "acme/chat", "tenant_id": "acme", "service_id": "chat", "incarnation": 1,
        "spec_name": "b200", "gpu_type": "NVIDIA-B200", "gpu_count": 1, "namespace": "gpc-acme",
        "runs": {"r1": run, "r0": {**run, "state": "ended", "ended_at": SILENT}},
    })  # fmt: skip
    runs, events = ended_with_cluster(doc, LOST)
    assert (runs["r1"]["state"], runs["r1"]["ended_at"], runs["r1"]["sequence"]) == (
        "ended",
        SILENT,
        3,
    )
    assert len(events) == 1


def runtime(name: str, *, home: bool) -> ClusterRuntime:
    kube = KubeClient(None)
    cache = ClusterCache(kube, wake=lambda _: None, wake_stocks=lambda: None, node_lost_grace_s=1)
    tenants = TenantReconciler(name, kube, None, InstancesSettings())  # type: ignore[arg-type]
    stocks = StockPool(
        kube, cache, None, None, cluster=name, namespace="gpucloud-stocks", wake=lambda: None,  # type: ignore[arg-type]
    )  # fmt: skip
    return ClusterRuntime(name, home, kube, cache, tenants, stocks)


def test_a_lost_cluster_is_lost_until_it_answers_and_the_home_cluster_is_driven_from_the_start() -> (
    None
):
    runtimes = ClusterRuntimes(runtime("local-1", home=True), lambda n, _c: runtime(n, home=False))
    assert runtimes.of(None) is runtimes.home
    assert runtimes.of("local-1") is runtimes.home
    assert runtimes.of("local-2") is None  # not opened: its workloads wait
    runtimes.mark_lost("local-2", SILENT)
    assert runtimes.lost_since("local-2") == SILENT
    runtimes.mark_answering("local-2")
    assert runtimes.lost_since("local-2") is None


def test_a_deleted_clusters_workloads_are_given_up_and_a_lost_clusters_caches_are_not_counted() -> (
    None
):
    runtimes = ClusterRuntimes(runtime("local-1", home=True), lambda n, _c: runtime(n, home=False))
    runtimes.registered({"local-1", "local-2"})
    assert runtimes.lost_since("local-2") is None
    runtimes.registered({"local-1", "local-3"})  # local-2 deleted; local-3 new, not driven yet
    assert runtimes.lost_since("local-2") is not None
    assert runtimes.lost_since("local-3") is None  # its workloads wait for the next pass
    assert [r.name for r in runtimes] == ["local-1"]


def test_a_cluster_registered_again_under_its_name_is_driven_again_at_once() -> None:
    runtimes = ClusterRuntimes(runtime("local-1", home=True), lambda n, _c: runtime(n, home=False))
    runtimes.registered({"local-1", "local-2"})
    runtimes.registered({"local-1"})
    runtimes.registered({"local-1", "local-2"})
    assert runtimes.lost_since("local-2") is None
