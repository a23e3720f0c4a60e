"""A node agent gets its own node's telemetry key, and only that, for the token
Kubernetes binds to its pod (review M4; gpucloud_libs.node_seals).

On the real API server of the local stack: the agent's ServiceAccount and an agent
pod on a (kwok) node, the token the kubelet would project into it (TokenRequest,
bound to the pod), and the agent's own code asking the running monitoring service.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from gpucloud_agent.seals import FetchedKeySealer, KeyUnavailable
from gpucloud_libs.node_seals import node_key
from gpucloud_stack.fleet import cpu_node
from gpucloud_stack.kube_access import AGENT_NAMESPACE

from .support import eventually, unique

AGENT_ACCOUNT = "gpucloud-agent"
AUDIENCE = "gpucloud-monitoring"


@pytest.fixture
async def node(kube: k8s.ApiClient) -> AsyncIterator[str]:
    """A node of the cluster's, cordoned so that nothing of the platform lands on it."""
    name = unique("agent-node")
    cordoned: Any = cpu_node(name) | {"spec": {"unschedulable": True}}
    await k8s.CoreV1Api(kube).create_node(cordoned)
    yield name
    with contextlib.suppress(k8s.ApiException):
        await k8s.CoreV1Api(kube).delete_node(name)


async def _agent_pod(kube: k8s.ApiClient, node: str, account: str) -> dict[str, str]:
    """An agent pod of `account` on `node`, as the DaemonSet makes one."""
    core = k8s.CoreV1Api(kube)
    name = unique("agent")
    pod: Any = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": AGENT_NAMESPACE},
        "spec": {
            "serviceAccountName": account,
            "nodeName": node,
            "automountServiceAccountToken": False,
            "containers": [{"name": "agent", "image": "gpucloud-agent"}],
        },
    }
    created = await core.create_namespaced_pod(AGENT_NAMESPACE, pod)
    return {"name": name, "uid": created.metadata.uid}


async def _token(
    kube: k8s.ApiClient,
    account: str,
    *,
    pod: dict[str, str] | None,
    audience: str = AUDIENCE,
) -> str:
    """The token the kubelet projects into the pod (TokenRequest, bound to it)."""
    spec: dict[str, Any] = {"audiences": [audience], "expirationSeconds": 600}
    if pod is not None:
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", **pod}
    request: Any = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    made = await k8s.CoreV1Api(kube).create_namespaced_service_account_token(
        account, AGENT_NAMESPACE, request
    )
    token: str = made.status.token
    return token


async def _ask(node: str, token: str, stack_env: dict[str, str], tmp_path: Path) -> bytes:
    """What the agent's own code gets from the running monitoring service."""
    path = tmp_path / unique("token")
    path.write_text(token)
    sealer = FetchedKeySealer(node, stack_env["GPUCLOUD_MONITORING_URL"], token_path=str(path))
    return await sealer.fetch()


async def test_an_agent_gets_its_own_nodes_key_for_its_pod_bound_token_and_no_other(
    kube: k8s.ApiClient, node: str, stack_env: dict[str, str], tmp_path: Path
) -> None:
    secret = stack_env["GPUCLOUD_TELEMETRY_SECRET"]
    pod = await _agent_pod(kube, node, AGENT_ACCOUNT)
    token = await _token(kube, AGENT_ACCOUNT, pod=pod)
    assert await _ask(node, token, stack_env, tmp_path) == node_key(secret, node)

    # The same token, from an agent that says it runs on another node: no key at all.
    with pytest.raises(KeyUnavailable, match=f"bound to node '{node}'"):
        await _ask(unique("other-node"), token, stack_env, tmp_path)
    # A token for another audience (the API server's own, say) is not taken.
    other_audience = await _token(kube, AGENT_ACCOUNT, pod=pod, audience="https://kubernetes")
    with pytest.raises(KeyUnavailable, match=r"\(401\)"):
        await _ask(node, other_audience, stack_env, tmp_path)
    # The agent's account, but a token bound to no pod, names no node.
    unbound = await _token(kube, AGENT_ACCOUNT, pod=None)
    with pytest.raises(KeyUnavailable, match=r"\(403\).*not bound to a pod on a node"):
        await _ask(node, unbound, stack_env, tmp_path)
    # Another account's pod on the same node (a tenant's, say) gets nothing.
    stranger = await _agent_pod(kube, node, "default")
    with pytest.raises(KeyUnavailable, match=r"\(403\).*node agent's ServiceAccount"):
        await _ask(node, await _token(kube, "default", pod=stranger), stack_env, tmp_path)

    # Once the pod is gone, so is what its token could get.
    await k8s.CoreV1Api(kube).delete_namespaced_pod(
        pod["name"], AGENT_NAMESPACE, grace_period_seconds=0
    )

    async def refused() -> bool:
        try:
            await _ask(node, token, stack_env, tmp_path)
        except KeyUnavailable as error:
            return "(401)" in str(error)
        return False

    await eventually(refused, timeout=30, interval=1)
    await k8s.CoreV1Api(kube).delete_namespaced_pod(
        stranger["name"], AGENT_NAMESPACE, grace_period_seconds=0
    )
