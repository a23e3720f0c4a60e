"""Every module of a service sits in its service's layer contract (pyproject.toml): a
module the contracts do not name is one whose imports nothing checks."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("gateway", "instances", "storage", "metering", "monitoring", "agent")
#: Where each one's package lives.
PACKAGES = {service: ROOT / "services" / service for service in SERVICES} | {
    "agent": ROOT / "agent"
}


def _contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _names(layers: list[str]) -> set[str]:
    """The modules a contract's layers name; `(name)` is a layer some containers lack."""
    return {module.strip().strip("()") for layer in layers for module in re.split(r"[|:]", layer)}


def _named_in_contracts() -> set[str]:
    named: set[str] = set()
    for contract in _contracts():
        containers = contract.get("containers", [""])
        for name in _names(contract.get("layers", [])):
            named.update(f"{c}.{name}" if c else name for c in containers)
    return named


def _outside_roles() -> list[str]:
    """Modules of a feature package (a contract's container) that are none of the roles
    that contract names: naming the package elsewhere does not excuse them."""
    outside = []
    for contract in _contracts():
        roles = _names(contract.get("layers", []))
        for container in contract.get("containers", []):
            service = container.split(".")[0].removeprefix("gpucloud_")
            package = PACKAGES[service] / container.replace(".", "/")
            outside += [
                f"{container}.{path.stem}"
                for path in package.glob("*.py")
                if path.stem != "__init__" and path.stem not in roles
            ]
    return sorted(outside)


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


def test_every_module_of_a_feature_package_is_one_of_its_roles() -> None:
    outside = _outside_roles()
    assert outside == [], f"name these roles in the feature contract of pyproject.toml: {outside}"


def test_a_module_of_no_role_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a feature package with a module of no role is named."""
    feature = tmp_path / "gpucloud_instances" / "jobs"
    feature.mkdir(parents=True)
    for name in ("__init__", "api", "brand_new"):
        (feature / f"{name}.py").touch()
    monkeypatch.setitem(PACKAGES, "instances", tmp_path)
    assert _outside_roles() == ["gpucloud_instances.jobs.brand_new"]
