"""The simulated node's stand-in for a pod's container: which addresses it serves (a
running pod's TCP ports, on loopback only) and the page it shows there, every value
from the pod escaped (standin.py)."""

from __future__ import annotations

from typing import Any

from gpucloud_agent.standin import page, served_ports
from gpucloud_libs.naming import INSTANCE_LABEL, TENANT_LABEL


def pod(
    *, phase: str = "Running", ip: str | None = "127.0.3.7", **container: Any
) -> dict[str, Any]:
    return {
        "metadata": {"labels": {INSTANCE_LABEL: "i-3f2a", TENANT_LABEL: "acme"}},
        "spec": {"nodeName": "sim-h100-0", "containers": [container]},
        "status": {"phase": phase, **({"podIP": ip} if ip else {})},
    }


# --- served ports ----------------------------------------------------------------------


def test_each_tcp_port_of_a_running_pod_is_served_at_its_address() -> None:
    ports = [{"containerPort": 8888}, {"containerPort": "2222", "protocol": "TCP"},
             {"containerPort": 5353, "protocol": "UDP"}]  # fmt: skip
    assert served_ports(pod(ports=ports)) == [("127.0.3.7", 8888), ("127.0.3.7", 2222)]


def test_a_pod_not_running_or_without_an_address_is_not_served() -> None:
    ports = [{"containerPort": 8888}]
    assert served_ports(pod(phase="Pending", ports=ports)) == []
    assert served_ports(pod(ip=None, ports=ports)) == []


def test_an_address_off_loopback_is_never_bound() -> None:
    assert served_ports(pod(ip="10.244.1.9", ports=[{"containerPort": 8888}])) == []
    assert served_ports(pod(ip="::1", ports=[{"containerPort": 80}])) == [("::1", 80)]


def test_a_pod_without_containers_or_ports_serves_nothing() -> None:
    assert served_ports(pod()) == []
    assert served_ports({"status": {"phase": "Running", "podIP": "127.0.0.9"}}) == []


# --- the page --------------------------------------------------------------------------


def test_the_page_says_what_would_run_in_the_pod() -> None:
    text = page(
        pod(image="jupyter/base-notebook", command=["start.sh"], args=["--port", "8888"],
            ports=[{"containerPort": 8888}],
            resources={"limits": {"nvidia.com/gpu": 2, "cpu": "8"}})
    )  # fmt: skip
    assert "<title>Simulated workload</title>" in text
    for row in (
        "<tr><th>Instance</th><td><code>i-3f2a</code></td></tr>",
        "<tr><th>Tenant</th><td><code>acme</code></td></tr>",
        "<tr><th>Image</th><td><code>jupyter/base-notebook</code></td></tr>",
        "<tr><th>Command</th><td><code>start.sh</code></td></tr>",
        "<tr><th>Arguments</th><td><code>--port 8888</code></td></tr>",
        "<tr><th>Ports</th><td><code>8888</code></td></tr>",
        "<tr><th>GPUs</th><td><code>2 x nvidia.com/gpu</code></td></tr>",
        "<tr><th>Node</th><td><code>sim-h100-0</code></td></tr>",
    ):
        assert row in text


def test_what_the_pod_leaves_out_is_named_as_such() -> None:
    text = page(pod(image="x"))
    assert "<th>Command</th><td><code>(the image&#x27;s own)</code>" in text
    assert "<th>Arguments</th><td><code>(none)</code>" in text
    assert "<th>Ports</th><td><code>(none)</code>" in text
    assert "<th>GPUs</th><td><code>(none)</code>" in text


def test_every_value_from_the_pod_is_escaped() -> None:
    text = page(pod(image="<script>alert(1)</script>", command=["echo", "a&b", '"q"']))
    assert "<script>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<code>echo a&amp;b &quot;q&quot;</code>" in text


def test_an_empty_pod_still_gets_a_page() -> None:
    text = page({})
    assert text.startswith("<!doctype html>")
    assert "<th>Instance</th><td><code></code>" in text
