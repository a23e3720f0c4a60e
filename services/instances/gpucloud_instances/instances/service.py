"""Instances as tenants ask for them: admission, reads, stops and where a port answers.

This side records what was asked; the controller (instances/reconciler.py) makes the
cluster match and records each observed transition. After admission the
controller's worker is the instance document's only writer, so a stop is an
inserted request, not an update.
"""

from __future__ import annotations

import asyncio
import secrets
import time

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, QuotaExceeded
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_libs.http import decode_cursor, encode_cursor
from gpucloud_libs.identity import Identity
from gpucloud_libs.server_timing import phase
from gpucloud_libs.tenants import require_active

from ..admission import (
    Claimant,
    allowed_zones,
    claim_refusal,
    claimant,
    known_spec,
    listed_projects,
    never_fits,
    project_cap,
    project_of,
    startable_projects,
    user_limits,
    user_may_start,
    workload_claimant,
)
from ..documents import InstanceDoc, TenantDoc, UserLimitsDoc, workload_project
from ..lifecycle import LIVE, STARTABLE, TERMINAL, State
from ..queue.line import Line
from ..quota_ledger import QuotaLedger, TenantUsage
from ..schemas import STORED, InstanceTemplate, ProjectUse, QuotaUse, mounts_storages
from ..settings import InstancesSettings
from ..store import DuplicateInstance, RequestKind, instance_key
from ..wakeups import instance_item
from ..workloads.admitted import NewWorkload
from ..workloads.cache import Recorded
from ..workloads.parts import WorkloadParts
from ..workloads.replays import claim_idempotency_key, earlier, request_hash, same_request
from .admission import instance_document
from .schemas import Instance, InstanceCreate, InstancePage
from .store import InstanceStore
from .views import instance_view

#: How often a reader waiting for a transition looks at the store again, for the
#: transitions another replica's controller records.
CHANGE_RECHECK_S = 0.5


class Instances:
    def __init__(
        self,
        settings: InstancesSettings,
        parts: WorkloadParts,
        instances: InstanceStore,
        quota: QuotaLedger,
    ) -> None:
        self._settings = settings
        self._images = parts.images
        self._placement = parts.placement
        self._specs = parts.specs
        self._tenants = parts.tenants
        self._instances = instances
        self._requests = parts.requests
        self._quota = quota
        self._storage = parts.storage
        self._wakeups = parts.wakeups
        self._lines = parts.lines

    async def quota(self, identity: Identity) -> QuotaUse:
        """The tenant's quota and what it holds now (the ledger as last written)."""
        tenant_id = identity.require_tenant()
        tenant = require_active(await self._tenants.get(tenant_id), service="instances")
        held = await self._quota.tenant_usage(tenant_id)
        quota = tenant["quota"]
        own = user_limits(tenant, identity.subject) or UserLimitsDoc(
            max_gpus=None, monthly_spend_cents=None
        )
        return QuotaUse(
            max_gpus=quota["max_gpus"], max_instances=quota["max_instances"],
            borrow_gpus=quota.get("borrow_gpus", 0), gpus_in_use=held.gpus,
            workloads_in_use=held.workloads, your_max_gpus=own["max_gpus"],
            your_monthly_spend_cents=own["monthly_spend_cents"],
            your_gpus_in_use=held.users.get(identity.subject, 0),
            projects=_project_uses(tenant, identity, held),
        )  # fmt: skip

    async def create(
        self, identity: Identity, body: InstanceCreate, idempotency_key: str | None
    ) -> tuple[Instance, bool]:
        """Record a new instance (202) or return the one this request already made (200).

        Four steps on the critical path of every start: the reads (at once), the quota
        claim, the insert, and a wake-up of the controller (in memory when it leads)."""
        identity.require_role("tenant-user", "tenant-admin")
        tenant_id = identity.require_tenant()
        self._images.admit(body.image, body.template.run_as_user, uid_field="template.runAsUser")
        hashed = request_hash(body, id_field="instance_id")
        with phase("reads"):
            existing, tenant, spec = await asyncio.gather(
                earlier(self._instances, tenant_id, body.instance_id, idempotency_key),
                self._tenants.get(tenant_id),
                self._specs.get(body.spec_name),
            )
        if existing is not None:
            return await self._replay(existing, hashed, identity), False
        tenant = user_may_start(require_active(tenant, service="instances"), identity.subject)
        project = project_of(tenant, identity, body.project)
        spec = known_spec(body.spec_name, spec)
        zones = allowed_zones(spec, body.zone)
        placed = await self._placement.choose(
            spec, region=body.region, zones=zones, volumes=mounts_storages(body.template.volumes)
        )
        storages = await self._storage.requested(
            identity, body.storage_ids, body.template.volumes, project
        )

        instance_id = body.instance_id or f"i-{secrets.token_hex(6)}"
        key = instance_key(tenant_id, instance_id)
        again = await claim_idempotency_key(self._instances, tenant_id, idempotency_key, key)
        if again is not None:  # a concurrent request with the same key got there first
            return await self._replay(again, hashed, identity), False
        new = NewWorkload(
            key=key, workload_id=instance_id, identity=identity, tenant=tenant, spec=spec,
            zones=zones, placed=placed, storages=storages, request_hash=hashed,
            idempotency_key=idempotency_key, project=project,
        )  # fmt: skip
        if body.queue:
            # It waits for the admission queue, which claims its quota when it admits
            # it; one that could never fit the quota (or its user's limit) is refused now.
            refusal = never_fits(
                tenant, identity.subject, project, GpuShare.of(spec), spec["gpu_num"]
            )
            if refusal is not None:
                await self._forget_key(tenant_id, idempotency_key)
                raise refusal
            return await self._record(new, body)
        # The claim comes first, keyed by the instance: of concurrent starts exactly as
        # many as fit pass, a retry counts once, and a claim whose instance never gets
        # recorded (a crash here) is released by the resync after a full pass.
        try:
            with phase("quota"):
                await claim_start(
                    self._quota, tenant, instance_id, GpuShare.of(spec), spec["gpu_num"],
                    claimant(tenant, identity.subject, project),
                )  # fmt: skip
        except QuotaExceeded:
            await self._forget_key(tenant_id, idempotency_key)
            raise
        return await self._record(new, body)

    async def _record(self, new: NewWorkload, body: InstanceCreate) -> tuple[Instance, bool]:
        """Insert the new instance (or find the one a concurrent request made) and wake
        the controller."""
        tenant_id = new.tenant["_id"]
        doc = instance_document(new, body, created=now())
        try:
            with phase("insert"):
                await self._instances.insert(doc)
        except DuplicateInstance:
            # A concurrent request with the same instanceID won the insert (the claim
            # it shares with this one is its claim now).
            await self._forget_key(tenant_id, new.idempotency_key)
            again = await self._instances.get(new.key)
            if again is None:
                raise Conflict("a concurrent request is creating this instance; retry") from None
            return await self._replay(again, new.request_hash, new.identity), False
        await self._wakeups.wake_new(doc)
        return await self.view(doc, new=True), True

    async def _forget_key(self, tenant_id: str, idempotency_key: str | None) -> None:
        if idempotency_key is not None:
            await self._instances.forget_idempotency_key(tenant_id, idempotency_key)

    async def _replay(self, existing: InstanceDoc, hashed: str, caller: Identity) -> Instance:
        instance_id = existing["instance_id"]
        same_request(
            existing, hashed, f"instance {instance_id!r}", caller=caller, instance_id=instance_id
        )
        return await self.view(existing)

    async def _owned(self, identity: Identity, instance_id: str) -> InstanceDoc:
        return await self._instances.owned(identity, instance_id)

    async def get(
        self,
        identity: Identity,
        instance_id: str,
        *,
        after_revision: int | None = None,
        wait_s: float = 0.0,
    ) -> Instance:
        """The instance; with `after_revision`, once its revision passes that (a long
        poll of at most `wait_s`: the answer comes as the transition is recorded)."""
        key = instance_key(identity.require_tenant(), instance_id)
        deadline = time.monotonic() + wait_s
        cache = self._instances.cache
        recorded: Recorded | None = None
        first_message: str | None = None
        while True:
            news = cache.listen(key)
            if recorded is None or recorded.stop_requested is None:
                # Both by `_id`, at once; a stop request only shows while it is live.
                doc, stop_requested = await asyncio.gather(
                    self._owned(identity, instance_id), self._requests.requested(key, "stop")
                )
                if recorded is None:
                    first_message = doc.get("message")
                recorded = Recorded(doc, stop_requested)
            doc = recorded.doc
            remaining = deadline - time.monotonic()
            if (
                after_revision is None
                or doc["sequence"] > after_revision
                or doc.get("message") != first_message  # a refused start says why there
                or remaining <= 0
            ):
                starting = State(doc["state"]) in STARTABLE and await self._requests.requested(
                    key, "start"
                )
                return await self.view(
                    doc, stop_requested=bool(recorded.stop_requested), start_requested=starting
                )
            recorded = await cache.wait(key, news, min(remaining, CHANGE_RECHECK_S))

    async def list(
        self,
        identity: Identity,
        *,
        states: list[str] | None,
        spec_name: str | None,
        cursor: str | None,
        limit: int,
        tenant_id: str | None = None,
        project: str | None = None,
    ) -> InstancePage:
        # A platform admin sees every tenant (or the one asked for); others their own.
        scope = tenant_id if identity.is_platform_admin else identity.require_tenant()
        projects = listed_projects(identity, project)
        after = None
        if cursor:
            after = decode_cursor(cursor)
        docs = await self._instances.page(
            scope, states=states, spec_name=spec_name, after=after, limit=limit + 1,
            projects=projects,
        )  # fmt: skip
        more = len(docs) > limit
        docs = docs[:limit]
        lines: dict[str, Line] = {}
        return InstancePage(
            items=[await self.view(doc, lines=lines) for doc in docs if doc.get("admitted")],
            next_cursor=encode_cursor(docs[-1]["_id"]) if more and docs else None,
        )

    async def stop(
        self, identity: Identity, instance_id: str, *, keep_record: bool = False
    ) -> Instance:
        """Ask for a stop; on a stopped or failed instance, ask for its record's deletion,
        unless `keep_record` (a stop that may be repeated safely).

        The controller carries it out (it is the instance document's only writer);
        the answer is the instance as it is now, with the request noted.
        """
        doc = await self._owned(identity, instance_id)
        if keep_record and State(doc["state"]) not in LIVE:
            # Stopping, stopped or failed already: nothing to do, unless a start of it is
            # still to be carried out, which this stop cancels.
            asked = await self._requests.start_request(doc["_id"])
            if asked is not None and asked.get("sequence") == doc["sequence"]:
                await self._requests.stop_pending_start(doc["_id"])
                await self._wakeups.wake(instance_item(doc["_id"]))
            return await self.view(doc)
        kind: RequestKind = "delete" if State(doc["state"]) in TERMINAL else "stop"
        if State(doc["state"]) != State.DELETED:
            await self._requests.request(doc["_id"], kind)
            await self._wakeups.wake(instance_item(doc["_id"]))
        return await self.view(doc, stop_requested=kind == "stop")

    async def start(self, identity: Identity, instance_id: str) -> Instance:
        """Start a stopped or failed instance again: the same record, spec, template and
        storages, on a node chosen anew. Its quota is claimed now, as a new start's is,
        so a start that does not fit is refused here; the controller carries it out.
        One that is already starting or running is left as it is."""
        identity.require_role("tenant-user", "tenant-admin")
        doc = await self._owned(identity, instance_id)
        state = State(doc["state"])
        if state in LIVE and state != State.STOPPING:
            return await self.view(doc)
        if state not in STARTABLE or await self._requests.requested(doc["_id"], "delete"):
            raise Conflict(
                f"instance {instance_id!r} is {state.value}; a start takes a stopped or "
                "failed instance",
                instance_id=instance_id, state=state.value,
            )  # fmt: skip
        tenant = user_may_start(
            require_active(await self._tenants.get(doc["tenant_id"]), service="instances"),
            doc["user_id"],
        )
        # Still a member of its project, and the project still there with budget left.
        project_of(tenant, identity, workload_project(doc))
        template = InstanceTemplate.model_validate(doc["template"], context=STORED)
        self._images.admit(doc["image"], template.run_as_user, uid_field="template.runAsUser")
        await self._placement.check_open(self._placement.cluster_of(doc))
        await claim_start(
            self._quota, tenant, instance_id, GpuShare.of(doc), doc["gpu_count"],
            workload_claimant(tenant, doc),
        )  # fmt: skip
        await self._requests.request_start(doc["_id"], doc["sequence"])
        await self._wakeups.wake(instance_item(doc["_id"]))
        return await self.view(doc, start_requested=True)

    async def view(
        self,
        doc: InstanceDoc,
        *,
        stop_requested: bool = False,
        start_requested: bool = False,
        lines: dict[str, Line] | None = None,
        new: bool = False,
    ) -> Instance:
        """The instance as the API shows it; a queued one with its place in the queue.
        `lines` shares each tenant's line between the items of one page; a `new` one
        (just created) is placed from its tenant's priority bands."""
        queue = await self._lines.place(instance_item(doc["_id"]), doc, lines=lines, new=new)
        return instance_view(
            doc, self._settings, queue=queue,
            stop_requested=stop_requested and State(doc["state"]) not in TERMINAL,
            start_requested=start_requested and State(doc["state"]) in STARTABLE,
            cluster=self._placement.cluster_of(doc),
        )  # fmt: skip


def _project_uses(tenant: TenantDoc, identity: Identity, held: TenantUsage) -> list[ProjectUse]:
    """The caller's projects' shares, and what each one's workloads hold."""
    shares = tenant.get("projects") or {}
    return [
        ProjectUse(
            project=project, max_gpus=project_cap(tenant, project),
            borrow_gpus=shares[project]["borrow_gpus"] if project in shares else 0,
            gpus_in_use=held.projects.get(project, 0),
        )
        for project in startable_projects(tenant, identity)
    ]  # fmt: skip


async def claim_start(
    quota: QuotaLedger, tenant: TenantDoc, instance_id: str, share: GpuShare, gpus: int,
    who: Claimant,
) -> None:  # fmt: skip
    """Claim the quota a start of `gpus` (of `share`'s kind) takes, or raise the 422
    that says which limit (the tenant's, the user's own, the project's share) it does
    not fit."""
    wanted = share.quota_gpus(gpus)
    claim = await quota.claim(tenant["_id"], instance_id, wanted, tenant["quota"], who)
    if not claim.admitted:
        # The claim was refused by this same rule, on these same figures.
        refusal = claim_refusal(tenant["quota"], who, claim.held, wanted=wanted)
        raise refusal or QuotaExceeded("the quota has no room for this instance")
