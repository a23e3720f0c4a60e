"""Which cluster a new workload goes to. So far every workload goes to the home
cluster, while it takes new ones: a cordoned or draining home cluster refuses new
workloads and starts at once, and those already in it go on."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from gpucloud_libs.errors import Conflict

from .schemas import ClusterState
from .store import ClusterStore

#: How long a cluster's state is taken as read: a cordon reaches every replica's
#: admissions within this.
STATE_READ_S = 1.0


class Placement:
    def __init__(self, clusters: ClusterStore, home: str) -> None:
        self._clusters = clusters
        self._home = home
        self._state: tuple[float, str] | None = None  # (read at, state)

    async def choose(self) -> str:
        """The cluster a new workload (or a start again) goes to; a 409 when none
        takes new workloads now."""
        state = await self._home_state()
        if state != ClusterState.ACTIVE:
            raise Conflict(
                f"no cluster takes new workloads now: cluster {self._home!r} is {state}",
                cluster=self._home, state=state,
            )  # fmt: skip
        return self._home

    def cluster_of(self, doc: Mapping[str, Any]) -> str:
        """The cluster a workload's document says it was placed in."""
        cluster: str = doc.get("cluster") or self._home
        return cluster

    def forget(self) -> None:
        """The state was just set here: read it again."""
        self._state = None

    async def _home_state(self) -> str:
        read = self._state
        if read is not None and time.monotonic() - read[0] < STATE_READ_S:
            return read[1]
        doc = await self._clusters.get(self._home)
        # Not recorded yet (the service is starting): the home cluster is active.
        state = ClusterState.ACTIVE.value if doc is None else doc["state"]
        self._state = (time.monotonic(), state)
        return state
