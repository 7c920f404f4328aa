"""Bad input through the real command lines: each gets exit 2 (1 where the command's answer is
"no"), a message naming the file or flag with what was wrong, and never a traceback.

`python tests/unit/cli/test_bad_inputs.py` prints the table of cases and what each printed.
"""

from __future__ import annotations

import json
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
    return {"tmp": str(tmp), "run": str(run)}


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
    ]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    return _files(tmp_path_factory.mktemp("bad"))


def run(case: Case) -> tuple[int, str, BaseException | None]:
    env = {"COLUMNS": "250", "SPLITSTACK_TEST_UNSET_VAR": ""}
    os.environ.pop("SPLITSTACK_TEST_UNSET_VAR", None)
    result = CliRunner().invoke(app, case.argv, env={k: v for k, v in env.items() if v})
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
