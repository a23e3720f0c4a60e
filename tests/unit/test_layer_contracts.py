"""Every module of a service sits in its service's layer contract (pyproject.toml): a
module the contracts do not name is one whose imports nothing checks."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("gateway", "instances", "storage", "metering", "monitoring", "agent")
#: Where each one's package lives.
PACKAGES = {service: ROOT / "services" / service for service in SERVICES} | {
    "agent": ROOT / "agent"
}


def _named_in_contracts() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    named: set[str] = set()
    for contract in config["tool"]["importlinter"]["contracts"]:
        containers = contract.get("containers", [""])
        for layer in contract.get("layers", []):
            for module in re.split(r"[|:]", layer):
                # `(name)`: a layer some containers lack
                name = module.strip().strip("()")
                named.update(f"{c}.{name}" if c else name for c in containers)
    return named


def _modules(service: str) -> list[str]:
    package = PACKAGES[service] / f"gpucloud_{service}"
    modules = []
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] not in {"__init__", "__main__"}:
            modules.append(".".join(parts))
    return sorted(modules)


@pytest.mark.parametrize("service", SERVICES)
def test_every_module_of_a_service_is_in_its_layer_contract(service: str) -> None:
    named = _named_in_contracts()
    # A module is covered by its own name or by a package above it (controller.*).
    outside = [
        module
        for module in _modules(service)
        if not any(
            ".".join(module.split(".")[:end]) in named for end in range(2, module.count(".") + 2)
        )
    ]
    assert outside == [], f"name these in the {service} layers of pyproject.toml: {outside}"
