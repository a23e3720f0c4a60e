"""Budgets: a monthly budget with thresholds, each published once per month; a hard stop,
and the tenant's spend cap, ask the instances service to stop the tenant's instances.

A notice is inserted first (the insert wins), then published; a failed publish
is retried through libs' PublishRetries.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from fractions import Fraction
from typing import NamedTuple, TypeVar

from faststream.kafka import KafkaBroker

from gpucloud_libs.clock import now
from gpucloud_libs.errors import NotFound
from gpucloud_libs.events import (
    BudgetThresholdCrossed,
    ProjectBudgetReached,
    StopTenantInstancesRequested,
    TenantDeleted,
    TenantUpserted,
    UserSpendLimitReached,
)
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.outbox import PublishRetries
from gpucloud_libs.topics import BILLING_ALERTS, INSTANCE_COMMANDS, TopicSpec

from . import ledger
from .documents import NoticeDoc, SampleDoc, Spender, SpendLimits, TransitionDoc, spender_field
from .prices import Prices
from .schemas import Budget, BudgetSet, GroupBy
from .store import BudgetStore, FactStore
from .tally import FaultBook, PriceBook, Tally, instances_from, tally

#: Those inside a tenant with monthly spend limits of their own.
SPENDERS: tuple[Spender, ...] = ("user", "project")
#: Percentages of a project's monthly budget that raise a billing alert, once each
#: per month (a tenant's budget names its own; at 100% the project is stopped too).
PROJECT_THRESHOLDS = (50, 80, 100)


class _SpenderStop(NamedTuple):
    """A user or project whose spend this month reached its limit."""

    spender: Spender
    spender_id: str
    limit: int
    spent: int


class _Crossing(NamedTuple):
    """A threshold of a budget (the tenant's, or a project's) the month's spend reached."""

    threshold: int
    spent: int
    budget: int
    project: str | None = None


class Budgets:
    def __init__(
        self,
        facts: FactStore,
        prices: Prices,
        budgets: BudgetStore,
        broker: KafkaBroker,
        *,
        source: str,
    ) -> None:
        self._facts = facts
        self._prices = prices
        self._budgets = budgets
        self._broker = broker
        self._source = source
        self._notice_retries = PublishRetries()

    async def apply_tenant(self, data: TenantUpserted | TenantDeleted) -> None:
        """The tenant's monthly spend cap, its users' own monthly limits and its
        projects' budgets, from the gateway's tenant events."""
        if isinstance(data, TenantDeleted):
            await self._budgets.set_cap(data.tenant_id, None, SpendLimits({}, {}))
            return
        limits = SpendLimits(
            {user_id: limits.monthly_spend_cents for user_id, limits in data.user_limits.items()
             if limits.monthly_spend_cents is not None},
            {project_id: project.monthly_budget_cents
             for project_id, project in data.projects.items()
             if project.monthly_budget_cents is not None},
        )  # fmt: skip
        before = (await self._budgets.spend_limits()).get(data.tenant_id, SpendLimits({}, {}))
        await self._budgets.set_cap(data.tenant_id, data.quota.monthly_spend_cap_cents, limits)
        # A limit changed: the next round may stop the user or project again at it (a
        # limit lowered back to one reached before included).
        for spender in SPENDERS:
            new, old = limits.of(spender), before.of(spender)
            for spender_id in {s for s in new | old if new.get(s) != old.get(s)}:
                await self._budgets.forget_stops(data.tenant_id, spender, spender_id)

    async def set(self, tenant_id: str, body: BudgetSet) -> Budget:
        await self._budgets.put(
            tenant_id,
            {
                "monthly_budget_cents": body.monthly_budget_cents,
                "thresholds": body.thresholds,
                "hard_stop": body.hard_stop,
            },
        )
        return await self.get(tenant_id)

    async def get(self, tenant_id: str) -> Budget:
        doc = await self._budgets.get(tenant_id)
        if doc is None:
            raise NotFound("no budget is set for this tenant")
        at = now()
        spent = month_to_date_cents(
            await self._facts.transitions(tenant_id), await self._facts.samples(tenant_id), at,
            await self._prices.book(), FaultBook(await self._facts.health()),
        )  # fmt: skip
        return Budget(
            tenant_id=tenant_id, period=ledger.period_of(at), spent_cents=spent,
            monthly_budget_cents=doc["monthly_budget_cents"], thresholds=doc["thresholds"],
            hard_stop=doc["hard_stop"],
            crossed=ledger.crossed(spent, doc["monthly_budget_cents"], doc["thresholds"]),
        )  # fmt: skip

    async def evaluate(self) -> None:
        """Publish each threshold crossed, once per tenant, period and threshold; and
        ask for a stop at a hard budget or at the tenant's spend cap."""
        at = now()
        period = ledger.period_of(at)
        caps, spend_limits = await self._budgets.caps(), await self._budgets.spend_limits()
        budgets = {doc["_id"]: doc for doc in await self._budgets.all()}
        if not caps and not budgets and not spend_limits:
            return
        # Once per round, not per tenant.
        prices = await self._prices.book()
        faults = FaultBook(await self._facts.health())
        # One read of every tenant's facts, not one per tenant.
        transitions = _by_tenant(await self._facts.transitions(None))
        samples = _by_tenant(await self._facts.samples(None))
        for tenant_id, limits in sorted(spend_limits.items()):
            for spender in SPENDERS:
                if not limits.of(spender):
                    continue
                spent_by = month_to_date_cents_by(
                    spender, transitions[tenant_id], at, prices, faults
                )
                for spender_id, limit in sorted(limits.of(spender).items()):
                    spent = spent_by.get(spender_id, 0)
                    if spender == "project":
                        for threshold in ledger.crossed(spent, limit, PROJECT_THRESHOLDS):
                            crossing = _Crossing(threshold, spent, limit, spender_id)
                            await self._notify(tenant_id, period, crossing)
                    if spent >= limit:
                        stop = _SpenderStop(spender, spender_id, limit, spent)
                        await self._stop_spender(tenant_id, period, stop)
        for tenant_id in sorted(set(caps) | set(budgets)):
            spent = month_to_date_cents(
                transitions[tenant_id], samples[tenant_id], at, prices, faults
            )
            budget = budgets.get(tenant_id)
            stop_reason = None
            if budget is not None:
                limit = budget["monthly_budget_cents"]
                for threshold in ledger.crossed(spent, limit, budget["thresholds"]):
                    await self._notify(tenant_id, period, _Crossing(threshold, spent, limit))
                if budget["hard_stop"] and spent >= limit:
                    stop_reason = f"monthly budget of {limit} cents reached"
            if tenant_id in caps and spent >= caps[tenant_id]:
                stop_reason = f"monthly spend cap of {caps[tenant_id]} cents reached"
            if stop_reason:
                await self._stop(tenant_id, period, stop_reason)

    async def _notify(self, tenant_id: str, period: str, crossing: _Crossing) -> None:
        """Once per tenant (or project, and its budget), month and threshold."""
        key = f"{tenant_id}:{period}:{crossing.threshold}"
        if crossing.project is not None:
            key = f"{tenant_id}:{period}:project:{crossing.project}:{crossing.budget}:{crossing.threshold}"
        notice: NoticeDoc = {"_id": key, "kind": "threshold", "tenant_id": tenant_id,
                  "period": period, "threshold": crossing.threshold,
                  "spent_cents": crossing.spent, "budget_cents": crossing.budget}  # fmt: skip
        if crossing.project is not None:
            notice["project"] = crossing.project
        if await self._budgets.claim_notice(notice):
            await self._publish_notice(notice)

    async def _stop(self, tenant_id: str, period: str, reason: str) -> None:
        notice: NoticeDoc = {"_id": f"{tenant_id}:{period}:stop", "kind": "stop", "tenant_id": tenant_id,
                  "period": period, "reason": reason}  # fmt: skip
        if await self._budgets.claim_notice(notice):
            await self._publish_notice(notice)

    async def _stop_spender(self, tenant_id: str, period: str, stop: _SpenderStop) -> None:
        """Once per user (or project), month and limit: a raised limit that is reached
        again stops them again."""
        notice: NoticeDoc = {
            "_id": f"{tenant_id}:{period}:{stop.spender}:{stop.spender_id}:{stop.limit}",
            "kind": f"{stop.spender}_stop", "tenant_id": tenant_id, "period": period,
            "limit_cents": stop.limit, "spent_cents": stop.spent,
        }  # fmt: skip
        notice[spender_field(stop.spender)] = stop.spender_id
        if await self._budgets.claim_notice(notice):
            await self._publish_notice(notice)

    async def _publish_notice(self, notice: NoticeDoc) -> None:
        try:
            await self._send_notice(notice)
        except Exception:
            self._notice_retries.failed(notice["_id"])
            raise
        await self._budgets.mark_published(notice["_id"])

    async def _send_notice(self, notice: NoticeDoc) -> None:
        topic, data = _notice_event(notice)
        await publish_event(self._broker, topic, data, source=self._source, event_id=notice["_id"])

    async def sweep(self) -> None:
        """Notices claimed but not yet published (Kafka was away)."""
        await self._notice_retries.sweep(
            all_unpublished=self._budgets.unpublished, get=self._budgets.notice,
            publish=self._publish_notice,
        )  # fmt: skip


def _notice_event(
    notice: NoticeDoc,
) -> tuple[
    TopicSpec,
    BudgetThresholdCrossed | UserSpendLimitReached | ProjectBudgetReached
    | StopTenantInstancesRequested,
]:  # fmt: skip
    """The event a notice goes out as, and its topic."""
    if notice["kind"] == "threshold":
        return BILLING_ALERTS, BudgetThresholdCrossed(
            tenant_id=notice["tenant_id"], period=notice["period"],
            threshold_pct=notice["threshold"], spent_cents=notice["spent_cents"],
            budget_cents=notice["budget_cents"], project=notice.get("project"),
        )  # fmt: skip
    if notice["kind"] == "user_stop":
        return INSTANCE_COMMANDS, UserSpendLimitReached(
            tenant_id=notice["tenant_id"], user_id=notice["user_id"], period=notice["period"],
            limit_cents=notice["limit_cents"], spent_cents=notice["spent_cents"],
        )  # fmt: skip
    if notice["kind"] == "project_stop":
        return INSTANCE_COMMANDS, ProjectBudgetReached(
            tenant_id=notice["tenant_id"], project=notice["project"], period=notice["period"],
            limit_cents=notice["limit_cents"], spent_cents=notice["spent_cents"],
        )  # fmt: skip
    return INSTANCE_COMMANDS, StopTenantInstancesRequested(
        tenant_id=notice["tenant_id"], reason=notice["reason"]
    )


def month_to_date_cents(
    transitions: list[TransitionDoc], samples: list[SampleDoc], at: datetime,
    prices: PriceBook, faults: FaultBook,
) -> int:  # fmt: skip
    """A tenant's spend this month up to `at`, in whole cents."""
    rows = _month_to_date(transitions, samples, at, prices, faults, group_by="spec")
    return ledger.cents(sum((t.amount for t in rows.values()), Fraction(0)))


def month_to_date_cents_by(
    spender: Spender, transitions: list[TransitionDoc], at: datetime, prices: PriceBook,
    faults: FaultBook,
) -> dict[str, int]:  # fmt: skip
    """Each user's (or project's) spend on their workloads' GPU time this month up to
    `at`, in whole cents (storage is the tenant's: no user's or project's limit counts
    it)."""
    rows = _month_to_date(transitions, [], at, prices, faults, group_by=spender)
    return {key: ledger.cents(row.amount) for key, row in rows.items()}


def _month_to_date(
    transitions: list[TransitionDoc], samples: list[SampleDoc], at: datetime,
    prices: PriceBook, faults: FaultBook, *, group_by: GroupBy,
) -> dict[str, Tally]:  # fmt: skip
    start_us, end_us = ledger.month_bounds(ledger.period_of(at))
    return tally(
        instances_from(transitions), samples, prices, faults,
        start_us=start_us, end_us=end_us, now_us=ledger.to_us(at), group_by=group_by,
    )  # fmt: skip


FactT = TypeVar("FactT", TransitionDoc, SampleDoc)


def _by_tenant(facts: list[FactT]) -> defaultdict[str, list[FactT]]:
    grouped: defaultdict[str, list[FactT]] = defaultdict(list)
    for fact in facts:
        grouped[fact["tenant_id"]].append(fact)
    return grouped
