"""HTTP routes of warm stocks (platform admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter

from gpucloud_libs.http import CurrentIdentity, app_part

from .schemas import StockChange, StockStatus
from .targets import StockTargets

router = APIRouter()

StocksPart = Annotated[StockTargets, app_part(StockTargets)]


@router.post(
    "/stocks", tags=["stocks"], summary="Add warm units of a spec (seed 004; platform admin)"
)
async def add_stock(
    body: StockChange, identity: CurrentIdentity, stocks: StocksPart
) -> StockStatus:
    identity.require_role("platform-admin")
    return await stocks.change(body, add=True)


@router.delete(
    "/stocks", tags=["stocks"], summary="Remove warm units of a spec (seed 004; platform admin)"
)
async def remove_stock(
    body: StockChange, identity: CurrentIdentity, stocks: StocksPart
) -> StockStatus:
    identity.require_role("platform-admin")
    return await stocks.change(body, add=False)


@router.get("/stocks", tags=["stocks"], summary="Warm stock per spec (platform admin)")
async def list_stocks(identity: CurrentIdentity, stocks: StocksPart) -> list[StockStatus]:
    identity.require_role("platform-admin")
    return await stocks.status()
