"""Prometheus export of the probe: textfile and a /metrics endpoint on loopback."""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from runbooks.gpu.export import serve, write_textfile
from runbooks.gpu.probe import probe


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items()
                                      if k in ("gpu", "type", "scope", "xid"))))] = s.value
    return out


def test_textfile_values_and_units(tmp_path, make_nvml, h100, geforce) -> None:
    result = probe(make_nvml([h100, geforce], xids=[(1, 79)]), xid_watch_s=1.0)
    text = write_textfile(tmp_path / "gpu.prom", result).read_text()
    s = _samples(text)
    g0, g1 = (("gpu", "0"),), (("gpu", "1"),)
    assert s[("splitstack_gpu_probe_up", ())] == 1.0
    assert s[("splitstack_gpu_memory_total_bytes", g0)] == 81559 * 1024 * 1024
    assert s[("splitstack_gpu_utilization_ratio", g0)] == 0.37
    assert s[("splitstack_gpu_temperature_celsius", g1)] == 70
    assert s[("splitstack_gpu_power_watts", g0)] == 123.456
    assert s[("splitstack_gpu_ecc_errors", (("gpu", "0"), ("scope", "aggregate"),
                                            ("type", "uncorrected")))] == 1
    assert s[("splitstack_gpu_xid_events", (("gpu", "1"), ("xid", "79")))] == 1
    assert s[("splitstack_gpu_processes", g1)] == 1
    # No ECC on the GeForce: the series is absent, not a misleading 0.
    assert not any(name == "splitstack_gpu_ecc_errors" and ("gpu", "1") in labels
                   for name, labels in s)


def test_textfile_without_gpu(tmp_path) -> None:
    text = write_textfile(tmp_path / "gpu.prom", probe(None, use_real=False)).read_text()
    s = _samples(text)
    assert s[("splitstack_gpu_probe_up", ())] == 0.0
    assert 'reason="no GPU probe: the nvidia-ml-py package' in text


def test_metrics_endpoint_probes_on_every_scrape(make_nvml, h100) -> None:
    calls = []

    def probe_fn():
        calls.append(1)
        return probe(make_nvml([h100]))

    server, thread = serve(probe_fn, port=0, registry=CollectorRegistry())
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        first = httpx.get(url, timeout=5).text
        httpx.get(url, timeout=5)
        assert "splitstack_gpu_probe_up 1.0" in first
        assert 'splitstack_gpu_memory_used_bytes{gpu="0"' in first
        assert len(calls) == 2
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
