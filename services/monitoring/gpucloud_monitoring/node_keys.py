"""Node keys: which node's agent sent a report, and a node's key for its agent alone
(gpucloud_libs.node_seals, review M4).

A report is taken only under the seal of the node it names. An agent gets its node's
key by showing the ServiceAccount token Kubernetes projected into its pod for this
service (audience `gpucloud-monitoring`). The API server reviews the token and says
whose it is and, for a token bound to a pod, the node that pod is on: that node, and
no other, is the one whose key the agent gets. A token of a pod since deleted, of
another service account, or for another audience gets none.
"""

from __future__ import annotations

import base64
import logging
import time

from gpucloud_libs.errors import DependencyUnavailable, Forbidden, Unauthenticated
from gpucloud_libs.kube import KubeClient, KubeError
from gpucloud_libs.node_seals import NodeKeyring, ReportT, genuine

from .schemas import NodeKey

log = logging.getLogger(__name__)

#: The audience an agent's projected token is made for: only this service takes it.
AUDIENCE = "gpucloud-monitoring"
#: Set by the API server on a token bound to a pod that is on a node.
NODE_CLAIM = "authentication.kubernetes.io/node-name"
#: A node whose reports are refused is logged at most this often.
REFUSAL_LOG_EVERY_S = 60.0


class NodeSeals:
    """Checks each report's seal against the key of the node it names."""

    def __init__(self, telemetry_secret: str) -> None:
        self._keys = NodeKeyring(telemetry_secret)
        self._logged: dict[str, float] = {}
        self.refused = 0

    def key(self, node: str) -> bytes:
        return self._keys.of(node)

    def genuine(self, reports: list[ReportT]) -> list[ReportT]:
        """The reports sealed by the node each names; the others are dropped, and said."""
        taken = []
        for report in reports:
            if genuine(self.key(report.node), report):
                taken.append(report)
                continue
            self.refused += 1
            at = time.monotonic()
            if at - self._logged.get(report.node, float("-inf")) >= REFUSAL_LOG_EVERY_S:
                self._logged[report.node] = at
                log.warning(
                    "refused telemetry not sealed by the node it names",
                    extra={"node": report.node, "report": report.type},
                )
        return taken


class NodeKeys:
    """Hands a node agent its node's key, for the pod-bound token Kubernetes gave it."""

    def __init__(self, kube: KubeClient, seals: NodeSeals, agent_accounts: list[str]) -> None:
        self._kube = kube
        self._seals = seals
        #: `system:serviceaccount:<namespace>:<name>` of the agents' ServiceAccounts.
        self._agents = set(agent_accounts)

    async def issue(self, token: str) -> NodeKey:
        try:
            review = await self._kube.create({
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token, "audiences": [AUDIENCE]},
            })  # fmt: skip
        except KubeError as error:  # the API server away, or the review not ours to make
            raise DependencyUnavailable(
                f"Kubernetes could not review the token: {error}", retry_after_s=10
            ) from error
        status = review.get("status") or {}
        if not status.get("authenticated") or AUDIENCE not in (status.get("audiences") or []):
            raise Unauthenticated(
                f"the token is not a valid Kubernetes token for the audience {AUDIENCE!r}"
            )
        user = status.get("user") or {}
        if user.get("username") not in self._agents:
            raise Forbidden("only the node agent's ServiceAccount gets a node key")
        nodes = (user.get("extra") or {}).get(NODE_CLAIM) or []
        if len(nodes) != 1:
            raise Forbidden(
                "the token is not bound to a pod on a node: project it into the agent's "
                "pod (a serviceAccountToken volume) rather than asking for one"
            )
        node = nodes[0]
        key = base64.urlsafe_b64encode(self._seals.key(node)).decode()
        log.info("node key issued", extra={"node": node})
        return NodeKey(node=node, key=key)
