"""``splitstack sim``: serve the vLLM/MinerU simulator, or fit a profile from a real server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import httpx
import typer
from pydantic import ValidationError

from contract.extras import MissingExtra
from contract.models import error_lines
from simulator.config import SimConfig
from simulator.faults import FaultError, parse_fault_args
from simulator.fit import FitError, drive_and_scrape, fit_profile, read_snapshot, render_profile
from simulator.profile import ProfileError, load_profile
from simulator.server import ServeError, setup_logging
from simulator.server import serve as run
from simulator.tokens import TokenizerError
from splitstack.cli.options import epilog, writing

app = typer.Typer(help="Inference-server simulator (a vLLM twin that speaks MinerU's VLM protocol).",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


def _fail(message: str, code: int = 2) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)


@app.command(epilog=epilog("splitstack sim serve --port 8000 --profile mineru25-h200",
                           "splitstack sim serve --profile instant --fault error_rate=0.1",
                           exits="0 stopped; 2 bad input (profile, fault, tokenizer, port)"))
def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: any free port)", min=0, max=65535)] = 8000,
    api_key: Annotated[str | None, typer.Option(
        envvar="VLLM_API_KEY", help="require this Bearer token on /v1/* and /sim/* (env: VLLM_API_KEY, as vLLM)",
    )] = None,
    profile: Annotated[str, typer.Option(help="calibration profile name, or a path to a profile YAML")] = "instant",
    seed: Annotated[int, typer.Option(help="seed of every random draw", min=0)] = 0,
    model_name: Annotated[str, typer.Option(help="served model name")] = "tiny",
    model_root: Annotated[str | None, typer.Option(help="'root' reported by /v1/models")] = None,
    tokenizer: Annotated[str | None, typer.Option(
        help="served model's tokenizer directory: count tokens with it in /tokenize, usage and metrics "
             "(default: the simulator's own regex pieces)")] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="override the profile's max_num_seqs", min=1)] = None,
    max_model_len: Annotated[int | None, typer.Option(help="override the profile's max_model_len", min=1)] = None,
    text_only: Annotated[bool, typer.Option(help="reject images like a text-only model")] = False,
    timings_max_entries: Annotated[int | None, typer.Option(help="per-request timestamps kept for GET "
                                                                    "/sim/timings (0: none)", min=0)] = None,
    fault: Annotated[list[str] | None, typer.Option(help="KEY=VALUE fault active from start (repeatable), "
                                                             "e.g. error_rate=0.1")] = None,
    private_engines: Annotated[int | None, typer.Option(
        help="the monolithic twin: N independent engines, engine i on --port + i (no batching across them, N "
             "copies of the weights, each loading for the profile's footprint.engine_load_s before /health 200)",
        min=1)] = None,
    engine_load_scale: Annotated[float, typer.Option(
        help="with --private-engines: scale the profile's engine load time (e.g. 0.01 in tests)", min=0)] = 1.0,
    private_kv_cache_tokens: Annotated[int | None, typer.Option(
        help="with --private-engines: KV budget of each engine (default: the profile's split evenly)", min=1)] = None,
) -> None:
    """Serve the simulator until interrupted. Logs go to stderr."""
    setup_logging()
    if private_engines is None and (engine_load_scale != 1.0 or private_kv_cache_tokens is not None):
        _fail("--engine-load-scale and --private-kv-cache-tokens set up private engines: add --private-engines N "
              "(or leave them out for one shared engine)")
    try:
        cfg = SimConfig(host=host, port=port, api_key=api_key, profile=profile, seed=seed, model_name=model_name,
                        model_root=model_root, tokenizer=tokenizer, max_num_seqs=max_num_seqs,
                        max_model_len=max_model_len,
                        multimodal=not text_only, faults=parse_fault_args(fault or []),
                        private_engines=private_engines, engine_load_scale=engine_load_scale,
                        private_kv_cache_tokens=private_kv_cache_tokens,
                        **({} if timings_max_entries is None else {"timings_max_entries": timings_max_entries}))
        run(cfg)
    except (ProfileError, FaultError, TokenizerError) as exc:
        _fail(str(exc))
    except ValidationError as exc:
        _fail("; ".join(error_lines(exc, loc=lambda loc: "--" + "-".join(map(str, loc)).replace("_", "-"))))
    except ServeError as exc:
        _fail(str(exc), exc.exit_code)
    except MissingExtra as exc:
        _fail(str(exc))


@app.command(epilog=epilog("splitstack sim fit vllm-metrics.txt --name my-gpu --out my-gpu.yaml",
                           "splitstack sim fit before.txt after.txt --name my-gpu",
                           exits="0 written; 2 bad input or an unreachable server"))
def fit(
    source: Annotated[list[str], typer.Argument(help="metrics snapshots: files or http(s)://.../metrics URLs, in "
                                                     "time order (two or more give load-dependent coefficients)")],
    name: Annotated[str, typer.Option(help="name of the new profile")],
    base: Annotated[str, typer.Option(help="profile whose limits and answer shapes are kept")] = "instant",
    out: Annotated[Path | None, typer.Option(help="write the YAML here (default: stdout)")] = None,
    drive: Annotated[str | None, typer.Option(help="base URL of a server to load at --levels while scraping "
                                                      "(SOURCE must then be its /metrics URL)")] = None,
    levels: Annotated[str, typer.Option(help="concurrency levels for --drive")] = "1,4,8",
    requests_per_level: Annotated[int, typer.Option(help="requests per level for --drive", min=1)] = 24,
    max_tokens: Annotated[int, typer.Option(help="max_tokens of driven requests", min=1)] = 64,
    api_key: Annotated[str | None, typer.Option(help="Bearer token for --drive and metric URLs")] = None,
    model: Annotated[str | None, typer.Option(help="model name for --drive (default: the only one served)")] = None,
) -> None:
    """Fit a profile's step-time coefficients from a real server's vllm:* histograms."""
    try:
        concurrency = [int(x) for x in levels.split(",")]
    except ValueError:
        _fail(f"--levels {levels!r}: give whole numbers separated by commas, e.g. 1,4,8")
    if not all(c >= 1 for c in concurrency):
        _fail(f"--levels {levels!r}: each level is a concurrency of 1 or more")
    for flag, url in ([("--drive", drive)] if drive else []) + [
            ("SOURCE", s) for s in source if "://" in s or drive]:
        if not url.startswith(("http://", "https://")):
            _fail(f"{flag} {url!r}: not an http(s) URL" + ("; with --drive, SOURCE is the server's /metrics URL"
                                                          if flag == "SOURCE" else "; give it like http://HOST:8000"))
    try:
        base_profile = load_profile(base)
        if drive:
            snapshots = drive_and_scrape(drive, source[0], concurrency, requests_per_level,
                                         max_tokens, api_key, model)
        else:
            snapshots = [read_snapshot(s, api_key) for s in source]
        profile, report = fit_profile(snapshots, base_profile, name, source)
    except (FitError, ProfileError, ValueError) as exc:
        _fail(str(exc))
    except httpx.HTTPError as exc:  # --drive: the server did not answer
        _fail(f"--drive {drive}: {type(exc).__name__}: {exc}; check the URL and that the server is up")
    text = render_profile(profile, report)
    if out:
        with writing("--out", out):
            out.write_text(text)
        sys.stderr.write(f"wrote {out}\n")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":  # the local stack starts the simulator as `python -m splitstack.cli.sim serve`
    app(prog_name="python -m splitstack.cli.sim")
