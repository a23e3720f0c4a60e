"""Prices (platform admin): per spec per GPU-hour and per storage GB-month, effective-dated."""

from __future__ import annotations

from decimal import Decimal

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, NotFound, ValidationFailed

from . import ledger
from .documents import PriceDoc
from .schemas import Price as PriceView
from .schemas import PriceCreate
from .store import PriceStore
from .tally import PriceBook


def price_view(doc: PriceDoc) -> PriceView:
    return PriceView(
        price_id=doc["_id"], meter=doc["meter"], spec_name=doc.get("spec_name"), amount=Decimal(doc["amount"]),
        effective_from=ledger.from_us(doc["effective_from_us"]),
    )  # fmt: skip


class Prices:
    def __init__(self, prices: PriceStore) -> None:
        self._prices = prices

    async def add(self, body: PriceCreate) -> PriceView:
        at = now()
        effective = body.effective_from or at
        if effective < at.replace(microsecond=0):
            raise ValidationFailed(
                "effectiveFrom is in the past: a price never re-prices used time"
            )
        if (body.meter == "gpu_hour") != (body.spec_name is not None):
            raise ValidationFailed("a gpu_hour price names its specName; a storage price does not")
        effective_us = ledger.to_us(effective)
        document: PriceDoc = {
            "_id": f"{body.meter}:{body.spec_name or '*'}@{effective_us}",
            "meter": body.meter,
            "spec_name": body.spec_name,
            "amount": str(body.amount),
            "effective_from": effective,
            "effective_from_us": effective_us,
        }
        if not await self._prices.add(document):
            raise Conflict("a price for this meter already takes effect at that moment")
        return price_view(document)

    async def remove(self, price_id: str) -> None:
        """A price still to come may be withdrawn; one in effect has priced used time,
        and the bills a tenant can check are computed from it, so it stays: a new price
        replaces it from a moment on."""
        if await self._prices.remove_if_after(price_id, ledger.to_us(now())):
            return
        existing = next((doc for doc in await self._prices.all() if doc["_id"] == price_id), None)
        if existing is None:
            raise NotFound(f"no price {price_id!r}; GET /v1/prices lists them")
        raise Conflict(
            f"the price has been in effect since {existing['effective_from'].isoformat()}: "
            "used time was billed at it, so it stays; add a new price to replace it"
        )

    async def list(self) -> list[PriceView]:
        return [price_view(doc) for doc in await self._prices.all()]

    async def book(self) -> PriceBook:
        return PriceBook(await self._prices.all())
