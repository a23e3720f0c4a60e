"""What changed since the last usage-record pass, so a pass reads only those facts."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


class ChangeSet:
    """Keys (tenant, instance or storage) that got new facts since the last pass.
    None until the first pass, which looks at everything."""

    def __init__(self) -> None:
        self._keys: set[tuple[str, str]] | None = None

    def add(self, *keys: tuple[str, str]) -> None:
        if self._keys is not None:
            self._keys.update(keys)

    def take(self) -> set[tuple[str, str]] | None:
        """The changes to look at now (None: everything); tracking starts afresh."""
        taken, self._keys = self._keys, set()
        return taken

    def give_back(self, keys: set[tuple[str, str]] | None) -> None:
        """A pass failed: look at its keys again next time (everything, if it was full)."""
        if keys is None or self._keys is None:
            self._keys = None
        else:
            self._keys |= keys


def by_tenant(keys: set[tuple[str, str]]) -> dict[str, set[str]]:
    """(tenant, instance or storage) keys as each tenant's set of ids."""
    grouped: dict[str, set[str]] = defaultdict(set)
    for tenant_id, subject_id in keys:
        grouped[tenant_id].add(subject_id)
    return grouped


@dataclass
class UsageChanges:
    """Shared by fact ingestion (which adds) and the usage-record pass (which takes)."""

    instances: ChangeSet = field(default_factory=ChangeSet)
    storages: ChangeSet = field(default_factory=ChangeSet)
    #: Per storage: usage records are claimed for every hour before this (µs).
    storage_hours_done: dict[tuple[str, str], int] = field(default_factory=dict)
