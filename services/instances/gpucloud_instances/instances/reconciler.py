"""Instance reconcile: makes an instance's pod match what was asked, and records what it sees.

Runs in the instance's worker, the document's only writer after admission.
Decisions come from observed state (the cached pod and node, the store),
never from remembered events, so a restart mid-operation converges:
deterministic object names make creates idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime
from typing import Any

from gpucloud_libs.clock import aware, now
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_libs.kube import ConflictError, KubeClient, Manifest, QuotaRejectedError

from .. import manifests
from ..documents import InstanceDoc
from ..lifecycle import STARTABLE, TERMINAL, FailureReason, State, Step, observe_pod, path
from ..manifests import WorkloadPod
from ..queue.decision import Waiting
from ..schemas import STORED, InstanceTemplate
from ..storages import StorageRefused
from ..transitions import transition_events
from ..wakeups import ADMISSION, instance_item
from ..workloads.reconciler import ClusterLost, ReconcilerParts, WorkloadReconciler
from . import manifests as instance_manifests
from .lost import lost_steps
from .outbox import InstanceOutbox
from .store import InstanceStore

log = logging.getLogger(__name__)


STOP_GRACE_S = 30


QUOTA_RETRY_S = 2.0


class InstanceReconciler(WorkloadReconciler[InstanceDoc]):
    def __init__(
        self, parts: ReconcilerParts, instances: InstanceStore, *, schedule_timeout_s: float
    ) -> None:
        super().__init__(parts)
        self._instances = instances
        self._held = instances.cache  # the workload cache (a cluster's is its runtime's)
        self._schedule_timeout_s = schedule_timeout_s
        self._outbox = InstanceOutbox(parts.broker, instances)

    def wake_afresh(self, key: str) -> bool:
        """Reconcile the instance soon, read from the store: what this replica remembers
        of it is stale (another writer changed it, or a pass found it drifted)."""
        self._held.forget(key)
        return self._queue.wake(instance_item(key))

    def handed(self, doc: InstanceDoc) -> None:
        """The API just inserted `doc` and wakes this replica's controller with it."""
        self._held.handed(doc)

    async def reconcile(self, key: str) -> None:
        try:
            await self._reconcile(key)
        except ClusterLost as lost:
            self._held.forget(key)
            await self._lost_with_cluster(key, lost)
        except BaseException:
            self._held.forget(key)  # a write may or may not have landed
            raise

    async def _lost_with_cluster(self, key: str, lost: ClusterLost) -> None:
        """Its cluster stopped answering (`lost_steps`); its pod, found when the
        cluster answers again, is an orphan the resync deletes."""
        doc, _ = await self._instances.for_controller(key, self._requests.stop_request)
        deleted = await self._requests.requested(key, "delete")
        if doc is not None and (steps := lost_steps(doc, lost, deleted=deleted)):
            await self._transition(doc, steps, message=lost.message)

    async def _reconcile(self, key: str) -> None:
        doc, stop_request = await self._instances.for_controller(key, self._requests.stop_request)
        stop_requested = stop_request is not None
        if doc is None or not doc.get("admitted"):
            return
        state = State(doc["state"])
        if state == State.QUEUED:
            await self._outbox.publish(doc)
            if stop_request is not None:
                reason = stop_request.get("reason") or "stopped while queued"
                await self._transition(doc, [Step(State.STOPPED, now(), reason)])
            else:
                await self._follow_plan(doc, instance_item(key))
            return
        pod = self._cluster(doc).cache.pods.get(key)
        if state == State.PENDING and pod is None and not stop_requested:
            # The pod first: the admission's event is published right after.
            await self._create_workload(doc)
            await self._outbox.publish(doc)
            return
        await self._outbox.publish(doc)
        if state in TERMINAL:
            deleted = await self._requests.requested(key, "delete")
            await self._settle_terminal(doc, pod, deleted=deleted)
            if not deleted and pod is None and state in STARTABLE:
                await self._start_again(doc)
        elif stop_request is not None:
            await self._stop(doc, pod, stop_request.get("reason"))
        elif pod is None:
            await self._without_pod(doc)
        else:
            await self._follow_pod(doc, pod)

    async def _settle_terminal(
        self, doc: InstanceDoc, pod: Manifest | None, *, deleted: bool
    ) -> None:
        if pod is not None:
            await self._delete_workload(doc)
        if deleted and State(doc["state"]) != State.DELETED:
            await self._transition(doc, [Step(State.DELETED, now())])
        if deleted:
            await self._requests.forget(doc["_id"], "start")  # never to be carried out

    async def _start_again(self, doc: InstanceDoc) -> None:
        """Carry out a start asked of this stopped or failed instance (its old pod gone):
        back to `pending`, where the next reconcile makes its pod. The quota was claimed
        by the API; the claim is made again here (the same claim counts once), as the
        resync may have taken it for an orphan. The stop that ended the last stay is
        forgotten first, so it cannot stop the new one; a crash before the transition
        leaves the start asked, and it is carried out on the next reconcile."""
        key = doc["_id"]
        asked = await self._requests.start_request(key)
        if asked is None:
            return
        if asked.get("sequence") != doc["sequence"]:
            await self._requests.forget(key, "start")  # asked of an earlier stay: done
            return
        stop = await self._requests.stop_request(key)
        if stop is not None and aware(stop["at"]) > aware(asked["at"]):
            # Stopped again before it started: the start is cancelled, its claim let go.
            await self._quota.release(doc["tenant_id"], doc["instance_id"])
            await self._requests.forget(key, "start")
            return
        if not await self._claim_quota(doc, doc["instance_id"], _quota_gpus(doc)):
            await self._quota.release(doc["tenant_id"], doc["instance_id"])
            await self._requests.forget(key, "start")
            await self._instances.update_fields(
                doc["_id"], {"message": "the start was refused: the tenant is not active or its "
                                 "quota has no room"},
            )  # fmt: skip
            return
        if await self._requests.requested(key, "delete"):
            return  # deleted meanwhile: the next reconcile settles it
        await self._requests.forget(key, "stop")
        self._held.forget(key)  # the stop request it read is gone
        fresh: InstanceDoc = {**doc, "node": None, "zone": None}  # the events say: no node yet
        started = await self._transition(
            fresh, [Step(State.PENDING, now())], node=None, zone=None, pod_ip=None,
            from_stock=False, message=None,
        )  # fmt: skip
        if started:
            # Carried out (a crash before this leaves one of an earlier stay, forgotten
            # when that stay ends).
            await self._requests.forget(key, "start")
            self._queue.wake(instance_item(key))

    async def pending_starts(self) -> list[str]:
        """The instances a start was asked of and not yet carried out (or cancelled)."""
        return await self._requests.keys_requested("start")

    async def _stop(self, doc: InstanceDoc, pod: Manifest | None, reason: str | None) -> None:
        if pod is not None and not pod["metadata"].get("deletionTimestamp"):
            await self._cluster(doc).kube.delete(
                "Pod", doc["namespace"], instance_manifests.pod_name(doc["instance_id"]),
                grace_s=STOP_GRACE_S,
            )  # fmt: skip
        if pod is None:
            await self._delete_workload(doc)
            await self._transition(doc, _to_stopped(State(doc["state"]), reason=reason))
        elif State(doc["state"]) != State.STOPPING:
            await self._transition(doc, [Step(State.STOPPING, now(), reason)])

    async def _without_pod(self, doc: InstanceDoc) -> None:
        node = doc.get("node")
        lost = node and node not in self._cluster(doc).cache.nodes
        reason = FailureReason.NODE_LOST if lost else FailureReason.POD_LOST
        message = f"the pod disappeared while {doc['state']}"
        await self._fail(doc, reason, message, pod_exists=False)

    async def _follow_pod(self, doc: InstanceDoc, pod: Manifest) -> None:
        state = State(doc["state"])
        at = now()
        cache = self._cluster(doc).cache
        observed = observe_pod(pod, node_ok=cache.pod_node_ok(pod), now=at)
        if observed.state == State.FAILED:
            assert observed.reason is not None
            await self._fail(doc, observed.reason, observed.message, pod_exists=True)
        elif observed.state == State.STOPPING:
            return  # deleted by someone else: the DELETED event brings us back
        elif observed.state == State.STOPPED:
            await self._delete_workload(doc)
            await self._transition(doc, _to_stopped(state, at), reason=None)
        elif observed.state == State.PENDING:
            await self._check_pending(doc, observed.unschedulable_message)
        else:
            last_at = aware(doc["history"][-1]["at"]) if doc["history"] else at
            steps = path(state, observed.state, observed.at, not_before=last_at)
            if steps:
                node = observed.node
                zone = cache.zone_of(node)
                doc = {**doc, "node": node, "zone": zone}  # events carry where it landed
                from_stock = manifests.FROM_STOCK in pod["metadata"].get("labels", {})
                await self._transition(
                    doc, steps, node=node, zone=zone, pod_ip=observed.pod_ip, from_stock=from_stock
                )
            elif observed.pod_ip and observed.pod_ip != doc.get("pod_ip"):
                await self._instances.update_fields(doc["_id"], {"pod_ip": observed.pod_ip})

    # --- the admission queue (`queue: true` starts) ----------------------------------

    async def _waits(self, doc: InstanceDoc, waiting: Waiting) -> None:
        if waiting.reason != doc.get("queue_reason"):
            await self._instances.update_fields(doc["_id"], {"queue_reason": waiting.reason})

    async def _admit(self, doc: InstanceDoc, *, borrowing: bool) -> None:
        """Claim the quota, then go `pending`: the next reconcile creates the pod. The
        claim is the last word: the pass planned from figures that may have moved.
        (Instances never borrow: the pass plans borrowing for jobs alone.)"""
        if not await self._claim_quota(doc, doc["instance_id"], _quota_gpus(doc)):
            self._queue.wake(ADMISSION)  # the next pass plans again, from the figures now
            return
        await self._transition(doc, [Step(State.PENDING, now())], queue_reason=None)
        self._queue.wake(instance_item(doc["_id"]))

    # --- transitions and their events ----------------------------------------------

    async def _transition(self, doc: InstanceDoc, steps: list[Step], **extra: Any) -> bool:
        """Record the steps (with `extra` fields; the store's write tells the readers
        waiting on the instance), then publish the events. False when the document
        moved under us (it is looked at again)."""
        done = await self._instances.transition(
            doc, steps, events=transition_events(doc, steps), extra=extra,
            drop_published=self._outbox.published(doc),
        )  # fmt: skip
        if done is None:
            self._held.forget(doc["_id"])
            self._queue.wake(instance_item(doc["_id"]))  # the document moved under us; look again
            return False
        await self._outbox.publish(done)
        if State(done["state"]) in TERMINAL:
            await self._quota.release(done["tenant_id"], done["instance_id"])
        return True

    def reset(self) -> None:
        """Leadership ended: the next leader's word is the store's."""
        self._held.forget_all()
        self._outbox.reset()

    async def _fail(
        self, doc: InstanceDoc, reason: FailureReason, message: str | None, *, pod_exists: bool
    ) -> None:
        await self._delete_workload(doc, pod=pod_exists)
        await self._transition(doc, [Step(State.FAILED, now(), reason.value)], message=message)
        log.info("instance failed", extra={"instance": doc["_id"], "reason": reason.value})

    # --- placement -------------------------------------------------------------------

    async def _check_pending(self, doc: InstanceDoc, unschedulable: str | None) -> None:
        if unschedulable is None:
            return
        if not self._cluster(doc).cache.fits_fleet(doc):
            await self._fail(
                doc,
                FailureReason.UNSCHEDULABLE,
                f"no {doc['gpu_type']} node can hold {doc['gpu_count']} GPUs: {unschedulable}",
                pod_exists=True,
            )
            return
        if _waited_s(doc) > self._schedule_timeout_s:
            await self._fail(doc, FailureReason.INSUFFICIENT_GPUS, unschedulable, pod_exists=True)
        elif doc.get("message") != unschedulable:
            await self._instances.update_fields(doc["_id"], {"message": unschedulable})

    async def _create_workload(self, doc: InstanceDoc) -> None:
        cluster = self._cluster(doc)
        if not await self._namespace_ready(doc, cluster):
            return
        storage_secrets = await self._attach_storages(doc, doc["instance_id"], stay=_stay(doc))
        if storage_secrets is None:
            return
        template = InstanceTemplate.model_validate(doc["template"], context=STORED)
        namespace_name, instance_id, tenant_id = (
            doc["namespace"],
            doc["instance_id"],
            doc["tenant_id"],
        )
        service = instance_manifests.instance_service(
            namespace_name, tenant_id, instance_id, template
        )
        # A warm unit's pod is bound to its node directly, skipping the scheduler
        # (that is what the stock paid for); otherwise the scheduler places it. Each
        # cluster keeps its own stocks.
        stock = cluster.stocks.claim(doc)
        pull_secrets, _ = await asyncio.gather(
            self._pull_secrets.for_image(tenant_id, namespace_name, doc["image"], cluster.kube),
            _create_service(cluster.kube, service),
        )
        shape = WorkloadPod.of(
            doc, image=doc["image"], template=template, storage_secrets=storage_secrets,
            pull_secrets=pull_secrets,
        )  # fmt: skip
        pod = instance_manifests.instance_pod(shape, instance_id, stock)
        try:
            created = await cluster.kube.create(pod)
        except ConflictError:
            return  # created by an earlier attempt; the watch brings it
        except QuotaRejectedError as error:
            await self._wait_for_quota(doc, error)
            return
        cluster.cache.pods.setdefault(doc["_id"], created)

    async def _project_gone(self, doc: InstanceDoc) -> None:
        await self._requests.request(doc["_id"], "stop", reason="its project was deleted")
        self.wake_afresh(doc["_id"])  # what this replica holds of it knows of no stop

    async def _storage_refused(self, doc: InstanceDoc, error: StorageRefused) -> None:
        await self._fail(doc, FailureReason.STORAGE_UNAVAILABLE, str(error), pod_exists=False)

    async def _wait_for_quota(self, doc: InstanceDoc, error: QuotaRejectedError) -> None:
        """The namespace quota is the backstop behind the API's own check; it also counts
        pods still terminating or left orphaned, which free up soon."""
        if _waited_s(doc) > self._schedule_timeout_s:
            await self._fail(doc, FailureReason.QUOTA_EXCEEDED, str(error), pod_exists=False)
            return
        await self._instances.update_fields(
            doc["_id"], {"message": "waiting for the namespace quota to free up"}
        )
        self._queue.wake_later(QUOTA_RETRY_S, instance_item(doc["_id"]))

    async def _delete_workload(self, doc: InstanceDoc, *, pod: bool = True) -> None:
        await delete_workload(
            self._cluster(doc).kube, doc["namespace"],
            instance_manifests.pod_name(doc["instance_id"]), pod=pod,
        )  # fmt: skip


async def delete_workload(
    kube: KubeClient, namespace_name: str, name: str, *, pod: bool = True
) -> None:
    """Delete an instance's pod (unless `pod` is False) and its Service."""
    if pod:
        await kube.delete("Pod", namespace_name, name, grace_s=0)
    await kube.delete("Service", namespace_name, name)


async def _create_service(kube: KubeClient, service: Manifest | None) -> None:
    if service is not None:
        with contextlib.suppress(ConflictError):
            await kube.create(service)


def _quota_gpus(doc: InstanceDoc) -> int:
    """The whole GPUs of quota an instance holds: its units, weighed."""
    return GpuShare.of(doc).quota_gpus(doc["gpu_count"])


def _to_stopped(
    state: State, at: datetime | None = None, *, reason: str | None = None
) -> list[Step]:
    """The steps to `stopped`, through `stopping` unless already there (with the stop's
    reason, where it was not the owner's own)."""
    at = at or now()
    if state == State.STOPPING:
        return [Step(State.STOPPED, at)]
    return [Step(State.STOPPING, at, reason), Step(State.STOPPED, at)]


def _latest_pending(doc: InstanceDoc) -> tuple[int, datetime] | None:
    """The sequence and time of the instance's latest `pending`: where its stay on a
    node (a start again is a new one) began."""
    for sequence, step in reversed(list(enumerate(doc.get("history", []), start=1))):
        if step["state"] == State.PENDING:
            return sequence, step["at"]
    return None


def _stay(doc: InstanceDoc) -> int:
    """Which stay on a node this is: its `pending`'s sequence."""
    latest = _latest_pending(doc)
    return latest[0] if latest else 0


def _waited_s(doc: InstanceDoc) -> float:
    """How long this stay has waited for a node: since its `pending`, or its creation."""
    latest = _latest_pending(doc)
    return (now() - aware(latest[1] if latest else doc["created_at"])).total_seconds()
