"""Inference services as tenants ask for them: create, read, change, roll back, delete.

A service is a Deployment of replicas behind one stable URL (the gateway balances
them). The API inserts the service and each change of its desired state as a new
configuration generation; the controller (inference/reconciler.py) makes the
Deployment match the newest generation and records the replicas it observes.
So the service document keeps one writer, and two concurrent changes cannot
both win: the second one's generation is already taken (409).

A service holds `(maxReplicas + maxSurge) * GPUs per replica` of its tenant's
quota for as long as it exists, so a rolling update or a scale-up never waits
for quota.
"""

from __future__ import annotations

import asyncio
import secrets

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, Forbidden, NotFound, QuotaExceeded, ValidationFailed
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_libs.http import decode_cursor, encode_cursor
from gpucloud_libs.identity import Identity
from gpucloud_libs.naming import public_origin, service_host, service_workload_id
from gpucloud_libs.project_shares import unseen_work
from gpucloud_libs.tenants import require_active

from ..admission import (
    Claimant,
    allowed_zones,
    claim_refusal,
    claimant,
    known_spec,
    listed_projects,
    project_of,
    spec_fields,
    user_may_start,
    workload_claimant,
)
from ..documents import (
    EndedServiceDoc,
    ServiceConfigDoc,
    ServiceDoc,
    TenantDoc,
    in_project_view,
)
from ..quota_ledger import QuotaLedger
from ..settings import InstancesSettings
from ..store import DuplicateInstance, instance_key, service_request_key
from ..wakeups import service_item
from ..workloads.parts import WorkloadParts
from .configurations import (
    claimed_gpus,
    first_configuration,
    latest_revision,
    next_config,
    patched_scaling,
    patched_template,
    service_document,
    template_doc,
)
from .schemas import (
    InferenceService,
    InferenceServiceCreate,
    InferenceServicePage,
    InferenceServicePatch,
    ReplicaRunPage,
    RollbackRequest,
    ServiceEndpoints,
    ServiceLoadReport,
    UpdateStrategy,
)
from .store import DuplicateGeneration, ServiceStore
from .views import replica_runs_view, service_view

#: Who reports service load (the gateway's own subject, never a caller's).
GATEWAY_SUBJECT = "service:gateway"


class InferenceServices:
    def __init__(
        self,
        settings: InstancesSettings,
        parts: WorkloadParts,
        services: ServiceStore,
        quota: QuotaLedger,
    ) -> None:
        self._storage = parts.storage
        self._settings = settings
        self._images = parts.images
        self._placement = parts.placement
        self._specs = parts.specs
        self._tenants = parts.tenants
        self._services = services
        self._requests = parts.requests
        self._quota = quota
        self._wakeups = parts.wakeups

    async def create(self, identity: Identity, body: InferenceServiceCreate) -> InferenceService:
        identity.require_role("tenant-user", "tenant-admin")
        tenant_id = identity.require_tenant()
        self._images.admit(body.image, body.run_as_user, uid_field="runAsUser")
        service_id = body.service_id or f"s-{secrets.token_hex(6)}"
        key = instance_key(tenant_id, service_id)
        existing, tenant, spec = await asyncio.gather(
            self._services.get(key), self._tenants.get(tenant_id), self._specs.get(body.spec_name)
        )
        if existing is not None:
            raise Conflict(f"inference service {service_id!r} exists", service_id=service_id)
        tenant = user_may_start(require_active(tenant, service="instances"), identity.subject)
        who = claimant(tenant, identity.subject, project_of(tenant, identity, body.project))
        spec = known_spec(body.spec_name, spec)
        zones = allowed_zones(spec, body.zone)
        placed = await self._placement.choose(spec, region=body.region, zones=zones)
        storages = await self._storage.requested(identity, body.storage_ids, [], who.project)
        created = now()
        config = first_configuration(key, body, created)
        await self._claim(
            tenant, service_id, claimed_gpus(config, GpuShare.of(spec), spec["gpu_num"]),
            grow=False, generation=config["generation"], who=who,
        )  # fmt: skip
        doc = service_document(
            service_id, identity, tenant, spec_fields(spec, zones, placed), body,
            storages=storages, created=created, project=who.project,
        )  # fmt: skip
        try:
            await self._services.insert(doc, config)
        except DuplicateInstance:
            # A concurrent create of the same id won; its claim is the one kept.
            raise Conflict(
                f"inference service {service_id!r} exists", service_id=service_id
            ) from None
        await self._wakeups.wake(service_item(key))
        return self.view(doc, [config], deleting=False)

    async def _claim(
        self, tenant: TenantDoc, service_id: str, gpus: int, *, grow: bool, generation: int,
        who: Claimant,
    ) -> None:  # fmt: skip
        workload = service_workload_id(service_id)
        if grow:
            claim = await self._quota.resize(
                tenant["_id"], workload, gpus, tenant["quota"], generation=generation, who=who
            )
        else:
            claim = await self._quota.claim(tenant["_id"], workload, gpus, tenant["quota"], who)
        if claim.admitted:
            return
        refusal = None if grow else claim_refusal(tenant["quota"], who, claim.held, wanted=gpus)
        own = "" if who.max_gpus is None else f", and your own limit is {who.max_gpus} at once"
        share = "" if who.project_max_gpus is None else (
            f", and project {who.project!r} may hold {who.project_max_gpus}"
        )  # fmt: skip
        raise refusal or QuotaExceeded(
            f"the service would hold {gpus} GPUs (maxReplicas plus maxSurge, times the spec's "
            f"GPUs) and the tenant may hold {tenant['quota']['max_gpus']}{own}{share}",
            limit="max_gpus",
            limit_value=tenant["quota"]["max_gpus"],
            in_use=claim.held.gpus,
            requested=gpus,
        )

    async def _owned(self, identity: Identity, service_id: str) -> ServiceDoc:
        doc = await self._services.get(instance_key(identity.require_tenant(), service_id))
        if doc is None or not in_project_view(doc, identity):
            # Another tenant's service (or project's) and a missing one look the same.
            raise unseen_work("inference service", service_id, identity.projects)
        return doc

    async def get(self, identity: Identity, service_id: str) -> InferenceService:
        doc = await self._owned(identity, service_id)
        configs, deleting = await asyncio.gather(
            self._services.configs(doc["_id"]),
            self._requests.requested(service_request_key(doc), "delete"),
        )
        return self.view(doc, configs, deleting=deleting)

    async def replica_runs(
        self, identity: Identity, service_id: str, *, tenant_id: str | None = None
    ) -> ReplicaRunPage:
        """Every replica a service of this name has run, with the interval it was billed
        for: the live service's, and those of its deleted earlier uses (deleted: True),
        so that every bill stays checkable. A platform admin names the tenant."""
        if identity.is_platform_admin and not tenant_id:
            raise ValidationFailed(
                "a platform admin names the service's tenant (tenantID)",
                errors=[{"loc": ["query", "tenantID"], "msg": "required for a platform admin",
                         "type": "missing"}],
            )  # fmt: skip
        owner = tenant_id if identity.is_platform_admin and tenant_id else identity.require_tenant()
        key = instance_key(owner, service_id)
        live, ended = await asyncio.gather(self._services.get(key), self._services.ended_runs(key))
        # The caller sees the uses of its projects alone (decision 142).
        live = live if live is not None and in_project_view(live, identity) else None
        ended = [use for use in ended if in_project_view(use, identity)]
        if live is None and not ended:
            # Another tenant's service (or project's) and a missing one look the same.
            raise unseen_work("inference service", service_id, identity.projects)
        # A service whose deletion is still being published is kept and live at once.
        live_use = live["incarnation"] if live is not None else None
        uses: list[tuple[EndedServiceDoc | ServiceDoc, bool]] = [
            (use, True) for use in ended if use["incarnation"] != live_use
        ]
        if live is not None:
            uses.append((live, False))
        return replica_runs_view(uses)

    async def page(
        self, identity: Identity, *, cursor: str | None, limit: int, tenant_id: str | None = None,
        project: str | None = None,
    ) -> InferenceServicePage:  # fmt: skip
        # A platform admin sees every tenant (or the one asked for); others their own.
        scope = tenant_id if identity.is_platform_admin else identity.require_tenant()
        after = decode_cursor(cursor) if cursor else None
        docs = await self._services.page(
            scope, after=after, limit=limit + 1, projects=listed_projects(identity, project)
        )
        more = len(docs) > limit
        docs = docs[:limit]
        configs, deleting = await asyncio.gather(
            self._services.configs_of([doc["_id"] for doc in docs]),
            self._requests.requested_of([service_request_key(doc) for doc in docs], "delete"),
        )
        items = [
            self.view(doc, configs[doc["_id"]], deleting=service_request_key(doc) in deleting)
            for doc in docs
        ]
        return InferenceServicePage(
            items=items, next_cursor=encode_cursor(docs[-1]["_id"]) if more else None
        )

    async def change(
        self, identity: Identity, service_id: str, body: InferenceServicePatch
    ) -> InferenceService:
        """A new generation: a new revision when the template changed."""
        identity.require_role("tenant-user", "tenant-admin")
        doc = await self._owned(identity, service_id)
        configs = await self._live_configs(doc)
        current = configs[-1]
        template = patched_template(current["template"], body)
        if body.model_fields_set & {"image", "run_as_user"}:
            self._images.admit(template.image, template.run_as_user, uid_field="runAsUser")
        strategy = body.strategy or UpdateStrategy(
            max_surge=current["max_surge"], max_unavailable=current["max_unavailable"]
        )
        min_replicas, max_replicas, autoscaling = patched_scaling(current, body)
        serving = template_doc(template)
        # A revision stored before `runAsUser` existed holds none: the same as None.
        changed_template = serving != {"runAsUser": None, **current["template"]}
        config = next_config(
            current,
            template=serving,
            revision=latest_revision(configs) + 1 if changed_template else current["revision"],
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            strategy=strategy,
            autoscaling=autoscaling,
            rolled_back_from=None if changed_template else current["rolled_back_from"],
        )
        return await self._record(doc, configs, config)

    async def rollback(
        self, identity: Identity, service_id: str, body: RollbackRequest
    ) -> InferenceService:
        """The template of an earlier revision, as the next revision."""
        identity.require_role("tenant-user", "tenant-admin")
        doc = await self._owned(identity, service_id)
        configs = await self._live_configs(doc)
        earlier = next((c for c in configs if c["revision"] == body.revision), None)
        if earlier is None:
            raise NotFound(f"inference service {service_id!r} has no revision {body.revision}")
        current = configs[-1]
        config = next_config(
            current,
            template=earlier["template"],
            revision=latest_revision(configs) + 1,
            min_replicas=current["min_replicas"],
            max_replicas=current["max_replicas"],
            strategy=UpdateStrategy(
                max_surge=current["max_surge"], max_unavailable=current["max_unavailable"]
            ),
            autoscaling=current["autoscaling"],
            rolled_back_from=body.revision,
        )
        return await self._record(doc, configs, config)

    async def _live_configs(self, doc: ServiceDoc) -> list[ServiceConfigDoc]:
        configs: list[ServiceConfigDoc]
        configs, deleting = await asyncio.gather(
            self._services.configs(doc["_id"]),
            self._requests.requested(service_request_key(doc), "delete"),
        )
        if deleting or not configs:
            raise Conflict(
                f"inference service {doc['service_id']!r} is being deleted",
                service_id=doc["service_id"],
            )
        return configs

    async def _record(
        self, doc: ServiceDoc, configs: list[ServiceConfigDoc], config: ServiceConfigDoc
    ) -> InferenceService:
        before = claimed_gpus(configs[-1], GpuShare.of(doc), doc["gpu_count"])
        after = claimed_gpus(config, GpuShare.of(doc), doc["gpu_count"])
        tenant = require_active(await self._tenants.get(doc["tenant_id"]), service="instances")
        if after != before:
            who = workload_claimant(tenant, doc)
            await self._claim(
                tenant, doc["service_id"], after, grow=True, generation=config["generation"],
                who=who,
            )  # fmt: skip
        try:
            await self._services.add_config(config)
        except DuplicateGeneration:
            if after != before:
                # A concurrent change was recorded, and our resize may have overwritten
                # its claim: hold what the recorded configuration holds (review M2).
                won = (await self._services.configs(doc["_id"]))[-1]
                await self._quota.restore(
                    doc["tenant_id"], service_workload_id(doc["service_id"]),
                    claimed_gpus(won, GpuShare.of(doc), doc["gpu_count"]), tenant["quota"],
                    generation=won["generation"],
                )  # fmt: skip
            raise Conflict(
                f"inference service {doc['service_id']!r} was changed meanwhile; read it and retry",
                service_id=doc["service_id"],
            ) from None
        await self._wakeups.wake(service_item(doc["_id"]))
        return self.view(doc, [*configs, config], deleting=False)

    async def delete(self, identity: Identity, service_id: str) -> InferenceService:
        """Ask for the deletion; the controller removes the replicas (each drains
        first), then the service and its quota claim."""
        identity.require_role("tenant-user", "tenant-admin")
        doc = await self._owned(identity, service_id)
        await self._requests.request(service_request_key(doc), "delete")
        await self._wakeups.wake(service_item(doc["_id"]))
        return self.view(doc, await self._services.configs(doc["_id"]), deleting=True)

    async def record_load(self, identity: Identity, report: ServiceLoadReport) -> None:
        """A gateway replica's requests in flight per service of the identity's tenant,
        for the autoscaler; services of other tenants, or gone, are ignored."""
        if identity.subject != GATEWAY_SUBJECT:
            raise Forbidden("only the gateway reports service load")
        tenant_id = identity.require_tenant()
        for load in report.services:
            key = instance_key(tenant_id, load.service_id)
            if await self._services.record_load(report.gateway, key, load.in_flight):
                await self._wakeups.wake(service_item(key))

    async def endpoints(self, identity: Identity, service_id: str) -> ServiceEndpoints:
        """The serving replicas' addresses, for the gateway's balancer."""
        doc = await self._owned(identity, service_id)
        return ServiceEndpoints(
            service_id=doc["service_id"],
            port=doc["port"],
            readiness_path=doc["readiness_path"],
            addresses=[
                replica["address"]
                for replica in doc["replicas"]
                if replica["ready"] and not replica["terminating"] and replica["address"]
            ],
        )

    def view(
        self, doc: ServiceDoc, configs: list[ServiceConfigDoc], *, deleting: bool
    ) -> InferenceService:
        url = public_origin(
            self._settings.instance_url_scheme,
            service_host(doc["service_id"], doc["tenant_id"], self._settings.instance_domain),
            self._settings.instance_url_port,
        )
        return service_view(
            doc, configs, url=f"{url}/", deleting=deleting, cluster=self._placement.cluster_of(doc)
        )
