"""Kubeconfigs handed to the platform as text (a cluster's registration): read and
checked before anything connects with them."""

from __future__ import annotations

import asyncio
from typing import Any

import yaml

from .errors import ValidationFailed
from .kube import KubeClient


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
            client = KubeClient(None, config_dict=config)
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
