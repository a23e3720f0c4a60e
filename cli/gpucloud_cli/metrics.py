"""`gpucloud <instances|jobs|services> metrics ID`: a workload's GPUs, a row a minute."""

from __future__ import annotations

import click

from .session import Column, Session, pass_session

COLUMNS: list[Column] = [
    ("MINUTE (UTC)", lambda p: p["start"][:16].replace("T", " ")),
    ("GPUS", lambda p: p["gpus"]),
    ("GPU %", lambda p: round(p["utilizationGpuPct"], 1)),
    ("MEMORY MIB", lambda p: round(p["memoryUsedMib"])),
    ("TEMP °C", lambda p: round(p["temperatureC"], 1)),
    ("POWER W", lambda p: round(p["powerW"], 1)),
    ("XIDS", lambda p: p["xids"]),
]


def metrics_command(collection: str, noun: str) -> click.Command:
    """The `metrics` command of one workload group; `collection` is its API path."""

    @click.command("metrics")
    @click.argument("workload_id", metavar="ID")
    @click.option("--minutes", type=click.IntRange(1, 7 * 24 * 60), default=60,
                  show_default=True, help="How far back.")  # fmt: skip
    @pass_session
    def show_metrics(session: Session, workload_id: str, minutes: int) -> None:
        series = session.client.workload_metrics(collection, workload_id, minutes)
        if session.output == "json":
            session.emit_json(series)
        elif series["points"]:
            session.emit(series["points"], COLUMNS)
        else:
            session.note(f"No samples of {noun} {workload_id} in the last {minutes} minutes.")

    show_metrics.help = (
        f"The {noun}'s GPUs a minute at a time: utilisation, memory, temperature and "
        "power, averaged over its GPUs, as the node agents sampled them."
    )
    return show_metrics
