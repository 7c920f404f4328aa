"""output_store.kind s3: the spec's errors, the worker's settings and its client (the render
is tested in tests/unit/infra/test_infra_output_store.py)."""

from __future__ import annotations

import pytest

from contract.spec_loader import SpecError, load_stack
from worker.config import settings_from_env
from worker.errors import TransientError
from worker.objectstore import ObjectStore, StoreConfigError, open_store
from worker.store import DirectoryStore

KEYS = {"output_store.access_key_id": {"name": "outputs-hmac", "key": "id", "env": "OUT_KEY_ID"},
        "output_store.secret_access_key": {"name": "outputs-hmac", "key": "secret", "env": "OUT_SECRET"}}
S3 = {"output_store.kind": "s3", "output_store.bucket": "doc-outputs", "output_store.prefix": "prod/v1"}


@pytest.mark.parametrize(("changes", "message"), [
    ({"output_store.kind": "s3"}, "output_store: kind 's3' needs output_store.bucket"),
    ({**S3, "output_store.bucket": "Bad_Bucket"}, "'Bad_Bucket': not a bucket name"),
    ({**S3, "output_store.prefix": "/abs/"}, "output_store.prefix: '/abs/': no leading"),
    ({**S3, "output_store.endpoint_url": "storage.googleapis.com"},
     "output_store.endpoint_url: 'storage.googleapis.com': not an http(s) URL"),
    ({**S3, "output_store.access_key_id": KEYS["output_store.access_key_id"]},
     "set both (an HMAC / access key pair) or neither"),
])
def test_spec_refuses_an_unusable_s3_store_naming_the_field(changes, message) -> None:
    with pytest.raises(SpecError) as info:
        load_stack("local", overrides=changes)
    assert message in str(info.value)


def test_the_worker_opens_the_store_the_spec_names(tmp_path) -> None:
    directory = load_stack("local")
    local = open_store(directory, tmp_path)
    assert isinstance(local, DirectoryStore) and local.location("job1") == str(tmp_path / "job1")
    spec = load_stack("local", overrides={**S3, **KEYS, "output_store.endpoint_url": "http://127.0.0.1:9"})
    settings = settings_from_env(spec, 0, env={"SPLITSTACK_API_KEY": "k"})  # s3 is no longer refused
    store = open_store(spec, settings.output_dir, env={"OUT_KEY_ID": "id", "OUT_SECRET": "secret"})
    assert isinstance(store, ObjectStore)
    assert store.location("job1") == "s3://doc-outputs/prod/v1/job1/"
    with pytest.raises(StoreConfigError, match=r"output_store.secret_access_key: the variable "
                       r"OUT_SECRET is empty; set it \(Kubernetes: the Secret 'outputs-hmac' key 'secret'\)"):
        open_store(spec, tmp_path, env={"OUT_KEY_ID": "id"})


def test_a_bucket_that_does_not_answer_is_a_transient_error(tmp_path) -> None:
    """The job is kept and retried (worker/errors.py), never dead-lettered, and one call gives up
    within obstore's retry budget (nothing listens on port 1)."""
    spec = load_stack("local", overrides={**S3, **KEYS, "output_store.endpoint_url": "http://127.0.0.1:1"})
    store = open_store(spec, tmp_path, env={"OUT_KEY_ID": "id", "OUT_SECRET": "secret"})
    with pytest.raises(TransientError, match=r"output store s3://doc-outputs/prod/v1: .*127.0.0.1:1"):
        store.exists("job1")
