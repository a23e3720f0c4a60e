"""`stack` command line: provision, up, down, status, logs, reset, env."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

from . import components, fleet, layout, provision, supervisor
from .components import Component
from .errors import StackError


def _say(message: str) -> None:
    print(message, flush=True)


def cmd_provision(_args: argparse.Namespace) -> None:
    started = time.monotonic()
    provision.ensure_all()
    _say(f"provisioned in {time.monotonic() - started:.1f}s (cache: {layout.cache_dir()})")


def _bring_up(group: tuple[Component, ...], ctx: components.Context) -> None:
    # Spawn the whole group first, then wait: the control-plane components retry
    # their upstreams, so starting them together saves most of the warm start.
    for component in group:
        supervisor.launch(component, ctx)
    for component in group:
        supervisor.wait_healthy(component, ctx)
        cluster = components.CLUSTER_OF.get(component.name)
        if cluster is not None and component.name.startswith("kwok"):
            created = fleet.register(ctx, cluster)
            if created:
                _say(f"  registered {created} fake GPU nodes from {cluster.fleet_file}")
        _say(f"  {component.name:<31} healthy")
        if cluster is not None and component.name.startswith("kube-apiserver"):
            _say(f"    {components.apply_kube_access(ctx, cluster)}")
        if component is components.KAFKA:
            _say(f"    {components.apply_kafka_access(ctx)}")
        if component is components.MINIO:
            _say(f"    {components.apply_minio_access(ctx)}")
        if component is components.RADOSGW:
            _say(f"    {components.apply_rgw_access(ctx)}")


def cmd_up(args: argparse.Namespace) -> None:
    started = time.monotonic()
    provision.ensure_all()
    ctx = components.context()
    _bring_up(components.infra(), ctx)
    _bring_up(components.ADDONS, ctx)
    if not args.infra_only:
        _bring_up(components.SERVICES, ctx)
        _say(f"    {components.register_second_cluster(ctx)}")
    _say(f"\nup in {time.monotonic() - started:.1f}s")
    if not args.infra_only:
        _say(f"  gateway:   http://{layout.HOST}:{layout.PORTS.gateway}  (OpenAPI at /docs)")
        _say(f"  admin key: {ctx.secrets.bootstrap_admin_key}  (bootstrap platform admin)")
    _say(f"  kubeconfig: {ctx.kubeconfig}")
    _say(f"  logs:      {layout.home_dir() / 'logs'}  (`make logs c=<component>`)")


def cmd_down(args: argparse.Namespace) -> None:
    targets = components.SERVICES if args.services_only else components.ALL
    for component in reversed(targets):
        if supervisor.stop(component):
            _say(f"  stopped {component.name}")


def cmd_status(_args: argparse.Namespace) -> None:
    ctx = components.context()
    unhealthy = 0
    _say(f"{'component':<31} {'pid':>8} {'health':<10} {'rss MiB':>8}")
    total = 0.0
    for row in supervisor.status((*components.infra(), *components.SERVICES), ctx):
        rss = f"{row.rss_mib:.0f}" if row.rss_mib else "-"
        total += row.rss_mib or 0.0
        health = "healthy" if row.healthy else ("starting" if row.pid else "down")
        unhealthy += not row.healthy
        _say(f"{row.name:<31} {row.pid or '-':>8} {health:<10} {rss:>8}")
    _say(f"{'total':<31} {'':>8} {'':<10} {total:>8.0f}")
    if unhealthy:
        sys.exit(1)


def cmd_logs(args: argparse.Namespace) -> None:
    if args.component not in components.BY_NAME:
        raise StackError(
            args.component, f"unknown component; one of: {', '.join(components.BY_NAME)}"
        )
    path = layout.log_file(args.component)
    if not path.exists():
        raise StackError(args.component, "has no log yet", path)
    tail = shutil.which("tail") or "tail"
    argv = [tail, "-n", str(args.lines), *(["-F"] if args.follow else []), str(path)]
    sys.exit(subprocess.call(argv))


def cmd_reset(_args: argparse.Namespace) -> None:
    for component in reversed(components.ALL):
        supervisor.stop(component)
    shutil.rmtree(layout.home_dir(), ignore_errors=True)
    _say(f"removed {layout.home_dir()} (data, logs and generated secrets)")


def cmd_env(args: argparse.Namespace) -> None:
    ctx = components.context()
    env = components.running_env(ctx, args.service) if args.service else components.service_env(ctx)
    if args.json:
        _say(json.dumps(env, indent=2))
    else:
        for key, value in env.items():
            _say(f"export {key}={shlex.quote(value)}")


def cmd_fleet(_args: argparse.Namespace) -> None:
    """Print the fleet's nodes as one Kubernetes List, for `kubectl apply -f -` elsewhere."""
    _say(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": fleet.node_manifests()}, indent=2)
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="stack", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("provision", help="build or download every server binary into the cache")
    up = sub.add_parser("up", help="start the stack and the five services")
    up.add_argument("--infra-only", action="store_true", help="start only the servers")
    down = sub.add_parser("down", help="stop everything; data is kept")
    down.add_argument("--services-only", action="store_true")
    sub.add_parser("status", help="health, pid and memory of every component")
    logs = sub.add_parser("logs", help="show a component's log")
    logs.add_argument("component")
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("-n", "--lines", type=int, default=100)
    sub.add_parser("reset", help="stop everything and wipe the data directory")
    env = sub.add_parser("env", help="connection settings for the stack, as shell exports")
    env.add_argument("--json", action="store_true")
    env.add_argument(
        "--service",
        choices=[*components.SERVICE_NAMES, "agent"],
        help="the settings that service runs with (its own Kafka principal)",
    )
    sub.add_parser("fleet", help="print the fake GPU nodes of fleet.toml as a Kubernetes List")
    args = parser.parse_args(argv)
    handlers = {
        "provision": cmd_provision, "up": cmd_up, "down": cmd_down, "status": cmd_status,
        "logs": cmd_logs, "reset": cmd_reset, "env": cmd_env, "fleet": cmd_fleet,
    }  # fmt: skip
    # Secrets are written 0600 one by one; directories stay traversable so that
    # PostgreSQL, running as its own user, reaches its data directory.
    os.umask(0o022)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `stack status | head` ends quietly
    try:
        handlers[args.command](args)
    except StackError as error:
        print(f"stack: {error}", file=sys.stderr)
        sys.exit(2)
