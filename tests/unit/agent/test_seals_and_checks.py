"""What the agent vouches for and reports without a GPU or a server: the seal on each
node's reports (seals.py), a missing ServiceAccount token failing before any request,
the lines `--check` prints (check.py), and which pod a GPU process runs in, read from
its cgroup (nvml.pod_uid_of, node_telemetry.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpucloud_agent.check import Outcome, _attribution
from gpucloud_agent.node_telemetry import NodeTelemetry
from gpucloud_agent.nvml import NvmlSource, pod_uid_of
from gpucloud_agent.seals import FetchedKeySealer, KeyUnavailable, SecretSealer
from gpucloud_libs.events import GpuSample, NodeInventory, TelemetryBatch
from gpucloud_libs.node_seals import genuine, node_key

AT = datetime(2026, 11, 27, tzinfo=UTC)
SECRET = "telemetry-secret-0123456789abcdef0123"
POD = "7c0e4a2b-1f3d-4c5e-8a9b-0d1e2f3a4b5c"


def batch(node: str, utilization: float = 50.0) -> TelemetryBatch:
    sample = GpuSample(
        gpu_uuid="GPU-0", index=0, at=AT, utilization_gpu_pct=utilization,
        utilization_memory_pct=0, memory_used_mib=0, memory_total_mib=81_559,
        temperature_c=40, power_w=70,
    )  # fmt: skip
    return TelemetryBatch(node=node, source="simulated", samples=(sample,))


# --- seals -----------------------------------------------------------------------------


async def test_a_simulated_nodes_report_is_sealed_with_that_nodes_key() -> None:
    sealed = await SecretSealer(SECRET)(batch("n1"))
    assert sealed.mac != ""
    assert genuine(node_key(SECRET, "n1"), sealed)
    assert not genuine(node_key(SECRET, "n2"), sealed)
    assert not genuine(node_key("another-secret-0123456789abcdef01", "n1"), sealed)


async def test_a_seal_covers_the_readings_so_a_changed_one_is_caught() -> None:
    sealed = await SecretSealer(SECRET)(batch("n1", utilization=50.0))
    forged = sealed.model_copy(update={"samples": batch("n1", utilization=0.0).samples})
    assert not genuine(node_key(SECRET, "n1"), forged)


async def test_sealing_leaves_the_report_as_it_was_but_its_seal() -> None:
    report = NodeInventory(node="n1", source="simulated", at=AT)
    sealed = await SecretSealer(SECRET)(report)
    assert isinstance(sealed, NodeInventory)
    assert sealed.model_copy(update={"mac": ""}) == report
    assert report.mac == ""  # the original is untouched


async def test_each_nodes_reports_are_sealed_alike_and_apart_from_others() -> None:
    sealer = SecretSealer(SECRET)
    first, again = await sealer(batch("n1")), await sealer(batch("n1"))
    assert first.mac == again.mac
    assert (await sealer(batch("n2"))).mac != first.mac


async def test_without_its_token_a_real_node_gets_no_key_and_seals_nothing(tmp_path: Path) -> None:
    token = tmp_path / "token"
    sealer = FetchedKeySealer("n1", "http://127.0.0.1:9/", token_path=str(token))
    with pytest.raises(KeyUnavailable, match=f"no ServiceAccount token at {token}"):
        await sealer(batch("n1"))
    with pytest.raises(KeyUnavailable, match="No such file or directory"):
        await sealer.fetch()


async def test_a_token_path_that_is_a_directory_is_no_token(tmp_path: Path) -> None:
    sealer = FetchedKeySealer("n1", "http://127.0.0.1:9", token_path=str(tmp_path))
    with pytest.raises(KeyUnavailable, match="no ServiceAccount token at"):
        await sealer.fetch()


# --- --check's lines -------------------------------------------------------------------


def test_a_check_that_holds_is_one_ok_line_with_the_name_aligned() -> None:
    assert Outcome("gpus", True, "8 x NVIDIA H100").line() == "ok   gpus        8 x NVIDIA H100"


def test_a_failed_check_names_its_fix_on_a_line_below() -> None:
    line = Outcome("driver", False, "NVML could not start", "install the driver").line()
    assert line.splitlines() == [
        "FAIL driver      NVML could not start",
        "                 fix: install the driver",
    ]


def test_a_failed_check_without_a_fix_is_one_line_and_a_held_one_never_shows_it() -> None:
    assert Outcome("kafka", False, "refused").line() == "FAIL kafka       refused"
    assert Outcome("kafka", True, "sees telemetry", "unused").line() == (
        "ok   kafka       sees telemetry"
    )


def test_a_name_longer_than_the_column_pushes_the_detail_along() -> None:
    assert Outcome("attribution", True, "x").line() == "ok   attribution x"


def test_with_no_gpu_process_attribution_holds_where_cgroups_are_readable() -> None:
    outcome = _attribution(NvmlSource())  # an unopened source lists no process
    readable = Path("/proc/self/cgroup").is_file()
    assert (outcome.name, outcome.ok) == ("attribution", readable)
    assert outcome.detail == (
        "no GPU process running now; cgroups are readable"
        if readable
        else "/proc/self/cgroup is not readable"
    )


# --- which pod a process runs in -------------------------------------------------------


def proc(tmp_path: Path, pid: int, cgroup: str) -> Path:
    (tmp_path / str(pid)).mkdir()
    (tmp_path / str(pid) / "cgroup").write_text(cgroup)
    return tmp_path


@pytest.mark.parametrize(
    "cgroup",
    [
        f"0::/kubepods/burstable/pod{POD}/0123abcd\n",  # cgroupfs driver
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD.replace('-', '_')}"
        ".slice/cri-containerd-0123abcd.scope\n",  # systemd driver
        f"12:memory:/kubepods/besteffort/pod{POD}/c1\n11:cpu:/kubepods/besteffort/pod{POD}/c1\n",
    ],
)
def test_a_processs_pod_is_read_from_its_cgroup_under_either_driver(
    tmp_path: Path, cgroup: str
) -> None:
    assert pod_uid_of(4242, proc(tmp_path, 4242, cgroup)) == POD


def test_a_process_outside_pods_or_gone_has_no_pod(tmp_path: Path) -> None:
    root = proc(tmp_path, 1, "0::/system.slice/containerd.service\n")
    assert pod_uid_of(1, root) is None
    assert pod_uid_of(2, root) is None  # exited since it was listed


def test_a_pod_id_must_be_a_whole_uuid(tmp_path: Path) -> None:
    assert pod_uid_of(7, proc(tmp_path, 7, "0::/kubepods/pod7c0e4a2b-1f3d/c\n")) is None


# --- a real node's telemetry source ----------------------------------------------------


async def test_a_nodes_source_announces_its_node_once() -> None:
    source = NodeTelemetry("gpu-node-1", kube=None)
    assert source.nodes() == ["gpu-node-1"]
    assert await source.nodes_added() == ["gpu-node-1"]
    assert await source.nodes_added() == []


async def test_without_kubernetes_no_gpu_is_attributed() -> None:
    assert await NodeTelemetry("gpu-node-1", kube=None)._attribution() == {}
