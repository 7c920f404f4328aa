import asyncio

import httpx
import pytest
from typer.testing import CliRunner

from worker.errors import PermanentError, TransientError
from worker.sources import fetch


def test_paths_are_read_and_missing_ones_are_permanent(tmp_path) -> None:
    f = tmp_path / "a.pdf"
    f.write_bytes(b"%PDF-1.7")
    assert asyncio.run(fetch(str(f), ())) == b"%PDF-1.7"
    with pytest.raises(PermanentError, match="no such file on the worker") as info:
        asyncio.run(fetch(str(tmp_path / "missing.pdf"), ()))
    assert info.value.kind == "not_found"


def test_urls_must_match_the_allow_list() -> None:
    with pytest.raises(PermanentError, match="not on the worker's allow-list") as info:
        asyncio.run(fetch("http://169.254.169.254/latest/meta-data", ("https://docs.example.com/",)))
    assert info.value.kind == "url_not_allowed"


def test_allowed_urls_are_downloaded_and_5xx_is_transient() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/ok.pdf":
            return httpx.Response(200, content=b"%PDF-ok")
        if request.url.path == "/gone.pdf":
            return httpx.Response(404)
        return httpx.Response(503)

    allow = ("https://docs.example.com/",)

    async def run(path: str) -> bytes:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            return await fetch(f"https://docs.example.com{path}", allow, http)

    assert asyncio.run(run("/ok.pdf")) == b"%PDF-ok"
    with pytest.raises(PermanentError, match="download answered 404"):
        asyncio.run(run("/gone.pdf"))
    with pytest.raises(TransientError, match="download answered 503"):
        asyncio.run(run("/busy.pdf"))


def test_cli_mounts_worker_submit_jobs_and_checks_files(tmp_path) -> None:
    from splitstack.cli.main import app

    runner = CliRunner()
    help_text = runner.invoke(app, ["--help"]).output
    for command in ("worker", "submit", "jobs"):
        assert command in help_text
    result = runner.invoke(app, ["submit", str(tmp_path / "nope.pdf")])
    assert result.exit_code == 2 and "not a file" in result.output
