"""NVML through pynvml: the only module that imports it.

A field the GPU or driver does not support comes back as None rather than
failing the sample: an A10 has no NVLink, a GeForce card no ECC. A machine with
no driver or no GPU raises `NvmlUnavailable` with the reason, once, at open.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from gpucloud_libs.events import GpuInventory, GpuSample

T = TypeVar("T")
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)


class NvmlUnavailable(Exception):
    """No usable NVML here: no driver library, no GPU, or the driver refused."""


def _maybe(call: Callable[..., T], *args: Any) -> T | None:
    """`call(*args)`, or None where the GPU or driver does not support it."""
    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def pod_uid_of(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The Kubernetes pod a process runs in, from its cgroup path (None outside pods)."""
    try:
        cgroup = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    match = _POD_UID.search(cgroup)
    return match.group(1).replace("_", "-") if match else None


#: The PCIe byte counters: one call, no sampling window. (`nvmlDeviceGetPcieThroughput`
#: measures over 20 ms and blocks for it, twice a sample: 42 ms per GPU on an H100.)
_PCIE_COUNTERS = (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES)
#: How often the counters are read, off the sample path. They are 32-bit on an H100
#: and wrap every 4 GiB: read every 50 ms, a wrap is told apart up to 80 GiB/s, above
#: PCIe 5.0 x16's 64 GB/s. A read costs about 0.3 ms: 0.6 % of a core per GPU.
PCIE_READ_EVERY_S = 0.05
#: How often a GPU's MIG layout is read again besides at each inventory: a change
#: of mode needs a GPU reset, so it is rare, and the read costs 0.16 ms.
MIG_REFRESH_S = 60.0


def counter_delta(previous: int, current: int, width_bits: int) -> int:
    """Bytes counted between two readings of a counter that wraps at 2**width_bits."""
    return (current - previous) % (1 << width_bits)


def _width(value_type: int) -> int:
    return 32 if value_type == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT else 64


class PcieCounters:
    """Each GPU's PCIe bytes sent and received since start, as 64-bit totals kept by a
    thread that reads NVML's wrapping counters every `PCIE_READ_EVERY_S`. A sample
    reads the totals (no NVML call) and takes the rate from two of them."""

    def __init__(self, handles: list[Any]) -> None:
        self._handles = handles
        self._lock = threading.Lock()
        self._last: list[tuple[int, int] | None] = [None] * len(handles)
        #: (NVML's µs timestamp, tx bytes, rx bytes), or None where not counted.
        self._totals: list[tuple[int, int, int] | None] = [None] * len(handles)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pcie-counters", daemon=True)

    def start(self) -> None:
        self._read()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1)

    def totals(self, index: int) -> tuple[int, int, int] | None:
        with self._lock:
            return self._totals[index]

    def _run(self) -> None:
        while not self._stop.wait(PCIE_READ_EVERY_S):
            self._read()

    def _read(self) -> None:
        for index, handle in enumerate(self._handles):
            values = _maybe(pynvml.nvmlDeviceGetFieldValues, handle, list(_PCIE_COUNTERS))
            if values is None or any(v.nvmlReturn != pynvml.NVML_SUCCESS for v in values):
                with self._lock:  # a gap: the next reading starts the count afresh
                    self._last[index] = None
                continue
            tx, rx = values[0].value.ullVal, values[1].value.ullVal
            at = max(values[0].timestamp, values[1].timestamp)
            width = _width(values[0].valueType)
            with self._lock:
                last, total = self._last[index], self._totals[index]
                self._last[index] = (tx, rx)
                if last is None or total is None:
                    self._totals[index] = (at, *(total[1:] if total else (0, 0)))
                else:
                    self._totals[index] = (
                        at,
                        total[1] + counter_delta(last[0], tx, width),
                        total[2] + counter_delta(last[1], rx, width),
                    )


class PcieRates:
    """One GPU's PCIe transmit and receive rates in KiB/s between two samples."""

    def __init__(self) -> None:
        self._last: tuple[int, int, int] | None = None

    def update(self, totals: tuple[int, int, int] | None) -> tuple[float | None, float | None]:
        last, self._last = self._last, totals
        if totals is None or last is None or totals[0] <= last[0]:
            return None, None  # not counted, the first sample, or no new reading yet
        seconds = (totals[0] - last[0]) / 1e6
        return (totals[1] - last[1]) / 1024 / seconds, (totals[2] - last[2]) / 1024 / seconds


class NvmlSource:
    def __init__(self) -> None:
        self._handles: list[Any] = []
        self._uuids: list[str] = []
        self._pcie: list[PcieRates] = []
        self._counters: PcieCounters | None = None
        #: Each GPU's MIG devices (none when not in MIG mode), and when last read.
        self._mig: list[list[Any]] = []
        self._mig_read_at = 0.0
        self._events: Any = None

    def open(self) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            raise NvmlUnavailable(f"NVML could not start: {error}") from error
        except OSError as error:  # the library itself is missing
            raise NvmlUnavailable(f"NVML library not found: {error}") from error
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            pynvml.nvmlShutdown()
            raise NvmlUnavailable("NVML started, but this machine has no NVIDIA GPU")
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]
        self._uuids = [_text(pynvml.nvmlDeviceGetUUID(handle)) for handle in self._handles]
        self._pcie = [PcieRates() for _ in self._handles]
        self._counters = PcieCounters(self._handles)
        self._counters.start()
        self._read_mig()
        self._events = _maybe(pynvml.nvmlEventSetCreate)
        if self._events is not None:
            for handle in self._handles:
                _maybe(
                    pynvml.nvmlDeviceRegisterEvents,
                    handle,
                    pynvml.nvmlEventTypeXidCriticalError,
                    self._events,
                )

    @property
    def listens_for_xids(self) -> bool:
        """Whether the driver took the XID event set (it may refuse an unprivileged agent)."""
        return self._events is not None

    def close(self) -> None:
        if self._counters is not None:
            self._counters.stop()
        if self._events is not None:
            _maybe(pynvml.nvmlEventSetFree, self._events)
        _maybe(pynvml.nvmlShutdown)

    def _read_mig(self) -> None:
        self._mig = [mig_devices(handle) for handle in self._handles]
        self._mig_read_at = time.monotonic()

    def inventory(self) -> list[GpuInventory]:
        self._read_mig()
        driver = _maybe(pynvml.nvmlSystemGetDriverVersion)
        cuda = _maybe(pynvml.nvmlSystemGetCudaDriverVersion_v2)
        cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None
        gpus = []
        for index, handle in enumerate(self._handles):
            mig = _maybe(pynvml.nvmlDeviceGetMigMode, handle)
            links = [
                _maybe(pynvml.nvmlDeviceGetNvLinkState, handle, link)
                for link in range(pynvml.NVML_NVLINK_MAX_LINKS)
            ]
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                GpuInventory(
                    gpu_uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    index=index,
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    serial=_text(serial)
                    if (serial := _maybe(pynvml.nvmlDeviceGetSerial, handle))
                    else None,
                    memory_total_mib=memory.total / 2**20,
                    driver_version=_text(driver) if driver else None,
                    cuda_version=cuda_version,
                    pcie_gen_current=_maybe(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
                    pcie_gen_max=_maybe(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
                    pcie_width_current=_maybe(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
                    pcie_width_max=_maybe(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
                    mig_mode=bool(mig[0]) if mig else None,
                    nvlink_links_active=sum(1 for state in links if state)
                    if any(s is not None for s in links)
                    else None,
                )
            )
        return gpus

    def xids(self, timeout_ms: int = 0) -> dict[str, list[int]]:
        """XID errors since the last call, by GPU UUID (never blocks longer than timeout)."""
        found: dict[str, list[int]] = {}
        if self._events is None:
            return found
        while True:
            try:
                event = pynvml.nvmlEventSetWait_v2(self._events, timeout_ms)
            except pynvml.NVMLError:  # timeout: nothing (more) pending
                return found
            uuid = _text(pynvml.nvmlDeviceGetUUID(event.device))
            found.setdefault(uuid, []).append(int(event.eventData))
            timeout_ms = 0

    def processes(self) -> dict[str, list[int]]:
        """PIDs of compute processes, by GPU UUID."""
        found: dict[str, list[int]] = {}
        for handle in self._handles:
            # A MIG device runs its own processes; its parent lists none of them.
            for device in [handle, *mig_devices(handle)]:
                uuid = _text(pynvml.nvmlDeviceGetUUID(device))
                running = _maybe(pynvml.nvmlDeviceGetComputeRunningProcesses, device) or []
                found[uuid] = [int(process.pid) for process in running]
        return found

    def sample(self, at: datetime | None = None) -> list[GpuSample]:
        """One sample per GPU; a GPU in MIG mode is read as its MIG devices instead, each
        with the physical GPU's health readings (NVML reads those per GPU only)."""
        at = at or datetime.now(UTC)
        if time.monotonic() - self._mig_read_at >= MIG_REFRESH_S:
            self._read_mig()
        xids = self.xids()
        samples = []
        for index, handle in enumerate(self._handles):
            whole = self._sample(index, handle, at, xids)
            devices = self._mig[index]
            samples += [mig_sample(whole, device) for device in devices] if devices else [whole]
        return samples

    def _sample(
        self, index: int, handle: Any, at: datetime, xids: dict[str, list[int]]
    ) -> GpuSample:
        uuid = self._uuids[index]
        rates = _maybe(pynvml.nvmlDeviceGetUtilizationRates, handle)
        totals = self._counters.totals(index) if self._counters else None
        pcie_tx, pcie_rx = self._pcie[index].update(totals)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        power = _maybe(pynvml.nvmlDeviceGetPowerUsage, handle)
        return GpuSample(
            gpu_uuid=uuid,
            index=index,
            at=at,
            utilization_gpu_pct=float(rates.gpu) if rates else 0.0,
            utilization_memory_pct=float(rates.memory) if rates else 0.0,
            memory_used_mib=memory.used / 2**20,
            memory_total_mib=memory.total / 2**20,
            temperature_c=float(
                _maybe(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU) or 0
            ),
            power_w=(power or 0) / 1000,
            sm_clock_mhz=_maybe(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
            memory_clock_mhz=_maybe(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM),
            throttle_reasons=_maybe(pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle) or 0,
            ecc_corrected=_maybe(
                pynvml.nvmlDeviceGetTotalEccErrors,
                handle,
                pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            )
            or 0,
            ecc_uncorrected=_maybe(
                pynvml.nvmlDeviceGetTotalEccErrors,
                handle,
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            )
            or 0,
            pcie_tx_kibps=pcie_tx,
            pcie_rx_kibps=pcie_rx,
            xid_errors=tuple(xids.get(uuid, ())),
        )


#: `nvmlDeviceGetName` of a MIG device ends with its profile: "... MIG 1g.5gb".
_MIG_PROFILE = re.compile(r"MIG (\S+)$")


def mig_devices(handle: Any) -> list[Any]:
    """The MIG devices of a GPU in MIG mode; none for a GPU that is not (or cannot be)."""
    mode = _maybe(pynvml.nvmlDeviceGetMigMode, handle)
    if not mode or mode[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
        return []
    devices = []
    for slot in range(_maybe(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
        device = _maybe(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
        if device is not None:  # an empty slot
            devices.append(device)
    return devices


def mig_sample(whole: GpuSample, device: Any) -> GpuSample:
    """A MIG device's sample: its own UUID, profile and memory; engine activity where the
    driver reports it per device, else the GPU's; health readings the GPU's."""
    memory = pynvml.nvmlDeviceGetMemoryInfo(device)
    rates = _maybe(pynvml.nvmlDeviceGetUtilizationRates, device)
    match = _MIG_PROFILE.search(_text(_maybe(pynvml.nvmlDeviceGetName, device) or ""))
    return whole.model_copy(
        update={
            "gpu_uuid": _text(pynvml.nvmlDeviceGetUUID(device)),
            "parent_gpu_uuid": whole.gpu_uuid,
            "slice": match.group(1) if match else "mig",
            "memory_used_mib": memory.used / 2**20,
            "memory_total_mib": memory.total / 2**20,
            **(
                {
                    "utilization_gpu_pct": float(rates.gpu),
                    "utilization_memory_pct": float(rates.memory),
                }
                if rates
                else {}
            ),
        }
    )
