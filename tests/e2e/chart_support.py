"""The Helm chart as Helm itself sees it (Helm is built by the stack's provisioning)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from gpucloud_stack import layout, provision

CHART = layout.REPO_ROOT / "deploy" / "helm" / "gpucloud"

#: The values the chart refuses to render without.
REQUIRED = (
    "identity.existingSecret=identity-keys",
    "identity.publicKeys.gateway=gateway-public-key",
    "identity.publicKeys.instances=instances-public-key",
    "kafka.admin.existingSecret=kafka-admin",
    "ingress.tlsSecret=gpucloud-tls",
)


def helm() -> Path:
    return provision.ensure(provision.HELM, say=False) / "helm"


def render_chart(release: str, namespace: str, *values: str) -> list[dict[str, Any]]:
    """The chart's objects as Helm renders them for `release` in `namespace`."""
    done = subprocess.run(
        [str(helm()), "template", release, str(CHART), "--namespace", namespace,
         *(arg for value in (*REQUIRED, *values) for arg in ("--set", value))],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]
