"""NVML through pynvml: the only module that imports it.

A field the GPU or driver does not support comes back as None rather than
failing the sample: an A10 has no NVLink, a GeForce card no ECC. A machine with
no driver or no GPU raises `NvmlUnavailable` with the reason, once, at open.
"""

from __future__ import annotations

import re
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


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def pod_uid_of(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The Kubernetes pod a process runs in, from its cgroup path (None outside pods)."""
    try:
        cgroup = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    match = _POD_UID.search(cgroup)
    return match.group(1).replace("_", "-") if match else None


class NvmlSource:
    def __init__(self) -> None:
        self._handles: list[Any] = []
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
        self._events = _maybe(pynvml.nvmlEventSetCreate)
        if self._events is not None:
            for handle in self._handles:
                _maybe(
                    pynvml.nvmlDeviceRegisterEvents,
                    handle,
                    pynvml.nvmlEventTypeXidCriticalError,
                    self._events,
                )

    def close(self) -> None:
        if self._events is not None:
            _maybe(pynvml.nvmlEventSetFree, self._events)
        _maybe(pynvml.nvmlShutdown)

    def inventory(self) -> list[GpuInventory]:
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
        xids = self.xids()
        samples = []
        for index, handle in enumerate(self._handles):
            whole = self._sample(index, handle, at, xids)
            devices = mig_devices(handle)
            samples += [mig_sample(whole, device) for device in devices] if devices else [whole]
        return samples

    def _sample(
        self, index: int, handle: Any, at: datetime, xids: dict[str, list[int]]
    ) -> GpuSample:
        uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
        rates = _maybe(pynvml.nvmlDeviceGetUtilizationRates, handle)
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
            pcie_tx_kibps=_float(
                _maybe(
                    pynvml.nvmlDeviceGetPcieThroughput,
                    handle,
                    pynvml.NVML_PCIE_UTIL_TX_BYTES,
                )
            ),
            pcie_rx_kibps=_float(
                _maybe(
                    pynvml.nvmlDeviceGetPcieThroughput,
                    handle,
                    pynvml.NVML_PCIE_UTIL_RX_BYTES,
                )
            ),
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
