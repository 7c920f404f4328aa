"""Images a cluster can pull: `splitstack images push` against a real OCI registry on loopback
(Debian's `docker-registry`, the CNCF distribution registry), the digest recorded and rendered
into the objects, `podman pull` by that digest, and a stack whose tag the registry lacks refused
before `pulumi up` (by the cluster-fit rules offline, and by `images check` against the registry).

The image pushed is a one-file stand-in imported with `podman import` under a tag of this test's
own (the stack's real images are gigabytes and built by `make images`); what is under test is
the registry path: tag, push, digest, lock file, reference by digest, pull.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from contract.cluster_fit import check_cluster_fit
from contract.image_refs import lock_path, stack_images
from contract.spec_loader import load_file
from infra.render import capture
from stack.podman import podman
from stack.registry import check_images, push_images
from testsupport.procs import free_port, running
from testsupport.stack import ROOT

pytestmark = pytest.mark.integration
REPO = f"localhost/splitstack-regtest-{uuid.uuid4().hex[:8]}/worker-gpu"


def _require(binary: str) -> None:
    if shutil.which(binary) is None:
        pytest.fail(f"{binary!r} is not installed: `make apt` installs it (Debian package "
                    f"{'docker-registry' if binary == 'docker-registry' else 'podman'})")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    _require("docker-registry")
    _require("podman")
    work = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = work / "config.yml"
    config.write_text(yaml.safe_dump({
        "version": 0.1, "log": {"level": "info"},
        "storage": {"filesystem": {"rootdirectory": str(work / "data")}},
        "http": {"addr": f"127.0.0.1:{port}"}}))
    with running("docker-registry", ["docker-registry", "serve", str(config)], work / "registry.log",
                 port=port, ready="/v2/"):
        yield f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def stand_in() -> Iterator[str]:
    """A one-file image under this test's own tag, removed afterwards with what was derived from it."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        body = f"splitstack registry test {uuid.uuid4()}\n".encode()
        info = tarfile.TarInfo("etc/splitstack-regtest")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    ref = f"{REPO}:t1"
    with tempfile.NamedTemporaryFile(suffix=".tar") as tmp:
        tmp.write(data.getvalue())
        tmp.flush()
        podman(["import", tmp.name, ref])
    try:
        yield ref
    finally:
        refs = podman(["images", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                       "reference=*splitstack-regtest*"], check=False).stdout.split()
        refs += podman(["images", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                        "reference=*/splitstack/worker-gpu*"], check=False).stdout.split()
        for r in set(refs) | {ref}:
            podman(["rmi", "--force", r], check=False)


def _stack_file(tmp: Path, registry: str, tag: str) -> Path:
    """localk8s's topology (cloud existing) in monolithic mode with an external queue: one image,
    the monolithic worker's, from the stand-in repository, pulled from ``registry``."""
    doc = yaml.safe_load((ROOT / "Pulumi.localk8s.yaml").read_text())
    cfg = doc["config"]
    cfg["splitstack:deployment_mode"] = "monolithic"
    cfg["splitstack:worker_pool"] = {"replicas": 1, "in_process": {"image": REPO, "image_tag": tag}}
    cfg["splitstack:queue"] = {"kind": "external"}
    cfg["splitstack:images"] = {"registry": f"{registry}/splitstack", "pull_secret": "regcred"}
    path = tmp / "Pulumi.regtest.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_push_records_digests_objects_pull_by_digest(registry: str, stand_in: str, tmp_path: Path) -> None:
    spec = load_file(_stack_file(tmp_path, registry, "t1"), "regtest")
    assert [i.source for i in stack_images(spec)] == [stand_in]
    # Before the push: nothing recorded, refused before `pulumi up`.
    assert [p.path for p in check_cluster_fit(spec)] == ["images.digests"]

    pushed, lock = push_images(spec, tmp_path, tls_verify=False)
    (one,) = pushed
    assert one.target == f"{registry}/splitstack/worker-gpu:t1"
    assert one.digest.startswith("sha256:") and len(one.digest) == 71
    assert lock == lock_path(tmp_path, "regtest")
    print(f"\npushed {one.image.source} -> {one.target} {one.digest}; lock {lock}:\n{lock.read_text()}")

    # The stack loaded again carries the digest; the objects name the image by it.
    spec = load_file(_stack_file(tmp_path, registry, "t1"), "regtest")
    assert check_cluster_fit(spec) == []
    assert check_images(spec, tls_verify=False) == []
    objects = capture(spec, ROOT).objects
    (dep,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "worker-gpu"]
    pod = dep["spec"]["template"]["spec"]
    by_digest = f"{registry}/splitstack/worker-gpu@{one.digest}"
    assert pod["containers"][0]["image"] == by_digest
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]

    # podman pulls exactly that image by digest from the registry (the local copies removed
    # first, so the pull has to fetch it).
    image_id = podman(["image", "inspect", "--format", "{{.Id}}", stand_in]).stdout.strip()
    podman(["rmi", "--force", stand_in, one.target])
    assert podman(["image", "exists", image_id], check=False).returncode != 0
    pulled = podman(["pull", "--tls-verify=false", by_digest], timeout_s=120).stdout.strip().splitlines()[-1]
    repo_digests = podman(["image", "inspect", "--format", "{{json .RepoDigests}}", pulled]).stdout
    assert by_digest in repo_digests
    assert podman(["image", "inspect", "--format", "{{.Id}}", pulled]).stdout.strip() == image_id
    print(f"pulled {by_digest}: image {image_id[:12]}, the one pushed")


def test_a_tag_the_registry_lacks_is_refused_before_pulumi_up(registry: str, stand_in: str,
                                                              tmp_path: Path) -> None:
    spec = load_file(_stack_file(tmp_path, registry, "t2"), "regtest")  # never pushed
    problems = [str(p) for p in check_cluster_fit(spec)]
    assert any(p.startswith("images.digests: no digest recorded for "
                            f"{registry}/splitstack/worker-gpu:t2") for p in problems), problems
    (problem,) = check_images(spec, tls_verify=False)
    assert problem.startswith(f"{registry}/splitstack/worker-gpu:t2: the registry has no such tag")
    print(f"\nrefused: {problems[0]}\ncheck: {problem}")
