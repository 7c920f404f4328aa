"""Bad input through the real command lines: each gets exit 2 (1 where the command's answer is
"no"), a message naming the file or flag with what was wrong, and never a traceback.

`python tests/unit/cli/test_bad_inputs.py` prints the table of cases and what each printed.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from splitstack.cli.main import app


@dataclass(frozen=True)
class Case:
    what: str
    argv: list[str]
    expect: str  # a piece of the message
    code: int = 2


def _files(tmp: Path) -> dict[str, str]:
    (tmp / "bad.yaml").write_text("kind: chat\nname: x\nload:\n  rate_rps: [1,\n")
    (tmp / "unknown-key.yaml").write_text(
        "kind: chat\nname: x\nprompt_tokens: {mean: 10}\noutput_tokens: {mean: 10}\nload: {rate_rps: 1}\nratee: 3\n")
    (tmp / "empty").mkdir()
    (tmp / "junk").mkdir()
    (tmp / "junk" / "summary.json").write_text("{not json")
    run = tmp / "run"
    run.mkdir()
    (run / "summary.json").write_text("{}")
    (tmp / "chat-summary.json").write_text(json.dumps({"kind": "chat", "throughput": {"completed_rps": 3}}))
    (tmp / "bad-spec.yaml").write_text("config:\n  splitstack:target: local\n  splitstack:queue: {port: 70000}\n")
    (tmp / "bad-gate.yaml").write_text("name: g\nscenario: chat-smoke\ngates: [{kind: latency, metric: ttft}]\n")
    (tmp / "junk.jsonl").write_text("{not json\n")
    (tmp / "empty.jsonl").write_text("")
    (tmp / "two-pages.pdf").write_bytes(_two_page_pdf())
    (tmp / "broken").mkdir()
    (tmp / "broken" / "x.yml").symlink_to(tmp / "nowhere")  # a dangling link among generated files
    return {"tmp": str(tmp), "run": str(run)}


def _two_page_pdf() -> bytes:
    """A minimal, valid two-page PDF (no PDF library needed here)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def cases(f: dict[str, str]) -> list[Case]:
    t = f["tmp"]
    return [
        Case("malformed scenario YAML", ["bench", "run", f"{t}/bad.yaml"], "line 5"),
        Case("unknown scenario key", ["bench", "run", f"{t}/unknown-key.yaml"], "ratee"),
        Case("unknown scenario name", ["bench", "run", "no-such-scenario"], "no-such-scenario"),
        Case("gate with a bad metric", ["bench", "gate", "--gate", f"{t}/bad-gate.yaml"], "metric"),
        Case("--url without --model", ["bench", "run", "chat-smoke", "--url", "http://127.0.0.1:9"], "--model"),
        Case("--api-key-env not set", ["bench", "run", "chat-smoke", "--url", "http://127.0.0.1:9", "--model", "m",
                                        "--api-key-env", "SPLITSTACK_TEST_UNSET_VAR"], "SPLITSTACK_TEST_UNSET_VAR"),
        Case("--out holds a run", ["bench", "run", "chat-smoke", "--out", f["run"]], "already holds a run"),
        Case("sweep --out holds a run", ["bench", "sweep", "chat-smoke", "--max", "500", "--out", f["run"]],
             "already holds a run"),
        Case("locust --out holds a run", ["bench", "locust", "run", "chat-smoke", "--out", f["run"]],
             "already holds a run"),
        Case("negative rate", ["bench", "run", "chat-smoke", "--rate", "-1"], "--rate"),
        Case("zero rate", ["bench", "run", "chat-smoke", "--rate", "0"], "--rate 0.0: must be greater than 0"),
        Case("--rate with --concurrency", ["bench", "run", "chat-smoke", "--rate", "5", "--concurrency", "4"],
             "--rate and --concurrency were both given"),
        Case("--duration-s with --count", ["bench", "run", "chat-smoke", "--duration-s", "10", "--count", "10"],
             "--duration-s and --count were both given"),
        Case("--normalize with --concurrency", ["bench", "run", "chat-smoke", "--normalize", "--concurrency", "2"],
             "--normalize and --concurrency were both given"),
        Case("--model without --url", ["bench", "run", "chat-smoke", "--model", "m"], "--model describes a server"),
        Case("--api-key-env without --url", ["bench", "run", "chat-smoke", "--api-key-env", "HOME"],
             "--api-key-env describes a server"),
        Case("--stack with --url", ["bench", "run", "chat-smoke", "--stack", "local", "--url", "http://127.0.0.1:9",
                                    "--model", "m"], "name two targets"),
        Case("--url not a URL", ["bench", "run", "chat-smoke", "--url", "notaurl", "--model", "m"],
             "--url 'notaurl': not an http(s) URL"),
        Case("--url with a bad port", ["bench", "run", "chat-smoke", "--url", "http://host:port", "--model", "m"],
             "the port is not a number"),
        Case("gate: --rate-like flag conflicts through --url", ["bench", "gate", "--gate", "chat-local", "--stack",
                                                                "local", "--url", "http://127.0.0.1:9"],
             "name two targets"),
        Case("gate: --url not a URL", ["bench", "gate", "--gate", "chat-local", "--url", "ftp://x", "--model", "m"],
             "not an http(s) URL"),
        Case("locust: --stack with --url", ["bench", "locust", "run", "chat-smoke", "--stack", "local", "--url",
                                            "http://127.0.0.1:9", "--model", "m"], "name two targets"),
        Case("sweep: --model without --url", ["bench", "sweep", "chat-smoke", "--max", "500", "--model", "m"],
             "--model describes a server"),
        Case("negative --count", ["bench", "run", "chat-smoke", "--count", "-3"], "--count"),
        Case("negative --processes", ["bench", "run", "chat-smoke", "--processes", "-1"], "--processes"),
        Case("too many --processes", ["bench", "run", "chat-smoke", "--processes", "65"], "--processes 65"),
        Case("negative --seed", ["bench", "run", "chat-smoke", "--seed", "-1"], "--seed"),
        Case("negative --progress-every-s", ["bench", "run", "chat-smoke", "--progress-every-s", "-1"],
             "--progress-every-s"),
        Case("sweep percentile over 100", ["bench", "sweep", "chat-smoke", "--max", "500", "--percentile", "101"],
             "--percentile"),
        Case("compare: too few resamples", ["bench", "compare", f["run"], f["run"], "--resamples", "5"],
             "--resamples"),
        Case("negative --lines", ["logs", "worker", "--lines", "-5"], "--lines"),
        Case("negative --limit", ["jobs", "--limit", "-1"], "--limit"),
        Case("negative --timeout-s", ["submit", f"{t}/bad.yaml", "--timeout-s", "-1"], "--timeout-s"),
        Case("negative --last", ["runbook", "audit-log", "--last", "-2"], "--last"),
        Case("locust: zero users", ["bench", "locust", "run", "chat-smoke", "--users", "0"], "--users"),
        Case("locust master: port out of range", ["bench", "locust", "master", "chat-smoke", "--expect-workers",
                                                  "1", "--bind-port", "70000"], "--bind-port"),
        Case("capacity fit: utilisation over 1", ["runbook", "capacity-plan", "fit", "--gpu-memory-utilization",
                                                  "1.5"], "--gpu-memory-utilization"),
        Case("report on an empty folder", ["bench", "report", f"{t}/empty"], "no summary.json"),
        Case("report on a missing folder", ["bench", "report", f"{t}/missing"], "no such file or folder"),
        Case("compare non-run folders", ["bench", "compare", f"{t}/empty", f"{t}/junk"], "no summary.json"),
        Case("check a missing run", ["bench", "check", f"{t}/missing", "--gate", "chat-local"], "no such file"),
        Case("unknown stack for a run", ["bench", "run", "chat-smoke", "--stack", "nosuch"], "nosuch"),
        Case("spec validate: unknown stack", ["spec", "validate", "nosuch"], "no stack of that name"),
        Case("spec validate: missing file", ["spec", "validate", f"{t}/none.yaml"], "no such file"),
        Case("spec validate: an invalid spec file", ["spec", "validate", f"{t}/bad-spec.yaml"], "queue.port",
             code=1),
        Case("spec show: unknown stack", ["spec", "show", "--stack", "nosuch"], "known stacks"),
        Case("up: malformed override", ["up", "--spec-override", "queue.port"], "expected KEY=VALUE"),
        Case("up: a Kubernetes stack", ["up", "--stack", "dev"], "pulumi up"),
        Case("up: override out of range", ["up", "--spec-override", "queue.port=70000"], "queue.port"),
        Case("submit a missing file", ["submit", f"{t}/none.pdf"], "not a file"),
        Case("submit outside the input roots", ["submit", "/etc/hostname"], "input_roots"),
        Case("logs of an unknown component", ["logs", "nosuch"], "no log for 'nosuch'"),
        Case("redrive naming nothing", ["dead-letters", "redrive"], "--kind KIND or --all"),
        Case("infra plan: unknown stack", ["infra", "plan", "--stack", "nosuch"], "nosuch"),
        Case("infra plan: a local stack", ["infra", "plan", "--stack", "local"], "local"),
        Case("capacity fit: unknown model", ["runbook", "capacity-plan", "fit", "--model", "qwen2.5-7b",
                                              "--gpu", "nvidia-h100-80gb"], "did you mean 'Qwen2.5-VL-7B-Instruct'"),
        Case("capacity fit: unknown GPU", ["runbook", "capacity-plan", "fit", "--model", "Qwen3-4B", "--gpu",
                                            "nvidia-h10"], "did you mean 'nvidia-h100-80gb'"),
        Case("forecast from a chat run", ["runbook", "capacity-plan", "forecast", "--bench-summary",
                                           f"{t}/chat-summary.json"], "is a chat run"),
        Case("forecast: missing summary", ["runbook", "capacity-plan", "forecast", "--bench-summary",
                                            f"{t}/none.json"], "no such file"),
        Case("forecast: bad quarter", ["runbook", "capacity-plan", "forecast", "--first-quarter", "2025"],
             "--first-quarter: '2025' is not a quarter"),
        Case("tune without KNOB=VALUE", ["runbook", "tune", "--set", "oops"], "KNOB=VALUE"),
        Case("runbook on an unknown stack", ["runbook", "diagnose", "--stack", "nosuch"], "nosuch"),
        Case("wait for a negative amount", ["runbook", "wait-for-gpu-memory", "--min-free-mib", "-5"],
             "--min-free-mib"),
        Case("slo window without a unit", ["slo", "report", "--window", "30 days", "--prometheus-url",
                                           "http://127.0.0.1:9"], "30 days"),
        Case("slo spec missing", ["slo", "show", "--spec", f"{t}/none.yaml"], "none.yaml"),
        Case("slo of a Kubernetes stack", ["slo", "status", "--stack", "dev"], "--prometheus-url"),
        Case("slo records missing", ["slo", "report", "--records", f"{t}/none.jsonl"], "none.jsonl"),
        Case("openslo import missing", ["slo", "openslo", "import", f"{t}/none.yaml"], "none.yaml: no such file"),
        Case("simulator: unknown profile", ["sim", "serve", "--profile", "nosuch", "--port", "0"], "nosuch"),
        Case("simulator: unknown fault", ["sim", "serve", "--fault", "bogus=1", "--port", "0"], "bogus"),
        # -- files and folders that cannot be written or read
        Case("infra render into /proc", ["infra", "render", "--out", "/proc/nope"], "--out /proc/nope: cannot write"),
        Case("infra compose into /proc", ["infra", "compose", "--out", "/proc/nope/c.yaml"],
             "--out /proc/nope/c.yaml: cannot write"),
        Case("slo rules into /proc", ["slo", "rules", "--out", "/proc/nope"], "--out /proc/nope: cannot write"),
        Case("slo dashboards into /proc", ["slo", "dashboards", "--out", "/proc/nope"], "--out /proc/nope: cannot"),
        Case("openslo export into /proc", ["slo", "openslo", "export", "--out", "/proc/nope/o.yaml"],
             "--out /proc/nope/o.yaml: cannot write"),
        Case("sim fit: metrics file missing", ["sim", "fit", f"{t}/none.txt", "--name", "x"],
             "cannot read metrics file"),
        Case("slo rules --check over a dangling link", ["slo", "rules", "--out", f"{t}/broken", "--check"],
             "cannot read what is there"),
        Case("slo spec is a folder", ["slo", "show", "--spec", t], "Is a directory"),
        Case("slo spec not YAML", ["slo", "show", "--spec", f"{t}/bad.yaml"], "not valid YAML"),
        Case("slo rules: spec missing", ["slo", "rules", "--spec", f"{t}/none.yaml"], "SLO spec not found"),
        Case("openslo import not YAML", ["slo", "openslo", "import", f"{t}/bad.yaml"], "not valid YAML"),
        Case("slo records not JSON", ["slo", "report", "--records", f"{t}/junk.jsonl"], "junk.jsonl:1: not a bench"),
        Case("slo records empty", ["slo", "report", "--records", f"{t}/empty.jsonl"], "no records"),
        Case("gpu-probe: kernel log missing", ["runbook", "gpu-probe", "--kernel-log", f"{t}/none.log"],
             "--kernel-log"),
        Case("audit log missing", ["runbook", "audit-log", "--audit-log", f"{t}/none.jsonl"],
             "--audit-log"),
        Case("audit log is a folder", ["runbook", "audit-log", "--audit-log", t], "is a folder"),
        Case("forecast: summary not JSON", ["runbook", "capacity-plan", "forecast", "--bench-summary",
                                            f"{t}/junk/summary.json"], "cannot read JSON"),
        Case("bench report on a broken summary", ["bench", "report", f"{t}/junk"], "not a bench summary"),
        Case("bench compare a broken run", ["bench", "compare", f"{t}/junk", f"{t}/none"], "not a bench summary"),
        Case("scenario file not YAML", ["bench", "run", f"{t}/junk/summary.json"], "not valid YAML"),
        Case("scenario is a folder", ["bench", "run", t], "scenario"),
        Case("--tokenizer missing", ["bench", "run", "chat-smoke", "--url", "http://127.0.0.1:9", "--model", "m",
                                     "--tokenizer", f"{t}/nodir"], "--tokenizer"),
        Case("gate: --tokenizer missing", ["bench", "gate", "--gate", "chat-local", "--url", "http://127.0.0.1:9",
                                           "--model", "m", "--tokenizer", f"{t}/nodir"], "--tokenizer"),
        Case("unknown gate", ["bench", "gate", "--gate", "nosuch"], "gate file 'nosuch' not found"),
        # -- page ranges
        Case("--pages reversed", ["submit", f"{t}/two-pages.pdf", "--pages", "5-2"], "--pages '5-2'"),
        Case("--pages from 0", ["submit", f"{t}/two-pages.pdf", "--pages", "0-3"], "--pages '0-3'"),
        Case("--pages not numbers", ["submit", f"{t}/two-pages.pdf", "--pages", "abc"], "expected FIRST-LAST"),
        Case("--pages past the end", ["submit", f"{t}/two-pages.pdf", "--pages", "1-9"], "has 2 pages"),
        # -- URLs and windows
        Case("--url half an IPv6 literal", ["bench", "run", "chat-smoke", "--url", "http://[::1", "--model", "m"],
             "--url 'http://[::1': not a URL"),
        Case("--prometheus-url not a URL", ["slo", "report", "--prometheus-url", "notaurl"],
             "--prometheus-url 'notaurl': not an http(s) URL"),
        Case("--prometheus-url ftp", ["slo", "status", "--prometheus-url", "ftp://x"], "not an http(s) URL"),
        Case("runbook --prometheus-url not a URL", ["runbook", "diagnose", "--prometheus-url", "notaurl"],
             "--prometheus-url 'notaurl'"),
        Case("Prometheus unreachable at a URL", ["slo", "report", "--prometheus-url", "http://127.0.0.1:9"],
             "check the URL"),
        Case("sim fit --drive not a URL", ["sim", "fit", f"{t}/none.txt", "--name", "x", "--drive", "notaurl"],
             "--drive 'notaurl'"),
        Case("sim fit --drive down", ["sim", "fit", "http://127.0.0.1:9/metrics", "--name", "x", "--drive",
                                      "http://127.0.0.1:9"], "--drive http://127.0.0.1:9"),
        Case("sim fit --levels not numbers", ["sim", "fit", f"{t}/none.txt", "--name", "x", "--levels", "a,b"],
             "--levels 'a,b'"),
        Case("slo zero window", ["slo", "report", "--window", "0h", "--prometheus-url", "http://127.0.0.1:9"],
             "--window '0h'"),
        Case("slo zero step", ["slo", "status", "--step", "0m", "--prometheus-url", "http://127.0.0.1:9"],
             "--step '0m'"),
        Case("slo bad current", ["slo", "status", "--current", "bogus", "--prometheus-url", "http://127.0.0.1:9"],
             "--current 'bogus'"),
        Case("runbook slo window without unit", ["runbook", "slo-status", "--window", "30x", "--prometheus-url",
                                                 "http://127.0.0.1:9"], "30x"),
        # -- enums, bounds, unknown names
        Case("--audit-log empty (the current folder)", ["runbook", "slo-status", "--audit-log", ""],
             "--audit-log '.': is a folder"),
        Case("--audit-log under /proc", ["runbook", "slo-status", "--audit-log", "/proc/nope/a.jsonl",
                                         "--prometheus-url", "http://127.0.0.1:9"], "--audit-log /proc/nope/a.jsonl"),
        Case("matrix at utilisation 0", ["runbook", "capacity-plan", "matrix", "--gpu-memory-utilization", "0"],
             "--gpu-memory-utilization"),
        Case("forecast with an infinite peak", ["runbook", "capacity-plan", "forecast", "--peak-factor", "inf"],
             "--peak-factor"),
        Case("unknown audit action", ["runbook", "audit-log", "--action", "nosuch"], "--action 'nosuch'"),
        Case("--output yaml", ["spec", "show", "--output", "yaml"], "--output"),
        Case("unknown engine", ["up", "--engine", "bogus"], "--engine"),
        Case("unknown mode", ["up", "--mode", "bogus"], "--mode"),
        Case("negative workers", ["up", "--workers", "-1"], "--workers"),
        Case("override of an unknown key", ["up", "--spec-override", "nosuch.key=1"], "nosuch: unknown key"),
        Case("override not a number", ["up", "--spec-override", "queue.port=abc"], "queue.port"),
        Case("simulator port out of range", ["sim", "serve", "--port", "70000"], "--port"),
        Case("unknown image", ["images", "build", "--only", "bogus"], "--only"),
        Case("cluster shape unknown", ["cluster", "up", "--shape", "nosuch"], "nosuch"),
        Case("cluster zero timeout", ["cluster", "up", "--timeout-s", "0"], "--timeout-s"),
        Case("sweep negative --max", ["bench", "sweep", "chat-smoke", "--max", "-1"], "--max"),
        Case("locust master without workers", ["bench", "locust", "master", "chat-smoke", "--expect-workers", "0"],
             "--expect-workers"),
        Case("gpu-probe port out of range", ["runbook", "gpu-probe", "--serve-port", "70000"], "--serve-port"),
        Case("wait with a negative timeout", ["runbook", "wait-for-gpu-memory", "--timeout-s", "-1"], "--timeout-s"),
        Case("audit-log --last 0", ["runbook", "audit-log", "--last", "0"], "--last"),
        Case("unknown flag", ["bench", "run", "chat-smoke", "--bogus"], "No such option: --bogus"),
        Case("unknown command", ["nosuch"], "No such command"),
        Case("unknown bench command", ["bench", "nosuch"], "No such command"),
        Case("--kube-context that is not there", ["runbook", "restart-server", "--stack", "dev", "--kube-context",
                                                  "nosuch"], "check that context 'nosuch'"),
    ]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    return _files(tmp_path_factory.mktemp("bad"))


def run(case: Case) -> tuple[int, str, BaseException | None]:
    env = {"COLUMNS": "250", "SPLITSTACK_TEST_UNSET_VAR": ""}
    os.environ.pop("SPLITSTACK_TEST_UNSET_VAR", None)
    handlers = list(logging.root.handlers)
    result = CliRunner().invoke(app, case.argv, env={k: v for k, v in env.items() if v})
    # A command that sets up logging (`sim serve`) binds a handler to this call's captured stderr;
    # one process per command in real use: drop it so the next case does not log into a closed stream.
    logging.root.handlers[:] = handlers
    exc = result.exception if not isinstance(result.exception, SystemExit) else None
    return result.exit_code, result.output, exc


CASES = cases({"tmp": "{tmp}", "run": "{run}"})


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.what for c in CASES])
def test_bad_input_is_named_without_a_traceback(index, files):
    case = cases(files)[index]
    code, output, exc = run(case)
    assert exc is None, f"{case.what}: raised {exc!r}\n{output}"
    assert "Traceback" not in output, output
    assert code == case.code, f"{case.what}: exit {code}\n{output}"
    assert case.expect in output, f"{case.what}: {case.expect!r} not in\n{output}"


if __name__ == "__main__":  # the table for a reader
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        f = _files(Path(tmp))
        print("| bad input | command | exit | traceback | message (first line) |\n| --- | --- | --- | --- | --- |")
        for c in cases(f):
            code, output, exc = run(c)
            first = next((ln.strip() for ln in output.splitlines() if ln.strip()), "").replace(tmp, "TMP")
            argv = " ".join(c.argv).replace(tmp, "TMP")
            print(f"| {c.what} | `{argv}` | {code} | {'yes' if exc or 'Traceback' in output else 'no'} | "
                  f"{first[:110].replace('|', '/')} |")
    sys.exit(0)
