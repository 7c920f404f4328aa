"""A fake of the pynvml module (no GPU can exist where the tests run).

It mirrors pynvml's surface the probe uses: NVMLError with `.value`, the NVML_* constants with
pynvml's numeric values, getters that return pynvml-shaped structs, and NotSupported where a
GeForce card has no ECC.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

MIB = 1024 * 1024


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    total_mib: float = 81559
    used_mib: float = 1024
    util_gpu: int = 37
    util_mem: int = 12
    temp_c: int = 41
    power_mw: int = 123456
    ecc: dict[str, int] | None = field(default_factory=lambda: {
        "mode": 1, "vol_cor": 2, "vol_unc": 0, "agg_cor": 7, "agg_unc": 1})
    remapped: tuple[int, int, int, int] | None = (1, 0, 0, 0)
    processes: list[tuple[int, int | None]] = field(default_factory=lambda: [(4242, 900 * MIB)])
    lost: bool = False


class FakeNvml:
    """The pynvml module's functions and constants under pynvml's own names (camelCase: the noqa
    on each), so the probe calls it exactly as it calls pynvml."""

    NVMLError = FakeNVMLError
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_TIMEOUT = 10
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    nvmlEventTypeXidCriticalError = 8  # noqa: N815

    def __init__(self, gpus: list[FakeGpu], *, init_error: int | None = None,
                 xids: list[tuple[int, int]] | None = None) -> None:
        self.gpus, self.init_error = gpus, init_error
        self.xids = list(xids or [])
        self.inits = self.shutdowns = 0
        self.registered: list[int] = []

    # -- lifecycle
    def nvmlInit(self) -> None:  # noqa: N802
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return "550.54.15"

    def nvmlSystemGetNVMLVersion(self) -> str:  # noqa: N802
        return "12.550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        return 12040

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    # -- devices
    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        if self.gpus[i].lost:
            raise FakeNVMLError(self.NVML_ERROR_GPU_IS_LOST)
        return i

    def nvmlDeviceGetIndex(self, handle: int) -> int:  # noqa: N802
        return handle

    def nvmlDeviceGetName(self, h: int) -> str:  # noqa: N802
        return self.gpus[h].name

    def nvmlDeviceGetUUID(self, h: int) -> str:  # noqa: N802
        return self.gpus[h].uuid

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:  # noqa: N802
        g = self.gpus[h]
        return SimpleNamespace(total=int(g.total_mib * MIB), used=int(g.used_mib * MIB),
                               free=int((g.total_mib - g.used_mib) * MIB))

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:  # noqa: N802
        return SimpleNamespace(gpu=self.gpus[h].util_gpu, memory=self.gpus[h].util_mem)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:  # noqa: N802
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self.gpus[h].temp_c

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:  # noqa: N802
        return self.gpus[h].power_mw

    def _ecc(self, h: int) -> dict[str, int]:
        ecc = self.gpus[h].ecc
        if ecc is None:
            raise FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return ecc

    def nvmlDeviceGetEccMode(self, h: int) -> list[int]:  # noqa: N802
        mode = self._ecc(h)["mode"]
        return [mode, mode]

    def nvmlDeviceGetTotalEccErrors(self, h: int, err_type: int, counter: int) -> int:  # noqa: N802
        key = ("vol" if counter == self.NVML_VOLATILE_ECC else "agg") + (
            "_unc" if err_type == self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "_cor")
        return self._ecc(h)[key]

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:  # noqa: N802
        if self.gpus[h].remapped is None:
            raise FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return self.gpus[h].remapped

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:  # noqa: N802
        return [SimpleNamespace(pid=pid, usedGpuMemory=used)
                for pid, used in self.gpus[h].processes]

    # -- events
    def nvmlEventSetCreate(self) -> str:  # noqa: N802
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: int, types: int, event_set: str) -> None:  # noqa: N802
        assert types == self.nvmlEventTypeXidCriticalError
        self.registered.append(h)

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> Any:  # noqa: N802
        if not self.xids:
            raise FakeNVMLError(self.NVML_ERROR_TIMEOUT)
        index, xid = self.xids.pop(0)
        return SimpleNamespace(device=index, eventData=xid, eventType=8)

    def nvmlEventSetFree(self, event_set: str) -> None:  # noqa: N802
        pass


@pytest.fixture
def h100() -> FakeGpu:
    return FakeGpu()


@pytest.fixture
def geforce() -> FakeGpu:
    # A GeForce card: no ECC memory, so NVML answers NotSupported for ECC and row remapping.
    return FakeGpu(name="NVIDIA GeForce RTX 4090", uuid="GPU-11111111-1111-1111-1111-1111",
                   total_mib=24564, used_mib=20000, util_gpu=99, util_mem=60, temp_c=70,
                   power_mw=400000, ecc=None, remapped=None, processes=[(777, None)])


@pytest.fixture
def make_nvml():
    return FakeNvml
