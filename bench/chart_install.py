"""The Helm chart on the local API server: objects, `helm install --wait` and uninstall times.

Installs the chart into a fresh namespace (hooks left out: kwok starts no container,
so a hook Job would never finish), with the platform's pods on a kwok CPU node of its
own, RUNS times; prints the object count and the median times. The same install is
checked object by object in tests/e2e/test_chart_install.py.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import time
import uuid
from typing import Any

import yaml
from kubernetes_asyncio import client as k8s

from gpucloud_stack import fleet, layout, provision

from .common import kube_client, stack_env

CHART = layout.REPO_ROOT / "deploy" / "helm" / "gpucloud"
VALUES = (
    "identity.existingSecret=identity-keys", "identity.publicKeys.gateway=key",
    "identity.publicKeys.instances=key", "kafka.admin.existingSecret=kafka-admin",
    "image.repository=gpucloud", "image.tag=local", "agent.enabled=false",
    "ingress.tlsSecret=gpucloud-tls",
)  # fmt: skip


def parser() -> argparse.ArgumentParser:
    bench = argparse.ArgumentParser(prog="python -m bench chart", description=__doc__)
    bench.add_argument("--runs", type=int, default=3)
    return bench


async def main(args: argparse.Namespace) -> None:
    env = stack_env()
    helm = str(provision.ensure(provision.HELM, say=False) / "helm")
    kube = await kube_client(env)
    core = k8s.CoreV1Api(kube)
    pool = f"chart-bench-{uuid.uuid4().hex[:8]}"
    node: Any = fleet.cpu_node(pool, {"gpucloud.io/test-pool": pool})
    await core.create_node(node)
    installs, uninstalls, objects = [], [], 0
    try:
        for run in range(args.runs):
            namespace = f"{pool}-{run}"

            def helm_run(*argv: str, ns: str = namespace) -> str:
                return subprocess.run(
                    [helm, "--kubeconfig", env["GPUCLOUD_KUBECONFIG"], "--namespace", ns, *argv],
                    capture_output=True, text=True, check=True, timeout=300,
                ).stdout  # fmt: skip

            started = time.perf_counter()
            helm_run("install", "gcb", str(CHART), "--create-namespace", "--no-hooks", "--wait",
                     "--set", f"platform.nodeSelector.gpucloud\\.io/test-pool={pool}",
                     *(arg for value in VALUES for arg in ("--set", value)))  # fmt: skip
            installs.append(time.perf_counter() - started)
            objects = len([d for d in yaml.safe_load_all(helm_run("get", "manifest", "gcb")) if d])
            started = time.perf_counter()
            helm_run("uninstall", "gcb", "--wait")
            uninstalls.append(time.perf_counter() - started)
            await core.delete_namespace(namespace)
    finally:
        with contextlib.suppress(k8s.ApiException):
            await core.delete_node(pool)
        await kube.close()
    print(f"chart: {objects} objects (hooks and the agent's DaemonSet left out), {args.runs} runs")
    print(
        f"  helm install --wait (every Deployment's pods ready on kwok): median "
        f"{statistics.median(installs):.2f} s, max {max(installs):.2f} s"
    )
    print(f"  helm uninstall --wait: median {statistics.median(uninstalls):.2f} s")
