"""GPU probe against a fake of NVML, and against the real pynvml on this GPU-less machine."""

from __future__ import annotations

import pytest

from runbooks.gpu.probe import probe
from runbooks.gpu.xid import parse_kernel_log


def test_this_machine_reports_no_gpu_cleanly() -> None:
    pytest.importorskip("pynvml")  # nvidia-ml-py is a core dependency
    result = probe()  # the real pynvml; no libnvidia-ml.so.1 exists here
    assert result.available is False
    assert result.gpus == []
    assert result.reason.startswith("no GPU: the NVML library (libnvidia-ml.so.1) is not on "
                                    "this machine")
    assert result.summary() == result.reason


def test_reads_every_field(make_nvml, h100, geforce) -> None:
    nvml = make_nvml([h100, geforce])
    r = probe(nvml)
    assert r.available and r.driver_version == "550.54.15" and r.cuda_driver_version == "12.4"
    a, b = r.gpus
    assert (a.name, a.memory_total_mib, a.memory_used_mib, a.memory_free_mib) == (
        "NVIDIA H100 80GB HBM3", 81559, 1024, 80535)
    assert (a.utilization_gpu_pct, a.utilization_memory_pct, a.temperature_c, a.power_w) == (
        37, 12, 41, 123.456)
    assert (a.ecc_enabled, a.ecc_volatile_corrected, a.ecc_volatile_uncorrected,
            a.ecc_aggregate_corrected, a.ecc_aggregate_uncorrected) == (True, 2, 0, 7, 1)
    assert (a.remapped_rows_corrected, a.remapped_rows_uncorrected, a.remapping_pending) == (
        1, 0, False)
    assert [(p.pid, p.used_memory_mib) for p in a.processes] == [(4242, 900)]
    assert a.unsupported == []
    # GeForce: no ECC memory. The probe says so instead of reporting zeros.
    assert b.ecc_enabled is None and b.ecc_volatile_uncorrected is None
    assert b.unsupported == ["ecc mode (not supported)", "remapped rows (not supported)"]
    assert [(p.pid, p.used_memory_mib) for p in b.processes] == [(777, None)]
    assert nvml.inits == nvml.shutdowns == 1
    text = r.summary()
    assert "GPU 1: NVIDIA GeForce RTX 4090 | memory 20000/24564 MiB used, 4564 MiB free" in text
    assert "not available from NVML: ecc mode (not supported)" in text


def test_lost_gpu(make_nvml, h100) -> None:
    lost = type(h100)(lost=True, uuid="GPU-dead")
    r = probe(make_nvml([h100, lost]))
    assert r.gpus[1].lost and r.gpus[1].unsupported == ["handle (GPU is lost)"]
    assert "GPU 1: LOST (fell off the bus; see Xid 79)" in r.summary()


@pytest.mark.parametrize("code, reason", [
    (9, "no GPU: the NVIDIA kernel driver is not loaded (nvidia.ko)"),
    (12, "no GPU: the NVML library (libnvidia-ml.so.1) is not on this machine"),
    (4, "no GPU access: NVML denied permission"),
])
def test_init_failures_are_results(make_nvml, code: int, reason: str) -> None:
    nvml = make_nvml([], init_error=code)
    r = probe(nvml)
    assert not r.available and r.reason.startswith(reason)
    assert nvml.shutdowns == 0  # never shut down what did not start


def test_zero_devices_and_missing_package(make_nvml) -> None:
    nvml = make_nvml([])
    r = probe(nvml)
    assert not r.available and r.reason == ("no GPU: the NVIDIA driver is loaded but NVML sees "
                                            "0 devices")
    assert nvml.shutdowns == 1
    r = probe(None, use_real=False)
    assert r.reason.startswith("no GPU probe: the nvidia-ml-py package (module pynvml) is not "
                               "installed")


def test_xid_watch_reports_events_with_meaning(make_nvml, h100, geforce) -> None:
    nvml = make_nvml([h100, geforce], xids=[(1, 79), (0, 48)])
    ticks = iter(range(100))
    r = probe(nvml, xid_watch_s=5.0, clock=lambda: float(next(ticks)))
    assert nvml.registered == [0, 1]
    assert [(e.gpu_index, e.xid) for e in r.xid_events] == [(1, 79), (0, 48)]
    assert r.xid_events[0].meaning == "GPU has fallen off the bus (drain the node, reboot)"
    assert "GPU 1 Xid 79 (GPU has fallen off the bus" in r.summary()


def test_xid_watch_without_events_times_out(make_nvml, h100) -> None:
    r = probe(make_nvml([h100]), xid_watch_s=1.0)
    assert r.xid_events == [] and r.xid_watch_s == 1.0
    assert "Xid events in a 1 s watch: none" in r.summary()


def test_past_xids_from_the_kernel_log() -> None:
    log = (
        "[  12.3] nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver\n"
        "[5012.7] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has "
        "fallen off the bus.\n"
        "[6000.1] NVRM: Xid (PCI:0000:00:1e): 31, Ch 00000010, intr 10000000. MMU Fault\n"
    )
    found = parse_kernel_log(log)
    assert [(x.pci_bus, x.xid) for x in found] == [("0000:3b:00", 79), ("0000:00:1e", 31)]
    assert found[1].meaning == "GPU memory page fault (application fault)"
    assert found[0].message.endswith("GPU has fallen off the bus.")
