"""An instance as the API shows it (pure): its state and history, where it runs, and
the URLs of its public ports."""

from __future__ import annotations

from gpucloud_libs.clock import aware
from gpucloud_libs.naming import instance_host, public_origin

from ..documents import InstanceDoc, workload_project
from ..schemas import STORED, InstanceTemplate, QueuePosition, Transition
from ..settings import InstancesSettings
from .schemas import Instance


def instance_urls(doc: InstanceDoc, settings: InstancesSettings) -> list[str]:
    """The URL of each public port, under its base path."""
    template = InstanceTemplate.model_validate(doc["template"], context=STORED)
    return [
        public_origin(
            settings.instance_url_scheme,
            instance_host(
                doc["instance_id"], doc["tenant_id"], port.port, settings.instance_domain
            ),
            settings.instance_url_port,
        )
        + (port.base_url or "/")
        for port in template.ports
        if port.is_public
    ]


def instance_view(
    doc: InstanceDoc,
    settings: InstancesSettings,
    *,
    queue: QueuePosition | None,
    stop_requested: bool,
    start_requested: bool = False,
    cluster: str,
) -> Instance:
    """`queue`: its place in its tenant's queue while queued; `stop_requested`: a stop
    is being carried out."""
    return Instance(
        instance_id=doc["instance_id"],
        tenant_id=doc["tenant_id"],
        state=doc["state"],
        reason=doc.get("reason"),
        message=doc.get("message"),
        spec_name=doc["spec_name"],
        project=workload_project(doc),
        gpu_type=doc["gpu_type"],
        gpu_count=doc["gpu_count"],
        image=doc["image"],
        cluster=cluster,
        zone=doc.get("zone"),
        node=doc.get("node"),
        from_stock=bool(doc.get("from_stock")),
        queue=queue,
        priority=doc.get("priority", 0),
        stop_requested=stop_requested,
        start_requested=start_requested,
        revision=doc["sequence"],
        urls=instance_urls(doc, settings),
        created_at=aware(doc["created_at"]),
        updated_at=aware(doc["updated_at"]),
        history=[
            Transition(state=h["state"], at=aware(h["at"]), reason=h.get("reason"))
            for h in doc.get("history", [])
        ],
    )
