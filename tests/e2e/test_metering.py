"""Metering: exact usage from lifecycle events under duplicates, reordering, consumer
kills and a broker restart; prices, invoices, budgets. The ledger's rules, pure, are
tests/unit/metering/test_ledger.py."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiokafka import AIOKafkaProducer
from faststream.kafka import KafkaBroker
from pymongo import AsyncMongoClient

from gpucloud_libs.events import InstanceStateChanged, NodeHealthChanged, StorageUsageSampled
from gpucloud_libs.kafka import create_broker, publish_event
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.topics import (
    BILLING_ALERTS,
    INSTANCE_COMMANDS,
    INSTANCE_LIFECYCLE,
    NODE_HEALTH,
    STORAGE_USAGE,
    USAGE,
)
from gpucloud_metering import ledger, mirror, store
from gpucloud_metering.documents import TransitionDoc
from gpucloud_metering.mirror import recorded_minute
from gpucloud_stack import layout

from .cli_support import cli_for
from .platform import Platform, assert_problem, bearer
from .support import eventually, read_topic, unique

STACK = layout.LOCAL_DIR / "stack.py"
BILLABLE = {"scheduled", "ready", "running", "stopping"}
PATHS = [
    ["pending", "scheduled", "ready", "running", "stopping", "stopped"],
    ["pending", "scheduled", "ready", "running", "stopping", "stopped", "deleted"],
    ["pending", "scheduled", "ready", "running", "failed"],
    ["pending", "scheduled", "failed"],
    ["pending", "failed"],
    ["pending", "stopping", "stopped"],
]


def lifecycle(
    tenant_id: str,
    instance_id: str,
    spec: str,
    gpus: int,
    states: list[str],
    times: list[int],
    node: str | None = None,
    project: str = "default",
) -> list[InstanceStateChanged]:
    return [
        InstanceStateChanged(
            instance_id=instance_id,
            tenant_id=tenant_id,
            project=project,
            spec_name=spec,
            gpu_type="GT",
            gpu_count=gpus,
            zone="zone-a",
            node=node if state != "pending" else None,
            state=state,
            previous_state=states[index - 1] if index else None,
            sequence=index + 1,
            at=ledger.from_us(moment),
        )
        for index, (state, moment) in enumerate(zip(states, times, strict=True))
    ]


def script(
    rng: random.Random, tenant_id: str, count: int, base_us: int
) -> tuple[list[InstanceStateChanged], dict[str, int]]:
    """Random lifecycles, and the GPU-microseconds each must be billed (the ground truth)."""
    events: list[InstanceStateChanged] = []
    truth: dict[str, int] = {}
    for index in range(count):
        instance_id = f"gt-{index}"
        states = rng.choice(PATHS)
        gpus = rng.choice([1, 2, 4, 8])
        times = [base_us + rng.randrange(0, 3_600_000_000)]
        for _ in states[1:]:
            times.append(times[-1] + rng.randrange(1, 900_000_000))
        truth[instance_id] = sum(
            gpus * (times[k + 1] - times[k])
            for k in range(len(states) - 1)
            if states[k] in BILLABLE
        )
        events += lifecycle(tenant_id, instance_id, "gt-spec", gpus, states, times)
    return events, truth


@pytest.fixture
async def broker(kafka: KafkaConnection) -> AsyncIterator[KafkaBroker]:
    test_broker = create_broker(kafka, client_id=unique("test-metering"))
    await test_broker.start()
    yield test_broker
    await test_broker.stop()


async def publish_all(broker: KafkaBroker, events: list[InstanceStateChanged]) -> None:
    async def one(data: InstanceStateChanged) -> None:
        for attempt in range(30):  # the broker may be restarting
            try:
                await publish_event(
                    broker, INSTANCE_LIFECYCLE, data, source="/test",
                    event_id=f"{data.tenant_id}/{data.instance_id}#{data.sequence}",
                )  # fmt: skip
                return
            except Exception:
                if attempt == 29:
                    raise
                await asyncio.sleep(1)

    for start in range(0, len(events), 200):
        await asyncio.gather(*(one(data) for data in events[start : start + 200]))


async def stack_up() -> None:
    result = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(STACK), "up"], capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


async def kill(component: str, sig: signal.Signals) -> None:
    """Signal a stack component and wait until its process is gone."""
    pid = int(layout.pid_file(component).read_text())
    os.kill(pid, sig)
    for _ in range(600):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{component} did not exit")


async def usage_by_instance(
    platform: Platform, tenant_id: str, start: str, end: str
) -> dict[str, int]:
    response = await platform.http.get(
        "/v1/usage",
        params={"tenantID": tenant_id, "start": start, "end": end, "groupBy": "instance"},
        headers=platform.admin,
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return {row["key"]: row["gpuMicroseconds"] for row in response.json()["rows"]}


@pytest.mark.parametrize("asked", [3, store.FEW_SUBJECTS + 2])
async def test_an_instances_transitions_are_read_alone_and_only_in_its_tenant(
    mongo: AsyncMongoClient[dict[str, Any]], asked: int
) -> None:
    facts = store.FactStore(mongo["gpucloud_tests"])
    ours, theirs = unique("ours"), unique("theirs")
    ids = [f"i{n}" for n in range(store.FEW_SUBJECTS + 2)]
    documents = [
        TransitionDoc(
            _id=f"{tenant}/{instance_id}#{sequence}", event_id=f"e-{tenant}-{instance_id}-{sequence}",
            tenant_id=tenant, instance_id=instance_id, sequence=sequence, state="pending",
            at_us=sequence, spec_name="h100-1", gpu_type="H100", gpu_count=1, zone=None,
            user_id=None,
        )
        for tenant in (ours, theirs) for instance_id in ids for sequence in (1, 2)
    ]  # fmt: skip
    assert await facts.record_transitions(documents) == []
    found = await facts.transitions_of(ours, set(ids[:asked]))
    assert sorted(doc["_id"] for doc in found) == sorted(
        f"{ours}/{instance_id}#{sequence}" for instance_id in ids[:asked] for sequence in (1, 2)
    )  # the other tenant's instance of the same id is never read


async def test_a_replica_reads_the_facts_another_records_after_its_first_read(
    mongo: AsyncMongoClient[dict[str, Any]],
) -> None:
    """Reports read whole tenants from a replica's mirror (mirror.py): what another
    replica records later is in the next read, even stamped by a clock behind ours;
    far behind, or not stamped at all (a replica of an older version), after the
    background pass reads the collection whole again."""
    db = mongo[unique("mirror")]
    reader, writer = store.FactStore(db), store.FactStore(db)
    ours, theirs = unique("ours"), unique("theirs")

    def fact(tenant: str, sequence: int, minutes_behind: int | None) -> TransitionDoc:
        doc = TransitionDoc(
            _id=f"{tenant}/i#{sequence}", event_id=f"e-{tenant}-{sequence}", tenant_id=tenant,
            instance_id="i", sequence=sequence, state="pending", at_us=sequence,
            spec_name="h100-1", gpu_type="H100", gpu_count=1, zone=None, user_id=None,
        )  # fmt: skip
        if minutes_behind is not None:
            doc["recorded_minute"] = recorded_minute(datetime.now(UTC)) - minutes_behind
        return doc

    def ids(docs: list[TransitionDoc]) -> list[str]:
        return sorted(doc["_id"] for doc in docs)

    await writer.record_transitions([fact(ours, 1, 0), fact(theirs, 1, 0)])
    assert ids(await reader.transitions(ours)) == [f"{ours}/i#1"]
    # Recorded after the first read: one by a replica whose clock is a little behind.
    await writer.record_transitions([fact(ours, 2, 0), fact(ours, 3, mirror.OVERLAP_MINUTES)])
    assert ids(await reader.transitions(ours)) == [f"{ours}/i#{n}" for n in (1, 2, 3)]
    # Far behind, and not stamped at all: the minutes miss them, the whole read does not.
    await writer.record_transitions([fact(ours, 4, 60), fact(ours, 5, None)])
    assert ids(await reader.transitions(ours)) == [f"{ours}/i#{n}" for n in (1, 2, 3)]
    await reader.reread()
    assert ids(await reader.transitions(ours)) == [f"{ours}/i#{n}" for n in (1, 2, 3, 4, 5)]
    assert len(await reader.transitions(None)) == 6


# --- exactness over the real pipeline -----------------------------------------------------


# Publishing, three kills and a broker restart take minutes on the 2-core machine,
# shared with the whole stack, before the wait for exact totals even begins; the
# catching up after the last kill has taken more than 240 s there.
@pytest.mark.timeout(900)
async def test_usage_is_exact_under_duplicates_reordering_kills_and_a_broker_restart(
    platform: Platform, broker: KafkaBroker
) -> None:
    rng = random.Random(20261122)
    tenant_id = unique("gt")
    base = ledger.to_us(datetime(2026, 10, 5, tzinfo=UTC))
    events, truth = script(rng, tenant_id, 2000, base)
    feed = events + rng.sample(events, len(events) // 10)  # 10% duplicates...
    rng.shuffle(feed)  # ...and no order at all
    assert len(feed) > 9_000

    chunks = [feed[i : i + len(feed) // 6] for i in range(0, len(feed), len(feed) // 6)]
    for index, chunk in enumerate(chunks):
        await publish_all(broker, chunk)
        if index in {0, 2, 4}:
            await asyncio.sleep(rng.uniform(0.2, 1.5))  # mid-stream
            await kill("metering", signal.SIGKILL)
            await stack_up()
        if index == 3:
            await kill("kafka", signal.SIGTERM)
            await stack_up()

    window = ("2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z")

    async def complete() -> dict[str, int] | None:
        billed = await usage_by_instance(platform, tenant_id, *window)
        return billed if sum(billed.values()) == sum(truth.values()) else None

    billed = await eventually(complete, timeout=540, interval=3)
    expected = {instance: gpu_us for instance, gpu_us in truth.items() if gpu_us}
    assert {k: v for k, v in billed.items() if v} == expected


async def test_a_malformed_lifecycle_event_is_parked_and_the_next_one_counts(
    platform: Platform, broker: KafkaBroker, kafka: KafkaConnection
) -> None:
    tenant_id = unique("bad")
    marker = unique("poison")
    producer = AIOKafkaProducer(**kafka.client_options())
    await producer.start()
    try:
        await producer.send_and_wait(INSTANCE_LIFECYCLE.name, b"{not json", key=marker.encode())
    finally:
        await producer.stop()
    base = ledger.to_us(datetime(2026, 10, 7, tzinfo=UTC))
    await publish_all(
        broker,
        lifecycle(tenant_id, "ok", "s", 1, ["scheduled", "stopped"], [base, base + 5_000_000]),
    )

    async def counted() -> bool:
        billed = await usage_by_instance(
            platform, tenant_id, "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"
        )
        return billed == {"ok": 5_000_000}

    await eventually(counted, timeout=60)
    parked = await read_topic(kafka, "gpucloud.dlq.gpucloud-metering", expect=100_000, timeout=3)
    assert marker.encode() in {record.key for record in parked}


# --- prices, invoices and budgets -----------------------------------------------------------


async def test_a_price_to_come_may_be_withdrawn_and_one_in_effect_stays(
    platform: Platform,
) -> None:
    """A price in effect has billed used time, which every bill is checked against: it
    is replaced, never deleted. One still to come may be withdrawn."""
    spec = await platform.spec()  # a price names a spec that exists
    later = (datetime.now(UTC) + timedelta(days=30)).isoformat()
    prices = []
    for effective in (None, later):
        body = {"meter": "gpu_hour", "specName": spec, "amount": "2.50"}
        made = await platform.http.post(
            "/v1/prices", json=body | ({"effectiveFrom": effective} if effective else {}),
            headers=platform.admin,
        )  # fmt: skip
        assert made.status_code == 201, made.text
        prices.append(made.json()["priceID"])
    in_effect, to_come = (f"/v1/prices/{quote(price, safe='')}" for price in prices)
    kept = await platform.http.delete(in_effect, headers=platform.admin)
    assert "add a new price to replace it" in assert_problem(kept, 409)["detail"]
    assert (await platform.http.delete(to_come, headers=platform.admin)).status_code == 204
    assert_problem(await platform.http.delete(to_come, headers=platform.admin), 404)
    listed = (await platform.http.get("/v1/prices", headers=platform.admin)).json()
    assert [p["priceID"] for p in listed if p["specName"] == spec] == prices[:1]


async def test_a_price_for_a_spec_that_does_not_exist_is_refused(platform: Platform) -> None:
    missing = unique("typo")
    # By the API's name for the field, and by the service's own, which it also takes.
    for field in ("specName", "spec_name"):
        body = {"meter": "gpu_hour", field: missing, "amount": "2.50"}
        refused = await platform.http.post("/v1/prices", json=body, headers=platform.admin)
        problem = assert_problem(refused, 422)
        assert problem["errors"] == [
            {"loc": ["body", field], "msg": f"no spec named {missing!r}",
             "type": "unknown_reference"}
        ]  # fmt: skip
    listed = (await platform.http.get("/v1/prices", headers=platform.admin)).json()
    assert missing not in {p["specName"] for p in listed}


async def test_price_changes_mid_month_invoices_and_usage_out(
    platform: Platform, broker: KafkaBroker, kafka: KafkaConnection
) -> None:
    spec, tenant_id = await platform.spec(), unique("inv")
    march = datetime(2031, 3, 1, tzinfo=UTC)
    for amount, effective in [("2.50", march), ("4.00", march + timedelta(days=14))]:
        set_price = await platform.http.post(
            "/v1/prices",
            json={"meter": "gpu_hour", "specName": spec, "amount": amount,
                  "effectiveFrom": effective.isoformat()},
            headers=platform.admin,
        )  # fmt: skip
        assert set_price.status_code == 201, set_price.text
    past = await platform.http.post(
        "/v1/prices",
        json={
            "meter": "gpu_hour",
            "specName": spec,
            "amount": "1",
            "effectiveFrom": "2026-01-01T00:00:00Z",
        },
        headers=platform.admin,
    )
    assert_problem(past, 422)

    # Two GPUs from an hour before the change to an hour after: 2 GPU-h at 2.50, 2 at 4.00.
    change = ledger.to_us(march + timedelta(days=14))
    hour = 3_600_000_000
    await publish_all(
        broker,
        lifecycle(tenant_id, "i1", spec, 2, ["pending", "scheduled", "running", "stopped"],
                  [change - 2 * hour, change - hour, change - hour + 1, change + hour]),
    )  # fmt: skip

    async def drafted() -> dict[str, Any] | None:
        draft = await platform.http.get(
            "/v1/invoice-drafts/2031-03", params={"tenantID": tenant_id}, headers=platform.admin
        )
        return draft.json() if draft.json()["totalCents"] == 1300 else None

    draft = await eventually(drafted, timeout=60)

    async def usage_out(kafka: KafkaConnection = kafka) -> list[dict[str, Any]]:
        records = await read_topic(kafka, USAGE.name, expect=1_000_000, timeout=2)
        return [json.loads(r.value) for r in records if r.key == tenant_id.encode()]

    [record] = await eventually(usage_out, timeout=60, interval=3)
    assert (record["subject_id"], record["quantity"], record["amount_cents"]) == (
        "i1",
        14_400,
        1300,
    )
    assert [
        (line["unitPrice"], line["quantity"], line["amountCents"]) for line in draft["lines"]
    ] == [
        ("2.50", "2", 500),
        ("4.00", "2", 800),
    ]
    assert draft["status"] == "draft"
    early = await platform.http.post(
        "/v1/invoices", json={"tenantID": tenant_id, "period": "2031-03"}, headers=platform.admin
    )
    assert_problem(early, 409)

    # An ended month: issued once, the same document every time, and immutable.
    october = ledger.to_us(datetime(2026, 10, 20, tzinfo=UTC))
    await publish_all(
        broker,
        lifecycle(tenant_id, "i2", spec, 1, ["scheduled", "stopped"], [october, october + hour]),
    )

    async def drafted_october() -> dict[str, Any] | None:
        draft = await platform.http.get(
            "/v1/invoice-drafts/2026-10", params={"tenantID": tenant_id}, headers=platform.admin
        )
        return draft.json() if draft.json()["lines"] else None

    await eventually(drafted_october, timeout=60)
    first = await platform.http.post(
        "/v1/invoices", json={"tenantID": tenant_id, "period": "2026-10"}, headers=platform.admin
    )
    assert first.status_code == 201, first.text
    again = await platform.http.post(
        "/v1/invoices", json={"tenantID": tenant_id, "period": "2026-10"}, headers=platform.admin
    )
    assert again.status_code == 200
    assert again.json() == first.json()
    assert first.json()["status"] == "issued"
    assert first.json()["lines"][0]["quantity"] == "1"

    await publish_all(
        broker,
        lifecycle(tenant_id, "late", spec, 8, ["scheduled", "stopped"], [october, october + hour]),
    )

    async def late_counted() -> bool:
        draft = await platform.http.get(
            "/v1/invoice-drafts/2026-10", params={"tenantID": tenant_id}, headers=platform.admin
        )
        return bool(draft.json()["lines"][0]["quantity"] == "9")

    await eventually(late_counted, timeout=60)
    stored = await platform.http.get(
        f"/v1/invoices/{first.json()['invoiceID']}", headers=platform.admin
    )
    assert stored.json() == first.json()


async def test_each_projects_gpu_hours_have_their_own_invoice_lines(
    platform: Platform, broker: KafkaBroker, tmp_path: Path
) -> None:
    """Decision 138: an invoice's GPU lines are a project's, spec's and price's, so a
    project's lines add up to its usage; `default`'s come first and read as before.
    `gpucloud invoices show` prints them."""
    spec, tenant_id = await platform.spec(), unique("inv")
    set_price = await platform.http.post(
        "/v1/prices",
        json={"meter": "gpu_hour", "specName": spec, "amount": "3.00",
              "effectiveFrom": "2033-02-01T00:00:00Z"},
        headers=platform.admin,
    )  # fmt: skip
    assert set_price.status_code == 201, set_price.text
    hour = 3_600_000_000
    base = ledger.to_us(datetime(2033, 2, 10, tzinfo=UTC))
    states = ["pending", "scheduled", "running", "stopped"]
    await publish_all(
        broker,
        # Billed from `scheduled`: one GPU for an hour, and two for three in vision.
        lifecycle(tenant_id, "plain", spec, 1, states, [base - 1, base, base + 1, base + hour])
        + lifecycle(tenant_id, "seen", spec, 2, states,
                    [base - 1, base, base + 1, base + 3 * hour], project="vision"),
    )  # fmt: skip

    async def drafted() -> dict[str, Any] | None:
        draft = await platform.http.get(
            "/v1/invoice-drafts/2033-02", params={"tenantID": tenant_id}, headers=platform.admin
        )
        return draft.json() if draft.json()["totalCents"] == 300 + 1800 else None

    draft = await eventually(drafted, timeout=60)
    assert [
        (line["project"], line["description"], line["quantity"], line["amountCents"])
        for line in draft["lines"]
    ] == [
        ("default", f"{spec}: GPU-hours", "1", 300),
        ("vision", f"{spec}: GPU-hours, project vision", "6", 1800),
    ]
    operator = cli_for(tmp_path, platform)
    assert (await operator.login(platform.admin_key)).code == 0
    shown = await operator.ok("invoices", "show", "2033-02", "--tenant", tenant_id)
    assert f"{tenant_id} 2033-02 (draft), total $21.00" in shown.out
    vision = next(line for line in shown.out.splitlines() if "project vision" in line)
    assert vision.split()[0] == "vision"
    assert "6.0000" in vision
    assert "$3.00" in vision
    assert "$18.00" in vision


async def test_time_on_a_quarantined_node_is_credited_in_usage_invoices_and_records(
    platform: Platform, broker: KafkaBroker, kafka: KafkaConnection
) -> None:
    spec, tenant_id = await platform.spec(), unique("credit")
    faulty, sound = unique("node-faulty"), unique("node-sound")
    # A price takes effect no earlier than now, so the usage is in a future month.
    may = datetime(2032, 5, 1, tzinfo=UTC)
    price = await platform.http.post(
        "/v1/prices",
        json={"meter": "gpu_hour", "specName": spec, "amount": "2.00", "effectiveFrom": may.isoformat()},
        headers=platform.admin,
    )  # fmt: skip
    assert price.status_code == 201, price.text
    # Two instances of 2 GPUs for 3 hours, one on each node.
    hour = ledger.US_PER_HOUR
    start = ledger.to_us(may + timedelta(days=9))
    states, times = (
        ["pending", "scheduled", "running", "stopped"],
        [start, start, start + 1, start + 3 * hour],
    )
    await publish_all(broker, lifecycle(tenant_id, "on-faulty", spec, 2, states, times, faulty)
                      + lifecycle(tenant_id, "on-sound", spec, 2, states, times, sound))  # fmt: skip
    # The faulty node is quarantined for the middle hour, as monitoring publishes it.
    for health, at_us in [("quarantined", start + hour), ("healthy", start + 2 * hour)]:
        await publish_event(
            broker, NODE_HEALTH,
            NodeHealthChanged(node=faulty, health=health, at=ledger.from_us(at_us)),
            source="/test",
        )  # fmt: skip

    window = (may.isoformat(), (may + timedelta(days=31)).isoformat())

    async def credited() -> list[dict[str, Any]] | None:
        response = await platform.http.get(
            "/v1/usage",
            params={"tenantID": tenant_id, "start": window[0], "end": window[1], "groupBy": "instance"},
            headers=platform.admin,
        )  # fmt: skip
        rows: list[dict[str, Any]] = response.json()["rows"]
        # Both health changes recorded: the credit is the middle hour, not up to the end.
        return rows if len(rows) == 2 and rows[0]["creditedGpuMicroseconds"] == 2 * hour else None

    on_faulty, on_sound = await eventually(credited, timeout=60)
    assert (on_faulty["key"], on_faulty["gpuMicroseconds"], on_faulty["creditedGpuMicroseconds"]) == (
        "on-faulty", 2 * 2 * hour, 2 * hour)  # fmt: skip
    assert (on_sound["key"], on_sound["gpuMicroseconds"], on_sound["creditedGpuMicroseconds"]) == (
        "on-sound", 2 * 3 * hour, 0)  # fmt: skip
    assert Decimal(on_faulty["amount"]) == Decimal("8.00")  # 4 GPU-hours at 2.00, not 6

    draft = await platform.http.get(
        "/v1/invoice-drafts/2032-05", params={"tenantID": tenant_id}, headers=platform.admin
    )
    [line] = draft.json()["lines"]
    assert (line["quantity"], line["creditedQuantity"], line["amountCents"]) == ("10", "2", 2000)

    async def records_out(kafka: KafkaConnection = kafka) -> dict[str, dict[str, Any]] | None:
        records = await read_topic(kafka, USAGE.name, expect=1_000_000, timeout=2)
        found = [json.loads(r.value) for r in records if r.key == tenant_id.encode()]
        return {r["subject_id"]: r for r in found} if len(found) == 2 else None

    records = await eventually(records_out, timeout=90, interval=3)
    faulty_record, sound_record = records["on-faulty"], records["on-sound"]
    assert (faulty_record["quantity"], faulty_record["credited_quantity"]) == (14_400, 7_200)
    assert faulty_record["amount_cents"] == 800
    assert (sound_record["quantity"], sound_record["credited_quantity"]) == (21_600, 0)


async def test_storage_usage_goes_out_per_closed_hour(
    platform: Platform, broker: KafkaBroker, kafka: KafkaConnection
) -> None:
    tenant_id, storage_id = unique("stored"), unique("bucket")
    # Storage has one price for everyone; a moment in April 2032 of its own per run.
    effective = datetime(2032, 4, 1, tzinfo=UTC) + timedelta(seconds=random.randrange(2_000_000))
    price = await platform.http.post(
        "/v1/prices",
        json={"meter": "storage_gb_month", "amount": "0.73", "effectiveFrom": effective.isoformat()},
        headers=platform.admin,
    )  # fmt: skip
    assert price.status_code == 201, price.text
    start, hour, gb = datetime(2032, 5, 3, tzinfo=UTC), timedelta(hours=1), 10**9
    for at, size in [(start, 2 * gb), (start + hour / 2, 4 * gb), (start + 2 * hour, 0)]:
        await publish_event(
            broker, STORAGE_USAGE,
            StorageUsageSampled(storage_id=storage_id, tenant_id=tenant_id, kind="object", bytes_used=size, at=at),
            source="/test",
        )  # fmt: skip

    async def records_out(kafka: KafkaConnection = kafka) -> list[dict[str, Any]] | None:
        records = await read_topic(kafka, USAGE.name, expect=1_000_000, timeout=2)
        found = [json.loads(r.value) for r in records if r.key == tenant_id.encode()]
        return sorted(found, key=lambda r: r["start"]) if len(found) == 2 else None

    first, second = await eventually(records_out, timeout=60, interval=3)
    assert [(r["meter"], r["subject_id"]) for r in (first, second)] == [
        ("storage_gb_hours", storage_id)
    ] * 2
    assert (datetime.fromisoformat(first["start"]), datetime.fromisoformat(first["end"])) == (
        start,
        start + hour,
    )
    assert (first["quantity"], second["quantity"]) == (3.0, 4.0)  # GB-hours
    assert (first["amount_cents"], second["amount_cents"]) == (0.3, 0.4)


async def test_budget_thresholds_fire_once_and_the_hard_stop_stops_instances(
    platform: Platform, broker: KafkaBroker, kafka: KafkaConnection
) -> None:
    account = await platform.tenant()
    admin = bearer(account.admin_key)
    spec = await platform.spec()
    # 3,600 a GPU-hour: one currency unit (100 cents) per GPU-second.
    price = await platform.http.post(
        "/v1/prices",
        json={"meter": "gpu_hour", "specName": spec, "amount": "3600"},
        headers=platform.admin,
    )
    assert price.status_code == 201, price.text
    budget = await platform.http.put(
        "/v1/budget",
        json={"monthlyBudgetCents": 10_000, "thresholds": [50, 80, 100], "hardStop": True},
        headers=admin,
    )
    assert budget.status_code == 200, budget.text

    # A real instance, to be stopped by the hard stop.
    free_spec = await platform.spec()
    started = await platform.http.post(
        "/v1/gpu-instances", json={"image": "busybox", "specName": free_spec}, headers=admin
    )
    assert started.status_code == 202
    instance_id = started.json()["instanceID"]

    soon = ledger.to_us(datetime.now(UTC)) + 2_000_000
    await publish_all(
        broker,
        lifecycle(
            account.tenant_id, "a", spec, 1, ["scheduled", "stopped"], [soon, soon + 85_000_000]
        ),
    )

    async def spent(cents: int) -> bool:
        response = await platform.http.get("/v1/budget", headers=admin)
        return bool(response.json()["spentCents"] >= cents)

    await eventually(lambda: spent(8_500), timeout=30)
    await asyncio.sleep(12)  # two rounds of the budget check
    await publish_all(
        broker,
        lifecycle(
            account.tenant_id, "b", spec, 1, ["scheduled", "stopped"], [soon, soon + 20_000_000]
        ),
    )
    await eventually(lambda: spent(10_500), timeout=30)

    async def stopped() -> bool:
        got = await platform.http.get(f"/v1/gpu-instances/{instance_id}", headers=admin)
        return bool(got.json()["state"] in {"stopping", "stopped"})

    await eventually(stopped, timeout=60)
    await asyncio.sleep(12)  # more rounds: nothing fires twice

    alerts = await read_topic(kafka, BILLING_ALERTS.name, expect=100_000, timeout=3)
    mine = [json.loads(r.value) for r in alerts if r.key == account.tenant_id.encode()]
    assert sorted(alert["threshold_pct"] for alert in mine) == [50, 80, 100]
    commands = await read_topic(kafka, INSTANCE_COMMANDS.name, expect=100_000, timeout=3)
    assert len([r for r in commands if r.key == account.tenant_id.encode()]) == 1
    shown = (await platform.http.get("/v1/budget", headers=admin)).json()
    assert shown["crossed"] == [50, 80, 100]


async def test_the_tenant_spend_cap_asks_for_a_stop_once(
    platform: Platform, broker: KafkaBroker, kafka: KafkaConnection
) -> None:
    account = await platform.tenant()
    capped = await platform.http.patch(
        f"/v1/tenants/{account.tenant_id}",
        json={"limits": {"maxGpus": 16, "maxInstances": 8, "maxStorageBytes": 10**12,
                         "monthlySpendCapCents": 100}},
        headers=platform.admin,
    )  # fmt: skip
    assert capped.status_code == 200, capped.text
    spec = await platform.spec()
    price = await platform.http.post(
        "/v1/prices",
        json={"meter": "gpu_hour", "specName": spec, "amount": "3600"},
        headers=platform.admin,
    )
    assert price.status_code == 201
    soon = ledger.to_us(datetime.now(UTC)) + 1_000_000
    # Two GPU-seconds at a unit each: 200 cents, over the cap of 100.
    await publish_all(
        broker,
        lifecycle(
            account.tenant_id, "x", spec, 2, ["scheduled", "stopped"], [soon, soon + 1_000_000]
        ),
    )

    async def stop_requested() -> list[Any]:
        commands = await read_topic(kafka, INSTANCE_COMMANDS.name, expect=100_000, timeout=2)
        return [r for r in commands if r.key == account.tenant_id.encode()]

    [command] = await eventually(stop_requested, timeout=40, interval=2)
    assert "spend cap" in json.loads(command.value)["reason"]
    await asyncio.sleep(11)  # two more rounds of the check: still one
    assert len(await stop_requested()) == 1
