"""The images' recipes and Containerfiles, without building: names and tags from the spec, the
defaults a user without this project's tooling gets, and what `make` passes through."""

from __future__ import annotations

import re
import subprocess

import pytest
from typer.testing import CliRunner

from contract.spec_loader import load_stack
from splitstack.cli.main import app
from stack.images import PUBLIC_PYTHON_BASE, BaseKind, ImageName, Skipped, build_images, official_vllm_base, recipes
from testsupport.stack import ROOT

IMAGES = ROOT / "images"


def _containerfile(name: str) -> str:
    return (IMAGES / name / "Containerfile").read_text()


def test_image_names_and_tags_come_from_the_spec() -> None:
    spec = load_stack("dev", ROOT)
    refs = {name: r.ref for name, r in recipes(spec).items()}
    assert refs == {
        ImageName.worker: f"{spec.worker_pool.image}:{spec.worker_pool.image_tag}",
        ImageName.simulator: f"{spec.inference_servers[0].sim_image}:{spec.inference_servers[0].sim_image_tag}",
        ImageName.inference_server: f"{spec.inference_servers[0].image}:{spec.inference_servers[0].image_tag}",
        ImageName.worker_gpu: f"{spec.worker_pool.in_process.image}:{spec.worker_pool.in_process.image_tag}",
    }


def test_worker_gpu_is_built_on_the_inference_server_image_or_skipped_saying_why() -> None:
    """`make images` builds all four; without the inference-server image in podman's store (it
    needs the CUDA vllm/vllm-openai image from a registry) worker-gpu is skipped, with the reason."""
    spec = load_stack("local", ROOT, overrides={"inference_servers.0.image_tag": "v0.0.0-absent"})
    skipped, = build_images(spec, ROOT, only=[ImageName.worker_gpu]).images
    assert isinstance(skipped, Skipped)
    assert "inference-server image ghcr.io/splitstack/inference-server:v0.0.0-absent" in skipped.reason
    assert "build inference-server first" in skipped.reason
    assert "ARG BASE=ghcr.io/splitstack/inference-server:" in _containerfile("worker-gpu")


@pytest.mark.parametrize("name", ["worker", "simulator"])
def test_python_images_default_to_the_public_base_and_run_as_a_numeric_non_root_user(name: str) -> None:
    text = _containerfile(name)
    assert f"ARG BASE={PUBLIC_PYTHON_BASE}" in text
    uid = re.search(r"^ARG UID=(\d+)$", text, re.M)
    assert uid and int(uid.group(1)) > 0 and "USER ${UID}:${UID}" in text
    # Kubernetes' `command` and Compose's `command` give the whole command line.
    assert not re.search(r"^ENTRYPOINT", text, re.M)
    assert "pip install --no-index --no-deps" in text  # only the wheels in the build context


def test_worker_image_has_its_readiness_check_and_no_torch() -> None:
    text = _containerfile("worker")
    assert 'CMD ["python", "-m", "splitstack.cli.worker_probe", "/readyz"]' in text
    assert "find_spec('torch') is None and u.find_spec('vllm') is None" in text


def test_inference_server_image_is_the_official_one_at_the_spec_tag_plus_mineru_vl_utils() -> None:
    text = _containerfile("inference-server")
    assert f"ARG BASE={official_vllm_base(load_stack('dev', ROOT))}" in text
    assert "mineru-vl-utils" in text and "MinerULogitsProcessor" in text


def test_debootstrap_base_skips_the_inference_server_with_the_reason() -> None:
    report = build_images(load_stack("local", ROOT), ROOT, base=BaseKind.debootstrap.value,
                          only=[ImageName.inference_server])
    skipped, = report.images
    assert isinstance(skipped, Skipped) and "--vllm-base IMAGE" in skipped.reason


def test_a_spec_running_the_official_vllm_image_builds_no_inference_server_over_its_tag() -> None:
    spec = load_stack("local", ROOT, overrides={"inference_servers.0.image": "vllm/vllm-openai",
                                                 "inference_servers.0.logits_processors": []})
    skipped, = build_images(spec, ROOT, only=[ImageName.inference_server]).images
    assert isinstance(skipped, Skipped) and "runs the official vLLM image itself" in skipped.reason


def test_a_misspelt_base_is_refused() -> None:
    result = CliRunner().invoke(app, ["images", "build", "--base", "publc"])
    assert result.exit_code == 2
    assert "--base 'publc': expected 'public', 'debootstrap' or an image reference" in result.output


def test_make_passes_the_runtime_through_and_builds_the_images_first() -> None:
    out = subprocess.run(["make", "-n", "demo", "RUNTIME=podman"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60).stdout
    assert "splitstack images build --base debootstrap" in out
    assert out.index("images build") < out.index("splitstack demo --engine sim --runtime podman")
