"""Leader election on a coordination.k8s.io Lease: one replica's controller acts at a time."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from gpucloud_libs.errors import DependencyUnavailable
from gpucloud_libs.kube import ConflictError, KubeClient, KubeError, NotFoundError

from .. import manifests

LEASE_NAME = "gpucloud-instances-controller"


class LeaseLost(Exception):
    """Another replica holds the lease now: stop acting at once."""


class Lease:
    def __init__(self, kube: KubeClient, *, namespace: str, holder: str, duration_s: int) -> None:
        self._kube = kube
        self._namespace = namespace
        self._holder = holder
        self._duration_s = duration_s
        self.held = False
        #: When this replica last took or renewed the lease, by its own monotonic clock.
        self._renewed_at = 0.0

    def fresh(self) -> bool:
        """Held, and renewed within the lease's duration by this process's own clock. A
        process frozen past its lease (a paused VM, a stopped process) resumes stale:
        another replica may lead by then, so it must not act before it renews."""
        return self.held and time.monotonic() - self._renewed_at < self._duration_s

    def _body(self, resource_version: str | None) -> dict[str, Any]:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        metadata: dict[str, Any] = {"name": LEASE_NAME, "namespace": self._namespace}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self._holder,
                "leaseDurationSeconds": self._duration_s,
                "renewTime": stamp,
                "acquireTime": stamp,
            },
        }

    async def acquire(self) -> bool:
        """Take the lease if it is free, expired or already ours."""
        await self._kube.ensure(manifests.namespace(self._namespace, {}))
        try:
            lease = await self._kube.read("Lease", self._namespace, LEASE_NAME)
        except NotFoundError:
            try:
                await self._kube.create(self._body(None))
            except ConflictError:
                return False
            self._took()
            return True
        spec = lease.get("spec", {})
        holder = spec.get("holderIdentity")
        if holder not in (None, "", self._holder) and not _expired(spec):
            return False
        try:
            await self._kube.replace(
                "Lease",
                self._namespace,
                LEASE_NAME,
                self._body(lease["metadata"]["resourceVersion"]),
            )
        except ConflictError:
            return False
        self._took()
        return True

    def _took(self) -> None:
        self.held = True
        self._renewed_at = time.monotonic()

    async def renew_forever(self) -> None:
        """Renew every third of the duration; raises LeaseLost when another took it, or
        when this process went longer than the lease without renewing (it was frozen)."""
        while True:
            await asyncio.sleep(min(1.0, self._duration_s / 3))
            if not self.fresh():
                self.held = False
                raise LeaseLost
            if time.monotonic() - self._renewed_at < self._duration_s / 3:
                continue
            try:
                lease = await self._kube.read("Lease", self._namespace, LEASE_NAME)
                if lease.get("spec", {}).get("holderIdentity") != self._holder:
                    self.held = False
                    raise LeaseLost
                body = self._body(lease["metadata"]["resourceVersion"])
                body["spec"]["acquireTime"] = lease["spec"].get("acquireTime")
                await self._kube.replace("Lease", self._namespace, LEASE_NAME, body)
                self._renewed_at = time.monotonic()
            except (ConflictError, NotFoundError) as error:
                self.held = False
                raise LeaseLost from error

    async def release(self) -> None:
        """Hand the lease over at once on a clean shutdown instead of letting it expire."""
        if not self.held:
            return
        self.held = False
        with contextlib.suppress(KubeError, DependencyUnavailable):
            lease = await self._kube.read("Lease", self._namespace, LEASE_NAME)
            if lease.get("spec", {}).get("holderIdentity") == self._holder:
                lease["spec"]["holderIdentity"] = ""
                await self._kube.replace("Lease", self._namespace, LEASE_NAME, lease)


def _expired(spec: dict[str, Any]) -> bool:
    renewed = spec.get("renewTime")
    if not renewed:
        return True
    renewed_at = datetime.fromisoformat(renewed.replace("Z", "+00:00"))
    return datetime.now(UTC) - renewed_at > timedelta(seconds=spec.get("leaseDurationSeconds", 15))
