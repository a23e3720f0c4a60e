"""Kubernetes objects of an instance: its pod and its service."""

from __future__ import annotations

from typing import Any

from ..manifests import (
    FROM_STOCK,
    GPU_RESOURCE,
    INSTANCE,
    MANAGED,
    SPEC,
    STOCK_UNIT,
    TENANT,
    Manifest,
    _sharing_labels,
    _sole_tenant,
    _workload_container,
    _workload_pod_spec,
)
from ..schemas import InstanceTemplate


def pod_name(instance_id: str) -> str:
    return f"inst-{instance_id}"


def instance_pod(
    *,
    namespace_name: str,
    tenant_id: str,
    instance_id: str,
    spec_name: str,
    image: str,
    template: InstanceTemplate,
    cpu: str,
    memory: str,
    gpus: int,
    gpu_type: str,
    zones: list[str],
    stock: tuple[str, str] | None = None,
    storage_secrets: list[tuple[str, str]] | None = None,
    pull_secrets: list[str] | None = None,
    gpu_resource: str = GPU_RESOURCE,
) -> Manifest:
    """`stock`: the (unit, node) of the warm unit it claimed, where it is bound;
    `storage_secrets`: (Secret, variable prefix) per object storage, in request order;
    `pull_secrets`: the image pull Secrets of the image's registry; `gpu_resource`: whole
    GPUs, or a shared kind (libs gpu_shares)."""
    unit, node = stock if stock is not None else (None, None)
    probe_port = next((port for port in template.ports if port.is_probe), None)
    container = _workload_container(
        image, template, cpu, memory, (gpu_resource, gpus), storage_secrets
    )
    container["ports"] = [
        {"containerPort": port.port, "protocol": port.protocol, "name": f"p{port.port}"}
        for port in template.ports
    ]
    if template.cmd:
        container["command"] = ["/bin/sh", "-c", template.cmd]
    if template.command:
        container["command"] = list(template.command)
    if template.args:
        container["args"] = list(template.args)
    if probe_port is not None:
        probe_action: dict[str, Any] = (
            {"httpGet": {"port": probe_port.port, "path": probe_port.base_url or "/"}}
            if probe_port.protocol == "TCP" and probe_port.base_url is not None
            else {"tcpSocket": {"port": probe_port.port}}
        )
        container["readinessProbe"] = {**probe_action, "periodSeconds": 5, "failureThreshold": 3}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(instance_id),
            "namespace": namespace_name,
            "labels": {
                MANAGED: "true",
                TENANT: tenant_id,
                INSTANCE: instance_id,
                SPEC: spec_name,
                **({FROM_STOCK: "true"} if node else {}),
                **_sharing_labels(gpu_resource),
            },
            **({"annotations": {STOCK_UNIT: unit}} if unit else {}),
        },
        "spec": _workload_pod_spec(
            container,
            template,
            "Always",
            gpu_type,
            zones,
            node,
            pull_secrets or [],
            _sole_tenant(gpu_resource, tenant_id),
        ),
    }


def instance_service(
    namespace_name: str, tenant_id: str, instance_id: str, template: InstanceTemplate
) -> Manifest | None:
    if not template.ports:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": pod_name(instance_id),
            "namespace": namespace_name,
            "labels": {MANAGED: "true", TENANT: tenant_id, INSTANCE: instance_id},
        },
        "spec": {
            "selector": {INSTANCE: instance_id},
            "ports": [
                {
                    "name": f"p{port.port}",
                    "port": port.port,
                    "targetPort": port.port,
                    "protocol": port.protocol,
                }
                for port in template.ports
            ],
        },
    }
