"""A tenant's pods reach the internet and their own namespace, and nothing of the platform.

kwok pods run no processes, so no packet can be sent from one here. Instead the
tenant's NetworkPolicy is read back from the real API server and every
destination of the table below is checked against it with the NetworkPolicy
rules of the Kubernetes API (a destination is reachable when some egress rule's
peer and port admit it).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from gpucloud_libs.naming import tenant_namespace

from .platform import Platform
from .support import eventually


@dataclass(frozen=True)
class Destination:
    ip: str
    port: int
    protocol: str = "TCP"
    namespace: str | None = None  # set for a pod of the cluster
    pod_labels: dict[str, str] = field(default_factory=dict)


def _labels_match(selector: Any, labels: dict[str, str]) -> bool:
    """A label selector with matchLabels only (what gpucloud writes); empty matches all."""
    wanted = (selector.match_labels or {}) if selector else {}
    assert not (selector and selector.match_expressions), "expressions are not evaluated here"
    return all(labels.get(key) == value for key, value in wanted.items())


def _peer_admits(peer: Any, destination: Destination, own_namespace: str) -> bool:
    if peer.ip_block is not None:
        address = ipaddress.ip_address(destination.ip)
        block = ipaddress.ip_network(peer.ip_block.cidr)
        excepted = [ipaddress.ip_network(cidr) for cidr in peer.ip_block._except or []]
        return (
            address.version == block.version
            and address in block
            and not any(address.version == net.version and address in net for net in excepted)
        )
    if destination.namespace is None:
        return False  # pod and namespace selectors only ever match pods
    if peer.namespace_selector is not None:
        namespace_labels = {"kubernetes.io/metadata.name": destination.namespace}
        if not _labels_match(peer.namespace_selector, namespace_labels):
            return False
    elif destination.namespace != own_namespace:
        return False
    return _labels_match(peer.pod_selector, destination.pod_labels)


def egress_allowed(policy: Any, destination: Destination) -> bool:
    assert "Egress" in policy.spec.policy_types
    for rule in policy.spec.egress or []:
        ports = rule.ports or []
        if ports and not any(
            p.port == destination.port and (p.protocol or "TCP") == destination.protocol
            for p in ports
        ):
            continue
        own = policy.metadata.namespace
        if rule.to is None or any(_peer_admits(peer, destination, own) for peer in rule.to):
            return True
    return False


def table(own_namespace: str) -> list[tuple[str, Destination, bool]]:
    dns = {"k8s-app": "kube-dns"}
    return [
        ("Kafka (local stack)", Destination("127.0.0.1", 9092), False),
        ("the database", Destination("127.0.0.1", 27017), False),
        ("the database, in-cluster", Destination("10.96.12.7", 27017), False),
        ("MinIO's admin API", Destination("127.0.0.1", 9000), False),
        ("a service of the platform", Destination("10.244.0.12", 8000, namespace="gpucloud-system"), False),
        ("the Kubernetes API (service address)", Destination("10.96.0.1", 443), False),
        ("the Kubernetes API (a node address)", Destination("192.168.1.10", 6443), False),
        ("cloud metadata", Destination("169.254.169.254", 80), False),
        ("shared address space", Destination("100.64.3.4", 443), False),
        ("another tenant's pod", Destination("10.244.3.9", 8888, namespace="t-other", pod_labels={"app": "x"}), False),
        ("a private IPv6 address", Destination("fd00::10", 443), False),
        # IPv6 prefixes that embed an IPv4 address reach it through a translator (M9).
        ("cloud metadata through NAT64", Destination("64:ff9b::a9fe:a9fe", 80), False),
        ("cloud metadata through local-use NAT64", Destination("64:ff9b:1::a9fe:a9fe", 80), False),
        ("a private address through 6to4", Destination("2002:0a00:0001::1", 443), False),
        ("the cluster DNS, on port 53", Destination("10.244.0.2", 53, "UDP", namespace="kube-system", pod_labels=dns), True),
        ("the cluster DNS, on another port", Destination("10.244.0.2", 8080, namespace="kube-system", pod_labels=dns), False),
        ("a pod of its own namespace", Destination("10.244.5.6", 29500, namespace=own_namespace), True),
        ("a public address", Destination("93.184.216.34", 443), True),
        ("a public IPv6 address", Destination("2606:4700::6810:84e5", 443), True),
    ]  # fmt: skip


async def test_a_tenants_pods_reach_the_internet_and_nothing_of_the_platform(
    platform: Platform, kube: k8s.ApiClient
) -> None:
    account = await platform.tenant()
    namespace = tenant_namespace(account.tenant_id)
    networking = k8s.NetworkingV1Api(kube)

    async def egress_policy() -> Any:
        found = await networking.list_namespaced_network_policy(namespace)
        return next((p for p in found.items if p.spec.egress), None)

    policy = await eventually(egress_policy, timeout=60)
    verdicts = {
        name: egress_allowed(policy, destination) for name, destination, _ in table(namespace)
    }
    assert verdicts == {name: expected for name, _, expected in table(namespace)}
    # Inbound: only the gateway's namespace and the tenant's own pods.
    [rule] = policy.spec.ingress
    assert [
        peer.namespace_selector.match_labels for peer in rule._from if peer.namespace_selector
    ] == [{"kubernetes.io/metadata.name": "gpucloud-system"}]


@pytest.mark.parametrize(
    ("destination", "expected"),
    [(Destination("8.8.8.8", 53, "UDP"), True), (Destination("10.0.0.1", 53, "UDP"), False)],
)
def test_the_evaluator_follows_ip_blocks_and_their_exceptions(
    destination: Destination, expected: bool
) -> None:
    """The oracle itself, on a policy built by hand: a block with an exception."""
    policy = k8s.V1NetworkPolicy(
        metadata=k8s.V1ObjectMeta(name="p", namespace="t-a"),
        spec=k8s.V1NetworkPolicySpec(
            pod_selector=k8s.V1LabelSelector(),
            policy_types=["Egress"],
            egress=[
                k8s.V1NetworkPolicyEgressRule(
                    to=[
                        k8s.V1NetworkPolicyPeer(
                            ip_block=k8s.V1IPBlock(cidr="0.0.0.0/0", _except=["10.0.0.0/8"])
                        )
                    ]
                )
            ],
        ),
    )
    assert egress_allowed(policy, destination) is expected
