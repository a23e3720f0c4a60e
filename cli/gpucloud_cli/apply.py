"""`gpucloud apply -f FILE`: GPU instances, batch jobs and inference services declared in
YAML, made to exist as the file says. Each is found again by its name within the
tenant, so a second apply of the same file changes nothing.

An instance or a job cannot be changed in place (the API has no update for either): an
existing one is left as it is, "unchanged", and told apart from the file if it differs.
A job that has ended is not run again by an apply either. A service
takes a PATCH of the fields that differ, "configured"; the ones the API fixes at
creation (spec, port, zone, ...) are refused with a clear line instead.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import yaml

from gpucloud_client import ApiError, Client

from .session import Failure, Session, pass_session

#: The fields an inference service's PATCH takes (InferenceServicePatch); the other
#: fields of its create body are fixed once it exists.
SERVICE_PATCHABLE = frozenset(
    {"image", "env", "command", "args", "volumes", "runAsUser", "minReplicas", "maxReplicas",
     "strategy", "autoscaling"}
)  # fmt: skip
SERVICE_FIXED = frozenset(
    {"specName", "port", "readinessPath", "zone", "region", "storageIDs", "project"}
)
#: What an instance's or a job's record shows of its create body, to say when the file
#: differs.
FIXED_SHOWN = ("image", "specName")


@dataclass(frozen=True)
class Declared:
    """One document of a file: what to make, by which name, with which create body."""

    kind: str
    name: str
    body: dict[str, Any]
    origin: str

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass
class Planned:
    """What apply does for one document: create it, PATCH these changes, or nothing."""

    item: Declared
    result: str
    state: str | None = None
    changes: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        detail = f": {', '.join(sorted(self.changes))}" if self.changes else ""
        return f"{self.item.ref} {self.result}{detail} ({self.state})"

    def summary(self) -> dict[str, Any]:
        return {"kind": self.item.kind, "name": self.item.name, "result": self.result,
                "state": self.state, "changed": sorted(self.changes)}  # fmt: skip


@dataclass(frozen=True)
class Kind:
    id_field: str
    #: Reads the current object (GET only) and decides; raises Failure if it cannot.
    plan: Callable[[Session, Declared], Planned]
    #: Sends the write a plan calls for; returns the object's state after it.
    carry_out: Callable[[Client, Planned], str]


@click.command()
@click.option("--filename", "-f", "files", multiple=True, required=True, metavar="FILE",
              help="A YAML file of documents (`-` reads stdin); repeatable.")  # fmt: skip
@pass_session
def apply(session: Session, files: tuple[str, ...]) -> None:
    """Create or update the instances, jobs and inference services FILE declares.

    Each YAML document is `kind: instance`, `kind: job` or `kind: service` with the
    API's create body beside it (`instanceID`, `jobID` or `serviceID` names it). A new
    one is "created"; an instance or job that exists is "unchanged" (neither is changed
    in place, and an ended job is not run again); a service
    that exists gets the fields that differ, "configured", or is "unchanged". Every
    document is read and checked against what exists before anything is written.

    \b
    Example stack.yaml:
      kind: instance
      instanceID: notebook
      image: jupyter/base-notebook
      specName: h100-1
      template: {ports: [{port: 8888, isPublic: true}]}
      ---
      kind: job
      jobID: finetune
      image: pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime
      specName: h100-1
      command: [python, train.py]
      ---
      kind: service
      serviceID: chat
      image: vllm/vllm-openai:v0.6.3
      specName: h100-1
      port: 8000
      readinessPath: /health
      minReplicas: 2
    """
    declared = [item for name in files for item in read_documents(name)]
    seen: set[str] = set()
    for item in declared:
        if item.ref in seen:
            raise Failure(f"{item.origin}: {item.ref} is declared twice")
        seen.add(item.ref)
    plans = [KINDS[item.kind].plan(session, item) for item in declared]
    done: list[Planned] = []
    try:
        for plan in plans:
            if plan.result != UNCHANGED:
                plan.state = KINDS[plan.item.kind].carry_out(session.client, plan)
            done.append(plan)
            if session.output == "table":
                session.out.print(plan.line(), highlight=False, soft_wrap=True)
    finally:
        # What was done is reported even when a later document fails.
        if session.output == "json":
            session.emit_json([plan.summary() for plan in done])


CREATED, CONFIGURED, UNCHANGED = "created", "configured", "unchanged"


def read_documents(name: str) -> Iterator[Declared]:
    """The file's documents, each checked for a known kind and a name."""
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise Failure(f"cannot read {name}: {reason}") from error
    shown = "stdin" if name == "-" else name
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as error:
        raise Failure(f"{shown}: not valid YAML: {yaml_problem(error)}") from error
    if not documents:
        raise Failure(f"{shown}: no documents; each needs a kind: {KIND_NAMES}")
    for number, doc in enumerate(documents, start=1):
        origin = shown if len(documents) == 1 else f"{shown}, document {number}"
        yield declared(doc, origin)


def declared(doc: object, origin: str) -> Declared:
    if not isinstance(doc, dict):
        raise Failure(f"{origin}: a document must be a mapping of fields, not {type(doc).__name__}")
    body = {str(key): value for key, value in doc.items()}
    kind = body.pop("kind", None)
    if kind is None:
        raise Failure(f"{origin}: no kind; give kind: {KIND_NAMES}")
    if not isinstance(kind, str) or kind not in KINDS:
        raise Failure(f"{origin}: unknown kind {kind!r}; apply takes kind: {KIND_NAMES}")
    id_field = KINDS[kind].id_field
    name = body.get(id_field)
    if not isinstance(name, str) or not name:
        raise Failure(
            f"{origin}: a {kind} needs its name as {id_field}, so that the next apply finds it"
        )
    return Declared(kind, name, body, origin)


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error on one line: what, and where."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"{error.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(error).split())


def current_or_none(read: Callable[[str], Any], name: str) -> dict[str, Any] | None:
    try:
        return dict(read(name))
    except ApiError as error:
        if error.status == 404:
            return None
        raise


def plan_fixed(
    read: Callable[[Session], Callable[[str], Any]],
) -> Callable[[Session, Declared], Planned]:
    """The plan for a kind that is not changed in place: create it, or leave it as it is
    and say which of the fields the record shows differ from the file."""

    def plan(session: Session, item: Declared) -> Planned:
        current = current_or_none(read(session), item.name)
        if current is None:
            return Planned(item, CREATED)
        differing = [f for f in FIXED_SHOWN if f in item.body and item.body[f] != current.get(f)]
        if differing:
            verb = "differs" if len(differing) == 1 else "differ"
            session.note(
                f"{item.ref}: the file's {' and '.join(differing)} {verb} from the "
                f"{item.kind}'s; {NOT_IN_PLACE[item.kind]}"
            )
        return Planned(item, UNCHANGED, current["state"])

    return plan


NOT_IN_PLACE = {
    "instance": "an instance is not changed in place: stop and delete it, then apply again",
    "job": "a job is not changed in place: give the file's job another jobID",
}


def create_instance(client: Client, plan: Planned) -> str:
    return client.create_instance(plan.item.body)["state"]


def submit_job(client: Client, plan: Planned) -> str:
    # The job's name makes the submission idempotent: a retried apply submits it once.
    return str(client.submit_job(plan.item.body)["state"])


def plan_service(session: Session, item: Declared) -> Planned:
    current = current_or_none(session.client.get_service, item.name)
    if current is None:
        return Planned(item, CREATED)
    changes = service_changes(item, current)
    return Planned(item, CONFIGURED if changes else UNCHANGED, current["state"], changes)


def configure_service(client: Client, plan: Planned) -> str:
    if plan.result == CREATED:
        return str(client.create_service(plan.item.body)["state"])
    return str(client.update_service(plan.item.name, plan.changes)["state"])


def service_changes(item: Declared, current: dict[str, Any]) -> dict[str, Any]:
    """The PATCH that makes the service what the file says, for the fields the file
    names. A field the API does not know goes in too, so that its 422 names it."""
    fixed = sorted(
        f for f in SERVICE_FIXED & item.body.keys() if not matches(item.body[f], current.get(f))
    )
    if fixed:
        shown = ", ".join(f"{f} {current.get(f)!r} to {item.body[f]!r}" for f in fixed)
        raise Failure(
            f"{item.origin}: {item.ref} cannot change {shown} in place; "
            f"delete it (`gpucloud services delete {item.name}`) and apply again"
        )
    changes = {
        f: value
        for f, value in item.body.items()
        if f not in SERVICE_FIXED | {"serviceID"}
        and (f not in SERVICE_PATCHABLE or not matches(value, current.get(f)))
    }
    floor = changes.get("minReplicas")
    if isinstance(floor, int) and "maxReplicas" not in item.body and floor > current["maxReplicas"]:
        changes["maxReplicas"] = floor  # the ceiling follows a floor raised above it
    return changes


def matches(wanted: Any, current: Any) -> bool:
    """Whether the service's value is what the file asks: every field the file gives,
    recursively; fields it leaves out (defaults the API filled in) are not compared."""
    if isinstance(wanted, dict):
        return isinstance(current, dict) and all(
            matches(value, current.get(key)) for key, value in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(current, list)
            and len(wanted) == len(current)
            and all(matches(w, c) for w, c in zip(wanted, current, strict=True))
        )
    return bool(wanted == current)


KINDS: dict[str, Kind] = {
    "instance": Kind("instanceID", plan_fixed(lambda s: s.client.get_instance), create_instance),
    "job": Kind("jobID", plan_fixed(lambda s: s.client.get_job), submit_job),
    "service": Kind("serviceID", plan_service, configure_service),
}
KIND_NAMES = "instance, job or service"
