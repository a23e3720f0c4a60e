"""`gpucloud projects`: a tenant's projects, each with members, a share of the
tenant's GPUs and a budget (decision 138)."""

from __future__ import annotations

from typing import Any

import click

from .session import Column, Session, pass_session
from .users import user_id_of

PROJECT_COLUMNS: list[Column] = [
    ("ID", lambda p: p["projectID"]),
    ("NAME", lambda p: p["name"]),
    ("GPUS", lambda p: "tenant's" if p["maxGpus"] is None else p["maxGpus"]),
    ("BORROW", lambda p: p["borrowGpus"]),
    ("BUDGET", lambda p: "-" if p["monthlyBudgetCents"] is None else p["monthlyBudgetCents"]),
    ("MEMBERS", lambda p: "everyone" if p["everyone"] else len(p["members"])),
]
MEMBER_COLUMNS: list[Column] = [
    ("USER", lambda m: m["userID"]),
    ("EMAIL", lambda m: m["email"]),
    ("NAME", lambda m: m["name"]),
]


def _share_options(command: Any) -> Any:
    for option in reversed([
        click.option("--gpus", "max_gpus", type=click.IntRange(0), default=None,
                     help="Its share of the tenant's GPUs (the shares together fit the tenant's)."),
        click.option("--borrow-gpus", type=click.IntRange(0), default=None,
                     help="GPUs beyond its share its jobs may borrow of the tenant's idle ones."),
        click.option("--monthly-budget-cents", type=click.IntRange(0), default=None,
                     help="What its work may cost per calendar month."),
    ]):  # fmt: skip
        command = option(command)
    return command


@click.group()
def projects() -> None:
    """Projects of your tenant: members, a share of the tenant's GPUs and a budget
    each (a tenant admin makes and changes them). `default` holds everyone and what
    the others do not carve."""


@projects.command("ls")
@pass_session
def list_projects(session: Session) -> None:
    """Your tenant's projects (a user sees `default` and their own)."""
    session.emit(session.client.projects(), PROJECT_COLUMNS)


@projects.command("show")
@click.argument("project")
@pass_session
def show_project(session: Session, project: str) -> None:
    """A project and its members."""
    shown = session.client.project(project)
    if session.output == "json":
        session.emit_json(shown)
        return
    session.emit(shown, PROJECT_COLUMNS)
    session.emit(shown["members"], MEMBER_COLUMNS)


@projects.command("create")
@click.argument("project")
@click.option("--name", help="How the console and reports name it (default: its id).")
@_share_options
@pass_session
def create_project(
    session: Session, project: str, name: str | None, max_gpus: int | None,
    borrow_gpus: int | None, monthly_budget_cents: int | None,
) -> None:  # fmt: skip
    """Make PROJECT (a DNS label, at most 20 characters).

    \b
    Example:
      gpucloud projects create vision --gpus 8 --monthly-budget-cents 500000
    """
    body: dict[str, Any] = {
        "projectID": project, "name": name or project, "maxGpus": max_gpus,
        "borrowGpus": borrow_gpus or 0, "monthlyBudgetCents": monthly_budget_cents,
    }  # fmt: skip
    session.emit(session.client.create_project(body), PROJECT_COLUMNS)


@projects.command("set")
@click.argument("project")
@click.option("--name")
@_share_options
@click.option("--no-gpus", is_flag=True, help="No share of its own: the tenant's quota holds it.")
@click.option("--no-budget", is_flag=True, help="No budget of its own.")
@pass_session
def set_project(
    session: Session, project: str, name: str | None, max_gpus: int | None,
    borrow_gpus: int | None, monthly_budget_cents: int | None, no_gpus: bool, no_budget: bool,
) -> None:  # fmt: skip
    """Change PROJECT's name, share, borrowing or budget; what is not given stays."""
    body: dict[str, Any] = {
        key: value for key, value in (
            ("name", name), ("maxGpus", max_gpus), ("borrowGpus", borrow_gpus),
            ("monthlyBudgetCents", monthly_budget_cents),
        ) if value is not None
    }  # fmt: skip
    if no_gpus:
        body["maxGpus"] = None
    if no_budget:
        body["monthlyBudgetCents"] = None
    if not body:
        raise click.UsageError("say what to change")
    session.emit(session.client.update_project(project, body), PROJECT_COLUMNS)


@projects.command("rm")
@click.argument("project")
@pass_session
def delete_project(session: Session, project: str) -> None:
    """Remove PROJECT."""
    session.client.delete_project(project)
    session.note(f"project {project} removed")


@projects.command("add-member")
@click.argument("project")
@click.argument("user")
@pass_session
def add_member(session: Session, project: str, user: str) -> None:
    """Make USER (an id or an email of your tenant) a member of PROJECT."""
    shown = session.client.add_project_member(project, user_id_of(session, user))
    session.emit(shown["members"], MEMBER_COLUMNS)


@projects.command("remove-member")
@click.argument("project")
@click.argument("user")
@pass_session
def remove_member(session: Session, project: str, user: str) -> None:
    """Take USER out of PROJECT."""
    session.client.remove_project_member(project, user_id_of(session, user))
    session.note(f"{user} is no longer a member of {project}")
