"""Failures the stack reports to a person: which component, why, and where to look."""

from __future__ import annotations

from pathlib import Path


class StackError(Exception):
    def __init__(self, component: str, reason: str, log: Path | None = None) -> None:
        self.component = component
        self.reason = reason
        self.log = log
        where = f" (log: {log})" if log else ""
        super().__init__(f"{component}: {reason}{where}")
