"""Kubeconfigs handed to the platform as text (a cluster's registration): read and
checked before anything connects with them.

A kubeconfig is a program for its loader as much as a document: `exec` and
`auth-provider` run commands with the service's environment, `tokenFile` and the
file fields read the service's files and send them, `proxy-url` and a turned-off TLS
check send its credentials elsewhere. A registered one is therefore reduced to
data (`registered_kubeconfig`) before any loader sees it, each time it is loaded,
so a kubeconfig stored before this check is held to it too (review N2).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import yaml

from .errors import ValidationFailed
from .kube import KubeClient
from .outbound_guard import Networks, OutboundGuard

#: What a registered kubeconfig's cluster and user may hold: data, never a path, a
#: command or a switch that weakens TLS.
CLUSTER_FIELDS = frozenset({"server", "certificate-authority-data", "tls-server-name"})
USER_FIELDS = frozenset({"token", "client-certificate-data", "client-key-data"})
#: Why a field is refused, for the ones a kubeconfig commonly holds.
REFUSED = {
    "exec": "it runs a command",
    "auth-provider": "it runs a provider's plugin",
    "tokenFile": "it reads a file of the service's",
    "client-certificate": "it reads a file: give client-certificate-data",
    "client-key": "it reads a file: give client-key-data",
    "certificate-authority": "it reads a file: give certificate-authority-data",
    "insecure-skip-tls-verify": "the API server's certificate must be checked",
    "proxy-url": "the API server is dialled directly",
    "username": "give a token or a client certificate",
    "password": "give a token or a client certificate",
    "as": "a registered cluster's user acts as itself",
    "as-groups": "a registered cluster's user acts as itself",
    "as-uid": "a registered cluster's user acts as itself",
    "as-user-extra": "a registered cluster's user acts as itself",
}
REGISTERED = "registered"


def parsed_kubeconfig(text: str, *, field: str = "kubeconfig") -> dict[str, Any]:
    """The kubeconfig as a dict, or a 422 on `field` saying what is wrong with it."""
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        # Where, not what: the text around the error may be a credential.
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ValidationFailed(f"the {field} is not YAML{where}", field=field) from None
    if not isinstance(config, dict) or not config.get("clusters") or not config.get("contexts"):
        raise ValidationFailed(
            f"the {field} names no cluster and context (clusters, contexts, current-context)",
            field=field,
        )
    return config


def kubeconfig_server(config: dict[str, Any], *, field: str = "kubeconfig") -> str:
    """The API server the kubeconfig's current context reaches."""
    contexts = {c.get("name"): c.get("context", {}) for c in config.get("contexts") or []}
    context = contexts.get(config.get("current-context")) or {}
    clusters = {c.get("name"): c.get("cluster", {}) for c in config.get("clusters") or []}
    server = (clusters.get(context.get("cluster")) or {}).get("server")
    if not isinstance(server, str) or not server:
        raise ValidationFailed(
            f"the {field}'s current context names no cluster with a server", field=field
        )
    return server.rstrip("/")


def registered_kubeconfig(config: dict[str, Any], *, field: str = "kubeconfig") -> dict[str, Any]:
    """The kubeconfig reduced to its current context's cluster (an https server and its
    CA as data) and user (a token, or a client certificate and key as data); a 422 on
    `field` naming anything else it holds there, before any loader sees it."""
    contexts = _named(config.get("contexts"), "context")
    context = contexts.get(config.get("current-context"))
    if context is None:
        raise ValidationFailed(f"the {field}'s current-context names no context", field=field)
    cluster = _named(config.get("clusters"), "cluster").get(context.get("cluster"))
    user = _named(config.get("users"), "user").get(context.get("user"))
    if cluster is None or user is None:
        raise ValidationFailed(
            f"the {field}'s current context names no cluster and user it has", field=field
        )
    _only(cluster, CLUSTER_FIELDS, "clusters[].cluster", field)
    _only(user, USER_FIELDS, "users[].user", field)
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith("https://"):
        raise ValidationFailed(f"the {field}'s server must be an https:// URL", field=field)
    certificate = "client-certificate-data" in user and "client-key-data" in user
    if "token" not in user and not certificate:
        raise ValidationFailed(
            f"the {field}'s user needs a token, or client-certificate-data and client-key-data",
            field=field,
        )
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": REGISTERED,
        "clusters": [{"name": REGISTERED, "cluster": dict(cluster)}],
        "users": [{"name": REGISTERED, "user": dict(user)}],
        "contexts": [{"name": REGISTERED,
                      "context": {"cluster": REGISTERED, "user": REGISTERED}}],
    }  # fmt: skip


def _named(entries: Any, key: str) -> dict[Any, dict[str, Any]]:
    if not isinstance(entries, list):
        return {}
    return {
        entry.get("name"): entry[key]
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get(key), dict)
    }


def _only(section: dict[str, Any], allowed: Iterable[str], where: str, field: str) -> None:
    for name in sorted(section):
        if name not in allowed:
            why = REFUSED.get(name, "a registered kubeconfig holds data alone")
            raise ValidationFailed(
                f"the {field}'s {where}.{name} is not taken: {why}", field=field, refused=name
            )


def registered_client(config: dict[str, Any]) -> KubeClient:
    """A client of a registered cluster, from its kubeconfig reduced to data."""
    return KubeClient(None, config_dict=registered_kubeconfig(config))


async def check_api_server(
    server: str, *, loopback_only: bool, allowed_networks: Networks, field: str = "kubeconfig"
) -> None:
    """A 422 unless the API server is a global address, or in a network the operator
    allows (`cluster_api_networks`); loopback alone on the local stack. Checked when a
    kubeconfig is registered; what it resolves to is not said back."""
    guard = OutboundGuard(
        field=f"the {field}'s server", allow_private_networks=False,
        loopback_only=loopback_only, allowed_networks=allowed_networks,
    )  # fmt: skip
    await guard.check(server)


class ClientsByKubeconfig:
    """One Kubernetes client per named cluster, opened from its kubeconfig on first use
    and again when the kubeconfig given differs from the one it was opened from (the
    cluster registered again, through any replica)."""

    def __init__(self) -> None:
        self._clients: dict[str, tuple[dict[str, Any], KubeClient]] = {}
        self._opening = asyncio.Lock()

    async def client(self, name: str, config: dict[str, Any]) -> KubeClient:
        async with self._opening:
            cached = self._clients.get(name)
            if cached is not None and cached[0] == config:
                return cached[1]
            await self.forget(name)
            client = registered_client(config)
            await client.connect()
            self._clients[name] = (config, client)
            return client

    async def forget(self, name: str) -> None:
        """Open the cluster's client afresh next time (it did not answer, or is gone)."""
        cached = self._clients.pop(name, None)
        if cached is not None:
            await cached[1].close()

    async def close(self) -> None:
        for name in list(self._clients):
            await self.forget(name)
