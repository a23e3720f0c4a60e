"""HTTP routes of the instances service."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
