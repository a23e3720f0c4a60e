"""A workload the API admitted, of any kind, and the fields every kind stores of it."""

from __future__ import annotations

from dataclasses import dataclass

from gpucloud_libs.identity import Identity
from gpucloud_libs.mongo import Document
from gpucloud_libs.naming import project_namespace

from ..admission import Placed, spec_fields
from ..documents import SpecDoc, TenantDoc


@dataclass(frozen=True)
class NewWorkload:
    """Who asked, in which tenant, for what spec; where it may run (its zones, and the
    cluster it was placed in) and the storages it mounts; and how a replay of the
    request is recognised (its id, Idempotency-Key and request hash)."""

    key: str
    workload_id: str
    identity: Identity
    tenant: TenantDoc
    spec: SpecDoc
    zones: list[str]
    placed: Placed
    storages: list[Document]
    request_hash: str
    idempotency_key: str | None
    #: The project it runs in, the caller's to start in (`project_of`).
    project: str

    def document_fields(self, id_field: str) -> Document:
        """What every kind's document holds of it, its id under `id_field`."""
        return {
            "_id": self.key,
            "tenant_id": self.tenant["_id"],
            id_field: self.workload_id,
            "user_id": self.identity.subject,
            "project": self.project,
            "idempotency_key": self.idempotency_key,
            "request_hash": self.request_hash,
            **spec_fields(self.spec, self.zones, self.placed),
            "storages": self.storages,
            "namespace": project_namespace(self.tenant["_id"], self.project),
        }
