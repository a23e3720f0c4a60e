"""Usage records out: every final GPU interval and storage hour, priced, published once each
on the usage topic for external billing (Lago, OpenMeter)."""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

from faststream.kafka import KafkaBroker

from gpucloud_libs.clock import now
from gpucloud_libs.events import UsageRecorded
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.outbox import PublishRetries
from gpucloud_libs.topics import USAGE

from . import ledger
from .changes import UsageChanges, by_tenant
from .documents import UsageRecordDoc
from .ledger import Sample
from .prices import Prices
from .store import FactStore, UsageRecordStore
from .tally import FaultBook, instances_from


class UsageRecords:
    def __init__(
        self,
        facts: FactStore,
        prices: Prices,
        records: UsageRecordStore,
        broker: KafkaBroker,
        changes: UsageChanges,
        *,
        source: str,
        settle_s: float,
    ) -> None:
        self._facts = facts
        self._prices = prices
        self._records = records
        self._broker = broker
        self._changes = changes
        self._source = source
        self._settle_us = int(settle_s * ledger.US_PER_S)
        self._usage_retries = PublishRetries()

    async def publish(self) -> int:
        """Every final GPU interval and storage hour, priced, as a usage record; once each.

        The first pass after a start looks at every instance and storage; later
        passes only at those with new facts since (or an interval still settling).
        """
        instances, storages = self._changes.instances.take(), self._changes.storages.take()
        try:
            # A full pass skips what earlier runs of the service already claimed.
            known = (
                await self._records.known_ids() if instances is None or storages is None else set()
            )
            published = await self._publish_final_intervals(instances, known)
        except Exception:
            self._changes.instances.give_back(instances)
            self._changes.storages.give_back(storages)
            raise
        try:
            return published + await self._publish_final_storage_hours(storages, known)
        except Exception:
            self._changes.storages.give_back(storages)
            raise

    async def _publish_final_intervals(
        self, only: set[tuple[str, str]] | None, known: set[str]
    ) -> int:
        """An interval is final once it is closed, every transition up to the closing
        one is recorded (a late one could still move its end), and the closing one
        was recorded `usage_settle_s` ago (a node health change published around the
        same moment could still credit part of it)."""
        if only is None:
            transitions = await self._facts.transitions(None)
        else:
            transitions = [
                doc
                for tenant_id, instance_ids in by_tenant(only).items()
                for doc in await self._facts.transitions_of(tenant_id, instance_ids)
            ]
        prices = await self._prices.book()
        faults = FaultBook(await self._facts.health())
        settled_before = ledger.to_us(now()) - self._settle_us
        published = 0
        for instance in instances_from(transitions):
            for interval in instance.intervals:
                if interval.end_us is None or (interval.closed_by or 0) > instance.settled_through:
                    continue
                usage_id = f"{instance.tenant_id}/{instance.instance_id}#{interval.opened_by}"
                if usage_id in known:
                    continue
                assert interval.closed_by is not None
                if instance.recorded_us[interval.closed_by] > settled_before:
                    self._changes.instances.add((instance.tenant_id, instance.instance_id))
                    continue
                uses = list(ledger.gpu_use(
                    interval.start_us, interval.end_us, interval.gpus,
                    prices.gpu(instance.spec_name), faults.of(interval.node),
                ))  # fmt: skip
                record: UsageRecordDoc = {
                    "_id": usage_id, "tenant_id": instance.tenant_id,
                    "subject_id": instance.instance_id, "meter": "gpu_seconds",
                    "quantity": sum(u.gpu_us for u in uses if not u.credited) / ledger.US_PER_S,
                    "credited_quantity": sum(u.gpu_us for u in uses if u.credited) / ledger.US_PER_S,
                    "start_us": interval.start_us, "end_us": interval.end_us,
                    "amount_cents": float(sum((u.amount for u in uses), Fraction(0)) * 100),
                }  # fmt: skip
                if await self._records.claim(record):
                    await self._publish_usage(record)
                    published += 1
        return published

    async def _publish_final_storage_hours(
        self, only: set[tuple[str, str]] | None, known: set[str]
    ) -> int:
        """A storage's usage per UTC hour goes out once a sample at or after the hour's
        end is recorded (the storage service samples every minute, and sends 0 when
        a storage is deleted); hours with nothing stored send nothing."""
        if only is None:
            samples = await self._facts.samples(None)
        else:
            samples = [
                doc
                for tenant_id, storage_ids in by_tenant(only).items()
                for doc in await self._facts.samples_of(tenant_id, storage_ids)
            ]
        by_storage: dict[tuple[str, str], list[Sample]] = defaultdict(list)
        for doc in samples:
            by_storage[(doc["tenant_id"], doc["storage_id"])].append(
                Sample(doc["at_us"], doc["bytes_used"])
            )
        prices = (await self._prices.book()).storage()
        published = 0
        for (tenant_id, storage_id), found in by_storage.items():
            done = self._changes.storage_hours_done.get((tenant_id, storage_id), 0)
            for hour, byte_us, amount in ledger.final_storage_hours(found, prices):
                usage_id = f"{tenant_id}/{storage_id}@{hour}"
                if hour < done or usage_id in known:
                    continue
                record: UsageRecordDoc = {
                    "_id": usage_id, "tenant_id": tenant_id, "subject_id": storage_id,
                    "meter": "storage_gb_hours", "quantity": float(ledger.gb_hours(byte_us)),
                    "start_us": hour, "end_us": hour + ledger.US_PER_HOUR,
                    "amount_cents": float(amount * 100),
                }  # fmt: skip
                if await self._records.claim(record):
                    await self._publish_usage(record)
                    published += 1
            closed_at = max(sample.at_us for sample in found)
            self._changes.storage_hours_done[(tenant_id, storage_id)] = (
                closed_at - closed_at % ledger.US_PER_HOUR
            )
        return published

    async def _publish_usage(self, record: UsageRecordDoc) -> None:
        try:
            await self._send_usage(record)
        except Exception:
            self._usage_retries.failed(record["_id"])
            raise
        await self._records.mark_published(record["_id"])

    async def _send_usage(self, record: UsageRecordDoc) -> None:
        await publish_event(
            self._broker, USAGE,
            UsageRecorded(
                usage_id=record["_id"], tenant_id=record["tenant_id"], subject_id=record["subject_id"],
                meter=record["meter"], quantity=record["quantity"],
                credited_quantity=record.get("credited_quantity", 0.0),
                start=ledger.from_us(record["start_us"]), end=ledger.from_us(record["end_us"]),
                amount_cents=record["amount_cents"],
            ),
            source=self._source, event_id=record["_id"],
        )  # fmt: skip

    async def sweep(self) -> None:
        """Usage records claimed but not yet published (Kafka was away)."""
        await self._usage_retries.sweep(
            all_unpublished=self._records.unpublished, get=self._records.get,
            publish=self._publish_usage,
        )  # fmt: skip
