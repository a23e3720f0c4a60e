"""What the CLI prints: tables on stdout with `-` for nothing, JSON for scripts, notes
on stderr only for people, times to the second in UTC, sizes and prices as people
read them, and the columns of each command's rows (session.py and the commands)."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from rich.console import Console

from gpucloud_cli.catalog import OFFER_COLUMNS, TEMPLATE_COLUMNS, _free, _utc, offers
from gpucloud_cli.jobs import DETAIL as JOB_DETAIL
from gpucloud_cli.jobs import finish, job_gpus, queue_text
from gpucloud_cli.metrics import COLUMNS as METRIC_COLUMNS
from gpucloud_cli.operator import NODE_COLUMNS, TENANT_COLUMNS
from gpucloud_cli.session import Column, Session, _cell, echo, moment
from gpucloud_cli.storages import COLUMNS as STORAGE_COLUMNS
from gpucloud_cli.storages import human_bytes
from gpucloud_cli.usage import user_names
from gpucloud_client.models import Identity, Job


def session(output: str = "table") -> tuple[Session, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    made = Session(None, output, out=Console(file=out, width=160), err=Console(file=err, width=160))
    return made, out, err


def row_of(columns: Sequence[Column], row: Any) -> dict[str, str]:
    """A row as its table shows it: header -> cell text."""
    return {header: _cell(read(row)) for header, read in columns}


def table_lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip() and "──" not in line]


# --- times -----------------------------------------------------------------------------


def test_a_time_is_shown_to_the_second_saying_it_is_utc() -> None:
    assert moment("2026-11-27T09:05:03.123456Z") == "2026-11-27 09:05:03 UTC"
    assert moment("2026-11-27T09:05:03+00:00") == "2026-11-27 09:05:03 UTC"


def test_no_time_is_a_dash() -> None:
    assert moment(None) == "-"
    assert moment("") == "-"


def test_an_api_time_is_compared_as_an_aware_instant() -> None:
    assert _utc("2026-01-01T00:00:00Z") == datetime(2026, 1, 1, tzinfo=UTC)
    assert _utc("2026-01-01T02:00:00+02:00") == datetime(2026, 1, 1, tzinfo=UTC)


# --- cells and tables ------------------------------------------------------------------


def test_a_cell_of_nothing_or_an_empty_list_is_a_dash() -> None:
    assert (_cell(None), _cell([]), _cell(["i-1", "i-2"]), _cell(0), _cell("")) == (
        "-", "-", "i-1, i-2", "0", "",
    )  # fmt: skip


def test_rows_are_a_table_on_stdout_under_their_headers() -> None:
    made, out, err = session()
    made.emit(
        [
            {"storageID": "models", "kind": "object", "state": "ready",
             "sizeBytes": 20 * 1024**3, "usedBytes": None, "attachedTo": [],
             "project": "default"},
            {"storageID": "scratch", "kind": "volume", "state": "ready",
             "sizeBytes": 10**9, "usedBytes": 5 * 1024**2, "attachedTo": ["i-1", "i-2"],
             "project": "vision"},
        ],
        STORAGE_COLUMNS,
    )  # fmt: skip
    assert table_lines(out.getvalue()) == [
        ["ID", "KIND", "STATE", "SIZE", "USED", "ATTACHED", "TO", "PROJECT"],
        ["models", "object", "ready", "20.0", "GiB", "-", "-", "default"],
        ["scratch", "volume", "ready", "953.7", "MiB", "5.0", "MiB", "i-1,", "i-2", "vision"],
    ]
    assert err.getvalue() == ""


def test_one_row_is_a_table_of_one_row() -> None:
    made, out, _ = session()
    made.emit({"serviceID": "chat-service"}, [("ID", lambda r: r["serviceID"])], title="Svc")
    assert table_lines(out.getvalue()) == [["Svc"], ["ID"], ["chat-service"]]


def test_json_output_is_the_data_as_it_came(capsys: pytest.CaptureFixture[str]) -> None:
    made, out, _ = session("json")
    made.emit([{"id": "i-1", "at": datetime(2026, 1, 1, tzinfo=UTC)}], [("ID", lambda r: r)])
    assert json.loads(capsys.readouterr().out) == [{"id": "i-1", "at": "2026-01-01 00:00:00+00:00"}]
    assert out.getvalue() == ""


def test_json_output_of_a_generator_is_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    made, _, _ = session("json")
    made.emit_json(item for item in ({"n": 1}, {"n": 2}))
    assert json.loads(capsys.readouterr().out) == [{"n": 1}, {"n": 2}]


def test_notes_go_to_stderr_for_tables_and_nowhere_for_json() -> None:
    table, out, err = session("table")
    table.note("storage scratch deleted")
    assert (out.getvalue(), err.getvalue()) == ("", "storage scratch deleted\n")
    quiet, _, quiet_err = session("json")
    quiet.note("storage scratch deleted")
    assert quiet_err.getvalue() == ""


def test_a_session_to_a_pipe_is_not_interactive() -> None:
    made, _, _ = session("table")
    assert not made.interactive  # its stderr is a StringIO, no terminal


# --- sizes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "shown"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
     (5 * 1024**2, "5.0 MiB"), (1024**4, "1.0 TiB"), (3 * 1024**5, "3072.0 TiB")],
)  # fmt: skip
def test_a_size_is_shown_in_binary_units_up_to_tebibytes(count: int, shown: str) -> None:
    assert human_bytes(count) == shown


# --- offers and templates --------------------------------------------------------------


def test_the_latest_price_in_force_prices_the_offer_in_any_order() -> None:
    now = datetime.now(UTC)
    stamps = [(now - timedelta(days=days)).isoformat().replace("+00:00", "Z") for days in (9, 2)]
    spec = {"name": "a100x2", "gpuType": "A100", "gpuNum": 2, "cpu": "24", "memory": "256Gi"}
    prices = [
        {"specName": "a100x2", "meter": "gpu_hour", "amount": "1.10", "effectiveFrom": stamps[1]},
        {"specName": "a100x2", "meter": "gpu_hour", "amount": "3.00", "effectiveFrom": stamps[0]},
    ]
    (offer,) = offers([spec], prices, [])
    assert offer["pricePerHour"] == "$2.20/h"
    assert row_of(OFFER_COLUMNS, offer)["GPUS"] == "2 x A100"


def test_free_gpus_read_by_zone_or_say_why_there_are_none() -> None:
    assert _free({"zone-a": 3, "zone-b": 0}) == "zone-a: 3, zone-b: 0"
    assert _free({}) == "no such GPUs"
    assert _free(None) == "shared GPU units"


def test_a_spec_larger_than_every_node_fits_nowhere() -> None:
    spec = {"name": "h100x16", "gpuType": "H100", "gpuNum": 16, "cpu": "1", "memory": "1Gi"}
    capacity = [{"zone": "zone-a", "gpuType": "H100", "freeByNode": [8, 8, 8]}]
    assert offers([spec], [], capacity)[0]["freeNow"] == {"zone-a": 0}


def test_a_template_row_lists_its_kinds_and_ports_with_their_protocols() -> None:
    template = {
        "templateID": "vllm", "name": "vLLM", "kinds": ["instance", "service"],
        "image": "vllm/vllm-openai:v0.6.3",
        "ports": [{"port": 8000, "appProtocol": "http"}, {"port": 2222, "appProtocol": "tcp"}],
    }  # fmt: skip
    assert row_of(TEMPLATE_COLUMNS, template) == {
        "TEMPLATE": "vllm", "NAME": "vLLM", "FOR": "instance, service",
        "IMAGE": "vllm/vllm-openai:v0.6.3", "PORTS": "8000/http, 2222/tcp",
    }  # fmt: skip


# --- jobs ------------------------------------------------------------------------------


def test_a_jobs_gpus_count_every_node() -> None:
    assert job_gpus({"gpuCount": 2, "gpuType": "H100"}) == "2 x H100"
    assert job_gpus({"gpuCount": 1, "gpuType": "H100", "nodes": 4}) == "4 x H100 (4 nodes)"
    assert job_gpus({"gpuCount": 8, "gpuType": "H100", "nodes": None}) == "8 x H100"


def job(**fields: Any) -> dict[str, Any]:
    return {
        "jobID": "train", "state": "queued", "specName": "h100-1", "gpuCount": 1,
        "gpuType": "H100", "succeededRuns": 0, "failedRuns": 1, "createdAt": None,
        "reason": None, "message": None, "exitCode": None, "queue": None, **fields,
    }  # fmt: skip


def test_a_queued_jobs_place_is_its_position_reason_and_gpus_ahead() -> None:
    queued = job(queue={"position": 3, "reason": "quota", "gpusAhead": 12})
    assert queue_text(cast(Job, queued)) == "queued #3 (quota, 12 GPUs ahead)"
    assert row_of(JOB_DETAIL, queued)["QUEUE"] == "queued #3 (quota, 12 GPUs ahead)"
    assert row_of(JOB_DETAIL, job())["QUEUE"] == "-"


def test_a_jobs_command_is_shown_as_a_shell_would_take_it() -> None:
    shown = row_of(JOB_DETAIL, job(command=["python", "train.py"], args=["--name", "run one"]))
    assert shown["COMMAND"] == "python train.py --name 'run one'"
    assert row_of(JOB_DETAIL, job())["COMMAND"] == "-"
    assert row_of(JOB_DETAIL, job())["RUNS"] == "0 ok, 1 failed"


# --- metrics, nodes, tenants, usage ----------------------------------------------------


def test_a_metrics_row_is_a_utc_minute_with_rounded_readings() -> None:
    point = {
        "start": "2026-11-27T09:05:00Z", "gpus": 2, "utilizationGpuPct": 87.349,
        "memoryUsedMib": 61_234.6, "temperatureC": 71.06, "powerW": 612.449, "xids": [],
    }  # fmt: skip
    assert row_of(METRIC_COLUMNS, point) == {
        "MINUTE (UTC)": "2026-11-27 09:05", "GPUS": "2", "GPU %": "87.3",
        "MEMORY MIB": "61235", "TEMP °C": "71.1", "POWER W": "612.4", "XIDS": "-",
    }  # fmt: skip


def test_a_node_without_utilisation_shows_a_dash_not_zero() -> None:
    node = {
        "node": "n1", "zone": "zone-a", "gpuType": "H100", "gpusInUse": 3, "gpus": 8,
        "health": "degraded", "healthReasons": ["xid 79"], "utilizationGpuPct": None,
        "telemetry": "nvml",
    }  # fmt: skip
    shown = row_of(NODE_COLUMNS, node)
    assert (shown["IN USE"], shown["UTIL %"], shown["REASONS"]) == ("3/8", "-", "xid 79")
    assert row_of(NODE_COLUMNS, {**node, "utilizationGpuPct": 41.6})["UTIL %"] == "42"


def test_a_tenant_that_may_borrow_nothing_shows_zero() -> None:
    tenant = {
        "tenantID": "acme", "name": "Acme", "status": "active", "quota": {"maxGpus": 16},
        "limits": {}, "createdAt": "2026-01-02T03:04:05Z",
    }  # fmt: skip
    shown = row_of(TENANT_COLUMNS, tenant)
    assert (shown["MAX GPUS"], shown["MAY BORROW"], shown["MAX INSTANCES"]) == ("16", "0", "-")
    assert shown["CREATED"] == "2026-01-02 03:04:05 UTC"


def test_a_tenant_user_sees_their_own_usage_row_as_you() -> None:
    made, _, _ = session()
    me: Identity = {
        "subject": "user:u-1", "userID": "u-1", "keyID": None, "role": "tenant-user",
        "tenantID": "acme", "scopes": [], "via": "api-key",
    }  # fmt: skip
    assert user_names(made, me) == {"u-1": "you"}
    assert user_names(made, {**me, "userID": None}) == {}


def test_a_job_that_ended_badly_is_reported_and_exits_one() -> None:
    made, _, err = session()
    ended = job(state="failed", reason="OOMKilled", exitCode=137)
    with pytest.raises(SystemExit) as exited:
        finish(made, cast(Job, ended))
    assert exited.value.code == 1
    assert err.getvalue() == "job train failed (OOMKilled), exit code 137\n"


def test_a_job_that_succeeded_is_reported_and_exits_normally() -> None:
    made, _, err = session()
    finish(made, cast(Job, job(state="succeeded", exitCode=0)))
    assert err.getvalue() == "job train succeeded, exit code 0\n"


def test_a_log_is_written_as_it_comes(capsys: pytest.CaptureFixture[str]) -> None:
    echo(iter(["epoch 1\n", "epoch", " 2\n"]))
    assert capsys.readouterr().out == "epoch 1\nepoch 2\n"


def test_brackets_in_keys_and_notes_print_as_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    """Object keys and file names may hold brackets: printed as written, never read as
    markup (which dropped `[draft]` and failed on `[/]`)."""
    plain = Session(None, "table")
    plain.emit(
        [{"key": "runs/[draft]/model.bin"}, {"key": "odd/[/]/name"}],
        [("KEY", lambda row: row["key"])],
    )
    plain.note("uploaded file [draft].txt → gpc://s/x")
    captured = capsys.readouterr()
    assert "runs/[draft]/model.bin" in captured.out
    assert "odd/[/]/name" in captured.out
    assert "file [draft].txt" in captured.err
