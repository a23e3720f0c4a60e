"""HTTP routes of the monitoring service."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
