"""HTTP routes of the metering service."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
