"""The object store against a real S3-compatible server on loopback (moto's standalone server,
testsupport/s3server.py): the commit protocol, a redelivered job that must not overwrite, a
process killed mid-upload, the start-up probe; then PDFs through real workers of a local stack
into the bucket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import obstore
import pytest
import redis
from pdf_fixtures import make_pdf

from contract.spec import OutputStore as OutputStoreSpec
from contract.spec import SecretRef
from stack.secrets import queue_url
from testsupport.procs import ROOT, wait_until
from testsupport.s3server import ACCESS_KEY_ID, SECRET_ACCESS_KEY, S3Server, s3_server
from testsupport.stack import input_roots_override, local_stack
from worker.jobs import Job
from worker.objectstore import ObjectStore, StoreConfigError, s3_store

pytestmark = pytest.mark.integration
KEY_ENV, SECRET_ENV = "SPLITSTACK_TEST_S3_KEY_ID", "SPLITSTACK_TEST_S3_SECRET"
BUCKET = "splitstack-outputs"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto") / "moto.log") as s3:
        s3.create_bucket(BUCKET)
        yield s3


def _spec(server: S3Server, prefix: str, bucket: str = BUCKET) -> OutputStoreSpec:
    return OutputStoreSpec(
        kind="s3", bucket=bucket, prefix=prefix, endpoint_url=server.endpoint_url,
        access_key_id=SecretRef(name="s3", key="id", env=KEY_ENV),
        secret_access_key=SecretRef(name="s3", key="secret", env=SECRET_ENV))


def _store(server: S3Server, prefix: str, scratch: Path, bucket: str = BUCKET) -> ObjectStore:
    spec = _spec(server, prefix, bucket)
    env = {KEY_ENV: ACCESS_KEY_ID, SECRET_ENV: SECRET_ACCESS_KEY}
    return ObjectStore(s3_store(spec, env), bucket, prefix, scratch)


def _keys(store: ObjectStore, job_id: str) -> list[str]:
    folder = store.key(job_id) + "/"
    return sorted(m["path"][len(folder):] for batch in obstore.list(store.client, folder) for m in batch)


def _commit(store: ObjectStore, job_id: str, text: str, images: int = 1) -> bool:
    staging = store.staging(job_id)
    (staging / "images").mkdir()
    for i in range(images):
        (staging / "images" / f"im{i:04d}.png").write_bytes(f"png {text} {i}".encode())
    return store.commit(job_id, staging, f"# {text}\n", [{"type": "text", "text": text}],
                        {"job_id": job_id, "by": text})


def test_commit_read_and_first_output_wins(server: S3Server, tmp_path: Path) -> None:
    store = _store(server, "unit/a", tmp_path)
    store.probe()  # moto answers a second create with 412
    assert not store.exists("j1")
    assert _commit(store, "j1", "first")
    assert store.exists("j1")
    assert store.location("j1") == f"s3://{BUCKET}/unit/a/j1/"
    meta = store.read_metadata("j1")
    assert meta["by"] == "first"
    assert store.read_file("j1", "document.md") == b"# first\n"
    assert json.loads(store.read_file("j1", "content_list.json")) == [{"type": "text", "text": "first"}]
    assert store.copy_images("j1", tmp_path / "copied") == 1
    assert (tmp_path / "copied" / "im0000.png").read_bytes() == b"png first 0"

    # A redelivery of the same job: its data goes under its own attempt, its marker is refused,
    # and what it uploaded is removed; the committed output is untouched.
    assert not _commit(store, "j1", "second")
    assert store.read_metadata("j1") == meta
    assert store.read_file("j1", "document.md") == b"# first\n"
    assert _keys(store, "j1") == sorted(["metadata.json", f"{meta['attempt']}/document.md",
                                         f"{meta['attempt']}/content_list.json",
                                         f"{meta['attempt']}/images/im0000.png"])
    assert not any(tmp_path.glob(".staging-*"))  # local staging removed either way


CRASHING_COMMIT = """
import sys
from pathlib import Path
from contract.spec import OutputStore
from worker.objectstore import ObjectStore, s3_store
endpoint, bucket, prefix, scratch = sys.argv[1:5]
spec = OutputStore(kind="s3", bucket=bucket, prefix=prefix, endpoint_url=endpoint)
store = ObjectStore(s3_store(spec, {}), bucket, prefix, Path(scratch))  # keys: AWS_* variables
staging = store.staging("big")
(staging / "images").mkdir()
for i in range(2000):
    (staging / "images" / f"im{i:04d}.png").write_bytes(b"x" * 2048)
print("uploading", flush=True)
store.commit("big", staging, "# crashed", [], {"job_id": "big", "by": "crashed"})
"""


def test_killed_mid_upload_leaves_no_output_and_the_next_commit_cleans_up(
        server: S3Server, tmp_path: Path) -> None:
    store = _store(server, "unit/crash", tmp_path / "scratch")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
           "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY}  # the default chain: no key fields
    child = subprocess.Popen([sys.executable, "-c", CRASHING_COMMIT, server.endpoint_url, BUCKET, "unit/crash",
                              str(tmp_path / "child")], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: len(_keys(store, "big")) >= 20 or child.poll() is not None, 60,
                   "the child's first uploads")
    finally:
        child.kill()
        out = child.communicate(timeout=30)[0].decode()
    assert child.returncode == -9, out  # killed, not finished
    left = _keys(store, "big")
    assert left and "metadata.json" not in left, left  # half an upload, no commit marker
    assert not store.exists("big")
    with pytest.raises(FileNotFoundError):
        store.read_file("big", "document.md")

    # The job's redelivery commits, and removes the crashed attempt's objects.
    assert _commit(store, "big", "redelivered")
    attempt = store.read_metadata("big")["attempt"]
    assert all(k == "metadata.json" or k.startswith(attempt + "/") for k in _keys(store, "big"))
    assert store.read_file("big", "document.md") == b"# redelivered\n"


def test_probe_names_a_missing_bucket(server: S3Server, tmp_path: Path) -> None:
    store = _store(server, "", tmp_path, bucket="no-such-bucket")
    with pytest.raises(StoreConfigError, match=r"no-such-bucket.*cannot write.*does not create it"):
        store.probe()


def test_pdfs_through_workers_into_the_bucket(server: S3Server, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, ACCESS_KEY_ID)  # the launcher hands them to the workers
    monkeypatch.setenv(SECRET_ENV, SECRET_ACCESS_KEY)
    prefix = "stack/outputs"
    stack = local_stack(tmp_path / "state", **{
        "inference_servers.0.engine": "sim", "inference_servers.0.max_model_len": 8192,
        "inference_servers.0.max_num_batched_tokens": 8192, "worker_pool.replicas": 2,
        "worker_pool.split_pages_over": 4, "worker_pool.page_window": 2,
        "output_store.kind": "s3", "output_store.bucket": BUCKET, "output_store.prefix": prefix,
        "output_store.endpoint_url": server.endpoint_url,
        "output_store.access_key_id": {"name": "s3", "key": "id", "env": KEY_ENV},
        "output_store.secret_access_key": {"name": "s3", "key": "secret", "env": SECRET_ENV}})
    env = {**os.environ, stack.spec.queue.url_env: queue_url(stack.spec, stack.paths)}
    try:
        stack.up()
        pdfs = [str(make_pdf(tmp_path / f"d{i}.pdf", 2, seed=i)) for i in range(2)]
        pdfs.append(str(make_pdf(tmp_path / "long.pdf", 6, seed=9)))  # fans out: 3 parts, merged
        done = subprocess.run([sys.executable, "-m", "splitstack.cli.main", "submit", *pdfs, "--wait",
                               "--timeout-s", "150", "--output", "json",
                               *input_roots_override(stack)], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=200)
        assert done.returncode == 0, done.stdout + done.stderr
        rows = [json.loads(line) for line in done.stdout.splitlines()]
        finals = {r["job_id"]: r for r in rows if "state" in r}
        assert len(finals) == 3 and all(r["state"] == "done" for r in finals.values()), finals
        store = _store(server, prefix, tmp_path / "reader")
        for job_id, row in finals.items():
            assert row["output"] == f"s3://{BUCKET}/{prefix}/{job_id}/"
            meta = store.read_metadata(job_id)
            assert store.read_file(job_id, "document.md").strip(), job_id
            assert (meta.get("parts"), meta["pages"]) in {(None, 2), (3, 6)}, meta
        assert sorted(store.read_metadata(j).get("parts") or 0 for j in finals) == [0, 0, 3]
        # The local folder only stages: nothing stays there.
        scratch = stack.paths.data / stack.spec.output_store.path
        assert not (list(scratch.iterdir()) if scratch.is_dir() else []), list(scratch.iterdir())

        # A redelivered job (the same job id on the stream again, as a reclaim delivers it) is
        # acked as a duplicate: the committed output stays as it was.
        job_id = next(j for j, r in finals.items() if not store.read_metadata(j).get("parts"))
        before = store.read_metadata(job_id)
        r = redis.Redis.from_url(env[stack.spec.queue.url_env], decode_responses=True)
        source = r.hget(f"{stack.spec.queue.stream}:job:{job_id}", "source")
        entry = r.xadd(stack.spec.queue.stream, Job(job_id=job_id, source=source).to_fields())
        wait_until(lambda: _delivered_and_acked(r, stack.spec.queue.stream, entry), 60,
                   "the redelivered job's ack")
        assert store.read_metadata(job_id) == before
        assert store.read_file(job_id, "document.md").strip()
    finally:
        stack.down()
    assert stack.processes() == []


def _delivered_and_acked(r: redis.Redis, stream: str, entry: str) -> bool:
    group = r.xinfo_groups(stream)[0]
    return group["last-delivered-id"] == entry and group["pending"] == 0
