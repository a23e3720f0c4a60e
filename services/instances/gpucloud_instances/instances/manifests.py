"""Kubernetes objects of an instance: its pod and its service."""

from __future__ import annotations

from typing import Any

from ..manifests import FROM_STOCK, INSTANCE, MANAGED, STOCK_UNIT, TENANT, Manifest, WorkloadPod
from ..schemas import InstanceTemplate


def pod_name(instance_id: str) -> str:
    return f"inst-{instance_id}"


def instance_pod(
    pod: WorkloadPod, instance_id: str, stock: tuple[str, str] | None = None
) -> Manifest:
    """`stock`: the (unit, node) of the warm unit it claimed, where it is bound."""
    unit, node = stock if stock is not None else (None, None)
    template = pod.template
    container = pod.container()
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
    probe = _readiness_probe(template)
    if probe is not None:
        container["readinessProbe"] = probe
    labels = pod.labels(pod.owner(INSTANCE, instance_id))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(instance_id),
            "namespace": pod.namespace_name,
            "labels": {**labels, **({FROM_STOCK: "true"} if node else {})},
            **({"annotations": {STOCK_UNIT: unit}} if unit else {}),
        },
        "spec": pod.spec(container, restart_policy="Always", node=node),
    }


def _readiness_probe(template: InstanceTemplate) -> Manifest | None:
    """Ready once its probe port answers: over HTTP where the port has a base URL."""
    port = next((port for port in template.ports if port.is_probe), None)
    if port is None:
        return None
    action: dict[str, Any] = (
        {"httpGet": {"port": port.port, "path": port.base_url or "/"}}
        if port.protocol == "TCP" and port.base_url is not None
        else {"tcpSocket": {"port": port.port}}
    )
    return {**action, "periodSeconds": 5, "failureThreshold": 3}


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
