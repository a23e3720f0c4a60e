"""Headless Chromium from Debian's package, unpacked into the cache (provision.CHROMIUM):
the console's browser tests and its first-load benchmark drive it with Playwright."""

from __future__ import annotations

import os
from pathlib import Path

from . import provision

#: Flags for a machine with no network beyond loopback: no background calls home.
HEADLESS_ARGS = (
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)  # fmt: skip


def chromium() -> tuple[Path, dict[str, str]]:
    """The executable (unpacked on first use) and the environment it runs in: its
    libraries come from the unpacked packages, the rest from the system."""
    root = provision.ensure(provision.CHROMIUM) / "root"
    libraries = sorted({str(path.parent) for path in root.rglob("*.so*")})
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(libraries)}
    return root / "usr/lib/chromium/chromium", env
