"""The controller's watch cache (controller/cache.py, ClusterCache), fed by hand as the
watches feed it: each pod sorted by what owns it and the work item it wakes, a job's
and a replica's pods kept past their deletion until their end is recorded, warm
stocks' pods, nodes a pod may go to, and a relist replacing what a watch lost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpucloud_instances import manifests
from gpucloud_instances.controller.cache import LISTED, ClusterCache
from gpucloud_instances.wakeups import WorkItem, instance_item, job_item, service_item
from gpucloud_libs.kube import KubeClient
from gpucloud_stack.fleet import gpu_node

H100 = "NVIDIA-H100"
QUARANTINED = {manifests.HEALTH: "quarantined"}


class Woken:
    """What the cache woke: work items, and the stock pass."""

    def __init__(self) -> None:
        self.items: list[WorkItem] = []
        self.stocks = 0

    def cache(self) -> ClusterCache:
        return ClusterCache(
            KubeClient(None), wake=self.items.append, wake_stocks=self._stocks,
            node_lost_grace_s=120,
        )  # fmt: skip

    def _stocks(self) -> None:
        self.stocks += 1


def ready_node(
    name: str, *, ready: bool = True, zone: str = "zone-a", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    node = gpu_node(name, product=H100, gpus=8, zone=zone, labels=labels)
    since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    node["status"]["conditions"] = [
        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": since}
    ]
    return node


def pod(
    name: str, node: str | None = "n1", phase: str = "Running", **labels: str
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {manifests.TENANT: "acme", **labels}},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


def job_pod(name: str, **fields: Any) -> dict[str, Any]:
    return pod(name, **fields, **{manifests.JOB: "train"})


def test_an_instance_pod_is_kept_under_its_instance_and_wakes_it() -> None:
    woken = Woken()
    cache = woken.cache()
    cache._on_pod("ADDED", pod("inst-nb", **{manifests.INSTANCE: "nb"}))
    assert list(cache.pods) == ["acme/nb"]
    cache._on_pod("DELETED", pod("inst-nb", **{manifests.INSTANCE: "nb"}))
    assert cache.pods == {}
    assert woken.items == [instance_item("acme/nb"), instance_item("acme/nb")]


def test_a_pod_owned_by_no_workload_is_ignored() -> None:
    woken = Woken()
    cache = woken.cache()
    cache._on_pod("ADDED", pod("stray"))
    assert (cache.pods, cache.job_pods, cache.service_pods, woken.items) == ({}, {}, {}, [])


def test_a_job_pod_is_first_seen_when_the_watch_adds_it_and_not_when_a_list_finds_it() -> None:
    """A listed pod may be older than this process: no run of it is floored at now."""
    woken = Woken()
    cache = woken.cache()
    before = datetime.now(UTC) - timedelta(milliseconds=1)
    cache._on_pod("ADDED", job_pod("job-train-a"))
    cache._on_pod(LISTED, job_pod("job-train-b"))
    tracked = cache.job_pods["acme/train"]
    seen = tracked["job-train-a"].seen_at
    assert seen is not None
    assert before <= seen <= datetime.now(UTC)
    assert tracked["job-train-b"].seen_at is None
    cache._on_pod("MODIFIED", job_pod("job-train-a", phase="Succeeded"))
    assert tracked["job-train-a"].seen_at == seen  # first seen stays first seen
    assert woken.items == [job_item("acme/train")] * 3


def test_a_deleted_job_pod_is_kept_with_when_it_went_until_its_run_is_recorded() -> None:
    cache = Woken().cache()
    cache._on_pod("ADDED", job_pod("job-train-a"))
    assert cache.job_pods["acme/train"]["job-train-a"].live
    cache._on_pod("DELETED", job_pod("job-train-a"))
    gone = cache.job_pods["acme/train"]["job-train-a"]
    assert gone.gone_at is not None
    assert not gone.live
    cache.forget_job_pod("acme/train", "job-train-a")
    assert cache.job_pods == {}  # its job holds no pod any more


def test_an_ended_pod_holds_nothing_though_it_is_still_there() -> None:
    cache = Woken().cache()
    cache._on_pod("ADDED", job_pod("job-train-a", phase="Failed"))
    assert not cache.job_pods["acme/train"]["job-train-a"].live


def test_a_replica_pod_is_tracked_under_its_service_and_wakes_it() -> None:
    woken = Woken()
    cache = woken.cache()
    replica = pod("isvc-chat-7f-x", **{manifests.SERVICE: "chat", manifests.REVISION: "2"})
    cache._on_pod("ADDED", replica)
    assert list(cache.service_pods["acme/chat"]) == ["isvc-chat-7f-x"]
    cache._on_pod("DELETED", replica)
    assert cache.service_pods["acme/chat"]["isvc-chat-7f-x"].gone_at is not None
    cache.forget_service_pod("acme/chat", "isvc-chat-7f-x")
    assert cache.service_pods == {}
    assert woken.items == [service_item("acme/chat")] * 2


def test_placeholders_and_holds_are_kept_by_unit_and_wake_the_stock_pass() -> None:
    woken = Woken()
    cache = woken.cache()
    stock = {manifests.STOCK: "h100x1"}
    cache._on_pod("ADDED", {"metadata": {"name": "stock-u1", "labels": stock}})
    hold = {
        "metadata": {"name": "stock-u1-hold", "labels": {**stock, manifests.STOCK_HOLD: "true"}}
    }
    cache._on_pod("ADDED", hold)
    assert (list(cache.stock_pods), list(cache.stock_holds)) == (["stock-u1"], ["stock-u1"])
    cache._on_pod("DELETED", hold)
    assert (list(cache.stock_pods), cache.stock_holds) == (["stock-u1"], {})
    assert (woken.stocks, woken.items) == (3, [])


def test_a_kubernetes_job_or_jobset_is_kept_under_its_job_and_wakes_it() -> None:
    woken = Woken()
    cache = woken.cache()
    job_set = {"kind": "JobSet", "metadata": {"name": "job-dist", "labels": {
        manifests.TENANT: "acme", manifests.JOB: "dist"}}}  # fmt: skip
    cache._on_job("ADDED", job_set)
    assert cache.jobs == {"acme/dist": job_set}
    cache._on_job("DELETED", job_set)
    assert cache.jobs == {}
    cache._on_job("ADDED", {"metadata": {"name": "other", "labels": {}}})
    assert woken.items == [job_item("acme/dist")] * 2


def test_a_new_pod_is_usable_only_on_a_ready_node_neither_cordoned_nor_quarantined() -> None:
    cache = Woken().cache()
    cordoned = ready_node("cordoned")
    cordoned["spec"]["unschedulable"] = True
    cache.nodes = {
        "ok": ready_node("ok"), "cordoned": cordoned, "down": ready_node("down", ready=False),
        "sick": ready_node("sick", labels=QUARANTINED),
    }  # fmt: skip
    usable = {name: cache.node_usable(name) for name in [*cache.nodes, "gone"]}
    assert usable == {"ok": True, "cordoned": False, "down": False, "sick": False, "gone": False}
    assert cache.node_quarantined("sick")
    assert cache.node_ok("cordoned")  # its pods are still trusted where they are


def test_a_nodes_zone_is_read_from_its_label() -> None:
    cache = Woken().cache()
    cache.nodes = {"n1": ready_node("n1", zone="zone-c")}
    assert cache.zone_of("n1") == "zone-c"
    assert cache.zone_of("gone") is None
    assert cache.zone_of(None) is None


def test_a_node_lost_or_quarantined_wakes_the_instances_and_services_on_it_alone() -> None:
    woken = Woken()
    cache = woken.cache()
    cache._on_node("ADDED", ready_node("n1"))
    cache._on_pod("ADDED", pod("inst-a", node="n1", **{manifests.INSTANCE: "a"}))
    cache._on_pod("ADDED", pod("inst-b", node="n2", **{manifests.INSTANCE: "b"}))
    cache._on_pod("ADDED", pod("isvc-chat-x", node="n1", **{manifests.SERVICE: "chat"}))
    woken.items.clear()
    cache._on_node("MODIFIED", ready_node("n1"))  # nothing changed
    assert woken.items == []
    cache._on_node("MODIFIED", ready_node("n1", labels=QUARANTINED))
    assert woken.items == [instance_item("acme/a"), service_item("acme/chat")]
    woken.items.clear()
    cache._on_node("DELETED", ready_node("n1", labels=QUARANTINED))
    assert woken.items == [instance_item("acme/a"), service_item("acme/chat")]


def test_the_units_in_use_are_those_named_by_instance_pods() -> None:
    cache = Woken().cache()
    claimed = pod("inst-a", **{manifests.INSTANCE: "a"})
    claimed["metadata"]["annotations"] = {manifests.STOCK_UNIT: "stock-u1"}
    cache._on_pod("ADDED", claimed)
    cache._on_pod("ADDED", pod("inst-b", **{manifests.INSTANCE: "b"}))
    assert cache.stock_units_in_use() == {"stock-u1"}


def unschedulable(found: dict[str, Any]) -> dict[str, Any]:
    found["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    ]
    return found


def test_live_pods_of_every_kind_that_found_no_node_are_waiting_for_one() -> None:
    woken = Woken()
    cache = woken.cache()
    cache._on_pod("ADDED", unschedulable(pod("inst-a", node=None, **{manifests.INSTANCE: "a"})))
    cache._on_pod("ADDED", unschedulable(job_pod("job-train-x", node=None)))
    cache._on_pod("ADDED", unschedulable(job_pod("job-train-y", node=None)))
    cache._on_pod("DELETED", unschedulable(job_pod("job-train-y", node=None)))
    deleting = unschedulable(pod("isvc-chat-z", node=None, **{manifests.SERVICE: "chat"}))
    deleting["metadata"]["deletionTimestamp"] = "2026-11-01T00:00:00Z"
    cache._on_pod("MODIFIED", deleting)
    waiting = sorted(p["metadata"]["name"] for p in cache.waiting_for_a_node())
    assert waiting == ["inst-a", "job-train-x"]
    assert woken.stocks == 3  # each report of one woke the stock pass


def test_the_fleets_gpus_count_usable_nodes_and_live_pods_only() -> None:
    cache = Woken().cache()
    cordoned = ready_node("n2")
    cordoned["spec"]["unschedulable"] = True
    cache.nodes = {"n1": ready_node("n1"), "n2": cordoned}
    gpus = {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "2"}}}]}
    for name, event in (
        ("job-train-a", "ADDED"),
        ("job-train-b", "ADDED"),
        ("job-train-b", "DELETED"),
    ):
        running = job_pod(name, node="n1")
        running["spec"] |= {**gpus, "nodeSelector": {manifests.GPU_PRODUCT_LABEL: H100}}
        cache._on_pod(event, running)
    accounting = cache.gpu_accounting()
    assert (accounting.capacity, accounting.free) == ({H100: 8}, {H100: 6})
    assert accounting.held == {"acme": {H100: 2}}


def test_a_relist_replaces_what_the_watch_had_and_wakes_every_instance_listed() -> None:
    woken = Woken()
    cache = woken.cache()
    cache._on_pod("ADDED", pod("inst-old", **{manifests.INSTANCE: "old"}))
    cache._on_pod("ADDED", job_pod("job-train-a"))
    woken.items.clear()
    cache._replace("Pod", [pod("inst-new", **{manifests.INSTANCE: "new"})])
    assert (list(cache.pods), cache.job_pods) == (["acme/new"], {})
    assert instance_item("acme/new") in woken.items
    assert instance_item("acme/old") not in woken.items


def test_a_relist_of_jobs_keeps_the_jobsets_and_stamps_each_items_kind() -> None:
    cache = Woken().cache()
    labels = {manifests.TENANT: "acme"}
    cache._on_job(
        "ADDED", {"kind": "JobSet", "metadata": {"labels": {**labels, manifests.JOB: "dist"}}}
    )
    cache._on_job(
        "ADDED", {"kind": "Job", "metadata": {"labels": {**labels, manifests.JOB: "old"}}}
    )
    cache._replace("Job", [{"metadata": {"labels": {**labels, manifests.JOB: "train"}}}])
    assert sorted(cache.jobs) == ["acme/dist", "acme/train"]
    assert cache.jobs["acme/train"]["kind"] == "Job"
