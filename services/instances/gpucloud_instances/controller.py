"""The reconcile loop: makes Kubernetes match the store, and records what it observes.

One replica at a time acts, the holder of a coordination.k8s.io Lease. The
leader keeps list+watch caches of the managed pods and of the nodes (with
resourceVersion bookkeeping; an expired version relists), and reconciles an
instance whenever its pod or node changes, when the API wakes it (an inserted
wake-up document, polled), and on a periodic resync of every live instance. Decisions come from observed state
(the pod, the node, the store), never from remembered events, so a restart
mid-operation converges: deterministic object names make creates idempotent,
and orphans (a pod without a live instance) are deleted on resync.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from faststream.kafka import KafkaBroker
from opentelemetry import metrics

from gpucloud_libs.errors import DependencyUnavailable
from gpucloud_libs.kube import (
    ConflictError,
    GoneError,
    KubeClient,
    KubeError,
    NotFoundError,
    QuotaRejectedError,
)
from gpucloud_libs.mongo import Document
from gpucloud_libs.topics import INSTANCE_LIFECYCLE

from . import manifests
from .lifecycle import TERMINAL, FailureReason, State, Step, observe_pod, path
from .schemas import InstanceTemplate
from .service import tenant_manifests, transition_events
from .settings import InstancesSettings
from .storages import StorageClient, StorageRefused
from .store import InstanceStore, RequestStore, SpecStore, StockStore, TenantStore, now

log = logging.getLogger(__name__)

LEASE_NAME = "gpucloud-instances-controller"
STOP_GRACE_S = 30
WAKEUP_POLL_S = 0.2
OUTBOX_SWEEP_S = 30.0  # transitions flush inline; this only catches crash leftovers
UNADMITTED_TTL = timedelta(minutes=2)
SLOW_RECONCILE_S = 1.0


class LeaseLost(Exception):
    pass


class Controller:
    def __init__(
        self,
        settings: InstancesSettings,
        kube: KubeClient,
        broker: KafkaBroker,
        specs: SpecStore,
        tenants: TenantStore,
        instances: InstanceStore,
        stocks: StockStore,
        requests: RequestStore,
        storage: StorageClient,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.storage = storage
        self.broker = broker
        self.specs = specs
        self.tenants = tenants
        self.instances = instances
        self.stocks = stocks
        self.requests = requests
        # Serialises claims, so two starts never take the same warm unit.
        self._claim_lock = asyncio.Lock()
        # Specs with a stock target, as of the last stock pass: starts of other
        # specs skip the claim (and its lock) altogether.
        self._stocked_specs: set[str] = set()
        self.pods: dict[str, dict[str, Any]] = {}  # instance key -> pod
        self.stock_pods: dict[str, dict[str, Any]] = {}  # placeholder name -> pod
        self.nodes: dict[str, dict[str, Any]] = {}
        self.is_leader = False
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._synced = asyncio.Event()
        self._synced_kinds: set[str] = set()
        self._active: set[str] = set()  # items a worker is reconciling now
        self._again: set[str] = set()  # woken while active: run once more after
        self._task: asyncio.Task[None] | None = None
        self._reconcile_seconds = metrics.get_meter(
            "gpucloud.instances.controller"
        ).create_histogram(
            "gpucloud.reconcile.duration", unit="s", description="Time to reconcile one item"
        )

    # --- lifecycle of the controller itself ---------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="instances-controller")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._release_lease()

    def wake(self, item: str) -> None:
        """Reconcile `item` soon: an instance key, `tenant:<id>` or `stocks`.

        Only the leader has a worker pool; other replicas' API calls also
        insert a wake-up document, which the leader polls.
        """
        if not self.is_leader:
            return
        if item in self._active:
            self._again.add(item)
        elif item not in self._queued:
            self._queued.add(item)
            self._queue.put_nowait(item)

    async def _run(self) -> None:
        while True:
            try:
                if await self._acquire_lease():
                    log.info(
                        "became controller leader", extra={"replica": self.settings.replica_id}
                    )
                    self.is_leader = True
                    await self._lead()
            except LeaseLost:
                log.warning("lost the controller lease")
            except (KubeError, DependencyUnavailable) as error:
                log.warning("controller interrupted; retrying", extra={"error": str(error)})
            except Exception:
                log.exception("controller crashed; restarting")
            finally:
                self.is_leader = False
                self._synced.clear()
                self._synced_kinds.clear()
            await asyncio.sleep(2)

    async def _lead(self) -> None:
        await self._ensure_cluster_objects()
        async with asyncio.TaskGroup() as group:
            group.create_task(self._renew_lease_forever())
            group.create_task(self._informer("Pod", f"{manifests.MANAGED}=true", self._on_pod))
            group.create_task(self._informer("Node", "", self._on_node))
            await self._synced.wait()
            for index in range(self.settings.reconcile_workers):
                group.create_task(self._worker(index))
            group.create_task(self._every(WAKEUP_POLL_S, self._poll_wakeups))
            group.create_task(self._every(OUTBOX_SWEEP_S, self._sweep_outbox))
            group.create_task(self._every(self.settings.resync_interval_s, self._resync))

    async def _every(self, interval: float, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await job()
            except (KubeError, DependencyUnavailable) as error:
                log.warning("periodic job failed", extra={"job": job.__name__, "error": str(error)})
            await asyncio.sleep(interval)

    # --- lease ----------------------------------------------------------------------

    def _lease_body(self, resource_version: str | None) -> dict[str, Any]:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        metadata: dict[str, Any] = {"name": LEASE_NAME, "namespace": self.settings.system_namespace}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.settings.replica_id,
                "leaseDurationSeconds": self.settings.lease_duration_s,
                "renewTime": stamp,
                "acquireTime": stamp,
            },
        }

    async def _acquire_lease(self) -> bool:
        await self.kube.ensure(manifests.namespace(self.settings.system_namespace, {}))
        try:
            lease = await self.kube.read("Lease", self.settings.system_namespace, LEASE_NAME)
        except NotFoundError:
            try:
                await self.kube.create(self._lease_body(None))
            except ConflictError:
                return False
            return True
        spec = lease.get("spec", {})
        holder = spec.get("holderIdentity")
        renewed = spec.get("renewTime")
        expired = True
        if renewed:
            renewed_at = datetime.fromisoformat(renewed.replace("Z", "+00:00"))
            expired = datetime.now(UTC) - renewed_at > timedelta(
                seconds=spec.get("leaseDurationSeconds", 15)
            )
        if holder not in (None, "", self.settings.replica_id) and not expired:
            return False
        try:
            await self.kube.replace(
                "Lease",
                self.settings.system_namespace,
                LEASE_NAME,
                self._lease_body(lease["metadata"]["resourceVersion"]),
            )
        except ConflictError:
            return False
        return True

    async def _renew_lease_forever(self) -> None:
        interval = self.settings.lease_duration_s / 3
        while True:
            await asyncio.sleep(interval)
            try:
                lease = await self.kube.read("Lease", self.settings.system_namespace, LEASE_NAME)
                if lease.get("spec", {}).get("holderIdentity") != self.settings.replica_id:
                    raise LeaseLost
                body = self._lease_body(lease["metadata"]["resourceVersion"])
                body["spec"]["acquireTime"] = lease["spec"].get("acquireTime")
                await self.kube.replace("Lease", self.settings.system_namespace, LEASE_NAME, body)
            except (ConflictError, NotFoundError) as error:
                raise LeaseLost from error

    async def _release_lease(self) -> None:
        """Hand the lease over at once on a clean shutdown instead of letting it expire."""
        if not self.is_leader:
            return
        with contextlib.suppress(KubeError, DependencyUnavailable):
            lease = await self.kube.read("Lease", self.settings.system_namespace, LEASE_NAME)
            if lease.get("spec", {}).get("holderIdentity") == self.settings.replica_id:
                lease["spec"]["holderIdentity"] = ""
                await self.kube.replace("Lease", self.settings.system_namespace, LEASE_NAME, lease)

    async def _ensure_cluster_objects(self) -> None:
        for priority_class in manifests.priority_classes():
            with contextlib.suppress(ConflictError):
                await self.kube.create(priority_class)
        await self.kube.ensure(manifests.namespace(self.settings.stock_namespace, {}))

    # --- informers --------------------------------------------------------------------

    async def _informer(
        self, kind: str, selector: str, on_event: Callable[[str, dict[str, Any]], None]
    ) -> None:
        """List, then watch from the list's resourceVersion; relist when it expires."""
        while True:
            items, version = await self.kube.list(kind, label_selector=selector)
            self._replace_cache(kind, items)
            self._synced_kinds.add(kind)
            if self._synced_kinds >= {"Pod", "Node"}:
                self._synced.set()
            try:
                while True:
                    async for event_type, obj in self.kube.watch(
                        kind, resource_version=version, label_selector=selector
                    ):
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        if event_type != "BOOKMARK":
                            on_event(event_type, obj)
            except GoneError:
                log.info("watch expired; relisting", extra={"kind": kind})

    def _replace_cache(self, kind: str, items: list[dict[str, Any]]) -> None:
        if kind == "Node":
            self.nodes = {node["metadata"]["name"]: node for node in items}
            return
        self.pods.clear()
        self.stock_pods.clear()
        for pod in items:
            self._on_pod("ADDED", pod)
        for key in list(self.pods):
            self.wake(key)

    def _on_pod(self, event_type: str, pod: dict[str, Any]) -> None:
        labels = pod.get("metadata", {}).get("labels", {})
        if manifests.STOCK in labels:
            name = pod["metadata"]["name"]
            if event_type == "DELETED":
                self.stock_pods.pop(name, None)
            else:
                self.stock_pods[name] = pod
            self.wake("stocks")
            return
        tenant, instance = labels.get(manifests.TENANT), labels.get(manifests.INSTANCE)
        if not tenant or not instance:
            return
        key = f"{tenant}/{instance}"
        if event_type == "DELETED":
            self.pods.pop(key, None)
        else:
            self.pods[key] = pod
        self.wake(key)

    def _on_node(self, event_type: str, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        was_ok = self._node_ok(name)
        if event_type == "DELETED":
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = node
        if was_ok != self._node_ok(name):
            for key, pod in self.pods.items():
                if pod.get("spec", {}).get("nodeName") == name:
                    self.wake(key)

    def _node_ok(self, name: str | None) -> bool:
        if name is None:
            return True
        node = self.nodes.get(name)
        if node is None:
            return False
        conditions = {c["type"]: c for c in node.get("status", {}).get("conditions") or []}
        ready = conditions.get("Ready", {})
        if ready.get("status") == "True":
            return True
        since = ready.get("lastTransitionTime")
        if not since:
            return False
        not_ready_for = now() - datetime.fromisoformat(since.replace("Z", "+00:00"))
        return not_ready_for.total_seconds() < self.settings.node_lost_grace_s

    # --- work queue -------------------------------------------------------------------

    async def _worker(self, index: int) -> None:
        while True:
            item = await self._queue.get()
            self._queued.discard(item)
            self._active.add(item)
            started = time.perf_counter()
            try:
                if item == "stocks":
                    await self._reconcile_stocks()
                elif item.startswith("tenant:"):
                    await self._reconcile_tenant(item.removeprefix("tenant:"))
                else:
                    await self._reconcile_instance(item)
            except (KubeError, DependencyUnavailable) as error:
                log.warning(
                    "reconcile failed; will retry", extra={"item": item, "error": str(error)}
                )
                asyncio.get_running_loop().call_later(1.0, self.wake, item)
            except Exception:
                log.exception("reconcile crashed", extra={"item": item, "worker": index})
                asyncio.get_running_loop().call_later(5.0, self.wake, item)
            finally:
                elapsed = time.perf_counter() - started
                self._reconcile_seconds.record(
                    elapsed,
                    {
                        "kind": item.split(":")[0]
                        if ":" in item
                        else ("stocks" if item == "stocks" else "instance")
                    },
                )
                if elapsed > SLOW_RECONCILE_S:
                    log.warning(
                        "slow reconcile", extra={"item": item, "seconds": round(elapsed, 2)}
                    )
                self._active.discard(item)
                if item in self._again:
                    self._again.discard(item)
                    self.wake(item)

    async def _poll_wakeups(self) -> None:
        for item in await self.requests.take_wakeups():
            self.wake(item)

    async def _resync(self) -> None:
        """Every live instance against Kubernetes, orphans, tenants and stocks.

        The comparison runs on the caches: only instances whose pod says something
        other than their stored state (or that have no pod, or still wait for a
        node) are queued, so a resync of thousands of settled instances costs a few
        queries, not thousands of reconciles.
        """
        # Claims are read first: a claim is always inserted after its instance, so
        # any claim seen here whose instance is not live belongs to a finished one.
        claims = await self.instances.claim_keys()
        live = await self.instances.live_states()
        for key in claims:
            if key not in live:
                await self.instances.release_quota(key)  # a crash between terminal and release
        at = now()
        for key, state in live.items():
            pod = self.pods.get(key)
            if pod is None or state == State.PENDING:
                self.wake(key)
                continue
            node_ok = self._node_ok(pod.get("spec", {}).get("nodeName"))
            if observe_pod(pod, node_ok=node_ok, now=at).state != state:
                self.wake(key)
        for key, pod in list(self.pods.items()):
            if key not in live and not pod["metadata"].get("deletionTimestamp"):
                doc = await self.instances.get(key)
                if doc is None or State(doc["state"]) in TERMINAL:
                    log.warning(
                        "deleting orphan pod",
                        extra={"pod": pod["metadata"]["name"], "instance": key},
                    )
                    await self._delete_workload(
                        pod["metadata"]["namespace"], pod["metadata"]["name"]
                    )
        applied = await self.tenants.applied_versions()
        for tenant in await self.tenants.all():
            if applied.get(tenant["_id"]) != tenant["version"]:
                self.wake(f"tenant:{tenant['_id']}")
        for key in await self.instances.stale_unadmitted(now() - UNADMITTED_TTL):
            await self.instances.release_quota(key)  # a create that crashed before admission
            await self.instances.remove(key)
        self.wake("stocks")

    # --- outbox ---------------------------------------------------------------------

    async def _sweep_outbox(self) -> None:
        """Instances with unpublished transitions (a crash between write and publish)."""
        for key in await self.instances.keys_with_outbox():
            self.wake(key)

    async def _flush(self, doc: Document) -> None:
        """Publish an instance's recorded transitions in order, then drop them.

        Runs in the instance's worker, the document's only writer. A crash between
        publish and drop republishes the same event ids, which consumers dedupe; an
        event is never dropped before the broker acknowledged it.
        """
        events = doc.get("outbox", [])
        if not events:
            return
        # Sent back to back on one producer and one partition (same key), so they
        # keep their order; then every acknowledgement is awaited at once.
        acks = [
            await self.broker.publish(
                event["value"].encode(),
                INSTANCE_LIFECYCLE.name,
                key=event["key"].encode(),
                headers=dict(event["headers"]),  # the publisher adds trace headers in place
                no_confirm=True,
            )
            for event in events
        ]
        await asyncio.gather(*acks)
        await self.instances.clear_outbox(doc["_id"], doc["sequence"])

    # --- tenants -------------------------------------------------------------------

    async def _reconcile_tenant(self, tenant_id: str) -> None:
        tenant = await self.tenants.get(tenant_id)
        if tenant is None or await self.tenants.applied_version(tenant_id) == tenant["version"]:
            return
        for manifest in tenant_manifests(self.settings, tenant_id, tenant):
            await self.kube.ensure(manifest)
        await self.tenants.mark_applied(tenant_id, tenant["version"])
        log.info(
            "tenant namespace applied",
            extra={"tenant": tenant_id, "namespace": tenant["namespace"]},
        )

    # --- instances -----------------------------------------------------------------

    async def _transition(self, doc: Document, steps: list[Step], **extra: Any) -> Document | None:
        done = await self.instances.transition(
            doc, steps, events=transition_events(doc, steps), extra=extra
        )
        if done is None:
            self.wake(doc["_id"])  # the document moved under us; look again
            return None
        await self._flush(done)
        if State(done["state"]) in TERMINAL:
            await self.instances.release_quota(done["_id"])
        return done

    async def _reconcile_instance(self, key: str) -> None:
        doc = await self.instances.get(key)
        if doc is None or not doc.get("admitted"):
            return
        if doc.get("outbox"):
            await self._flush(doc)
        requested = await self.requests.kinds(key)
        state = State(doc["state"])
        pod = self.pods.get(key)
        name = manifests.pod_name(doc["instance_id"])
        namespace_name = doc["namespace"]
        at = now()

        if state in TERMINAL:
            if pod is not None:
                await self._delete_workload(namespace_name, name)
            if "delete" in requested and state != State.DELETED:
                await self._transition(doc, [Step(State.DELETED, at)])
            return

        if requested & {"stop", "delete"}:
            if pod is not None and not pod["metadata"].get("deletionTimestamp"):
                await self.kube.delete("Pod", namespace_name, name, grace_s=STOP_GRACE_S)
            if pod is None:
                await self._delete_workload(namespace_name, name)
                steps = (
                    [Step(State.STOPPING, at), Step(State.STOPPED, at)]
                    if state != State.STOPPING
                    else [Step(State.STOPPED, at)]
                )
                await self._transition(doc, steps)
            elif state != State.STOPPING:
                await self._transition(doc, [Step(State.STOPPING, at)])
            return

        if pod is None:
            if state == State.PENDING:
                await self._create_workload(doc)
                return
            node = doc.get("node")
            reason = (
                FailureReason.NODE_LOST
                if node and node not in self.nodes
                else FailureReason.POD_LOST
            )
            await self._fail(
                doc, reason, f"the pod disappeared while {state.value}", pod_exists=False
            )
            return

        observed = observe_pod(
            pod, node_ok=self._node_ok(pod.get("spec", {}).get("nodeName")), now=at
        )
        if observed.state == State.FAILED:
            assert observed.reason is not None
            await self._fail(doc, observed.reason, observed.message, pod_exists=True)
        elif observed.state == State.STOPPING:
            return  # deleted by someone else: the DELETED event brings us back
        elif observed.state == State.STOPPED:
            await self._delete_workload(namespace_name, name)
            steps = (
                [Step(State.STOPPING, at), Step(State.STOPPED, at)]
                if state != State.STOPPING
                else [Step(State.STOPPED, at)]
            )
            await self._transition(doc, steps, reason=None)
        elif observed.state == State.PENDING:
            await self._check_pending(doc, observed.unschedulable_message)
        else:
            steps = path(state, observed.state, observed.at)
            if steps:
                node = observed.node
                zone = (
                    self.nodes.get(node or "", {})
                    .get("metadata", {})
                    .get("labels", {})
                    .get(manifests.ZONE_LABEL)
                )
                doc = {**doc, "node": node, "zone": zone}  # events carry where it landed
                await self._transition(doc, steps, node=node, zone=zone, pod_ip=observed.pod_ip)
            elif observed.pod_ip and observed.pod_ip != doc.get("pod_ip"):
                await self.instances.update_fields(doc["_id"], {"pod_ip": observed.pod_ip})

    async def _fail(
        self, doc: Document, reason: FailureReason, message: str | None, *, pod_exists: bool
    ) -> None:
        if pod_exists:
            await self._delete_workload(doc["namespace"], manifests.pod_name(doc["instance_id"]))
        else:
            await self._delete_workload(
                doc["namespace"], manifests.pod_name(doc["instance_id"]), pod=False
            )
        await self._transition(doc, [Step(State.FAILED, now(), reason.value)], message=message)
        log.info("instance failed", extra={"instance": doc["_id"], "reason": reason.value})

    async def _check_pending(self, doc: Document, unschedulable: str | None) -> None:
        if unschedulable is None:
            return
        if not self._fits_fleet(doc):
            await self._fail(
                doc,
                FailureReason.UNSCHEDULABLE,
                f"no {doc['gpu_type']} node can hold {doc['gpu_count']} GPUs: {unschedulable}",
                pod_exists=True,
            )
            return
        if self._waited(doc) > self.settings.schedule_timeout_s:
            await self._fail(doc, FailureReason.INSUFFICIENT_GPUS, unschedulable, pod_exists=True)
        elif doc.get("message") != unschedulable:
            await self.instances.update_fields(doc["_id"], {"message": unschedulable})

    @staticmethod
    def _waited(doc: Document) -> float:
        created: datetime = doc["created_at"]
        return (now() - created.replace(tzinfo=created.tzinfo or UTC)).total_seconds()

    def _fits_fleet(self, doc: Document) -> bool:
        for node in self.nodes.values():
            labels = node["metadata"].get("labels", {})
            if labels.get(manifests.GPU_PRODUCT_LABEL) != doc["gpu_type"]:
                continue
            if doc["zones"] and labels.get(manifests.ZONE_LABEL) not in doc["zones"]:
                continue
            allocatable = (
                node.get("status", {}).get("allocatable", {}).get(manifests.GPU_RESOURCE, "0")
            )
            if int(allocatable) >= doc["gpu_count"]:
                return True
        return False

    async def _create_workload(self, doc: Document) -> None:
        tenant = await self.tenants.get(doc["tenant_id"])
        if tenant is None:
            return
        if await self.tenants.applied_version(doc["tenant_id"]) != tenant["version"]:
            await self._reconcile_tenant(doc["tenant_id"])
        template = InstanceTemplate.model_validate(doc["template"])
        namespace_name, instance_id, tenant_id = (
            doc["namespace"],
            doc["instance_id"],
            doc["tenant_id"],
        )
        storage_secrets: list[tuple[str, str]] = []
        if doc.get("storages"):
            try:
                plan = await self.storage.attach(tenant_id, instance_id, doc["storages"])
            except StorageRefused as error:
                await self._fail(
                    doc, FailureReason.STORAGE_UNAVAILABLE, str(error), pod_exists=False
                )
                return
            storage_secrets = [
                (item["secretName"], item["envPrefix"]) for item in plan if item["kind"] == "object"
            ]
        node = await self._claim_stock(doc)
        if node is not None:
            await self.instances.update_fields(doc["_id"], {"from_stock": True})
        service = manifests.instance_service(namespace_name, tenant_id, instance_id, template)
        if service is not None:
            await self._create_ignoring_conflict(service)
        # A warm unit's node is known: bind there directly, skipping the scheduler
        # (that is what the stock paid for); otherwise the scheduler places it.
        pod = manifests.instance_pod(
            namespace_name=namespace_name, tenant_id=tenant_id, instance_id=instance_id,
            spec_name=doc["spec_name"], image=doc["image"], template=template,
            cpu=doc["cpu"], memory=doc["memory"], gpus=doc["gpu_count"], gpu_type=doc["gpu_type"],
            zones=doc["zones"], node=node, storage_secrets=storage_secrets,
        )  # fmt: skip
        try:
            created = await self.kube.create(pod)
        except ConflictError:
            return  # created by an earlier attempt; the watch brings it
        except QuotaRejectedError as error:
            # The namespace quota is the backstop behind the API's own check; it also
            # counts pods still terminating or left orphaned, which free up soon.
            if self._waited(doc) > self.settings.schedule_timeout_s:
                await self._fail(doc, FailureReason.QUOTA_EXCEEDED, str(error), pod_exists=False)
            else:
                await self.instances.update_fields(
                    doc["_id"], {"message": "waiting for the namespace quota to free up"}
                )
                asyncio.get_running_loop().call_later(2.0, self.wake, doc["_id"])
            return
        self.pods.setdefault(doc["_id"], created)

    async def _create_ignoring_conflict(self, manifest: dict[str, Any]) -> None:
        with contextlib.suppress(ConflictError):
            await self.kube.create(manifest)

    async def _delete_workload(self, namespace_name: str, name: str, *, pod: bool = True) -> None:
        if pod:
            await self.kube.delete("Pod", namespace_name, name, grace_s=0)
        await self.kube.delete("Service", namespace_name, name)

    # --- stocks --------------------------------------------------------------------

    async def _claim_stock(self, doc: Document) -> str | None:
        """Take a warm unit of the instance's spec: its placeholder goes, and its node is
        where the instance is pinned. Returns None when the stock has none available."""
        if doc["spec_name"] not in self._stocked_specs:
            return None
        async with self._claim_lock:
            for unit in await self.stocks.units(doc["spec_name"]):
                if unit["state"] != "available" or (
                    doc["zones"] and unit.get("zone") not in doc["zones"]
                ):
                    continue
                await self.stocks.remove_unit(unit["_id"])
                await self.kube.delete("Pod", self.settings.stock_namespace, unit["_id"], grace_s=0)
                await self._until_gone(unit["_id"])
                self.wake("stocks")  # refill
                node: str = unit["node"]
                return node
        return None

    async def _until_gone(self, placeholder: str, timeout_s: float = 5.0) -> None:
        """Wait until the watch saw the placeholder deleted, so its GPUs are free when
        the instance pod arrives on the same node."""
        deadline = time.monotonic() + timeout_s
        while placeholder in self.stock_pods and time.monotonic() < deadline:  # noqa: ASYNC110 - the watch updates the cache
            await asyncio.sleep(0.005)

    async def _reconcile_stocks(self) -> None:
        """Keep each spec's units at its target; never under the claim lock, so a
        refill (Kubernetes calls) does not hold up starts. A stale view here only
        over- or under-fills by a unit until the next pass."""
        units = {unit["_id"]: unit for unit in await self.stocks.units()}
        # Observed placeholders: Running ones become available where they run.
        for name, pod in list(self.stock_pods.items()):
            unit = units.get(name)
            node = pod.get("spec", {}).get("nodeName")
            if unit is None:
                if not pod["metadata"].get("deletionTimestamp"):
                    await self.kube.delete(
                        "Pod", self.settings.stock_namespace, name, grace_s=0
                    )  # orphan
            elif (
                unit["state"] == "placing"
                and node
                and pod.get("status", {}).get("phase") == "Running"
            ):
                zone = (
                    self.nodes.get(node, {})
                    .get("metadata", {})
                    .get("labels", {})
                    .get(manifests.ZONE_LABEL)
                )
                await self.stocks.mark_available(name, node, zone)
                unit["state"] = "available"
        # Units whose placeholder vanished (preempted, node lost) are replaced.
        grace = now() - timedelta(seconds=10)
        for name, unit in list(units.items()):
            if name not in self.stock_pods and unit["created_at"].replace(tzinfo=UTC) < grace:
                await self.stocks.remove_unit(name)
                units.pop(name)
        targets = await self.stocks.targets()
        self._stocked_specs = {spec_name for spec_name, target in targets.items() if target > 0}
        for spec_name, target in targets.items():
            spec = await self.specs.get(spec_name)
            if spec is None:
                continue
            live = [unit for unit in units.values() if unit["spec_name"] == spec_name]
            missing = target - len(live)
            for _ in range(max(missing, 0)):
                name = f"stock-{spec_name}-{secrets.token_hex(4)}"
                await self.stocks.add_unit(name, spec_name)
                try:
                    await self.kube.create(
                        manifests.placeholder_pod(
                            namespace_name=self.settings.stock_namespace, name=name,
                            spec_name=spec_name, cpu=spec["cpu"], memory=spec["memory"],
                            gpus=spec["gpu_num"], gpu_type=spec["gpu_type"],
                            zones=list(spec.get("zones") or []),
                        )
                    )  # fmt: skip
                except KubeError as error:
                    if error.status != 422:
                        raise
                    # Kubernetes will never take this spec's placeholder: say so once
                    # per pass and go on with the other specs' stocks.
                    await self.stocks.remove_unit(name)
                    log.error(
                        "stock placeholder refused; fix or delete the spec",
                        extra={"spec": spec_name, "error": str(error)[:300]},
                    )
                    break
            # Surplus: drop the ones still placing first, then available ones.
            surplus = sorted(live, key=lambda unit: unit["state"] != "placing")[: max(-missing, 0)]
            for unit in surplus:
                await self.stocks.remove_unit(unit["_id"])
                await self.kube.delete("Pod", self.settings.stock_namespace, unit["_id"], grace_s=0)

    # --- node health (from monitoring) ------------------------------------------------

    async def set_node_health(self, node: str, health: str) -> None:
        """Quarantined nodes are cordoned and labelled so no instance is placed there."""
        quarantined = health == "quarantined"
        try:
            await self.kube.patch(
                "Node", None, node,
                {"metadata": {"labels": {manifests.HEALTH: health}}, "spec": {"unschedulable": quarantined}},
            )  # fmt: skip
        except NotFoundError:
            log.info("health event for an unknown node", extra={"node": node})
