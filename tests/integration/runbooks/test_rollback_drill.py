"""The rollback drill: split -> monolithic -> split on the local stack (simulator engine) with
documents in flight; every document submitted ends with exactly one output, none dead-lettered.

One worker keeps it short (each switch restarts every worker, which loads MinerU): its
documents in flight are finished or released by its drain and taken by its successor. The
per-worker engines of several workers are checked in tests/unit/stack/test_stack_topology.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from pdf_fixtures import make_pdf

from runbooks.registry import invoke
from stack.secrets import queue_url
from worker.jobs_view import connect, list_jobs, submit

pytestmark = pytest.mark.integration

SIM = {
    "inference_servers.0.engine": "sim",
    # Page images of the generated PDFs need more than the local spec's 2048-token context.
    "inference_servers.0.max_model_len": 8192,
    "inference_servers.0.max_num_batched_tokens": 8192,
    "worker_pool.replicas": 1,
    "queue.visibility_timeout_s": 10,
}


def test_split_to_monolithic_and_back_with_documents_in_flight(make_stack, drill, tmp_path: Path) -> None:
    stack = make_stack(**SIM)
    stack.up()
    ctx = drill.context(stack)
    r = connect(stack.spec, queue_url(stack.spec, stack.paths))
    pdfs = [make_pdf(tmp_path / f"d{i}.pdf", 1, seed=i) for i in range(6)]

    plan = invoke(ctx, "rollback", {"to": "monolithic"})
    assert plan.outcome == "planned", plan.render()
    assert "deployment_mode: split -> monolithic" in plan.evidence
    assert any("inference server 'vlm': stopped" in e for e in plan.evidence), plan.evidence
    assert stack.deployment_mode() == "split"  # a dry run changes nothing

    ids = submit(r, stack.spec, pdfs[:3])
    ctx.apply = True
    to_mono = invoke(ctx, "rollback", {"to": "monolithic"})  # documents in flight
    assert to_mono.outcome == "applied", to_mono.render()
    state = stack.read_state()
    assert state["deployment_mode"] == "monolithic"
    assert "engine-w0" in state["components"] and "server-vlm" not in state["components"]
    assert "server-vlm" not in stack.supervisor.process_info()

    ids += submit(r, stack.spec, pdfs[3:])
    back = invoke(ctx, "rollback", {"to": "split"})
    assert back.outcome == "applied", back.render()
    assert stack.deployment_mode() == "split"
    assert not any(n.startswith("engine-") for n in stack.supervisor.process_info())
    assert invoke(ctx, "rollback", {"to": "split"}).outcome == "noop"

    def finished() -> dict[str, str] | None:
        now = {row["job_id"]: row.get("state", "?") for row in list_jobs(r, stack.spec, ids=ids)}
        return now if all(v in ("done", "dead_lettered") for v in now.values()) else None

    final = drill.wait_for("every document finished", finished, timeout_s=90)
    assert set(final.values()) == {"done"}, (final, r.xrange(stack.spec.queue.dead_letter_stream))
    outputs = stack.paths.data / stack.spec.output_store.path
    written = sorted(p.name for p in outputs.iterdir() if (p / "metadata.json").is_file())
    assert written == sorted(ids)  # one output per submission: none lost, none extra
    assert r.xlen(stack.spec.queue.dead_letter_stream) == 0
    audit = [rec["outcome"] for rec in ctx.audit.records() if rec["action"] == "rollback"]
    assert audit == ["planned", "applied", "applied", "noop"]
