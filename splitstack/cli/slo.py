"""The `slo` CLI: only wiring; the work is in spec, promql, rules, writer, budget, report, dashboards.

Exit codes: 0 ok; 1 an error budget is exhausted (`status`) or generated files are stale
(`--check`); 2 bad input (spec, records, unreachable Prometheus); 3 some SLO has no data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from contract.models import parse_assignments
from dashboards.generate import DASHBOARD_DIR, render_dashboards
from runbooks.connect import stack_prometheus_url
from runbooks.model import Refused
from slo import promql
from slo.budget import Status
from slo.openslo import OpenSLOError, export_openslo, import_openslo
from slo.prom_source import ADVICE, URL_ADVICE, PrometheusSource, PrometheusUnreachable, QueryFailed
from slo.records import RecordError, load_records
from slo.report import (
    evaluate_prometheus,
    evaluate_records,
    parse_duration_s,
    render_table,
    report_json,
    write_json,
)
from slo.rule_tests import ScenarioError
from slo.spec import OBJECTIVES_PATH, SLOSpec, SpecError, load_spec
from slo.writer import GENERATED_DIR, diff_tree, render_generated, write_tree
from splitstack.cli.options import (
    OptionalStack,
    Output,
    OutputOpt,
    SpecOverride,
    add_version,
    check_http_url,
    epilog,
    writing,
)
from splitstack.cli.terminal import SafeConsole, echo

app = typer.Typer(no_args_is_help=True)
add_version(app, "slo", "SLOs: show the spec, generate alert rules and dashboards, report error budgets.")
openslo_app = typer.Typer(help="Export / import OpenSLO v1 documents.", no_args_is_help=True)
app.add_typer(openslo_app, name="openslo")

console = SafeConsole()
err = SafeConsole(stderr=True)

SpecOpt = Annotated[Path, typer.Option("--spec", help="SLO spec file", show_default=True)]


def _fail(msg: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/] {msg}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _spec(path: Path):
    try:
        return load_spec(path)
    except SpecError as e:
        raise _fail(str(e)) from None
    except OSError as e:  # a folder, no permission
        raise _fail(f"--spec {path}: cannot read it ({e.strerror or e}); pass an SLO spec file") from None


@app.command(epilog=epilog("slo show", "slo show --spec my-objectives.yaml"))
def show(spec: SpecOpt = OBJECTIVES_PATH) -> None:
    """Print every SLO with its target, window and SLI as PromQL (5-minute error ratio)."""

    s = _spec(spec)
    for slo in s.slos:
        console.print(f"[bold]{slo.name}[/]  {slo.title}  target {slo.target} over {slo.window_d} d  ({slo.source})")
        if slo.time_based:
            console.print(f"  indicator: {promql.indicator_expr(slo, s.jobs)}", highlight=False, soft_wrap=True)
        console.print(f"  error ratio [5m]: {promql.error_ratio_expr(slo, s.jobs, '5m')}",
                      highlight=False, soft_wrap=True)


@app.command(epilog=epilog("slo rules", "slo rules --check",
                           exits="0 written (or up to date with --check); 1 stale (--check); 2 bad input"))
def rules(spec: SpecOpt = OBJECTIVES_PATH,
          out: Annotated[Path | None, typer.Option(help="output folder (default alerts/generated)")] = None,
          check: Annotated[bool, typer.Option(
              "--check", help="exit 1 if the files differ from a fresh render; write nothing")] = False) -> None:
    """Generate alerts/generated/*.rules.yml and their promtool unit tests from the spec."""

    s = _spec(spec)
    try:
        files = render_generated(s)  # everything rendered before anything is written
    except ScenarioError as e:
        raise _fail(str(e)) from None
    target = out or GENERATED_DIR
    if check:
        try:
            stale = diff_tree(files, target)
        except OSError as e:
            raise _fail(f"--out {target}: cannot read what is there ({e}); pass the folder of the generated "
                        "files") from None
        if stale:
            raise _fail(f"generated rules are stale, run `slo rules`: {', '.join(stale)}", 1)
        console.print(f"{len(files)} generated files up to date")
        return
    with writing("--out", target):
        changed = write_tree(files, target)
    console.print(f"{len(files)} files in {target}, {len(changed)} changed")


def _prometheus(stack: str | None, prometheus_url: str | None, spec_override: list[str] | None) -> str:
    """--prometheus-url, else the stack's own Prometheus (--stack, default local)."""
    if prometheus_url:
        return check_http_url("--prometheus-url", prometheus_url)
    try:
        return stack_prometheus_url(stack or "local", parse_assignments(spec_override or [], "--spec-override",
                                                                       "observability.prometheus_port=19090"))
    except (Refused, ValueError) as e:
        raise _fail(str(e)) from None


def _evaluate(spec_path: Path, prometheus: str | None, records: Path | None, window: str | None,
              current: str, step: str, explicit_url: bool = False):

    s = _spec(spec_path)
    for flag, value in (("--current", current), ("--window", window), ("--step", step)):
        try:
            if value is not None:
                parse_duration_s(value)
        except ValueError:
            raise _fail(f"{flag} {value!r}: give a positive whole number with its unit, like 30d, 6h, 5m or "
                        "90s") from None
    current_s = parse_duration_s(current)
    if records is not None:
        try:
            return s, evaluate_records(s, load_records(records), current_s), f"records:{records}"
        except RecordError as e:
            raise _fail(str(e)) from None
    assert prometheus is not None  # _prometheus() resolved it
    src = PrometheusSource(prometheus, s.jobs, step=step, advice=URL_ADVICE if explicit_url else ADVICE)
    try:
        src.check()
        return s, evaluate_prometheus(s, src, window, current), f"prometheus:{src.url}"
    except (PrometheusUnreachable, QueryFailed) as e:
        raise _fail(str(e)) from None


PromOpt = Annotated[str | None, typer.Option(
    "--prometheus-url", help="Prometheus base URL (default: the --stack's own Prometheus)")]
RecOpt = Annotated[Path | None, typer.Option("--records", help="bench records JSONL instead of Prometheus")]
WinOpt = Annotated[str | None, typer.Option(
    "--window", help="attainment window with its unit, e.g. 1h or 30d (default: each SLO's window_d)")]
CurOpt = Annotated[str, typer.Option("--current", help="window of the current burn rate, with its unit (e.g. 1h)")]
StepOpt = Annotated[str, typer.Option("--step", help="subquery step for time-based SLIs, with its unit (e.g. 1m)")]
SLO_EXITS = ("0 ok; 1 an error budget is exhausted; 2 bad input or an unreachable Prometheus; "
             "3 some SLO has no or too little data")


@app.command(epilog=epilog("slo report --stack local --window 1h",
                           "slo report --prometheus-url http://127.0.0.1:9090 --out slo-report.json",
                           "slo report --records .state/bench/RUN/records.jsonl",
                           exits="0 reported; 2 bad input or an unreachable Prometheus"))
def report(spec: SpecOpt = OBJECTIVES_PATH, stack: OptionalStack = None, prometheus_url: PromOpt = None,
           spec_override: SpecOverride = None, records: RecOpt = None,
           window: WinOpt = None, current: CurOpt = "1h", step: StepOpt = "1m",
           json_out: Annotated[Path | None, typer.Option(
               "--out", help="also write the report as JSON to this file")] = None,
           output: OutputOpt = Output.text) -> None:
    """Attainment, error budget (total / spent / remaining), burn rate and time to exhaustion per SLO."""

    prometheus = None if records is not None else _prometheus(stack, prometheus_url, spec_override)
    s, evals, source = _evaluate(spec, prometheus, records, window, current, step, prometheus_url is not None)
    if output is Output.json:
        typer.echo(report_json(evals, source), nl=False)
    else:
        render_table(s, evals, console, f"SLO report ({source})")
    if json_out:
        with writing("--out", json_out):
            write_json(evals, json_out, source)


@app.command(epilog=epilog("slo status --stack local",
                           "slo status --prometheus-url http://prometheus:9090 --window 30d", exits=SLO_EXITS))
def status(spec: SpecOpt = OBJECTIVES_PATH, stack: OptionalStack = None, prometheus_url: PromOpt = None,
           spec_override: SpecOverride = None, records: RecOpt = None,
           window: WinOpt = None, current: CurOpt = "1h", step: StepOpt = "1m") -> None:
    """Like report; exits 1 when any error budget is exhausted, 3 when an SLO has no data."""

    prometheus = None if records is not None else _prometheus(stack, prometheus_url, spec_override)
    s, evals, source = _evaluate(spec, prometheus, records, window, current, step, prometheus_url is not None)
    render_table(s, evals, console, f"SLO status ({source})")
    exhausted = [e.slo for e in evals if e.status is Status.exhausted]
    if exhausted:
        raise _fail(f"error budget exhausted: {', '.join(exhausted)}", 1)
    missing = [e.slo for e in evals if e.status in (Status.no_data, Status.insufficient_data)]
    if missing:
        raise _fail(f"no or too little data for: {', '.join(missing)}", 3)


@app.command(epilog=epilog("slo dashboards", "slo dashboards --check",
                           exits="0 written (or up to date with --check); 1 stale (--check); 2 bad input"))
def dashboards(spec: SpecOpt = OBJECTIVES_PATH,
               out: Annotated[Path | None, typer.Option(help="output folder (default dashboards/generated)")] = None,
               check: Annotated[bool, typer.Option(
                   "--check", help="exit 1 if the JSON differs from a fresh render")] = False) -> None:
    """Generate the Grafana dashboards (JSON) from the spec and the metric catalog."""

    files = render_dashboards(_spec(spec))
    target = out or DASHBOARD_DIR
    if check:
        try:
            stale = diff_tree(files, target, suffix=".json")
        except OSError as e:
            raise _fail(f"--out {target}: cannot read what is there ({e}); pass the folder of the generated "
                        "files") from None
        if stale:
            raise _fail(f"dashboards are stale, run `slo dashboards`: {', '.join(stale)}", 1)
        console.print(f"{len(files)} dashboards up to date")
        return
    with writing("--out", target):
        changed = write_tree(files, target, suffix=".json")
    console.print(f"{len(files)} dashboards in {target}, {len(changed)} changed")


@app.command(epilog=epilog("slo schema --check",
                           exits="0 written (or up to date with --check); 1 stale (--check)"))
def schema(check: Annotated[bool, typer.Option(
        "--check", help="exit 1 if slo/objectives.schema.json is stale")] = False) -> None:
    """Write the JSON schema of objectives.yaml (for editors and CI validation)."""

    path = OBJECTIVES_PATH.with_name("objectives.schema.json")
    text = json.dumps(SLOSpec.model_json_schema(), indent=2, sort_keys=True) + "\n"
    if check:
        if not path.exists() or path.read_text() != text:
            raise _fail(f"{path} is stale, run `slo schema`", 1)
        console.print(f"{path.name} up to date")
        return
    with writing("slo schema: the schema file", path):
        path.write_text(text)
    console.print(f"wrote {path}")


@openslo_app.command("export", epilog=epilog("slo openslo export --out openslo.yaml"))
def openslo_export(spec: SpecOpt = OBJECTIVES_PATH,
                   out: Annotated[Path | None, typer.Option(help="write here instead of stdout")] = None) -> None:
    """Export the spec as OpenSLO v1 documents (multi-document YAML)."""

    text = export_openslo(_spec(spec))
    if out:
        with writing("--out", out):
            out.write_text(text)
    else:
        echo(text, nl=False)


@openslo_app.command("import", epilog=epilog("slo openslo import openslo.yaml --out objectives.yaml"))
def openslo_import(src: Annotated[Path, typer.Argument(help="OpenSLO v1 YAML (one or more documents)")],
                   out: Annotated[Path | None, typer.Option(
                       help="write the SLO spec here instead of stdout")] = None) -> None:
    """Import OpenSLO v1 SLOs that fit splitstack's model into an objectives.yaml."""

    if not src.is_file():
        raise _fail(f"{src}: no such file; pass an OpenSLO v1 YAML file")
    try:
        text = import_openslo(src.read_text(), origin=str(src))
    except (OpenSLOError, OSError) as e:
        raise _fail(str(e)) from None
    if out:
        with writing("--out", out):
            out.write_text(text)
    else:
        echo(text, nl=False)


if __name__ == "__main__":
    app()
