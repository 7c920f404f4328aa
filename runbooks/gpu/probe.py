"""GPU probe through NVML (pynvml, PyPI nvidia-ml-py): memory, utilization, temperature, ECC,
row remapping, Xid events, processes.

The NVML module is injected (`nvml=`) so tests use a fake: no GPU exists where CI runs. This
module needs only the standard library and pynvml (no pydantic), so it also runs on a bare GPU
machine (benchmarks/gpu_probe_device.py).

What NVML cannot give, and the probe says so in `unsupported` instead of guessing:
- Xid errors that happened before the probe: NVML only delivers Xid events that occur while a
  process is registered for them (nvmlDeviceRegisterEvents). Past Xids are only in the kernel log
  ("NVRM: Xid ..."); runbooks/gpu/xid.py parses that text when given it.
- ECC counters and row remapping on GPUs without ECC memory (GeForce: NVML_ERROR_NOT_SUPPORTED).
- Per-process memory inside a container that does not share the host PID namespace (NVML
  returns the processes but the pids are the host's).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

MIB = 1024 * 1024


@dataclass
class XidEvent:
    gpu_index: int
    xid: int
    meaning: str


@dataclass
class GpuProcess:
    pid: int
    used_memory_mib: float | None


@dataclass
class GpuState:
    index: int
    name: str = ""
    uuid: str = ""
    lost: bool = False  # NVML_ERROR_GPU_IS_LOST: the GPU fell off the bus (Xid 79)
    memory_total_mib: float | None = None
    memory_used_mib: float | None = None
    memory_free_mib: float | None = None
    utilization_gpu_pct: int | None = None
    utilization_memory_pct: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    ecc_enabled: bool | None = None
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    remapped_rows_corrected: int | None = None
    remapped_rows_uncorrected: int | None = None
    remapping_pending: bool | None = None
    remapping_failed: bool | None = None
    processes: list[GpuProcess] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)


@dataclass
class ProbeResult:
    available: bool
    reason: str
    driver_version: str = ""
    cuda_driver_version: str = ""
    nvml_version: str = ""
    gpus: list[GpuState] = field(default_factory=list)
    xid_events: list[XidEvent] = field(default_factory=list)
    xid_watch_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        if not self.available:
            return self.reason
        lines = [f"{len(self.gpus)} GPU(s); driver {self.driver_version}, CUDA driver "
                 f"{self.cuda_driver_version}, NVML {self.nvml_version}"]
        for g in self.gpus:
            if g.lost:
                lines.append(f"  GPU {g.index}: LOST (fell off the bus; see Xid 79) {g.uuid}")
                continue
            lines.append(
                f"  GPU {g.index}: {g.name} | memory {_n(g.memory_used_mib)}/"
                f"{_n(g.memory_total_mib)} MiB used, {_n(g.memory_free_mib)} MiB free | "
                f"util {_n(g.utilization_gpu_pct)}% (mem {_n(g.utilization_memory_pct)}%) | "
                f"{_n(g.temperature_c)} C | {_n(g.power_w)} W | ECC "
                f"{'on' if g.ecc_enabled else 'off' if g.ecc_enabled is False else 'n/a'} "
                f"uncorrected volatile {_n(g.ecc_volatile_uncorrected)} aggregate "
                f"{_n(g.ecc_aggregate_uncorrected)} | remapped rows unc "
                f"{_n(g.remapped_rows_uncorrected)} pending {_n(g.remapping_pending)} | "
                f"{len(g.processes)} process(es)")
            if g.unsupported:
                lines.append(f"    not available from NVML: {', '.join(g.unsupported)}")
        xids = ", ".join(f"GPU {e.gpu_index} Xid {e.xid} ({e.meaning})" for e in self.xid_events)
        lines.append(f"  Xid events in a {self.xid_watch_s:g} s watch: {xids or 'none'}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


def _n(value: Any) -> str:
    return "n/a" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


# Xid codes an on-call engineer meets most (NVIDIA "XID Errors" documentation, r555).
XID_MEANINGS = {
    13: "graphics engine exception (application fault)",
    31: "GPU memory page fault (application fault)",
    43: "GPU stopped processing (application fault)",
    45: "preemptive cleanup, due to previous errors",
    48: "double-bit ECC error (reset the GPU)",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus (drain the node, reboot)",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (restart the application)",
    95: "uncontained ECC error (reset the GPU)",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def xid_meaning(xid: int) -> str:
    return XID_MEANINGS.get(xid, "see NVIDIA's Xid catalog")


def load_nvml() -> Any:
    """The real pynvml module, or None when nvidia-ml-py is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Reader:
    """Calls NVML getters, turning NVMLError into an `unsupported` entry (never hiding others)."""

    def __init__(self, nvml: Any, state: GpuState) -> None:
        self.nvml, self.state = nvml, state

    def get(self, label: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            self.state.unsupported.append(f"{label} ({_error_name(self.nvml, exc)})")
            return None


def _error_name(nvml: Any, exc: Exception) -> str:
    code = getattr(exc, "value", None)
    names = {
        getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3): "not supported",
        getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4): "no permission",
        getattr(nvml, "NVML_ERROR_GPU_IS_LOST", 15): "GPU is lost",
    }
    return names.get(code, str(exc) or type(exc).__name__)


def _read_gpu(nvml: Any, index: int) -> GpuState:
    state = GpuState(index=index)
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError as exc:
        state.lost = getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_GPU_IS_LOST", 15)
        state.unsupported.append(f"handle ({_error_name(nvml, exc)})")
        return state
    r = _Reader(nvml, state)
    state.name = _text(r.get("name", nvml.nvmlDeviceGetName, handle) or "")
    state.uuid = _text(r.get("uuid", nvml.nvmlDeviceGetUUID, handle) or "")
    mem = r.get("memory", nvml.nvmlDeviceGetMemoryInfo, handle)
    if mem is not None:
        state.memory_total_mib = mem.total / MIB
        state.memory_used_mib = mem.used / MIB
        state.memory_free_mib = mem.free / MIB
    util = r.get("utilization", nvml.nvmlDeviceGetUtilizationRates, handle)
    if util is not None:
        state.utilization_gpu_pct, state.utilization_memory_pct = util.gpu, util.memory
    state.temperature_c = r.get("temperature", nvml.nvmlDeviceGetTemperature, handle,
                                nvml.NVML_TEMPERATURE_GPU)
    power_mw = r.get("power", nvml.nvmlDeviceGetPowerUsage, handle)
    state.power_w = None if power_mw is None else power_mw / 1000
    mode = r.get("ecc mode", nvml.nvmlDeviceGetEccMode, handle)
    if mode is not None:
        state.ecc_enabled = bool(mode[0])
        if state.ecc_enabled:
            unc, cor = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, \
                nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
            vol, agg = nvml.NVML_VOLATILE_ECC, nvml.NVML_AGGREGATE_ECC
            total = nvml.nvmlDeviceGetTotalEccErrors
            state.ecc_volatile_corrected = r.get("ecc volatile corrected", total, handle, cor, vol)
            state.ecc_volatile_uncorrected = r.get("ecc volatile uncorrected", total, handle,
                                                   unc, vol)
            state.ecc_aggregate_corrected = r.get("ecc aggregate corrected", total, handle,
                                                  cor, agg)
            state.ecc_aggregate_uncorrected = r.get("ecc aggregate uncorrected", total, handle,
                                                    unc, agg)
    rows = r.get("remapped rows", nvml.nvmlDeviceGetRemappedRows, handle)
    if rows is not None:
        (state.remapped_rows_corrected, state.remapped_rows_uncorrected,
         pending, failed) = rows
        state.remapping_pending, state.remapping_failed = bool(pending), bool(failed)
    procs = r.get("processes", nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
    for p in procs:
        used = getattr(p, "usedGpuMemory", None)
        state.processes.append(GpuProcess(pid=p.pid, used_memory_mib=None if used is None
                                          else used / MIB))
    return state


def _watch_xids(nvml: Any, count: int, watch_s: float, notes: list[str],
                clock: Callable[[], float]) -> list[XidEvent]:
    """Xid events that occur during the watch window (NVML has no history of earlier ones)."""
    events: list[XidEvent] = []
    try:
        event_set = nvml.nvmlEventSetCreate()
    except nvml.NVMLError as exc:
        notes.append(f"Xid watch unavailable ({_error_name(nvml, exc)})")
        return events
    try:
        for i in range(count):
            try:
                nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(i),
                                              nvml.nvmlEventTypeXidCriticalError, event_set)
            except nvml.NVMLError as exc:
                notes.append(f"GPU {i}: Xid events unavailable ({_error_name(nvml, exc)})")
        deadline = clock() + watch_s
        while (left_ms := int((deadline - clock()) * 1000)) > 0 and len(events) < 100:
            try:
                data = nvml.nvmlEventSetWait_v2(event_set, left_ms)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) != getattr(nvml, "NVML_ERROR_TIMEOUT", 10):
                    notes.append(f"Xid wait failed ({_error_name(nvml, exc)})")
                break
            xid = int(data.eventData)
            events.append(XidEvent(gpu_index=_index_of(nvml, data.device), xid=xid,
                                   meaning=xid_meaning(xid)))
    finally:
        nvml.nvmlEventSetFree(event_set)
    return events


def _index_of(nvml: Any, handle: Any) -> int:
    try:
        return int(nvml.nvmlDeviceGetIndex(handle))
    except nvml.NVMLError:
        return -1


def probe(nvml: Any = None, *, xid_watch_s: float = 0.0, use_real: bool = True,
          clock: Callable[[], float] = time.monotonic) -> ProbeResult:
    """Read every GPU NVML sees. No GPU (no driver, no library, no device) is a result, not an
    exception: available=False with the reason."""
    if nvml is None and use_real:
        nvml = load_nvml()
    if nvml is None:
        return ProbeResult(available=False, reason="no GPU probe: the nvidia-ml-py package "
                           "(module pynvml) is not installed; pip install nvidia-ml-py")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return ProbeResult(available=False, reason=_no_gpu_reason(nvml, exc))
    try:
        result = ProbeResult(
            available=True, reason="",
            driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
            nvml_version=_text(nvml.nvmlSystemGetNVMLVersion()),
            cuda_driver_version=_cuda_version(nvml),
        )
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            result.available = False
            result.reason = "no GPU: the NVIDIA driver is loaded but NVML sees 0 devices"
            return result
        result.gpus = [_read_gpu(nvml, i) for i in range(count)]
        result.xid_watch_s = xid_watch_s
        if xid_watch_s > 0:
            result.xid_events = _watch_xids(nvml, count, xid_watch_s, result.notes, clock)
        result.notes.append("Xids from before this probe are only in the kernel log "
                            "(dmesg | grep 'NVRM: Xid'); pass --kernel-log to parse one")
        return result
    finally:
        nvml.nvmlShutdown()


def _cuda_version(nvml: Any) -> str:
    try:
        v = int(nvml.nvmlSystemGetCudaDriverVersion())
    except nvml.NVMLError:
        return ""
    return f"{v // 1000}.{v % 1000 // 10}"


def _no_gpu_reason(nvml: Any, exc: Exception) -> str:
    code = getattr(exc, "value", None)
    if code == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
        return ("no GPU: the NVML library (libnvidia-ml.so.1) is not on this machine, so there "
                "is no NVIDIA driver; run the probe on a GPU node (or in a pod with "
                "nvidia.com/gpu)")
    if code == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9):
        return ("no GPU: the NVIDIA kernel driver is not loaded (nvidia.ko); check "
                "`lsmod | grep nvidia` and the GPU operator's driver pod")
    if code == getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4):
        return "no GPU access: NVML denied permission; run as a user that may open /dev/nvidia*"
    return f"no GPU: NVML failed to initialise ({_error_name(nvml, exc)})"
