"""The base of every event payload (events.py holds the contracts and their union)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class EventData(BaseModel):
    """Base of every event payload."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str

    @property
    def aggregate_id(self) -> str:
        """The id that orders this event; it becomes the Kafka message key."""
        raise NotImplementedError
