"""How the bench's command lines print a run: the summary table, validity, gates and verdict.
Shared by `bench run|gate|check`, `bench locust ...` and `splitstack demo`."""

from __future__ import annotations

import sys

import typer
from rich.markup import escape
from rich.table import Table

from bench.pipeline import summary_lines as pipeline_lines
from bench.summary import GateVerdict, Summary
from bench.tokcheck import summary_lines as tokcheck_lines
from splitstack.cli.terminal import SafeConsole

console = SafeConsole(stderr=True)  # progress, warnings and errors
out = SafeConsole(width=None if sys.stdout.isatty() else 160)  # results; logs and CI: no wrapping at 80


def fail(msg: str, code: int = 2) -> typer.Exit:
    """Print ``error: msg`` and return the Exit to raise (``raise fail(...)``)."""
    console.print(f"[red]error:[/red] {escape(msg)}", soft_wrap=True, highlight=False)
    return typer.Exit(code)


OUTPUT_SOURCES = {"usage": "the server's usage", "tokenizer": "the client tokenizer",
                  "events": "one per event with text (no usage, no tokenizer)"}


def print_summary(s: Summary) -> None:
    t = Table(title=f"{s['run']['scenario']}: {s['run']['load_label']}, window {s['window_s']:.1f} s")
    for c in ("metric", "n", "mean", "p50", "p90", "p95", "p99", "max"):
        t.add_column(c, justify="right" if c != "metric" else "left")
    for name, d in s["latency"].items():
        if d.get("n"):
            t.add_row(name, str(d["n"]), *(f"{d[k]:.3f}" for k in ("mean", "p50", "p90", "p95", "p99", "max")))
    out.print(t)
    out.print("requests: " + ", ".join(f"{k}={v}" for k, v in s["requests"].items()))
    out.print("throughput: " + ", ".join(f"{k}={v:.2f}" for k, v in s["throughput"].items()))
    tokens = s.get("tokens") or {}
    if tokens.get("prompt_source"):
        sources = ", ".join(f"{v} answers counted by {OUTPUT_SOURCES.get(k, k)}"
                            for k, v in tokens.get("output_source", {}).items())
        out.print(f"prompt lengths: {tokens['prompt_source']}; output tokens: {sources or 'none'}",
                  markup=False, highlight=False, soft_wrap=True)
    observer = s.get("observer")
    if observer:
        out.print(observer["text"], markup=False, highlight=False, soft_wrap=True)
    if tokens.get("merged_event_requests"):
        out.print(f"[yellow]note:[/] {tokens['merged_event_requests']} answer(s) had more tokens than streamed "
                  "events with text: the server merged tokens into some events, and with usage at the end "
                  "only their ITL counts the difference on the last event. For exact per-token ITL set "
                  "`continuous_usage_stats: true` in the scenario (it costs the server time per event: "
                  "docs/bench-metrics.md).", soft_wrap=True, highlight=False)
    for n in s.get("count_agreement") or []:
        how = "agree" if n["agrees"] else "[red]DIFFER[/red]"
        extra = f" (the client's own count: {n['client_counted']})" if "client_counted" in n else ""
        out.print(f"{n['count'].replace('_', ' ')}: client {n['client']}, server {n['server']} ({n['counter']}): "
                  f"{how}{extra}", soft_wrap=True, highlight=False)
    if s.get("errors_by_reason"):
        out.print(f"errors: {s['errors_by_reason']}")
    for f in s.get("first_failures") or []:
        out.print(f"  first {f['error']} at {f['at_s']:.1f} s ({f['request_id']}): {f['detail'] or 'no detail'}",
                  markup=False, highlight=False, soft_wrap=True)
    if s.get("pipeline"):
        for line in pipeline_lines(s["pipeline"]):
            out.print(line, soft_wrap=True)
    for a in s.get("agreement", []):
        out.print(f"server agreement {a['metric']}: client {a['client_ms']:.2f} ms vs server {a['server_ms']:.2f} ms "
                  f"(tolerance {a['tolerance_ms']:.2f} ms): {'agrees' if a['agrees'] else 'DIFFERS'}")
    if s.get("tokenizer_crosscheck"):
        for line in tokcheck_lines(s["tokenizer_crosscheck"]):
            out.print(line, markup=False, highlight=False)
    v = s["validity"]
    out.print(f"run validity: {'[green]valid[/green]' if v['valid'] else '[red]INVALID[/red]'}")
    for check in v["checks"]:
        if not check["passed"]:
            out.print(f"  [red]x[/red] {check['check']}: {check['measured']} (need {check['threshold']}): "
                      f"{check['why']}")
    for w in v.get("warnings") or []:
        out.print(f"  [yellow]warning:[/] {w}", soft_wrap=True, highlight=False)


def print_gates(g: GateVerdict) -> None:
    t = Table(title="gates")
    for c in ("gate", "kind", "measured", "threshold", "result", "why"):
        t.add_column(c)
    colors = {"pass": "green", "fail": "red", "not_evaluable": "yellow"}
    for r in g["results"]:
        t.add_row(r["name"], r["kind"], str(r["measured"]), r["threshold"],
                  f"[{colors[r['status']]}]{r['status']}[/]", r["reason"])
    out.print(t)
    color = {"go": "green", "no-go": "red", "invalid": "yellow"}[g["verdict"]]
    out.print(f"verdict: [bold {color}]{g['verdict'].upper()}[/] (exit {g['exit_code']}): {g['reason']}")
