"""`gpucloud jobs`: submit batch jobs, follow them through the queue, read their logs."""

from __future__ import annotations

import shlex
import time
from typing import Any

import click
import yaml

from gpucloud_client import ApiError
from gpucloud_client.models import Job
from gpucloud_client.workload_api import ENDED_JOB_STATES

from .metrics import metrics_command
from .session import Column, Session, echo, moment, pass_session

POLL_S = 1.0


def job_gpus(job: dict[str, Any]) -> str:
    """Every GPU the job holds: a 4-node job of a 1-GPU spec holds 4."""
    nodes = job.get("nodes") or 1
    text = f"{nodes * job['gpuCount']} x {job['gpuType']}"
    return text + (f" ({nodes} nodes)" if nodes > 1 else "")


COLUMNS: list[Column] = [
    ("ID", lambda j: j["jobID"]),
    ("STATE", lambda j: j["state"]),
    ("SPEC", lambda j: j["specName"]),
    ("GPUS", job_gpus),
    ("CLUSTER", lambda j: j.get("cluster")),
    ("RUNS", lambda j: f"{j['succeededRuns']} ok, {j['failedRuns']} failed"),
    ("CREATED", lambda j: moment(j["createdAt"])),
]
DETAIL: list[Column] = [
    *COLUMNS,
    ("COMMAND", lambda j: shlex.join([*(j.get("command") or []), *(j.get("args") or [])]) or None),
    ("REASON", lambda j: j["reason"]),
    ("MESSAGE", lambda j: j["message"]),
    ("EXIT", lambda j: j["exitCode"]),
    ("QUEUE", lambda j: queue_text(j) if j["queue"] else None),
]


@click.group()
def jobs() -> None:
    """Batch jobs: queued fairly, run to completion, billed per run."""


@jobs.command("ls")
@click.option("--state", "states", multiple=True, help="Only these states (repeatable).")
@click.option("--project", help="Only this project's jobs.")
@pass_session
def list_jobs(session: Session, states: tuple[str, ...], project: str | None) -> None:
    """List the tenant's jobs (its project's alone, for a key of one project)."""
    session.emit(session.client.list_jobs(states=list(states) or None, project=project), COLUMNS)


@jobs.command("get")
@click.argument("job_id")
@pass_session
def get_job(session: Session, job_id: str) -> None:
    """One job, with its runs and, while it waits, its place in the queue."""
    job = session.client.get_job(job_id)
    session.emit(job, DETAIL)
    if session.output == "table" and job["runs"]:
        session.emit(job["runs"], [("RUN", lambda r: r["runID"]), ("STATE", lambda r: r["state"]),
                                   ("NODE", lambda r: r["node"]), ("EXIT", lambda r: r["exitCode"]),
                                   ("STARTED", lambda r: moment(r["startedAt"])), ("ENDED", lambda r: moment(r["endedAt"]))])  # fmt: skip


@jobs.command("submit")
@click.argument("spec_file", type=click.File("r"))
@click.option("--id", "job_id", help="The job's id (default: the file's jobID, else generated).")
@click.option("--project", help="Run in this project of yours (default: the file's, else default).")
@click.option("--follow/--detach", default=True, show_default=True,
              help="Follow the job's state and logs until it ends.")  # fmt: skip
@pass_session
def submit_job(
    session: Session, spec_file: Any, job_id: str | None, project: str | None, follow: bool
) -> None:
    """Submit the job SPEC_FILE describes (YAML, the API's fields; `-` reads stdin), then
    follow it through the queue and print its runs' logs until it ends. The exit code is
    0 if the job succeeded, 1 otherwise.

    \b
    Example job.yaml:
      jobID: finetune-1
      image: pytorch/pytorch
      specName: h100-1
      region: local-1        # optional: any region with the GPUs when left out
      command: [python, train.py]
      retryLimit: 2
      storageIDs: [datasets]
      project: vision        # optional: a project of yours (`gpucloud projects`)
    """
    try:
        body = yaml.safe_load(spec_file)
    except yaml.YAMLError as error:
        raise click.BadParameter(f"not YAML: {error}", param_hint="SPEC_FILE") from error
    if not isinstance(body, dict):
        raise click.BadParameter(
            "the file must hold a mapping of the job's fields", param_hint="SPEC_FILE"
        )
    if job_id:
        body["jobID"] = job_id
    if project:
        body["project"] = project
    job = session.client.submit_job(body)
    if not follow:
        session.emit(job, DETAIL)
        return
    session.note(f"job {job['jobID']} submitted")
    finish(session, follow_job(session, job["jobID"]))


@jobs.command("logs")
@click.argument("job_id")
@click.option("--run", help="A run's id (default: the latest run).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the log grows.")
@click.option("--tail", "tail_lines", type=int, help="Only the last N lines.")
@pass_session
def job_logs(
    session: Session, job_id: str, run: str | None, follow: bool, tail_lines: int | None
) -> None:
    """Print a run's log."""
    with session.client.job_log(job_id, run=run, follow=follow, tail_lines=tail_lines) as chunks:
        echo(chunks)


@jobs.command("wait")
@click.argument("job_id")
@pass_session
def wait_job(session: Session, job_id: str) -> None:
    """Follow a job already submitted (state and logs) until it ends."""
    finish(session, follow_job(session, job_id))


@jobs.command("cancel")
@click.argument("job_id")
@pass_session
def cancel_job(session: Session, job_id: str) -> None:
    """Cancel a job: queued, it leaves the queue; running, its pods are stopped."""
    session.emit(session.client.cancel_job(job_id), COLUMNS)


def follow_job(session: Session, job_id: str) -> Job:
    """Show the job's wait in the queue, then each run's log in turn, until it ends.
    Ctrl-C detaches: the job goes on."""
    client = session.client
    printed: set[str] = set()
    try:
        job = wait_in_queue(session, job_id)
        while True:
            fresh = [run for run in job["runs"] if run["runID"] not in printed and run["startedAt"]]
            if not fresh:
                if job["state"] in ENDED_JOB_STATES:
                    return job
                time.sleep(POLL_S)
                job = client.get_job(job_id)
                continue
            run = fresh[0]
            session.note(f"── run {run['runID']} on {run['node']} ──")
            print_log(session, job_id, run["runID"], follow=run["endedAt"] is None)
            printed.add(run["runID"])
            job = client.get_job(job_id)
    except KeyboardInterrupt:
        session.note(f"detached; job {job_id} goes on (`gpucloud jobs wait {job_id}`)")
        raise SystemExit(130) from None


def wait_in_queue(session: Session, job_id: str) -> Job:
    job = session.client.get_job(job_id)
    if job["state"] not in {"queued", "admitted"}:
        return job
    with session.err.status(f"{job_id}: {job['state']}") as status:
        last = ""
        while job["state"] in {"queued", "admitted"}:
            line = f"{job_id}: {queue_text(job) if job['queue'] else job['state']}"
            if line != last:
                status.update(line)
                if not session.err.is_terminal:
                    session.note(line)
                last = line
            time.sleep(POLL_S)
            job = session.client.get_job(job_id)
    return job


def print_log(session: Session, job_id: str, run_id: str, *, follow: bool) -> None:
    try:
        with session.client.job_log(job_id, run=run_id, follow=follow) as chunks:
            echo(chunks)
    except ApiError as error:  # a run whose pod is gone has no log left to show
        session.note(f"(no log for run {run_id}: {error.detail or error.title})")


def queue_text(job: Job) -> str:
    queue = job["queue"]
    assert queue is not None
    return f"queued #{queue['position']} ({queue['reason']}, {queue['gpusAhead']} GPUs ahead)"


def finish(session: Session, job: Job) -> None:
    exit_code = f", exit code {job['exitCode']}" if job["exitCode"] is not None else ""
    reason = f" ({job['reason']})" if job["reason"] else ""
    session.note(f"job {job['jobID']} {job['state']}{reason}{exit_code}")
    if session.output == "json":
        session.emit_json(job)
    if job["state"] != "succeeded":
        raise SystemExit(1)


jobs.add_command(metrics_command("jobs", "job"))
