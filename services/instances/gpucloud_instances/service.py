"""Domain logic of the instances service: specs, stocks, tenants and instances.

The API and the Kafka handlers call this; it never talks to Kubernetes. It
records what the user asked for, and the controller (controller.py) makes the
cluster match, recording each observed transition.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpucloud_libs.errors import (
    Conflict,
    Forbidden,
    NotFound,
    QuotaExceeded,
    TenantNotReady,
    ValidationFailed,
)
from gpucloud_libs.events import CloudEvent, InstanceStateChanged, TenantUpserted
from gpucloud_libs.http import decode_cursor, encode_cursor
from gpucloud_libs.identity import Identity
from gpucloud_libs.mongo import Document
from gpucloud_libs.naming import instance_host, tenant_namespace

from . import manifests
from .lifecycle import ACTIVE, TERMINAL, State, Step
from .schemas import (
    Instance,
    InstanceCreate,
    InstanceEndpoint,
    InstancePage,
    InstanceTemplate,
    Spec,
    SpecCreate,
    StockChange,
    StockStatus,
    Transition,
)
from .settings import InstancesSettings
from .storages import StorageClient
from .store import (
    DuplicateInstance,
    InstanceStore,
    RequestStore,
    SpecStore,
    StockStore,
    TenantStore,
    instance_key,
    now,
)

EVENT_SOURCE = "/gpucloud/instances"


def lifecycle_event(doc: Document, step: Step, sequence: int, previous: State | None) -> Document:
    """The outbox entry for one transition: the encoded Kafka message, id deterministic."""
    data = InstanceStateChanged(
        instance_id=doc["instance_id"],
        tenant_id=doc["tenant_id"],
        user_id=doc.get("user_id"),
        spec_name=doc["spec_name"],
        gpu_type=doc["gpu_type"],
        gpu_count=doc["gpu_count"],
        zone=doc.get("zone"),
        node=doc.get("node"),
        state=step.state.value,
        previous_state=previous.value if previous else None,
        reason=step.reason,
        sequence=sequence,
        at=step.at,
    )
    event = CloudEvent.new(data, source=EVENT_SOURCE, event_id=f"{doc['_id']}#{sequence}")
    key, value, headers = event.to_kafka()
    return {"id": event.id, "key": key.decode(), "value": value.decode(), "headers": headers}


def transition_events(doc: Document, steps: list[Step]) -> list[Document]:
    events, previous, sequence = (
        [],
        State(doc["state"]) if doc.get("sequence") else None,
        doc["sequence"],
    )
    for step in steps:
        sequence += 1
        events.append(lifecycle_event(doc, step, sequence, previous))
        previous = step.state
    return events


def _request_hash(body: InstanceCreate) -> str:
    canonical = json.dumps(body.model_dump(mode="json", exclude={"instance_id"}), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


class InstanceNotRunning(Conflict):
    code = "instance_not_running"
    title = "The instance is not running"


class InstancesService:
    def __init__(
        self,
        settings: InstancesSettings,
        specs: SpecStore,
        tenants: TenantStore,
        instances: InstanceStore,
        stocks: StockStore,
        requests: RequestStore,
        storage: StorageClient,
        wake: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.specs = specs
        self.tenants = tenants
        self.instances = instances
        self.stocks = stocks
        self.requests = requests
        self._wake_local = wake

    async def _wake(self, item: str) -> None:
        """Wake the controller: at once when this replica leads, through the store otherwise."""
        self._wake_local(item)
        await self.requests.wake(item)

    # --- specs ---------------------------------------------------------------

    async def create_spec(self, body: SpecCreate) -> Spec:
        spec = Spec(**body.model_dump(), created_at=now())
        if not await self.specs.insert(spec.model_dump()):
            raise Conflict(f"spec {body.name!r} already exists")
        return spec

    async def get_spec(self, name: str) -> Spec:
        doc = await self.specs.get(name)
        if doc is None:
            raise NotFound(f"spec {name!r} does not exist")
        return Spec.model_validate(doc)

    async def list_specs(self) -> list[Spec]:
        return [Spec.model_validate(doc) for doc in await self.specs.list()]

    async def delete_spec(self, name: str) -> None:
        await self.get_spec(name)
        targets = await self.stocks.targets()
        if targets.get(name, 0) > 0:
            raise Conflict(
                f"spec {name!r} still has a warm stock of {targets[name]}; delete the stock first"
            )
        await self.specs.delete(name)

    # --- stocks (warm pools) -------------------------------------------------

    async def change_stock(self, change: StockChange, *, add: bool) -> StockStatus:
        await self.get_spec(change.spec_name)
        delta = change.number if add else -change.number
        await self.stocks.record_operation(change.spec_name, delta, change.operation_id)
        await self._wake("stocks")
        [status] = [s for s in await self.stock_status() if s.spec_name == change.spec_name]
        return status

    async def stock_status(self) -> list[StockStatus]:
        units = await self.stocks.units()
        result = []
        for spec_name, target in (await self.stocks.targets()).items():
            mine = [unit for unit in units if unit["spec_name"] == spec_name]
            result.append(
                StockStatus(
                    spec_name=spec_name,
                    target=target,
                    available=sum(unit["state"] == "available" for unit in mine),
                    placing=sum(unit["state"] == "placing" for unit in mine),
                )
            )
        return sorted(result, key=lambda status: status.spec_name)

    # --- tenants (from the gateway's events) -----------------------------------

    async def apply_tenant(self, tenant: TenantUpserted) -> None:
        quota = tenant.quota
        cpu = (
            quota.max_cpu_cores
            if quota.max_cpu_cores is not None
            else quota.max_gpus * self.settings.default_cpu_cores_per_gpu
        )
        memory = (
            quota.max_memory_gib
            if quota.max_memory_gib is not None
            else quota.max_gpus * self.settings.default_memory_gib_per_gpu
        )
        fields: Document = {
            "name": tenant.name,
            "status": tenant.status,
            "quota": quota.model_dump(),
            "namespace_cpu": str(max(cpu, 1)),
            "namespace_memory": f"{max(memory, 1)}Gi",
            "namespace": tenant_namespace(tenant.tenant_id),
            "updated_at": now(),
        }
        # What the namespace must reflect; the controller applies it when it differs.
        fields["version"] = hashlib.sha256(
            json.dumps(
                [fields["quota"], fields["namespace_cpu"], fields["namespace_memory"]],
                sort_keys=True,
            ).encode()
        ).hexdigest()[:16]
        await self.tenants.upsert(tenant.tenant_id, fields)
        await self._wake(f"tenant:{tenant.tenant_id}")

    async def stop_tenant_instances(self, tenant_id: str) -> int:
        stopped = 0
        after = None
        while True:
            page = await self.instances.page(
                tenant_id, states=[s.value for s in ACTIVE], spec_name=None, after=after, limit=200
            )
            for doc in page:
                await self.requests.request(doc["_id"], "stop")
                self._wake_local(doc["_id"])
                stopped += 1
            if len(page) < 200:
                return stopped
            after = page[-1]["_id"]

    # --- instances -----------------------------------------------------------

    async def create_instance(
        self, identity: Identity, body: InstanceCreate, idempotency_key: str | None
    ) -> tuple[Instance, bool]:
        """Record a new instance (202) or return the one this request already made (200)."""
        identity.require_role("tenant-user", "tenant-admin")
        tenant_id = identity.require_tenant()
        request_hash = _request_hash(body)
        existing = None
        if body.instance_id is not None:
            existing = await self.instances.get(instance_key(tenant_id, body.instance_id))
        if existing is None and idempotency_key is not None:
            existing = await self.instances.by_idempotency_key(tenant_id, idempotency_key)
        if existing is not None:
            return self._replay(existing, request_hash), False

        tenant = await self.tenants.get(tenant_id)
        if tenant is None:
            raise TenantNotReady(
                "the tenant is not provisioned in the instances service yet; retry shortly",
                retry_after_s=2,
            )
        if tenant.get("status") != "active":
            raise Forbidden("the tenant is suspended")
        spec, zones = await self._placement(body)
        self._check_quota(tenant, *await self.instances.usage(tenant_id), wanted=spec["gpu_num"])
        storages = await self.storage.requested(identity, body)

        instance_id = body.instance_id or f"i-{secrets.token_hex(6)}"
        key = instance_key(tenant_id, instance_id)
        if idempotency_key is not None and not await self.instances.record_idempotency_key(
            tenant_id, idempotency_key, key
        ):
            # A concurrent request with the same key got there first.
            again = await self.instances.by_idempotency_key(tenant_id, idempotency_key)
            if again is None:
                raise Conflict("a request with this Idempotency-Key is in progress; retry")
            return self._replay(again, request_hash), False
        created = now()
        doc = _instance_document(
            key, identity, tenant, spec, body,
            instance_id=instance_id, idempotency_key=idempotency_key,
            request_hash=request_hash, zones=zones, storages=storages, created=created,
        )  # fmt: skip
        try:
            await self.instances.insert(doc)
        except DuplicateInstance:
            # A concurrent request with the same instanceID won the insert.
            if idempotency_key is not None:
                await self.instances.forget_idempotency_key(tenant_id, idempotency_key)
            again = await self.instances.get(key)
            if again is None:
                raise Conflict("a concurrent request is creating this instance; retry") from None
            return self._replay(again, request_hash), False
        # Claim, then count again with this claim included: two racing creates can
        # both pass the first check, but not both this one. The loser is removed
        # before anything was published or created in Kubernetes.
        await self.instances.claim_quota(key, tenant_id, spec["gpu_num"])
        count, gpus = await self.instances.usage(tenant_id)
        try:
            self._check_quota(tenant, count - 1, gpus - spec["gpu_num"], wanted=spec["gpu_num"])
        except QuotaExceeded:
            await self.instances.release_quota(key)
            await self.instances.remove(key)
            if idempotency_key is not None:
                await self.instances.forget_idempotency_key(tenant_id, idempotency_key)
            raise
        step = Step(State.PENDING, created)
        admitted = await self.instances.admit(doc, step, lifecycle_event(doc, step, 1, None))
        assert admitted is not None
        await self._wake(doc["_id"])
        return self.view(admitted), True

    async def _placement(self, body: InstanceCreate) -> tuple[Document, list[str]]:
        """The requested spec and the zones the instance may land in."""
        spec = await self.specs.get(body.spec_name)
        if spec is None:
            raise ValidationFailed(
                f"unknown spec {body.spec_name!r}",
                errors=[
                    {"loc": ["body", "specName"], "msg": "unknown spec", "type": "unknown_spec"}
                ],
            )
        zones = list(spec.get("zones") or [])
        if body.zone is not None:
            if zones and body.zone not in zones:
                raise ValidationFailed(
                    f"spec {body.spec_name!r} is offered in {zones}, not {body.zone!r}"
                )
            zones = [body.zone]
        return spec, zones

    @staticmethod
    def _check_quota(tenant: Document, count: int, gpus: int, *, wanted: int) -> None:
        """Would one more instance with `wanted` GPUs fit, given `count` instances and `gpus` held?"""
        quota = tenant["quota"]
        if count + 1 > quota["max_instances"]:
            raise QuotaExceeded(
                f"the tenant may run {quota['max_instances']} instances and has {count}",
                limit="max_instances",
                limit_value=quota["max_instances"],
                in_use=count,
                requested=1,
            )
        if gpus + wanted > quota["max_gpus"]:
            raise QuotaExceeded(
                f"the tenant may hold {quota['max_gpus']} GPUs, holds {gpus} and asked for {wanted}",
                limit="max_gpus",
                limit_value=quota["max_gpus"],
                in_use=gpus,
                requested=wanted,
            )

    def _replay(self, existing: Document, request_hash: str) -> Instance:
        if existing.get("request_hash") != request_hash:
            raise Conflict(
                f"instance {existing['instance_id']!r} was already created with a different request",
                instance_id=existing["instance_id"],
            )
        return self.view(existing)

    async def _owned(self, identity: Identity, instance_id: str) -> Document:
        tenant_id = identity.require_tenant()
        doc = await self.instances.get(instance_key(tenant_id, instance_id))
        if doc is None or not doc.get("admitted"):
            # Another tenant's instance and a missing one look the same.
            raise NotFound(f"instance {instance_id!r} does not exist")
        return doc

    async def get_instance(self, identity: Identity, instance_id: str) -> Instance:
        doc = await self._owned(identity, instance_id)
        return self.view(doc, requested=await self.requests.kinds(doc["_id"]))

    async def endpoint(self, identity: Identity, instance_id: str, port: int) -> InstanceEndpoint:
        """Where the gateway reaches one public port of the caller's instance."""
        doc = await self._owned(identity, instance_id)
        template = InstanceTemplate.model_validate(doc["template"])
        if not any(p.port == port and p.is_public and p.protocol == "TCP" for p in template.ports):
            raise NotFound(f"instance {instance_id!r} has no public port {port}")
        state = State(doc["state"])
        if state != State.RUNNING or not doc.get("pod_ip"):
            starting = state in ACTIVE and state != State.STOPPING
            raise InstanceNotRunning(
                f"instance {instance_id!r} is {state.value}"
                + ("; it will answer once it is running" if starting else ""),
                state=state.value,
                **({"retry_after_s": 2} if starting else {}),
            )
        return InstanceEndpoint(instance_id=instance_id, port=port, address=doc["pod_ip"])

    async def list_instances(
        self,
        identity: Identity,
        *,
        states: list[str] | None,
        spec_name: str | None,
        cursor: str | None,
        limit: int,
        tenant_id: str | None = None,
    ) -> InstancePage:
        # A platform admin sees every tenant (or the one asked for); others their own.
        scope = tenant_id if identity.is_platform_admin else identity.require_tenant()
        after = None
        if cursor:
            after = decode_cursor(cursor)
        docs = await self.instances.page(
            scope, states=states, spec_name=spec_name, after=after, limit=limit + 1
        )
        more = len(docs) > limit
        docs = docs[:limit]
        return InstancePage(
            items=[self.view(doc) for doc in docs if doc.get("admitted")],
            next_cursor=encode_cursor(docs[-1]["_id"]) if more and docs else None,
        )

    async def stop_instance(self, identity: Identity, instance_id: str) -> Instance:
        """Ask for a stop; on a stopped or failed instance, ask for its record's deletion.

        The controller carries it out (it is the instance document's only writer);
        the answer is the instance as it is now, with the request noted.
        """
        doc = await self._owned(identity, instance_id)
        kind = "delete" if State(doc["state"]) in TERMINAL else "stop"
        if State(doc["state"]) != State.DELETED:
            await self.requests.request(doc["_id"], kind)
            self._wake_local(doc["_id"])
        return self.view(doc, requested={kind})

    def view(self, doc: Document, requested: set[str] | None = None) -> Instance:
        template = InstanceTemplate.model_validate(doc["template"])
        urls = [
            f"https://{instance_host(doc['instance_id'], doc['tenant_id'], port.port, self.settings.instance_domain)}{port.base_url or '/'}"
            for port in template.ports
            if port.is_public
        ]
        return Instance(
            instance_id=doc["instance_id"],
            tenant_id=doc["tenant_id"],
            state=doc["state"],
            reason=doc.get("reason"),
            message=doc.get("message"),
            spec_name=doc["spec_name"],
            gpu_type=doc["gpu_type"],
            gpu_count=doc["gpu_count"],
            image=doc["image"],
            zone=doc.get("zone"),
            node=doc.get("node"),
            from_stock=bool(doc.get("from_stock")),
            stop_requested=bool(requested) and State(doc["state"]) not in TERMINAL,
            urls=urls,
            created_at=_aware(doc["created_at"]),
            updated_at=_aware(doc["updated_at"]),
            history=[
                Transition(state=h["state"], at=_aware(h["at"]), reason=h.get("reason"))
                for h in doc.get("history", [])
            ],
        )


def _instance_document(
    key: str,
    identity: Identity,
    tenant: Document,
    spec: Document,
    body: InstanceCreate,
    *,
    instance_id: str,
    idempotency_key: str | None,
    request_hash: str,
    zones: list[str],
    storages: list[Document],
    created: datetime,
) -> Document:
    """A new, not yet admitted instance as stored."""
    tenant_id = tenant["_id"]
    return {
        "_id": key,
        "tenant_id": tenant_id,
        "instance_id": instance_id,
        "user_id": identity.subject,
        "idempotency_key": idempotency_key,
        "request_hash": request_hash,
        "spec_name": spec["name"],
        "gpu_type": spec["gpu_type"],
        "gpu_count": spec["gpu_num"],
        "cpu": spec["cpu"],
        "memory": spec["memory"],
        "zones": zones,
        "image": body.image,
        "template": body.template.model_dump(by_alias=True),
        "storages": storages,
        "namespace": tenant["namespace"],
        "state": State.PENDING.value,
        "reason": None,
        "message": None,
        "sequence": 0,
        "history": [],
        "outbox": [],
        "has_outbox": False,
        "admitted": False,
        "node": None,
        "zone": None,
        "from_stock": False,
        "created_at": created,
        "updated_at": created,
    }


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def tenant_manifests(
    settings: InstancesSettings, tenant_id: str, tenant: Document
) -> list[dict[str, Any]]:
    """Everything a tenant's namespace carries: the seeds' "Tenant VPC"."""
    namespace_name = tenant["namespace"]
    quota = tenant["quota"]
    return [
        manifests.namespace(namespace_name, {manifests.TENANT: tenant_id}),
        manifests.resource_quota(
            namespace_name, gpus=quota["max_gpus"], instances=quota["max_instances"],
            cpu=tenant["namespace_cpu"], memory=tenant["namespace_memory"],
        ),
        manifests.limit_range(namespace_name),
        manifests.network_policy(
            namespace_name, gateway_namespace=settings.gateway_namespace
        ),
    ]  # fmt: skip
