"""Jobs name only files inside the input roots; secrets reach programs from files, never argv."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contract.inputs import forbidden_dirs, input_roots, path_refusal
from contract.spec_loader import load_stack
from worker.errors import PermanentError
from worker.sources import fetch


def test_paths_outside_the_roots_symlinks_out_and_the_secrets_folder_are_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "in", tmp_path / "out"
    secrets = root / "state" / "secrets"
    for d in (root, outside, secrets):
        d.mkdir(parents=True)
    (root / "a.pdf").write_bytes(b"%PDF-1.4")
    (outside / "key").write_text("hunter2")
    (root / "link.pdf").symlink_to(outside / "key")
    (secrets / "api-key").write_text("s3cret")
    roots, forbidden = [root], [secrets]
    assert path_refusal(str(root / "a.pdf"), roots, forbidden) is None
    assert "is outside the workers' input roots" in path_refusal(str(outside / "key"), roots, forbidden)
    assert f"resolves to {outside / 'key'}" in path_refusal(str(root / "link.pdf"), roots, forbidden)
    assert "secrets folder" in path_refusal(str(secrets / "api-key"), roots, forbidden)
    with pytest.raises(PermanentError) as err:
        asyncio.run(fetch(str(root / "link.pdf"), (), roots=tuple(roots), forbidden=tuple(forbidden)))
    assert err.value.kind == "path_not_allowed" and "hunter2" not in str(err.value)


def test_default_roots_local_and_in_a_pod(tmp_path: Path) -> None:
    local = load_stack("local", overrides={"local.state_dir": str(tmp_path / "st")})
    assert tmp_path / "st" in [Path(p) for p in input_roots(local, tmp_path)]
    assert forbidden_dirs(local, tmp_path) == [tmp_path / "st" / "secrets"]
    assert input_roots(load_stack("prod"), tmp_path) == [Path("/data")]
    custom = load_stack("local", overrides={"worker_pool.input_roots": ["docs", "/srv/pdfs"]})
    assert input_roots(custom, tmp_path) == [tmp_path / "docs", Path("/srv/pdfs")]


def test_submit_refuses_a_file_outside_the_roots_before_touching_the_queue(tmp_path: Path) -> None:
    from splitstack.cli.main import app

    home = Path.home() / ".splitstack-test-not-a-root.pdf"  # neither the state folder nor the temp folder
    home.write_bytes(b"%PDF-1.4")
    try:
        res = CliRunner().invoke(app, ["submit", str(home)], env={"SPLITSTACK_REDIS_URL": "redis://127.0.0.1:1/0"})
    finally:
        home.unlink()
    assert res.exit_code == 2, res.output
    assert "refused, nothing was submitted" in res.output and "outside the workers' input roots" in res.output


def test_not_a_pdf_reason_never_echoes_the_bytes() -> None:
    from worker.pdfcheck import inspect_pdf

    with pytest.raises(PermanentError) as err:
        inspect_pdf(b"-----BEGIN OPENSSH PRIVATE KEY-----", "/in/id_rsa", 10)
    assert "BEGIN" not in str(err.value) and "35 bytes" in str(err.value)


def test_secretexec_puts_the_file_in_the_environment_only(tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text("s3cret\n")
    show = [sys.executable, "-c", "import os, sys; print(os.environ['MY_KEY'], 's3cret' in ' '.join(sys.argv))"]
    out = subprocess.run([sys.executable, "-m", "stack.secretexec", f"MY_KEY={secret}", "--", *show],
                         capture_output=True, text=True, timeout=30, env={**os.environ})
    assert out.stdout.split() == ["s3cret", "False"], out.stderr
    missing = subprocess.run([sys.executable, "-m", "stack.secretexec", f"MY_KEY={tmp_path / 'nope'}", "--", "true"],
                             capture_output=True, text=True, timeout=30)
    assert missing.returncode == 2 and "cannot read the secret for MY_KEY" in missing.stderr
