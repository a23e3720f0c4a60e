"""The outbox (gpucloud_libs.outbox): an entry stored with its document is the very
event that goes to Kafka, and the retries after the first sweep publish only what
failed, once each, skipping what was published or removed meanwhile."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpucloud_libs.events import CloudEvent, InstanceStateChanged
from gpucloud_libs.mongo import Document
from gpucloud_libs.outbox import PublishRetries, outbox_entry


class Outbox:
    """Documents by id, and what a publish sent: the three calls a sweep takes."""

    def __init__(self, *pending: str) -> None:
        self.documents: dict[str, Document] = {i: {"_id": i, "published": False} for i in pending}
        self.sent: list[str] = []
        self.scans = 0
        self.failing: set[str] = set()

    async def all_unpublished(self) -> list[Document]:
        self.scans += 1
        return [doc for doc in self.documents.values() if not doc["published"]]

    async def get(self, document_id: str) -> Document | None:
        return self.documents.get(document_id)

    async def publish(self, doc: Document) -> None:
        if doc["_id"] in self.failing:
            raise ConnectionError("broker away")
        self.sent.append(doc["_id"])
        doc["published"] = True

    async def sweep(self, retries: PublishRetries) -> None:
        await retries.sweep(
            all_unpublished=self.all_unpublished, get=self.get, publish=self.publish
        )


async def test_the_first_sweep_publishes_everything_left_pending_by_a_scan() -> None:
    outbox, retries = Outbox("a", "b"), PublishRetries()
    outbox.documents["old"] = {"_id": "old", "published": True}
    await outbox.sweep(retries)
    assert (outbox.scans, outbox.sent) == (1, ["a", "b"])


async def test_failures_before_the_first_sweep_need_no_record_the_scan_finds_them() -> None:
    outbox, retries = Outbox("a"), PublishRetries()
    retries.failed("a")
    await outbox.sweep(retries)
    await outbox.sweep(retries)
    assert outbox.sent == ["a"]  # once: the early failure was not kept besides the scan


async def test_after_the_first_sweep_only_failed_ids_are_retried_without_a_scan() -> None:
    outbox, retries = Outbox(), PublishRetries()
    await outbox.sweep(retries)
    outbox.documents |= {i: {"_id": i, "published": False} for i in ("z", "m", "never-failed")}
    for failed in ("z", "m"):
        retries.failed(failed)
    await outbox.sweep(retries)
    assert (outbox.scans, outbox.sent) == (1, ["m", "z"])  # by id, in order
    await outbox.sweep(retries)
    assert outbox.sent == ["m", "z"]


async def test_a_retry_skips_a_document_published_or_removed_meanwhile() -> None:
    outbox, retries = Outbox(), PublishRetries()
    await outbox.sweep(retries)
    outbox.documents["done"] = {"_id": "done", "published": True}  # its own publish got out later
    retries.failed("done")
    retries.failed("gone")  # e.g. its tenant was deleted
    await outbox.sweep(retries)
    assert outbox.sent == []


async def test_a_document_that_fails_again_is_kept_for_the_next_sweep() -> None:
    outbox, retries = Outbox(), PublishRetries()
    await outbox.sweep(retries)
    outbox.documents["a"] = {"_id": "a", "published": False}
    retries.failed("a")
    outbox.failing = {"a"}
    for _ in range(2):
        with pytest.raises(ConnectionError):
            await outbox.sweep(retries)
    outbox.failing = set()
    await outbox.sweep(retries)
    assert (outbox.scans, outbox.sent) == (1, ["a"])


async def test_a_document_failing_in_the_first_sweep_is_retried_by_id() -> None:
    outbox, retries = Outbox("a"), PublishRetries()
    outbox.failing = {"a"}
    with pytest.raises(ConnectionError):
        await outbox.sweep(retries)
    outbox.failing = set()
    await outbox.sweep(retries)
    assert (outbox.scans, outbox.sent) == (1, ["a"])


# --- entries ---------------------------------------------------------------------


def test_an_outbox_entry_is_the_event_as_it_goes_to_kafka() -> None:
    event = CloudEvent.new(
        InstanceStateChanged(
            instance_id="nb-1", tenant_id="t-1", spec_name="h100x1", gpu_type="H100",
            gpu_count=1, state="running", sequence=4,
            at=datetime(2026, 3, 1, 12, 0, 0, 654321, tzinfo=UTC),
        ),
        source="/gpucloud/instances",
    )  # fmt: skip
    entry = outbox_entry(event)
    assert (entry["id"], entry["key"]) == (event.id, "t-1/nb-1")
    assert entry["headers"]["ce_id"] == event.id
    decoded = CloudEvent.from_kafka(entry["value"].encode(), entry["headers"])
    assert decoded == event


def test_an_outbox_entry_is_plain_strings_a_document_can_hold() -> None:
    event = CloudEvent.new(
        InstanceStateChanged(
            instance_id="nb-1", tenant_id="t-1", spec_name="h100x1", gpu_type="H100",
            gpu_count=1, state="stopped", sequence=9, at=datetime(2026, 3, 1, tzinfo=UTC),
        ),
        source="/gpucloud/instances",
        event_id="fixed-id",
    )  # fmt: skip
    entry = outbox_entry(event)
    assert set(entry) == {"id", "key", "value", "headers"}
    assert all(isinstance(value, str) for value in (entry["id"], entry["key"], entry["value"]))
    assert all(isinstance(v, str) for v in entry["headers"].values())
    assert entry["id"] == "fixed-id"


async def test_a_broker_down_at_the_first_sweep_leaves_every_pending_document_for_later() -> None:
    """The first document fails: it and every one after it are published by the next
    sweeps, once each."""
    outbox, retries = Outbox("a", "b", "c"), PublishRetries()
    outbox.failing = {"a"}
    with pytest.raises(ConnectionError):
        await outbox.sweep(retries)
    outbox.failing = set()
    for _ in range(3):
        await outbox.sweep(retries)
    assert (outbox.scans, sorted(outbox.sent)) == (1, ["a", "b", "c"])


async def test_a_scan_that_failed_is_made_again_by_the_next_sweep() -> None:
    outbox, retries = Outbox("a"), PublishRetries()

    async def store_down() -> list[Document]:
        raise ConnectionError("database away")

    with pytest.raises(ConnectionError):
        await retries.sweep(all_unpublished=store_down, get=outbox.get, publish=outbox.publish)
    await outbox.sweep(retries)
    assert (outbox.scans, outbox.sent) == (1, ["a"])


async def test_ids_being_retried_are_kept_when_reading_them_fails() -> None:
    outbox, retries = Outbox(), PublishRetries()
    await outbox.sweep(retries)  # the first sweep: nothing pending
    outbox.documents["a"] = {"_id": "a", "published": False}
    retries.failed("a")

    async def store_down(_: str) -> Document | None:
        raise ConnectionError("database away")

    with pytest.raises(ConnectionError):
        await retries.sweep(
            all_unpublished=outbox.all_unpublished, get=store_down, publish=outbox.publish
        )
    await outbox.sweep(retries)
    assert outbox.sent == ["a"]


async def test_a_failure_recorded_while_the_first_scan_runs_is_retried() -> None:
    """A document written, and its publish failed, while the scan was reading: the
    scan did not see it, the next sweep does."""
    outbox, retries = Outbox(), PublishRetries()

    async def scan_while_b_fails() -> list[Document]:
        outbox.documents["b"] = {"_id": "b", "published": False}
        retries.failed("b")
        return []

    await retries.sweep(all_unpublished=scan_while_b_fails, get=outbox.get, publish=outbox.publish)
    await outbox.sweep(retries)
    assert outbox.sent == ["b"]


async def test_a_new_failure_of_a_document_the_sweep_publishes_is_kept() -> None:
    """The sweep publishes what it read of `a` while a newer event of `a` fails to go
    out: that failure is tried again, not erased by the sweep's success."""
    outbox, retries = Outbox(), PublishRetries()
    await outbox.sweep(retries)  # the first sweep: nothing pending
    outbox.documents["a"] = {"_id": "a", "published": False}
    retries.failed("a")

    async def publish_while_a_fails_again(doc: Document) -> None:
        await outbox.publish(doc)
        outbox.documents["a"]["published"] = False  # a newer event of `a`...
        retries.failed("a")  # ...whose publish failed meanwhile

    await retries.sweep(
        all_unpublished=outbox.all_unpublished, get=outbox.get, publish=publish_while_a_fails_again
    )
    await outbox.sweep(retries)
    assert outbox.sent == ["a", "a"]
