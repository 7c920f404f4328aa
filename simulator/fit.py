"""Fit a profile's latency coefficients from a real vLLM server's Prometheus histograms.

Each window between two snapshots (or one snapshot since start) gives a mean inter-token latency
(ITL), a mean decode batch (decode tokens / engine steps) and a mean prefill time per prompt
token. The decode step model ``ITL = step_base + decode_per_seq * batch`` is fitted by least
squares over windows at different loads (``--drive`` makes such windows); one window gives the
intercept only. KV capacity comes from ``vllm:cache_config_info``.
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from .profile import LatencyModel, Profile


class FitError(ValueError):
    """Input that cannot be fitted (names the metric or source and what to do)."""


HISTS = {
    "itl": "vllm:inter_token_latency_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "prompt": "vllm:request_prompt_tokens",
    "iter": "vllm:iteration_tokens_total",
    "ttft": "vllm:time_to_first_token_seconds",
}


@dataclass
class Snapshot:
    source: str
    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, float] = field(default_factory=dict)
    cache_info: dict[str, str] = field(default_factory=dict)

    def minus(self, other: Snapshot | None) -> Snapshot:
        if other is None:
            return self
        return Snapshot(f"{other.source} -> {self.source}", {k: v - other.sums.get(k, 0) for k, v in self.sums.items()},
                        {k: v - other.counts.get(k, 0) for k, v in self.counts.items()}, self.cache_info)


def parse_snapshot(text: str, source: str) -> Snapshot:
    snap = Snapshot(source)
    wanted = {v: k for k, v in HISTS.items()}
    for fam in text_string_to_metric_families(text):
        if fam.name in wanted:
            key = wanted[fam.name]
            for s in fam.samples:
                if s.name.endswith("_sum"):
                    snap.sums[key] = snap.sums.get(key, 0.0) + s.value
                elif s.name.endswith("_count"):
                    snap.counts[key] = snap.counts.get(key, 0.0) + s.value
        elif fam.name == "vllm:cache_config_info":
            for s in fam.samples:
                snap.cache_info = dict(s.labels)
    missing = [HISTS[k] for k in ("itl", "prefill", "prompt", "iter") if k not in snap.counts]
    if missing:
        raise FitError(f"{source}: no {', '.join(missing)} in the metrics: is this a vLLM /metrics page?")
    return snap


def read_snapshot(source: str, api_key: str | None = None, client: httpx.Client | None = None) -> Snapshot:
    if source.startswith(("http://", "https://")):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            resp = (client or httpx).get(source, headers=headers, timeout=30)
            resp.raise_for_status()
        except httpx.HTTPError as exc:
            raise FitError(f"cannot scrape {source}: {exc}") from exc
        return parse_snapshot(resp.text, source)
    try:
        with open(source) as fh:
            return parse_snapshot(fh.read(), source)
    except OSError as exc:
        raise FitError(f"cannot read metrics file {source}: {exc.strerror}") from exc


@dataclass
class Window:
    source: str
    mean_itl_ms: float
    mean_batch: float
    prefill_ms_per_token: float
    requests: int


def windows(snapshots: list[Snapshot]) -> list[Window]:
    out = []
    prev = None if len(snapshots) == 1 else snapshots[0]
    for snap in snapshots if prev is None else snapshots[1:]:
        d = snap.minus(prev)
        prev = snap
        if d.counts.get("itl", 0) <= 0 or d.counts.get("iter", 0) <= 0 or d.counts.get("prompt", 0) <= 0:
            continue
        itl_ms = 1000 * d.sums["itl"] / d.counts["itl"]
        batch = d.counts["itl"] / d.counts["iter"]
        mean_prompt = d.sums["prompt"] / d.counts["prompt"]
        mean_prefill_ms = 1000 * d.sums["prefill"] / max(1.0, d.counts["prefill"])
        per_token = max(0.0, (mean_prefill_ms - itl_ms) / mean_prompt) if mean_prompt else 0.0
        out.append(Window(d.source, itl_ms, max(1.0, batch), per_token, int(d.counts["prompt"])))
    if not out:
        raise FitError("no window with completed requests and generated tokens: send some load between snapshots")
    return out


def fit_profile(snapshots: list[Snapshot], base: Profile, name: str, sources: list[str]) -> tuple[Profile, dict]:
    ws = windows(snapshots)
    batches = [w.mean_batch for w in ws]
    itls = [w.mean_itl_ms for w in ws]
    if len(ws) >= 2 and max(batches) - min(batches) >= 0.5:
        slope, intercept = statistics.linear_regression(batches, itls)
        slope = max(0.0, slope)
        intercept = max(0.0, statistics.fmean(itls) - slope * statistics.fmean(batches)) if intercept < 0 else intercept
        method = f"least squares over {len(ws)} windows"
    else:
        slope, intercept = 0.0, statistics.fmean(itls) / 1.0
        method = "one load level: intercept only (decode_per_seq_ms = 0); give snapshots at several loads"
    weights = [w.requests for w in ws]
    prefill = sum(w.prefill_ms_per_token * n for w, n in zip(ws, weights)) / sum(weights)
    latency = LatencyModel(step_base_ms=round(intercept, 4), decode_per_seq_ms=round(slope, 5),
                           prefill_per_token_ms=round(prefill, 5), image_encode_ms=base.latency.image_encode_ms,
                           image_patch_px=base.latency.image_patch_px, image_max_tokens=base.latency.image_max_tokens,
                           startup_s=base.latency.startup_s)
    engine = base.engine
    info = snapshots[-1].cache_info
    if info.get("kv_cache_size_tokens", "None").isdigit() and info.get("block_size", "None").isdigit():
        engine = engine.model_copy(update={"kv_cache_tokens": int(info["kv_cache_size_tokens"]),
                                           "block_size_tokens": int(info["block_size"])})
    profile = base.model_copy(update={
        "name": name, "engine": engine, "latency": latency, "reference": base.reference.model_copy(
            update={"pages_per_s": None, "output_tokens_per_s": None}),
        "description": f"fitted by `splitstack sim fit` ({method})",
        "sources": [f"vLLM /metrics snapshots: {', '.join(sources)}", f"limits and answer shapes from profile "
                    f"'{base.name}'"],
    })
    report = {"method": method, "windows": [w.__dict__ for w in ws]}
    return profile, report


def render_profile(profile: Profile, report: dict) -> str:
    lines = ["# generated by `splitstack sim fit`; edit the inputs and refit rather than this file", "# fit windows:"]
    for w in report["windows"]:
        lines.append(f"#   {w['source']}: ITL {w['mean_itl_ms']:.3f} ms at batch {w['mean_batch']:.2f}, "
                     f"prefill {w['prefill_ms_per_token']:.4f} ms/token, {w['requests']} requests")
    data = profile.model_dump(mode="json", exclude_none=True)
    return "\n".join(lines) + "\n" + yaml.safe_dump(data, sort_keys=False, width=120)


def drive_and_scrape(base_url: str, metrics_url: str, levels: list[int], per_level: int, max_tokens: int,
                     api_key: str | None, model: str | None) -> list[Snapshot]:
    """Load a server at each concurrency level and scrape its metrics around each level."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=300) as client:
        if model is None:
            data = client.get("/v1/models").raise_for_status().json()["data"]
            if len(data) != 1:
                raise FitError(f"{base_url} serves {len(data)} models: pass --model")
            model = data[0]["id"]
        body = {"model": model, "prompt": "The quick brown fox jumps over the lazy dog. " * 4,
                "max_tokens": max_tokens, "ignore_eos": True}

        def one(_: int) -> None:
            client.post("/v1/completions", json=body).raise_for_status()

        snaps = [read_snapshot(metrics_url, api_key, client)]
        snaps[0].source = "idle"
        for level in levels:
            with ThreadPoolExecutor(level) as pool:
                list(pool.map(one, range(per_level)))
            snaps.append(read_snapshot(metrics_url, api_key, client))
            snaps[-1].source = f"concurrency {level}"
    return snaps
