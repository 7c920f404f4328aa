"""stack/containers.py and stack/wheelhouse.py without podman: the `podman run` a component becomes,
what the runtime refuses, and the wheel closure for the image's Python (markers included)."""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.spec_loader import load_stack
from stack import containers
from stack.component import BuildContext, SetupError
from stack.containers import check_runtime, image_context, in_container
from stack.paths import StackPaths
from stack.supervisor import render_config
from stack.wheelhouse import _closure, packaged_files, source_digest
from stack.workers import worker_component
from testsupport.stack import ROOT

SECRET = "s3cret-value"


def _ctx(tmp_path: Path, **overrides) -> BuildContext:
    spec = load_stack("local", ROOT, overrides={"local.state_dir": str(tmp_path / "state"), **overrides})
    paths = StackPaths.at(spec.local.state_dir, ROOT)
    paths.make()
    return BuildContext(spec, paths, ROOT, SECRET)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder the image's user may enter (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="splitstack-unit-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def fake_image(monkeypatch) -> None:
    monkeypatch.setattr(containers, "image_user", lambda ref: (10001, 10001))
    monkeypatch.setattr(containers, "podman_binary", lambda: "/usr/bin/podman")
    monkeypatch.setattr(containers.os, "chown", lambda path, uid, gid: None)


def test_worker_becomes_a_podman_run_that_signals_pid_1_only(open_dir, fake_image) -> None:
    ctx = _ctx(open_dir, **{"inference_servers.0.engine": "sim", "local.runtime": "podman"})
    outputs = ctx.paths.data / "outputs"
    c = in_container(ctx, worker_component(image_context(ctx), 0), "ghcr.io/splitstack/worker:0.1.0",
                     writable=(outputs,))
    argv = c.argv
    assert argv[:3] == ["/usr/bin/podman", "run", "--rm"]
    for flags in (["--network", "host"], ["--pull", "never"], ["--read-only"], ["--cap-drop", "all"],
                  ["--volume", f"{ctx.paths.root}:{ctx.paths.root}:ro"], ["--volume", f"{outputs}:{outputs}:rw"],
                  ["--label", f"io.splitstack.stack-id={ctx.paths.stack_id}"]):
        assert any(argv[i:i + len(flags)] == flags for i in range(len(argv))), flags
    image_at = argv.index("ghcr.io/splitstack/worker:0.1.0")
    assert argv[image_at + 1:image_at + 4] == ["python", "-m", "splitstack.cli.worker_process"]
    # Secrets: podman passes on what stack.secretexec read from their files into its environment;
    # neither the value nor the file is in the container's command line.
    assert SECRET not in " ".join(argv) and "SPLITSTACK_API_KEY" in c.secrets
    at = argv.index("SPLITSTACK_API_KEY")
    assert argv[at - 1] == "--env"
    conf = render_config([c], ctx.paths)
    assert SECRET not in conf and "stack.secretexec" in conf
    assert "stopasgroup=false" in conf and "killasgroup=false" in conf and "stopsignal=TERM" in conf


def test_process_workers_drain_like_pid_1_and_their_group_is_killed_after(tmp_path) -> None:
    ctx = _ctx(tmp_path, **{"inference_servers.0.engine": "sim"})
    conf = render_config([worker_component(ctx, 0)], ctx.paths)
    assert "stopasgroup=false" in conf and "killasgroup=true" in conf


def test_vllm_engine_is_refused_with_the_fix(tmp_path) -> None:
    ctx = _ctx(tmp_path, **{"local.runtime": "podman"})
    with pytest.raises(SetupError, match="engine 'vllm' has no local image .* use --engine sim, or --runtime process"):
        check_runtime(ctx)


def test_a_closed_state_dir_is_named_with_the_fix(tmp_path, fake_image) -> None:
    ctx = _ctx(tmp_path, **{"inference_servers.0.engine": "sim", "local.runtime": "podman"})
    closed = next(p for p in [*reversed(ctx.paths.root.parents), ctx.paths.root] if not p.stat().st_mode & 0o001)
    with pytest.raises(SetupError, match=f"{closed} .* is closed to uid 10001, the user of .*: `chmod o\\+x {closed}`"):
        in_container(ctx, worker_component(image_context(ctx), 0), "ghcr.io/splitstack/worker:0.1.0")


def _wheel(folder: Path, name: str, version: str, requires: list[str]) -> None:
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as zf:
        zf.writestr(f"{name}-{version}.dist-info/METADATA", meta)


def test_closure_follows_the_images_python_not_the_hosts(tmp_path) -> None:
    # redis needs async-timeout below Python 3.11.3 (Debian bookworm has 3.11.2); pip evaluates
    # python_full_version markers for the Python that runs it, which is why the closure is walked.
    _wheel(tmp_path, "app", "1.0", ["redis>=5", "extra-only; extra == 'worker'", "old-only; python_version < '3.10'"])
    _wheel(tmp_path, "redis", "8.1.0", ['async-timeout>=4.0.3; python_full_version < "3.11.3"'])
    _wheel(tmp_path, "extra_only", "2.0", [])
    closure, missing = _closure(tmp_path, ["app[worker]"], "3.11.2", skip=set())
    assert closure == {"app": "1.0", "redis": "8.1.0", "extra-only": "2.0"} and missing == ["async-timeout"]
    closure, missing = _closure(tmp_path, ["app"], "3.11.7", skip=set())
    assert closure == {"app": "1.0", "redis": "8.1.0"} and missing == []


def test_images_are_built_from_the_packaged_files_only() -> None:
    files = packaged_files(ROOT)
    assert Path("worker/main.py") in files and Path("pyproject.toml") in files
    assert not [f for f in files if f.parts[0] in ("tests", "testsupport", "benchmarks", "images")]
    assert len(source_digest(ROOT)) == 16


def test_a_containerised_worker_finds_the_same_input_roots_and_secrets_folder(tmp_path) -> None:
    """The worker reads the spec the launcher wrote; inside an image its project root is another
    folder, so the state folder must be absolute there: the bench's PDFs under it are allowed and
    the secrets folder under it is still refused."""
    import json

    from contract.inputs import forbidden_dirs, input_roots, path_refusal
    from contract.spec import Spec
    from contract.worker_env import ENV_SPEC_FILE

    spec = load_stack("local", ROOT, overrides={"inference_servers.0.engine": "sim", "local.state_dir": ".state"})
    paths = StackPaths.at(spec.local.state_dir, tmp_path)  # relative, as in Pulumi.local.yaml
    paths.make()
    ctx = BuildContext(spec, paths, tmp_path, SECRET)
    c = worker_component(ctx, 0)
    spec = Spec.model_validate(json.loads(Path(c.env[ENV_SPEC_FILE]).read_text()))
    image_root = Path("/usr/lib/python3/dist-packages")  # any other folder
    roots, forbidden = input_roots(spec, image_root), forbidden_dirs(spec, image_root)
    assert path_refusal(str(ctx.paths.root / "bench" / "doc.pdf"), roots, forbidden) is None
    assert "secrets folder" in (path_refusal(str(ctx.paths.secrets / "key"), roots, forbidden) or "")
