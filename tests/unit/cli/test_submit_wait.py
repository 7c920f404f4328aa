"""`submit --wait` says where the jobs are while it waits (on stderr, when the states change),
and stdout keeps only the ids and the final records; `--pages` past a document's end is refused
before anything is queued."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from splitstack.cli import worker as worker_cli
from splitstack.cli.main import app
from worker import jobs_view
from worker.pagecount import page_count

PDF = (b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
       b"2 0 obj\n<< /Type /Pages /Kids [3 0 R 4 0 R 5 0 R] /Count 3 >>\nendobj\n"
       b"3 0 obj\n<< /Type /Page /Parent 2 0 R >>\nendobj\n%%EOF\n")


def test_wait_reports_progress_on_stderr_and_records_on_stdout(tmp_path: Path, monkeypatch) -> None:
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(PDF)
    states = iter([["queued"], ["running"], ["running"], ["done"]])
    monkeypatch.setattr(worker_cli, "_spec", lambda stack, spec_override=None: object())
    monkeypatch.setattr(worker_cli, "check_inputs", lambda spec, files, root: None)
    monkeypatch.setattr(worker_cli, "_connect", lambda spec: object())
    monkeypatch.setattr(worker_cli, "submit", lambda r, spec, files, *a: ["job-1"])
    # the wait polls the queue in worker/jobs_view.py
    monkeypatch.setattr(jobs_view, "list_jobs", lambda r, spec, ids: [
        {"job_id": "job-1", "state": s, "output": "/out/job-1"} for s in next(states)])
    monkeypatch.setattr(jobs_view.time, "sleep", lambda s: None)
    result = CliRunner().invoke(app, ["submit", str(pdf), "--wait"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if line.startswith("waiting ")]
    # once per change of the states, not once per poll
    assert [line.split(": ", 1)[1] for line in said] == ["queued=1", "running=1", "done=1"], result.stderr
    assert "waiting" not in result.stdout and "job-1\t" in result.stdout and "/out/job-1" in result.stdout


def test_pages_past_the_end_are_refused_before_anything_is_queued(tmp_path: Path, monkeypatch) -> None:
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(PDF)
    queued: list = []
    monkeypatch.setattr(worker_cli, "submit", lambda *a: queued.append(a) or ["x"])
    result = CliRunner().invoke(app, ["submit", str(pdf), "--pages", "2-7"])
    assert result.exit_code == 2 and "has 3 pages" in result.output and "1-3" in result.output, result.output
    assert not queued


def test_page_count_reads_the_root_of_the_page_tree(tmp_path: Path) -> None:
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(PDF)
    assert page_count(pdf) == 3
    nested = tmp_path / "n.pdf"  # an intermediate node (it has a /Parent) is not the document's count
    nested.write_bytes(b"%PDF-1.7\n<< /Type /Pages /Kids [4 0 R] /Count 120 >>\n"
                       b"<< /Type /Pages /Parent 2 0 R /Kids [5 0 R] /Count 20 >>\n")
    assert page_count(nested) == 120
    (tmp_path / "t.txt").write_text("not a pdf /Type /Pages /Count 4")
    assert page_count(tmp_path / "t.txt") is None
    (tmp_path / "s.pdf").write_bytes(b"%PDF-1.7\n<< /Type /ObjStm /N 3 >>stream...")  # compressed tree
    assert page_count(tmp_path / "s.pdf") is None
