"""Inference service reconcile: the Deployment made to match the newest configuration,
and the replicas recorded as the pod watch sees them.

Runs in the service's worker, the document's only writer after its insert.
Kubernetes' Deployment controller does the rolling update and replaces lost
pods; this pass adds what it does not do: replicas on a quarantined or lost
node, and crash-looping ones, are deleted so that the Deployment starts them
elsewhere, and a deleted service releases its quota only once its last replica
is gone.

Each replica is billed as a job's run is (decision 68): its transitions,
`scheduled` (bound to a node: its GPUs are held) then `running` then `ended`,
are recorded with their events in one guarded update and published from the
document's outbox on `gpucloud.inference.lifecycle.v1`.
"""

from __future__ import annotations

import logging
import math
from datetime import timedelta

from gpucloud_libs.clock import aware, now, now_as_stored
from gpucloud_libs.events import InferenceServiceDeleted
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.kube import ConflictError
from gpucloud_libs.mongo import Document
from gpucloud_libs.naming import service_workload_id
from gpucloud_libs.outbox import OutboxEntry, publish_in_order
from gpucloud_libs.topics import INFERENCE_LIFECYCLE

from ..documents import ReplicaRunDoc, ScaleDoc, ServiceConfigDoc, ServiceDoc, ServiceReplicaDoc
from ..job_lifecycle import observe_run, run_floor, run_steps
from ..manifests import WorkloadPod
from ..schemas import STORED, InstanceTemplate
from ..storages import StorageRefused
from ..store import service_request_key
from ..transitions import INFERENCE_EVENT_SOURCE, replica_event
from ..wakeups import service_item
from ..workloads.reconciler import (
    CLUSTER_RETRY_S,
    ClusterLost,
    ReconcilerParts,
    WorkloadReconciler,
)
from . import manifests as service_manifests
from .lost import ended_with_cluster
from .replicas import crash_looping, recorded_as_run, replica_state_of, replica_view, revision_of
from .store import ServiceStore

log = logging.getLogger(__name__)

#: A service whose first configuration never got written (a crash between the two
#: inserts) is removed after this.
UNCONFIGURED_TTL = timedelta(minutes=2)
#: How soon a service whose storages were refused tries again.
STORAGE_RETRY_S = 10.0
#: A gateway replica's load report older than this no longer counts (it reports
#: every second while a service is busy, and once more when it goes idle).
LOAD_FRESH = timedelta(seconds=10)


class InferenceReconciler(WorkloadReconciler[ServiceDoc]):
    def __init__(
        self,
        parts: ReconcilerParts,
        services: ServiceStore,
    ) -> None:
        super().__init__(parts)
        self._services = services

    async def reconcile(self, key: str) -> None:
        try:
            await self._reconcile(key)
        except ClusterLost as lost:
            await self._lost_with_cluster(key, lost)

    async def _lost_with_cluster(self, key: str, lost: ClusterLost) -> None:
        """Its cluster stopped answering: every replica's run ends at that (a replica
        found when it answers again is replaced: `_replace_unhealthy`), the gateway is
        given no replica, and the service waits for its cluster; one being deleted is
        forgotten without it (its Deployment there is then an orphan)."""
        doc = await self._services.get(key)
        if doc is None:
            return
        runs, events = ended_with_cluster(doc, lost)
        changes: Document = {"runs": runs} if events else {}
        if doc["replicas"]:
            changes["replicas"] = []
        if doc.get("message") != lost.message:
            changes["message"] = lost.message
        if changes:
            saved = await self._saved(doc, changes, events)
            if saved is None:
                return
            doc = saved
        if await self._requests.requested(service_request_key(doc), "delete"):
            await self._forget(doc)
            return
        self._queue.wake_later(CLUSTER_RETRY_S, service_item(key))

    async def _reconcile(self, key: str) -> None:
        doc = await self._services.get(key)
        if doc is None:
            return
        doc = await self._flush(doc)
        cluster = self._cluster(doc)
        deleting = await self._requests.requested(service_request_key(doc), "delete")
        changes: Document = {}
        if deleting:
            await cluster.kube.delete(
                "Deployment", doc["namespace"], service_manifests.deployment_name(doc["service_id"]),
                cascade=True,
            )  # fmt: skip
        else:
            configs = await self._services.configs(key)
            if not configs:
                if now() - aware(doc["created_at"]) > UNCONFIGURED_TTL:
                    await self._forget(doc)
                return
            config = configs[-1]
            scale = await self._scale(doc, config)
            if scale != doc.get("scale"):
                changes["scale"] = scale
            if doc["applied_generation"] != config["generation"]:
                if not await self._namespace_ready(doc, cluster):
                    return
                storage_secrets = await self._attach_storages(
                    doc, service_workload_id(doc["service_id"])
                )
                if storage_secrets is None:
                    return
                await self._apply(doc, config, scale["replicas"], storage_secrets)
                changes["message"] = None
                changes |= {
                    "applied_generation": config["generation"],
                    "applied_revision": config["revision"],
                    "applied_replicas": scale["replicas"],
                }
            elif doc.get("applied_replicas") != scale["replicas"]:
                await cluster.kube.patch(
                    "Deployment", doc["namespace"], service_manifests.deployment_name(doc["service_id"]),
                    {"spec": {"replicas": scale["replicas"]}},
                )  # fmt: skip
                changes["applied_replicas"] = scale["replicas"]
            await self._replace_unhealthy(doc)
        runs, events = self._observe_runs(doc)
        replicas = self._observe(doc)
        if replicas != doc["replicas"]:
            changes["replicas"] = replicas
        if events:
            changes["runs"] = runs
        if changes:
            saved = await self._saved(doc, changes, events)
            if saved is None:
                return
            doc = saved
        self._forget_recorded_pods(doc)
        if deleting and not cluster.cache.service_pods.get(key) and not doc.get("outbox"):
            await self._forget(doc)

    async def _saved(
        self, doc: ServiceDoc, changes: Document, events: list[OutboxEntry]
    ) -> ServiceDoc | None:
        """Save and publish `changes`; None when the document moved under us (it is
        looked at again)."""
        saved = await self._services.save(doc, changes, events)
        if saved is None:
            self._queue.wake(service_item(doc["_id"]))
            return None
        return await self._flush(saved)

    def _observe_runs(self, doc: ServiceDoc) -> tuple[dict[str, ReplicaRunDoc], list[OutboxEntry]]:
        """Each replica's transitions since the last pass, with their events."""
        runs = {rid: ReplicaRunDoc(**run) for rid, run in doc["runs"].items()}
        events: list[OutboxEntry] = []
        at = now_as_stored()  # a replica's end may be this instant: recorded and billed
        prefix = service_manifests.deployment_name(doc["service_id"])
        cache = self._cluster(doc).cache
        tracked = cache.service_pods.get(doc["_id"], {})
        for tracked_pod in tracked.values():
            observed = observe_run(
                tracked_pod.pod, job_object_name=prefix, now=at, gone_at=tracked_pod.gone_at
            )
            run = runs.get(observed.run_id)
            current = None if run is None else recorded_as_run(run["state"])
            floor = run_floor(aware(doc["created_at"]), run, tracked_pod.seen_at)
            steps = run_steps(current, observed, not_before=floor)
            if not steps:
                continue
            if run is None:
                run = {
                    "state": "scheduled", "sequence": 0, "revision": revision_of(tracked_pod),
                    "node": observed.node, "zone": cache.zone_of(observed.node),
                    "scheduled_at": None, "ended_at": None,
                }  # fmt: skip
            for state, step_at in steps:
                replica_state = replica_state_of(state)
                events.append(replica_event(doc, observed.run_id, run, replica_state, step_at))
                run = {**run, "state": replica_state, "sequence": run["sequence"] + 1}
                if replica_state == "scheduled":
                    run["scheduled_at"] = step_at
                elif replica_state == "ended":
                    run["ended_at"] = step_at
            runs[observed.run_id] = run
        present = {
            observe_run(t.pod, job_object_name=prefix, now=at, gone_at=t.gone_at).run_id
            for t in tracked.values()
        }
        for rid, run in runs.items():
            if rid not in present and run["state"] != "ended":
                # Its pod is gone and its end went unseen (a relist after a restart).
                events.append(replica_event(doc, rid, run, "ended", at))
                runs[rid] = {**run, "state": "ended", "sequence": run["sequence"] + 1,
                             "ended_at": at}  # fmt: skip
        return runs, events

    def _forget_recorded_pods(self, doc: ServiceDoc) -> None:
        prefix = service_manifests.deployment_name(doc["service_id"])
        cache = self._cluster(doc).cache
        for name, tracked in list(cache.service_pods.get(doc["_id"], {}).items()):
            run = doc["runs"].get(name.removeprefix(f"{prefix}-"))
            if tracked.gone_at is not None and (run is None or run["state"] == "ended"):
                cache.forget_service_pod(doc["_id"], name)

    async def _flush(self, doc: ServiceDoc) -> ServiceDoc:
        """Publish the recorded events in order, then drop them (a crash in between
        republishes the same event ids, which consumers dedupe); the document after."""
        if not doc.get("outbox"):
            return doc
        await publish_in_order(self._broker, INFERENCE_LIFECYCLE, doc["outbox"])
        await self._services.clear_outbox(doc["_id"], doc["version"])
        return {**doc, "outbox": [], "has_outbox": False}

    async def _scale(self, doc: ServiceDoc, config: ServiceConfigDoc) -> ScaleDoc:
        """How many replicas the service runs now. Without autoscaling, `minReplicas`.
        With it, ceil(requests in flight / target), within the bounds: up at once, down
        only once wanted for the scale-down delay, and to zero (with `minReplicas` 0)
        only after no request for `scaleToZeroAfterSeconds`."""
        at = now()
        previous: ScaleDoc = doc.get("scale") or {
            "replicas": max(config["min_replicas"], 1), "busy_at": None, "lower_since": None,
        }  # fmt: skip
        auto = config["autoscaling"]
        if auto is None:
            return {"replicas": config["min_replicas"], "busy_at": None, "lower_since": None}
        in_flight = await self._services.load(doc["_id"], at - LOAD_FRESH)
        busy_at = at if in_flight > 0 else previous["busy_at"]
        wanted = math.ceil(in_flight / auto["targetInFlight"])
        floor = config["min_replicas"]
        idle_for = at - aware(busy_at or doc["created_at"])
        to_zero_after = timedelta(seconds=auto["scaleToZeroAfterSeconds"])
        if floor == 0 and idle_for < to_zero_after:
            floor = 1
            # Nothing else wakes an idle service: look again when it may go to zero.
            wait_s = (to_zero_after - idle_for).total_seconds()
            self._queue.wake_soon(service_item(doc["_id"]), wait_s + 0.1)
        wanted = min(max(wanted, floor), config["max_replicas"])
        current = previous["replicas"]
        if wanted >= current:
            return {"replicas": wanted, "busy_at": busy_at, "lower_since": None}
        lower_since = aware(previous["lower_since"] or at)
        delay = timedelta(seconds=auto["scaleDownDelaySeconds"])
        if at - lower_since >= delay:
            return {"replicas": wanted, "busy_at": busy_at, "lower_since": None}
        wait_s = (delay - (at - lower_since)).total_seconds()
        self._queue.wake_soon(service_item(doc["_id"]), wait_s + 0.1)
        return {"replicas": current, "busy_at": busy_at, "lower_since": lower_since}

    async def _project_gone(self, doc: ServiceDoc) -> None:
        await self._requests.request(
            service_request_key(doc), "delete", reason="its project was deleted"
        )
        self._queue.wake(service_item(doc["_id"]))

    async def _storage_refused(self, doc: ServiceDoc, error: StorageRefused) -> None:
        """Recorded, and tried again later: a service's replicas wait for their storage."""
        message = f"storage unavailable: {error}"
        if doc.get("message") != message:
            await self._services.save(doc, {"message": message}, [])
        self._queue.wake_soon(service_item(doc["_id"]), STORAGE_RETRY_S)

    async def _apply(
        self,
        doc: ServiceDoc,
        config: ServiceConfigDoc,
        replicas: int,
        storage_secrets: list[tuple[str, str]],
    ) -> None:
        template = config["template"]
        cluster = self._cluster(doc)
        pod = WorkloadPod.of(
            doc, image=template["image"], command=template["command"], args=template["args"],
            template=InstanceTemplate.model_validate(
                {"envs": template["env"], "volumes": template["volumes"],
                 "runAsUser": template.get("runAsUser")},
                context=STORED,
            ),
            storage_secrets=storage_secrets,
            pull_secrets=await self._pull_secrets.for_image(
                doc["tenant_id"], doc["namespace"], template["image"], cluster.kube
            ),
        )  # fmt: skip
        deployment = service_manifests.inference_deployment(
            pod,
            service_id=doc["service_id"],
            revision=config["revision"],
            serving=service_manifests.Serving(doc["port"], doc["readiness_path"]),
            rollout=service_manifests.Rollout(
                replicas, config["max_surge"], config["max_unavailable"]
            ),
        )
        try:
            await cluster.kube.create(deployment)
        except ConflictError:
            # A whole replacement, not a merge: a variable taken out must go.
            await cluster.kube.replace(
                "Deployment", doc["namespace"], deployment["metadata"]["name"], deployment
            )

    async def _replace_unhealthy(self, doc: ServiceDoc) -> None:
        """Delete replicas the Deployment would keep but should not: on a quarantined
        or lost node, or crash-looping. It starts each again where it can run."""
        cluster = self._cluster(doc)
        prefix = service_manifests.deployment_name(doc["service_id"])
        # A copy: the watch changes the cache while a deletion is awaited.
        for tracked in list(cluster.cache.service_pods.get(doc["_id"], {}).values()):
            pod = tracked.pod
            if tracked.gone_at is not None or pod["metadata"].get("deletionTimestamp"):
                continue
            node = pod.get("spec", {}).get("nodeName")
            run = doc["runs"].get(pod["metadata"]["name"].removeprefix(f"{prefix}-"))
            why = None
            if run is not None and run["state"] == "ended":
                why = "its run ended with its cluster"  # lost, then found again
            elif node and not cluster.cache.node_ok(node):
                why = "node lost"
            elif node and cluster.cache.node_quarantined(node):
                why = "node quarantined"
            elif crash_looping(pod):
                why = "crash loop"
            if why is None:
                continue
            log.warning(
                "replacing a replica",
                extra={"service": doc["_id"], "pod": pod["metadata"]["name"], "why": why},
            )
            # A lost node's kubelet will never confirm a graceful deletion.
            grace = 0 if why == "node lost" else None
            await cluster.kube.delete(
                "Pod", doc["namespace"], pod["metadata"]["name"], grace_s=grace
            )

    def _observe(self, doc: ServiceDoc) -> list[ServiceReplicaDoc]:
        """The replicas whose pods are still there (terminating ones too)."""
        pods = self._cluster(doc).cache.service_pods.get(doc["_id"], {})
        return [replica_view(t.pod) for _, t in sorted(pods.items()) if t.gone_at is None]

    async def _forget(self, doc: ServiceDoc) -> None:
        """The service is gone: its quota, its documents, and (by the event) what the
        storage service gave it. The event goes first; a failed publish keeps the
        service for the next pass, and a repeat is deduplicated by its id."""
        deleted = InferenceServiceDeleted(
            service_id=doc["service_id"], tenant_id=doc["tenant_id"], at=now()
        )
        # Its runs outlive it: the tenant checks the service's bill against them.
        await self._services.keep_runs(doc, deleted.at)
        event_id = f"{doc['_id']}@{doc['incarnation']}#deleted"
        await publish_event(
            self._broker, INFERENCE_LIFECYCLE, deleted, source=INFERENCE_EVENT_SOURCE,
            event_id=event_id,
        )  # fmt: skip
        await self._quota.release(doc["tenant_id"], service_workload_id(doc["service_id"]))
        await self._services.remove(doc["_id"])
        await self._requests.forget(service_request_key(doc), "delete")
