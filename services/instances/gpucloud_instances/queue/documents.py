"""The stored documents of the admission queue's lines."""

from __future__ import annotations

from typing import TypedDict


class QueueLineDoc(TypedDict):
    """A tenant's queued workloads in admission order, as parallel lists (compact)."""

    _id: str  # the tenant
    #: Work items (an instance's key, `job_item` of a job's).
    items: list[str]
    #: GPUs of quota each asks for.
    gpus: list[int]
    priorities: list[int]


class QueueBandsDoc(TypedDict):
    """A tenant's line summed by priority, highest first, as parallel lists: FerretDB
    stores no array of arrays."""

    _id: str  # the tenant
    priorities: list[int]
    workloads: list[int]
    gpus: list[int]
