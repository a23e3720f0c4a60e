"""Retries of publishes that failed after their write (libs/gpucloud_libs/outbox.py)."""

from __future__ import annotations

import pytest

from gpucloud_libs.mongo import Document
from gpucloud_libs.outbox import PublishRetries


async def test_first_sweep_scans_then_only_failed_publishes_are_retried() -> None:
    documents: dict[str, Document] = {
        "a": {"_id": "a", "published": False},  # left over from before a restart
        "b": {"_id": "b", "published": True},
    }
    scans: list[str] = []
    broker_up = True
    sent: list[str] = []

    async def all_unpublished() -> list[Document]:
        scans.append("scan")
        return [doc for doc in documents.values() if not doc["published"]]

    async def get(document_id: str) -> Document | None:
        return documents.get(document_id)

    async def publish(doc: Document) -> None:
        if not broker_up:
            retries.failed(doc["_id"])
            raise ConnectionError("broker away")
        sent.append(doc["_id"])
        doc["published"] = True

    retries = PublishRetries()
    await retries.sweep(all_unpublished=all_unpublished, get=get, publish=publish)
    assert (scans, sent) == (["scan"], ["a"])

    # A new document whose publish fails at write time is retried by id, not by a scan.
    documents["c"] = {"_id": "c", "published": False}
    broker_up = False
    with pytest.raises(ConnectionError):
        await publish(documents["c"])
    with pytest.raises(ConnectionError):
        await retries.sweep(all_unpublished=all_unpublished, get=get, publish=publish)
    broker_up = True
    await retries.sweep(all_unpublished=all_unpublished, get=get, publish=publish)
    assert (scans, sent) == (["scan"], ["a", "c"])
    await retries.sweep(all_unpublished=all_unpublished, get=get, publish=publish)
    assert sent == ["a", "c"]
