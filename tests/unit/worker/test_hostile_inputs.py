"""No input holds a worker: pipes, devices, huge files, links swapped in after the check, and a
read that never ends are each refused or given up within a bound (worker/sources.py)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

import worker.sources as sources
from contract.inputs import file_refusal, input_roots
from contract.spec_loader import load_stack
from worker.errors import PermanentError
from worker.jobs_view import InputRefused, check_inputs
from worker.sources import InputStalled, fetch

GIB = 1024 ** 3
BOUND_S = 10.0  # an outer bound only: a blocked open or read would never return at all


def _fetch(path: Path, roots: list[Path], **kw) -> bytes:
    async def go() -> bytes:
        return await asyncio.wait_for(fetch(str(path), (), roots=tuple(roots), **kw), BOUND_S)
    return asyncio.run(go())


def _refused(path: Path, roots: list[Path], **kw) -> PermanentError:
    with pytest.raises(PermanentError) as err:
        _fetch(path, roots, **kw)
    return err.value


def test_a_named_pipe_swapped_in_after_submit_is_refused_at_once(tmp_path: Path) -> None:
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(b"%PDF-1.7\n")
    spec = load_stack("local", overrides={"worker_pool.input_roots": [str(tmp_path)]})
    check_inputs(spec, [pdf], tmp_path)  # what `submit` checked: a regular file
    pdf.unlink()
    os.mkfifo(pdf)  # no writer: a blocking open would wait forever
    err = _refused(pdf, [tmp_path])
    assert err.kind == "not_regular" and "a named pipe" in err.reason
    with pytest.raises(InputRefused, match="a named pipe"):
        check_inputs(spec, [pdf], tmp_path)


def test_a_1_gib_sparse_file_is_refused_at_submit_and_before_any_read(tmp_path: Path) -> None:
    big = tmp_path / "big.pdf"
    with open(big, "wb") as f:
        f.write(b"%PDF-1.7\n")
        f.truncate(GIB)  # sparse: no disk used, 1 GiB of zeros to a reader
    spec = load_stack("local", overrides={"worker_pool.input_roots": [str(tmp_path)]})
    with pytest.raises(InputRefused, match="worker_pool.max_input_mib=256"):
        check_inputs(spec, [big], tmp_path)
    err = _refused(big, [tmp_path], max_bytes=spec.worker_pool.max_input_mib * 1024 * 1024)
    assert err.kind == "too_large" and f"{GIB} bytes" in err.reason


def test_a_file_that_grows_past_the_cap_while_read_is_refused(tmp_path: Path) -> None:
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(b"%PDF-1.7\n" + b"x" * 4096)
    assert _fetch(pdf, [tmp_path], max_bytes=8192).startswith(b"%PDF")
    assert _refused(pdf, [tmp_path], max_bytes=1024).kind == "too_large"


def test_a_link_swapped_in_after_the_path_check_is_refused_on_the_descriptor(tmp_path: Path,
                                                                             monkeypatch) -> None:
    root, outside = tmp_path / "in", tmp_path / "out"
    root.mkdir()
    outside.mkdir()
    (outside / "key").write_text("hunter2")
    pdf = root / "a.pdf"
    pdf.write_bytes(b"%PDF-1.7\n")
    # The file becomes a link between the roots check and the open: the open on the resolved
    # path does not follow it (O_NOFOLLOW) ...
    real_realpath = os.path.realpath
    calls = []

    def swap_then_resolve(path, *a, **kw):
        resolved = real_realpath(path, *a, **kw)
        calls.append(path)
        if Path(path) == pdf and len(calls) == 2:  # the reader's own resolution, after the roots check
            pdf.unlink()
            pdf.symlink_to(outside / "key")
        return resolved

    monkeypatch.setattr(sources.os.path, "realpath", swap_then_resolve)
    err = _refused(pdf, [root])
    assert err.kind == "path_not_allowed" and "symbolic link" in err.reason and "hunter2" not in err.reason
    monkeypatch.undo()
    # ... and a folder on the path swapped for a link after the check is seen on the opened
    # descriptor (/proc/self/fd), not on the name.
    sub = root / "sub"
    sub.mkdir()
    (sub / "b.pdf").write_bytes(b"%PDF-1.7\n")
    (outside / "b.pdf").write_text("hunter2")
    sub.rename(root / "sub.old")
    sub.symlink_to(outside)
    with pytest.raises(PermanentError) as err_fd:
        sources._read_regular(str(sub / "b.pdf"), (root,), (), 1024)
    assert err_fd.value.kind == "path_not_allowed" and str(outside / "b.pdf") in err_fd.value.reason


def test_a_directory_a_device_and_a_missing_file_are_named(tmp_path: Path) -> None:
    (tmp_path / "d.pdf").mkdir()
    assert "a directory" in _refused(tmp_path / "d.pdf", [tmp_path]).reason
    assert _refused(tmp_path / "gone.pdf", [tmp_path]).kind == "not_found"
    assert "a character device" in (file_refusal("/dev/null", 1024) or "")
    with pytest.raises(PermanentError) as err:
        sources._read_regular("/dev/zero", None, (), 1024)  # would read forever
    assert err.value.kind == "not_regular"


def test_a_read_that_stalls_gives_up_at_its_deadline(tmp_path: Path, monkeypatch) -> None:
    """A hung network mount cannot exist here: the blocking read is a sleep in the same thread."""
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(b"%PDF-1.7\n")

    def hung(*_a, **_kw) -> bytes:
        time.sleep(1.0)
        return b""

    monkeypatch.setattr(sources, "_read_regular", hung)
    with pytest.raises(InputStalled, match="input_read_timeout_s=0.2"):
        _fetch(pdf, [tmp_path], read_timeout_s=0.2)


def test_the_temp_folder_is_no_default_input_root(tmp_path: Path) -> None:
    import tempfile

    roots = input_roots(load_stack("local", overrides={"local.state_dir": str(tmp_path / "st")}), tmp_path)
    assert roots == [tmp_path / "st"]
    assert Path(os.path.realpath(tempfile.gettempdir())) not in roots
