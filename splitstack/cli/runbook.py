"""The `runbook` command line: capacity planning, GPU probes and (splitstack/cli/runbook_actions.py)
the on-call actions. It parses options, calls the runbooks package and prints what it returns."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from contract.capacity import CatalogError
from contract.models import error_lines, format_loc
from runbooks.capacity.fit import FitInputError, fit_report
from runbooks.capacity.forecast import BenchSummaryError, forecast, forecast_inputs, render_table
from runbooks.capacity.matrix import matrix_table
from runbooks.gpu.export import serve, write_textfile
from runbooks.gpu.probe import probe
from runbooks.gpu.wait import WaitParams, wait_for_gpu_memory
from runbooks.gpu.xid import parse_kernel_log
from splitstack.cli.options import Output, add_version, epilog, reading, writing
from splitstack.cli.runbook_actions import register as register_actions
from splitstack.cli.terminal import echo

app = typer.Typer(name="runbook", no_args_is_help=True, add_completion=False)
add_version(app, "runbook", "On-call runbook actions for splitstack.")
capacity_app = typer.Typer(help="Capacity planning: model fit on a GPU, growth forecast.",
                           no_args_is_help=True)
app.add_typer(capacity_app, name="capacity-plan")


def _fail(message: str, code: int = 2) -> None:
    echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@capacity_app.command("fit", epilog=epilog(
    "runbook capacity-plan fit --model Qwen2.5-VL-7B-Instruct --gpu nvidia-l40s",
    "runbook capacity-plan fit --model-config ./config.json --gpu-memory-gib 80 --output json",
    exits="0 it fits; 1 it does not; 2 bad input (an unknown model or GPU gets the nearest names)"))
def capacity_fit(
    model: Annotated[str | None, typer.Option(help="Catalog model name or HF repo id.")] = None,
    model_config: Annotated[Path | None, typer.Option(
        help="A Hugging Face config.json, for a model outside the catalog.")] = None,
    params_total: Annotated[int | None, typer.Option(
        help="Checkpoint parameters, when --model-config cannot be counted (MoE etc.).", min=1)] = None,
    gpu: Annotated[str, typer.Option(help="Catalog GPU name, e.g. nvidia-h100-80gb.")] = "",
    gpu_memory_gib: Annotated[float | None, typer.Option(
        help="CUDA-visible GiB of a GPU outside the catalog (instead of --gpu).", min=0)] = None,
    gpu_memory_utilization: Annotated[float, typer.Option(help="vLLM fraction, 0.05-1.", min=0.05, max=1)] = 0.9,
    max_model_len: Annotated[int, typer.Option(help="vLLM --max-model-len, tokens.", min=1)] = 8192,
    tensor_parallel_size: Annotated[int, typer.Option(help="GPUs per replica.", min=1)] = 1,
    max_num_batched_tokens: Annotated[int | None, typer.Option(
        help="vLLM --max-num-batched-tokens (default: vllm_memory.yaml).", min=1)] = None,
    kv_cache_dtype: Annotated[str, typer.Option(help="auto, fp8, float16, bfloat16.")] = "auto",
    activation_gib: Annotated[float | None, typer.Option(
        help="Measured peak activation (vLLM log), replaces the estimate.", min=0)] = None,
    output: Annotated[Output, typer.Option(help="text or json.")] = Output.text,
) -> None:
    """Does a model fit a GPU under vLLM: KV cache tokens and full-length sequences at once."""
    try:
        report = fit_report(model=model, model_config=model_config, params_total=params_total, gpu=gpu,
                            gpu_memory_gib=gpu_memory_gib, gpu_memory_utilization=gpu_memory_utilization,
                            max_model_len=max_model_len, tensor_parallel_size=tensor_parallel_size,
                            max_num_batched_tokens=max_num_batched_tokens, kv_cache_dtype=kv_cache_dtype,
                            activation_gib=activation_gib)
    except (CatalogError, FitInputError, ValueError) as exc:
        _fail(str(exc))
        return
    echo(report.model_dump_json(indent=1) if output is Output.json else report.explain())
    raise typer.Exit(0 if report.fits else 1)


@capacity_app.command("matrix", epilog=epilog("runbook capacity-plan matrix --max-model-len 16384"))
def capacity_matrix(
    gpu_memory_utilization: Annotated[float, typer.Option(help="vLLM fraction, 0.05-1.", min=0.05, max=1)] = 0.9,
    max_model_len: Annotated[int, typer.Option(help="Tokens per sequence.", min=1)] = 8192,
) -> None:
    """Every catalog model on every catalog GPU: max concurrent full-length sequences."""

    echo(matrix_table(gpu_memory_utilization=gpu_memory_utilization,
                            max_model_len=max_model_len))


@capacity_app.command("forecast", epilog=epilog(
    "runbook capacity-plan forecast --bench-summary .state/bench/RUN/summary.json",
    "runbook capacity-plan forecast --avg-pdfs-per-day 50000 --quarterly-growth 0.2 --output json"))
def capacity_forecast(
    bench_summary: Annotated[Path | None, typer.Option(
        help="A pipeline run's summary.json (bench run/gate): per-server PDFs/h from the documents it "
        "completed (throughput.documents_per_h).")] = None,
    pages_per_pdf: Annotated[float | None, typer.Option(
        help="Average pages per PDF, to convert a summary's pages_per_s.", min=0)] = None,
    avg_pdfs_per_day: Annotated[float | None, typer.Option(help="Average volume in the first quarter.", min=0)] = None,
    quarterly_growth: Annotated[float | None, typer.Option(help="0.2 = 20 %.", min=-1)] = None,
    peak_factor: Annotated[float | None, typer.Option(help="Peak hour / average hour (1-24).", min=1, max=24)] = None,
    per_server_pdfs_per_hour: Annotated[float | None, typer.Option(help="One inference server, PDFs/h.", min=0)] = None,
    per_worker_pdfs_per_hour: Annotated[float | None, typer.Option(help="One CPU worker, PDFs/h.", min=0)] = None,
    quarters: Annotated[int | None, typer.Option(help="Quarters to forecast.", min=1)] = None,
    first_quarter: Annotated[str | None, typer.Option(
        help="First quarter, e.g. 'Q1 2027' (default: the current one; 'Q1 2025' gives requirement "
             "CAP-6's table).")] = None,
    output: Annotated[Output, typer.Option(help="text or json.")] = Output.text,
) -> None:
    """Servers, workers and monthly cost per quarter (requirement CAP-6's forecast; flags override)."""

    overrides = dict(avg_pdfs_per_day=avg_pdfs_per_day, quarterly_growth=quarterly_growth, peak_factor=peak_factor,
                     per_server_pdfs_per_hour=per_server_pdfs_per_hour,
                     per_worker_pdfs_per_hour=per_worker_pdfs_per_hour, quarters=quarters,
                     first_quarter=first_quarter)
    try:
        inputs, source = forecast_inputs(overrides, bench_summary, pages_per_pdf)
    except BenchSummaryError as exc:
        _fail(str(exc))
        return
    except ValidationError as exc:
        _fail("; ".join(error_lines(exc, loc=lambda loc: "--" + format_loc(loc).replace("_", "-")))
              + " (requirement CAP-6's values: runbooks/capacity/manual_forecast.yaml)")
        return
    plans = forecast(inputs)
    if output is Output.json:
        echo(json.dumps({"inputs": inputs.model_dump(), "per_server_source": source,
                               "quarters": [p.model_dump() for p in plans]}, indent=1))
        return
    echo(f"per-server capacity {inputs.per_server_pdfs_per_hour:g} PDFs/h from {source}")
    echo(render_table(plans))


@app.command("gpu-probe", epilog=epilog("runbook gpu-probe --output json",
                                        "runbook gpu-probe --textfile /var/lib/node_exporter/gpu.prom",
                                        exits="0 read (or no GPU, unless --require-gpu); 1 no GPU with --require-gpu"))
def gpu_probe(
    output: Annotated[Output, typer.Option(help="text or json.")] = Output.text,
    textfile: Annotated[Path | None, typer.Option(
        help="Also write Prometheus text here (node_exporter textfile collector).")] = None,
    serve_port: Annotated[int | None, typer.Option(
        help="Serve /metrics on this port until interrupted (0 picks a free port).", min=0, max=65535)] = None,
    serve_addr: Annotated[str, typer.Option(help="Address for --serve-port.")] = "127.0.0.1",
    xid_watch_s: Annotated[float, typer.Option(help="Watch for Xid events this long.", min=0)] = 0.0,
    kernel_log: Annotated[Path | None, typer.Option(
        help="Kernel log text (dmesg output) to scan for past 'NVRM: Xid' lines.")] = None,
    require_gpu: Annotated[bool, typer.Option(help="Exit 1 when no GPU is found.")] = False,
) -> None:
    """Read every GPU through NVML: memory, utilization, temperature, ECC, Xid, processes."""

    past = parse_kernel_log(reading("--kernel-log", kernel_log)) if kernel_log else []  # before the probe
    result = probe(xid_watch_s=xid_watch_s)
    if output is Output.json:
        data = result.to_dict()
        data["kernel_log_xids"] = [x.__dict__ for x in past]
        echo(json.dumps(data, indent=1))
    else:
        echo(result.summary())
        for x in past:
            echo(f"  kernel log: PCI {x.pci_bus} Xid {x.xid} ({x.meaning}): {x.message}")
    if textfile is not None:
        with writing("--textfile", textfile):
            write_textfile(textfile, result)
        echo(f"wrote {textfile}", err=True)
    if serve_port is not None:
        _serve(serve_port, serve_addr, xid_watch_s)
    if require_gpu and not result.available:
        raise typer.Exit(1)


def _serve(port: int, addr: str, xid_watch_s: float) -> None:
    server, _thread = serve(lambda: probe(xid_watch_s=xid_watch_s), port=port, addr=addr)
    echo(f"serving http://{addr}:{server.server_port}/metrics (Ctrl-C stops)", err=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()


@app.command("wait-for-gpu-memory", epilog=epilog("runbook wait-for-gpu-memory --min-free-mib 70000 --timeout-s 600",
                                                  exits="0 ready; 1 timeout; 2 no GPU or bad input"))
def wait_for_gpu_memory_cmd(
    min_free_mib: Annotated[float, typer.Option(help="Free memory wanted per GPU, MiB.", min=0)],
    gpu_index: Annotated[int | None, typer.Option(help="GPU index; default all.", min=0)] = None,
    timeout_s: Annotated[float, typer.Option(help="Give up after this many seconds.", min=0)] = 300.0,
    interval_s: Annotated[float, typer.Option(help="Seconds between reads.", min=0)] = 5.0,
) -> None:
    """Wait until GPU memory is free (read-only). Exit 0 ready, 1 timeout, 2 no GPU/bad input."""

    try:
        params = WaitParams(min_free_mib=min_free_mib, gpu_index=gpu_index, timeout_s=timeout_s,
                            interval_s=interval_s)
    except ValueError as exc:
        _fail(str(exc))
        return
    report = wait_for_gpu_memory(params)
    echo(f"{report.outcome}: {report.message}")
    raise typer.Exit({"ready": 0, "timeout": 1}.get(report.outcome, 2))


register_actions(app)

if __name__ == "__main__":
    app()
