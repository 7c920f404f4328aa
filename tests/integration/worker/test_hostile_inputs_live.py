"""Hostile inputs on a real worker: files swapped after `submit` checked them (a named pipe, a
1 GiB sparse file, links to secrets or devices, a folder swapped for a link) are dead-lettered
with a reason naming what they are, and the worker stays ready and keeps serving."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest
from pdf_fixtures import make_pdf

pytestmark = pytest.mark.integration
GIB = 1024 ** 3


def test_inputs_swapped_after_submit_never_hold_the_worker(make_harness, tmp_path: Path) -> None:
    h = make_harness()
    h.start_redis()
    h.start_sim()
    docs, outside = tmp_path / "docs", tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir(exist_ok=True)
    secrets = h.root / "state" / "secrets"
    secrets.mkdir(parents=True)
    (secrets / "api-key").write_text("s3cret-not-for-jobs")
    (outside / "b.pdf").write_text("hunter2")
    names = ["fifo.pdf", "sparse.pdf", "to-secrets.pdf", "to-dev-zero.pdf", "sub/b.pdf", "good.pdf"]
    pdfs = [make_pdf(docs / n, 1, seed=i) for i, n in enumerate(names)]
    ids = dict(zip(names, h.submit(pdfs)))  # all regular files inside the roots when submitted
    # ... and swapped before any worker reads them
    (docs / "fifo.pdf").unlink()
    os.mkfifo(docs / "fifo.pdf")
    with open(docs / "sparse.pdf", "r+b") as f:
        f.truncate(GIB)
    for name, target in (("to-secrets.pdf", secrets / "api-key"), ("to-dev-zero.pdf", Path("/dev/zero"))):
        (docs / name).unlink()
        (docs / name).symlink_to(target)
    shutil.rmtree(docs / "sub")
    (docs / "sub").symlink_to(outside)
    try:
        w = h.start_worker()
        rows = h.wait_terminal(list(ids.values()), 120)
        got = {n: (rows[i]["state"], rows[i].get("kind", "-"), rows[i].get("reason", "-")) for n, i in ids.items()}
        print("\nhostile input | state | kind | reason")
        for n, (state, kind, reason) in got.items():
            print(f"{n} | {state} | {kind} | {reason.replace(str(tmp_path), '<tmp>')[:150]}")
        assert got["good.pdf"][0] == "done"
        assert got["fifo.pdf"][1] == "not_regular" and "a named pipe" in got["fifo.pdf"][2]
        assert got["sparse.pdf"][1] == "too_large" and f"{GIB} bytes" in got["sparse.pdf"][2]
        assert got["to-secrets.pdf"][1] == "path_not_allowed" and "secrets folder" in got["to-secrets.pdf"][2]
        assert got["to-dev-zero.pdf"][1] == "path_not_allowed"
        assert got["sub/b.pdf"][1] == "path_not_allowed"
        assert not any("s3cret" in r or "hunter2" in r for _s, _k, r in got.values())
        ready = httpx.get(f"http://127.0.0.1:{w.port}/readyz", timeout=5)
        assert ready.status_code == 200, ready.text
        again = h.submit([make_pdf(docs / "after.pdf", 1, seed=9)])
        assert h.wait_terminal(again, 60)[again[0]]["state"] == "done"
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def test_a_read_that_always_stalls_ends_as_poison_and_frees_the_worker(make_harness, tmp_path: Path) -> None:
    """A hung mount cannot be made here: a read deadline of a microsecond makes every read of
    a real file stall. Each stall gives the job back and counts on its record; after
    queue.max_delivery_attempts it is dead-lettered 'poison' naming the stalls."""
    h = make_harness(**{"worker_pool.input_read_timeout_s": 1e-6})
    h.start_redis()
    h.start_sim()
    w = h.start_worker()
    job, = h.submit([make_pdf(tmp_path / "docs" / "slow.pdf", 1)])
    row = h.wait_terminal([job], 60)[job]
    assert row["state"] == "dead_lettered" and row["kind"] == "poison", row
    attempts = h.spec.queue.max_delivery_attempts
    assert f"reading its input stalled {attempts} time(s)" in row["reason"], row["reason"]
    assert "input_read_timeout_s=1e-06" in row["reason"]
    assert int(row["input_stalls"]) == attempts
    assert httpx.get(f"http://127.0.0.1:{w.port}/readyz", timeout=5).status_code == 200
