"""Starts, stops and inspects the stack's processes.

Each component runs detached in its own session, with its output in
<home>/logs/<name>.log and its pid in <home>/run/<name>.pid, so `up` returns
while the stack keeps running and `down` can find it again later.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass

from . import layout, probes
from .components import Component, Context
from .errors import StackError


def running_pid(component: Component) -> int | None:
    path = layout.pid_file(component.name)
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    if not _alive(pid):
        path.unlink(missing_ok=True)
        return None
    return pid


def _alive(pid: int) -> bool:
    try:
        # A child of this process that exited stays a zombie until reaped.
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    except ChildProcessError:
        pass  # started by an earlier `stack` invocation
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def _tail(component: Component, lines: int = 15) -> str:
    try:
        text = layout.log_file(component.name).read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


def launch(component: Component, ctx: Context) -> bool:
    """Spawn `component` unless it is healthy or already starting; True if spawned."""
    if running_pid(component) is not None or component.healthy(ctx):
        return False
    for port in component.ports:
        if probes.port_open(layout.HOST, port):
            raise StackError(
                component.name,
                f"port {port} is already taken by another process; stop it or free the port",
            )
    try:
        component.prepare(ctx)
    except (subprocess.CalledProcessError, OSError) as error:
        detail = getattr(error, "stderr", "") or str(error)
        raise StackError(component.name, f"preparation failed: {detail.strip()[-500:]}") from error
    argv = component.argv(ctx)
    if not os.path.exists(argv[0]):
        raise StackError(component.name, f"binary {argv[0]} is missing; run `make provision`")
    log = layout.log_file(component.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    layout.pid_file(component.name).parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n==== starting {component.name} at {time.strftime('%F %T')} ====\n".encode())
        out.flush()
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **component.env(ctx)},
            cwd=layout.home_dir(),
            start_new_session=True,
        )
    layout.pid_file(component.name).write_text(str(process.pid))
    return True


def wait_healthy(component: Component, ctx: Context) -> None:
    deadline = time.monotonic() + component.start_timeout_s
    while time.monotonic() < deadline:
        if component.healthy(ctx):
            return
        if running_pid(component) is None:
            raise StackError(
                component.name,
                "exited during start-up; last log lines:\n" + _tail(component),
                layout.log_file(component.name),
            )
        time.sleep(0.25)
    raise StackError(
        component.name,
        f"not healthy after {component.start_timeout_s:.0f}s; last log lines:\n" + _tail(component),
        layout.log_file(component.name),
    )


def stop(component: Component, timeout_s: float = 20.0) -> bool:
    pid = running_pid(component)
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and running_pid(component) is not None:
        time.sleep(0.1)
    if running_pid(component) is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        time.sleep(0.2)
    layout.pid_file(component.name).unlink(missing_ok=True)
    return True


@dataclass(frozen=True)
class Status:
    name: str
    pid: int | None
    healthy: bool
    rss_mib: float | None


def _rss_mib(pid: int) -> float | None:
    """Resident memory of the process and its children, from /proc."""
    total_kib = 0
    for member in _process_tree(pid):
        with contextlib.suppress(OSError):
            for line in open(f"/proc/{member}/status"):  # noqa: SIM115
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
    return total_kib / 1024 if total_kib else None


def _process_tree(pid: int) -> Iterable[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = open(f"/proc/{entry}/stat").read()  # noqa: SIM115
                parent = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
    stack = [pid]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(children.get(current, []))


def status(components: Iterable[Component], ctx: Context) -> list[Status]:
    result = []
    for component in components:
        pid = running_pid(component)
        result.append(
            Status(component.name, pid, component.healthy(ctx), _rss_mib(pid) if pid else None)
        )
    return result
