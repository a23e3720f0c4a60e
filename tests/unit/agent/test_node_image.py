"""The agent as a GPU node's image has it: without the simulator's extras."""

from __future__ import annotations

import subprocess
import sys


def test_the_agent_starts_without_the_stand_ins_extra() -> None:
    """asyncssh belongs to the `standins` extra, which the node image does not install:
    the agent's command line must load without it."""
    blocked = "import sys; sys.modules['asyncssh'] = None; import gpucloud_agent.cli"
    ran = subprocess.run(
        [sys.executable, "-c", blocked], capture_output=True, text=True, check=False
    )
    assert ran.returncode == 0, ran.stderr
