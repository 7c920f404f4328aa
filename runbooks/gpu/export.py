"""Prometheus export of a GPU probe: a textfile for node_exporter's textfile collector, or a
/metrics endpoint. Both go through a Collector on an injected registry, so each scrape of the
endpoint runs a fresh probe and tests use their own registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server, write_to_textfile
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from runbooks.gpu.probe import MIB, ProbeResult

PREFIX = "splitstack_gpu"


class ProbeCollector(Collector):
    """Turns ProbeResult snapshots into metric families (probe_fn runs once per collect)."""

    def __init__(self, probe_fn: Callable[[], ProbeResult]) -> None:
        self.probe_fn = probe_fn

    def collect(self) -> Iterator[Any]:
        r = self.probe_fn()
        up = GaugeMetricFamily(f"{PREFIX}_probe_up",
                               "1 when NVML answered and sees at least one GPU, else 0.")
        up.add_metric([], 1.0 if r.available else 0.0)
        yield up
        info = InfoMetricFamily(f"{PREFIX}_probe", "NVIDIA driver and NVML versions.",
                                labels=["reason"])
        info.add_metric([r.reason], {"driver_version": r.driver_version,
                                     "cuda_driver_version": r.cuda_driver_version,
                                     "nvml_version": r.nvml_version})
        yield info
        labels = ["gpu", "uuid", "name"]
        fams = {
            "lost": GaugeMetricFamily(f"{PREFIX}_lost", "1 when NVML reports the GPU lost "
                                      "(fell off the bus).", labels=labels),
            "total": GaugeMetricFamily(f"{PREFIX}_memory_total_bytes", "GPU memory (NVML).",
                                       labels=labels),
            "used": GaugeMetricFamily(f"{PREFIX}_memory_used_bytes", "GPU memory in use.",
                                      labels=labels),
            "free": GaugeMetricFamily(f"{PREFIX}_memory_free_bytes", "GPU memory free.",
                                      labels=labels),
            "util": GaugeMetricFamily(f"{PREFIX}_utilization_ratio", "Fraction of the last "
                                      "sample period a kernel ran (0-1).", labels=labels),
            "mutil": GaugeMetricFamily(f"{PREFIX}_memory_utilization_ratio", "Fraction of the "
                                       "last sample period memory was read or written (0-1).",
                                       labels=labels),
            "temp": GaugeMetricFamily(f"{PREFIX}_temperature_celsius", "GPU core temperature.",
                                      labels=labels),
            "power": GaugeMetricFamily(f"{PREFIX}_power_watts", "Board power draw.",
                                       labels=labels),
            "ecc": GaugeMetricFamily(f"{PREFIX}_ecc_errors", "ECC error count NVML reports "
                                     "(volatile: since driver load; aggregate: lifetime).",
                                     labels=labels + ["type", "scope"]),
            "rows": GaugeMetricFamily(f"{PREFIX}_remapped_rows", "Rows remapped for ECC "
                                      "errors (Ampere and later).", labels=labels + ["type"]),
            "pending": GaugeMetricFamily(f"{PREFIX}_row_remap_pending", "1 when a row remap "
                                         "waits for a GPU reset.", labels=labels),
            "procs": GaugeMetricFamily(f"{PREFIX}_processes", "Compute processes on the GPU.",
                                       labels=labels),
        }
        for g in r.gpus:
            lv = [str(g.index), g.uuid, g.name]
            fams["lost"].add_metric(lv, 1.0 if g.lost else 0.0)
            _add(fams["total"], lv, g.memory_total_mib, MIB)
            _add(fams["used"], lv, g.memory_used_mib, MIB)
            _add(fams["free"], lv, g.memory_free_mib, MIB)
            _add(fams["util"], lv, g.utilization_gpu_pct, 0.01)
            _add(fams["mutil"], lv, g.utilization_memory_pct, 0.01)
            _add(fams["temp"], lv, g.temperature_c)
            _add(fams["power"], lv, g.power_w)
            for typ, scope, value in (
                ("corrected", "volatile", g.ecc_volatile_corrected),
                ("uncorrected", "volatile", g.ecc_volatile_uncorrected),
                ("corrected", "aggregate", g.ecc_aggregate_corrected),
                ("uncorrected", "aggregate", g.ecc_aggregate_uncorrected),
            ):
                _add(fams["ecc"], lv + [typ, scope], value)
            _add(fams["rows"], lv + ["corrected"], g.remapped_rows_corrected)
            _add(fams["rows"], lv + ["uncorrected"], g.remapped_rows_uncorrected)
            _add(fams["pending"], lv, None if g.remapping_pending is None
                 else float(g.remapping_pending))
            if not g.lost:
                fams["procs"].add_metric(lv, float(len(g.processes)))
        yield from fams.values()
        xid = GaugeMetricFamily(f"{PREFIX}_xid_events", "Xid events seen during the probe's "
                                "watch window (NVML keeps no history).", labels=["gpu", "xid"])
        counts: dict[tuple[str, str], int] = {}
        for e in r.xid_events:
            key = (str(e.gpu_index), str(e.xid))
            counts[key] = counts.get(key, 0) + 1
        for key, n in sorted(counts.items()):
            xid.add_metric(list(key), float(n))
        yield xid


def _add(fam: GaugeMetricFamily, labels: list[str], value: Any, scale: float = 1.0) -> None:
    # A reading NVML could not give is absent, never 0: 0 would claim "no ECC errors".
    if value is not None:
        fam.add_metric(labels, float(value) * scale)


def registry_for(probe_fn: Callable[[], ProbeResult],
                 registry: CollectorRegistry | None = None) -> CollectorRegistry:
    registry = registry if registry is not None else CollectorRegistry()
    registry.register(ProbeCollector(probe_fn))
    return registry


def write_textfile(path: Path, result: ProbeResult) -> Path:
    """Atomic write (prometheus_client renames a temp file) of one probe's metrics."""
    write_to_textfile(str(path), registry_for(lambda: result))
    return Path(path)


def serve(probe_fn: Callable[[], ProbeResult], *, port: int, addr: str = "127.0.0.1",
          registry: CollectorRegistry | None = None) -> tuple[Any, Any]:
    """Start /metrics on addr:port (port 0 picks a free one); returns (server, thread)."""
    return start_http_server(port, addr=addr, registry=registry_for(probe_fn, registry))
