"""What every command shares: the chosen profile, the output format and one client."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import click
from rich import box
from rich.console import Console
from rich.table import Table

from gpucloud_client import Client

from . import config


class Failure(click.ClickException):
    """An error for the person at the terminal: one line on stderr, exit code 1."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True, file=file)


#: A table column: its header, and how to read it from a row.
Column = tuple[str, Callable[[Any], object]]


def moment(iso: str | None) -> str:
    """An API time as a table shows it: to the second, saying its zone (the API's
    times are UTC). `-` for none."""
    if not iso:
        return "-"
    return iso[:19].replace("T", " ") + " UTC"


@dataclass
class Session:
    profile_name: str | None
    output: str
    #: A pipe gets whole rows, not rows folded to 80 columns.
    out: Console = field(
        # No markup: keys, names and messages print as they are (`runs/[draft]/x`).
        default_factory=lambda: Console(width=None if sys.stdout.isatty() else 500, markup=False)
    )
    #: Progress, spinners and notes go to stderr, so stdout stays the command's answer.
    err: Console = field(default_factory=lambda: Console(stderr=True, markup=False))
    _client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            profile = config.load(self.profile_name)
            self._client = Client(profile.endpoint, profile.api_key)
        return self._client

    @property
    def interactive(self) -> bool:
        return self.output == "table" and self.err.is_terminal

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def emit(self, data: Any, columns: Sequence[Column], *, title: str | None = None) -> None:
        """A list of rows, or one row, as a table, or as JSON with `--output json`."""
        if self.output == "json":
            self.emit_json(data)
            return
        rows = [data] if isinstance(data, Mapping) else list(data)
        table = Table(
            title=title, header_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False
        )
        for header, _ in columns:
            table.add_column(header, overflow="fold")
        for row in rows:
            table.add_row(*(_cell(read(row)) for _, read in columns))
        self.out.print(table)

    def emit_json(self, data: Any) -> None:
        if not isinstance(data, Mapping | list):
            data = list(data) if isinstance(data, Iterable) else data
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")

    def note(self, message: str) -> None:
        if self.output == "table":
            self.err.print(message, highlight=False)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value) or "-"
    return str(value)


def echo(chunks: Iterable[str]) -> None:
    """A log to stdout as it comes, not when a buffer fills."""
    for chunk in chunks:
        sys.stdout.write(chunk)
        sys.stdout.flush()


pass_session = click.make_pass_decorator(Session)
