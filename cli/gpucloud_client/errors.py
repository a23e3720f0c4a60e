"""The client's errors: what the API refused, and what never reached it."""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """Base of every error the client raises."""


class ApiError(ClientError):
    """The API answered with a problem (RFC 9457): its status, machine-readable code and
    human-readable detail."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.code: str = str(body.get("code") or f"http_{status}")
        self.title: str = str(body.get("title") or f"HTTP {status}")
        self.detail: str = str(body.get("detail") or "")
        self.body = body
        super().__init__(f"{self.title}: {self.detail}" if self.detail else self.title)


class Unreachable(ClientError):
    """The endpoint could not be reached, or did not answer in time."""


class TransferFailed(ClientError):
    """The object store refused or dropped a presigned transfer."""
