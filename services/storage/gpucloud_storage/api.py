"""HTTP routes of the storage service."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
