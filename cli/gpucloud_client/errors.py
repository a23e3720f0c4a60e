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
        #: (field, message) of each field the API refused, as it named them.
        self.fields: list[tuple[str, str]] = [
            (_field(item.get("loc") or []), str(item.get("msg") or ""))
            for item in body.get("errors") or []
            if isinstance(item, dict)
        ]
        super().__init__(f"{self.title}: {self.detail}" if self.detail else self.title)


def _field(loc: list[Any]) -> str:
    """`["body", "template", "ports", 0, "port"]` as `template.ports[0].port`."""
    parts = [part for part in loc if part not in {"body", "query", "path"}]
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(the request)"


class Unreachable(ClientError):
    """The endpoint could not be reached, or did not answer in time."""


class TransferFailed(ClientError):
    """The object store refused or dropped a presigned transfer."""
