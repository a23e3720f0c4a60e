"""Time as every service stores and shows it: aware UTC datetimes.

PyMongo hands datetimes back naive (in UTC) unless the client is told
otherwise, so anything read from a store goes through `aware` before it is
compared with `now()` or shown in a response.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def now() -> datetime:
    return datetime.now(UTC)


def now_as_stored() -> datetime:
    """`now()` to the millisecond, as BSON keeps a datetime (`as_stored`)."""
    return as_stored(now())


def as_stored(at: datetime) -> datetime:
    """`at` to the millisecond, as BSON keeps a datetime. An instant that is both
    recorded in a document and published in an event (a transition the bill counts
    from) then reads the same from the API and from the bill."""
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def as_stored_values(value: Any) -> Any:
    """`value` with every datetime in it (in dicts and lists, at any depth) to the
    millisecond: a document as the store will hand it back, for a copy kept in memory."""
    if isinstance(value, datetime):
        return as_stored(value)
    if isinstance(value, dict):
        return {key: as_stored_values(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_stored_values(item) for item in value]
    return value


def aware(value: datetime) -> datetime:
    """`value` as an aware UTC datetime (a stored one comes back naive)."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def aware_or_none(value: datetime | None) -> datetime | None:
    """`aware`, for a field that may be unset."""
    return None if value is None else aware(value)
