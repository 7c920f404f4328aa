"""The output store in a bucket, through the S3 API (``output_store.kind: s3``).

Layout under ``s3://<bucket>/<prefix>/<job_id>/``::

    metadata.json                  the commit marker; names the attempt that won
    <attempt>/document.md
    <attempt>/content_list.json
    <attempt>/images/...

Commit protocol (the bucket has no rename, so the directory store's staging-and-rename becomes
a commit marker):

1. The backend writes into a local staging folder, as with the directory store.
2. The data objects are uploaded under a prefix unique to this attempt: nothing a reader sees
   changes, and two deliveries of one job never write the same key.
3. ``metadata.json`` is put last with ``If-None-Match: *`` (a create-only write): the first
   attempt to put it wins; a later one gets 412, deletes its own attempt's objects and reports
   "not committed", as the directory store does. A reader (the fan-in merge, ``exists``, the
   bench, the runbooks) looks at ``metadata.json`` first, so it sees a whole output or none.
4. The winner deletes what earlier, crashed attempts of the same job left under its prefix.

So no sweep of the bucket is needed: a worker killed mid-upload leaves objects that nothing
points at, and the job's redelivery (the queue redelivers every unacked job) removes them when
it commits. Only the local staging folder is swept, as in the directory store.

Client: obstore (Python bindings of the Apache Arrow ``object_store`` crate): one small wheel
with no dependencies, create-only puts (``mode="create"`` sends ``If-None-Match: *`` on S3) and
the default credential chain (``AWS_*`` variables, IRSA web identity, instance metadata). boto3
cannot be installed beside ``kubernetes>=37`` (the ``runbooks`` extra): botocore requires
``python-dateutil<3``, kubernetes ``>=3``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.extras import require
from contract.spec import OutputStore as OutputStoreSpec
from contract.spec import Spec
from worker.errors import TransientError
from worker.store import CONTENT_LIST, IMAGES, MARKDOWN, METADATA, DirectoryStore, OutputStore

if TYPE_CHECKING:
    from obstore.store import S3Store

logger = logging.getLogger("worker")
ATTEMPT_KEY = "attempt"  # in metadata.json: the attempt folder holding the data objects
PROBE_FOLDER = ".splitstack-probe"
RETRY_TIMEOUT_S = 30.0


class StoreConfigError(Exception):
    """The bucket cannot be used as configured; the message names the field and the fix."""


def _short(exc: BaseException) -> str:
    """obstore's messages end with a multi-line debug dump: the first line says enough."""
    return str(exc).strip().splitlines()[0][:300]


def s3_store(spec: OutputStoreSpec, env: dict[str, str]) -> S3Store:
    """The obstore client for ``spec`` (kind s3), credentials read from the variables its
    SecretRefs name; none: the SDK's default chain."""
    obstore_store = require("obstore.store", "worker", "output_store.kind 's3'")
    config: dict[str, Any] = {}
    if spec.endpoint_url:
        config["endpoint"] = spec.endpoint_url
    else:
        config["virtual_hosted_style_request"] = True  # AWS S3's preferred addressing
    if spec.region:
        config["region"] = spec.region
    elif not (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")):
        config["region"] = "us-east-1"  # what S3-compatible servers accept; GCS ignores it
    for field, ref in (("access_key_id", spec.access_key_id),
                       ("secret_access_key", spec.secret_access_key)):
        if ref is None:
            continue
        value = env.get(ref.env)
        if not value:
            raise StoreConfigError(
                f"output_store.{field}: the variable {ref.env} is empty; set it (Kubernetes: the "
                f"Secret {ref.name!r} key {ref.key!r}), or remove both key fields to use the "
                "default credential chain")
        config[field] = value
    client = {"allow_http": True} if (spec.endpoint_url or "").startswith("http://") else {}
    # obstore retries for up to 180 s by default; a job whose upload fails is kept and retried
    # by the worker with its own backoff, so one call gives up sooner.
    retry = {"max_retries": 4, "retry_timeout": timedelta(seconds=RETRY_TIMEOUT_S)}
    return obstore_store.S3Store(spec.bucket, config=config, client_options=client,
                                 retry_config=retry)


class ObjectStore:
    """:class:`worker.store.OutputStore` on a bucket; staging happens in ``scratch``."""

    def __init__(self, client: S3Store, bucket: str, prefix: str, scratch: Path) -> None:
        self._obs = require("obstore", "worker", "output_store.kind 's3'")
        self._exc = require("obstore.exceptions", "worker", "output_store.kind 's3'")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.scratch = DirectoryStore(scratch)  # the local staging folders and their sweep

    # -- keys ------------------------------------------------------------------------------
    def key(self, job_id: str, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, job_id, *parts) if p)

    def location(self, job_id: str) -> str:
        return f"s3://{self.bucket}/{self.key(job_id)}/"

    # -- reading ---------------------------------------------------------------------------
    def exists(self, job_id: str) -> bool:
        try:
            self._call(self._obs.head, self.key(job_id, METADATA))
        except FileNotFoundError:
            return False
        return True

    def read_metadata(self, job_id: str) -> dict[str, Any]:
        return json.loads(self._get(self.key(job_id, METADATA)))

    def read_file(self, job_id: str, name: str) -> bytes:
        return self._get(self.key(job_id, self._attempt_of(job_id), name))

    def copy_images(self, job_id: str, into: Path) -> int:
        folder = self.key(job_id, self._attempt_of(job_id), IMAGES) + "/"
        count = 0
        for batch in self._call(lambda: list(self._obs.list(self.client, folder))):
            for meta in batch:
                target = into / meta["path"][len(folder):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(self._get(meta["path"]))
                count += 1
        return count

    def _attempt_of(self, job_id: str) -> str:
        return str(self.read_metadata(job_id)[ATTEMPT_KEY])

    def _get(self, key: str) -> bytes:
        return bytes(self._call(lambda: self._obs.get(self.client, key).bytes()))

    # -- writing ---------------------------------------------------------------------------
    def staging(self, job_id: str) -> Path:
        return self.scratch.staging(job_id)

    def discard(self, staging: Path) -> None:
        shutil.rmtree(staging, ignore_errors=True)

    def discard_job_staging(self, job_id: str) -> int:
        return self.scratch.discard_job_staging(job_id)

    def sweep_staging(self, older_than_s: float, now: float) -> int:
        return self.scratch.sweep_staging(older_than_s, now)

    def commit(self, job_id: str, staging: Path, markdown: str, content_list: list[Any],
               metadata: dict[str, Any]) -> bool:
        """Upload the attempt's objects, then put ``metadata.json`` create-only.

        Returns False when another delivery of the job committed first. A failure of the
        bucket raises TransientError: the job is kept and tried again."""
        attempt = f"a-{uuid.uuid4().hex[:12]}"
        try:
            images = staging / IMAGES
            for path in sorted(images.rglob("*")) if images.is_dir() else []:
                if path.is_file():
                    self._put(self.key(job_id, attempt, IMAGES, path.relative_to(images).as_posix()),
                              path.read_bytes())
            self._put(self.key(job_id, attempt, CONTENT_LIST),
                      json.dumps(content_list, ensure_ascii=False, indent=1).encode())
            self._put(self.key(job_id, attempt, MARKDOWN), markdown.encode())
            marker = json.dumps({**metadata, ATTEMPT_KEY: attempt}, ensure_ascii=False, indent=1)
            committed = self._put_marker(job_id, attempt, marker.encode())
            self._delete_other_attempts(job_id, keep=attempt if committed else None,
                                        drop=None if committed else attempt)
        finally:
            self.discard(staging)
        return committed

    def _put_marker(self, job_id: str, attempt: str, data: bytes) -> bool:
        try:
            self._call(self._obs.put, self.key(job_id, METADATA), data, mode="create")
            return True
        except self._exc.AlreadyExistsError:
            # Ours when a retried PUT's first answer was lost after the server stored it.
            return self._attempt_of(job_id) == attempt

    def _delete_other_attempts(self, job_id: str, keep: str | None, drop: str | None) -> None:
        """The winner removes crashed attempts' leftovers; a loser removes its own objects.
        Best effort: what stays is unreferenced and removed by the job's next commit."""
        folder = self.key(job_id) + "/"
        try:
            for batch in self._obs.list(self.client, folder):
                for meta in batch:
                    rel = meta["path"][len(folder):]
                    attempt = rel.split("/", 1)[0]
                    if rel == METADATA or (keep is not None and attempt == keep) \
                            or (drop is not None and attempt != drop):
                        continue
                    self._obs.delete(self.client, meta["path"])
        except (FileNotFoundError, self._exc.BaseError) as exc:
            logger.warning("output store: leftovers under %s not removed (%s)", folder, _short(exc))

    def _put(self, key: str, data: bytes) -> None:
        self._call(self._obs.put, key, data)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run an obstore call; a missing object is FileNotFoundError (obstore's own), a
        refused create is AlreadyExistsError, any other failure of the bucket TransientError."""
        try:
            if args or kwargs:
                return fn(self.client, *args, **kwargs)
            return fn()
        except (FileNotFoundError, self._exc.AlreadyExistsError):
            raise
        except self._exc.NotFoundError as exc:
            raise FileNotFoundError(_short(exc)) from exc
        except self._exc.BaseError as exc:
            raise TransientError(f"output store s3://{self.bucket}/{self.prefix}: {_short(exc)}") from exc

    # -- start-up check --------------------------------------------------------------------
    def probe(self) -> None:
        """Write, refuse a second create of, and delete one probe object: the bucket exists,
        the credentials may write, and the endpoint honours ``If-None-Match: *`` (without it a
        redelivered job could overwrite a committed output). Raises StoreConfigError."""
        key = self.key(PROBE_FOLDER, uuid.uuid4().hex)
        where = f"output_store s3://{self.bucket}/{self.prefix}"
        try:
            self._obs.put(self.client, key, b"probe", mode="create")
        except (FileNotFoundError, self._exc.BaseError) as exc:  # obstore: a missing bucket is the former
            raise StoreConfigError(
                f"{where}: cannot write ({_short(exc)}); check that the bucket exists (splitstack "
                "does not create it), output_store.endpoint_url / region, and that the "
                "credentials may PutObject and DeleteObject there") from exc
        try:
            try:
                self._obs.put(self.client, key, b"probe again", mode="create")
            except self._exc.AlreadyExistsError:
                return
            except self._exc.BaseError as exc:
                raise StoreConfigError(
                    f"{where}: a create-only PUT (If-None-Match: *) failed ({_short(exc)}); the "
                    "endpoint must support conditional writes") from exc
            raise StoreConfigError(
                f"{where}: the endpoint ignored If-None-Match: * on PutObject (a second create of "
                f"{key} succeeded), so a redelivered job could overwrite a committed output; use "
                "an endpoint with conditional writes (AWS S3, or an S3-compatible server that "
                "answers 412), or output_store.kind 'directory'")
        finally:
            try:
                self._obs.delete(self.client, key)
            except self._exc.BaseError as exc:
                logger.warning("output store: probe object %s not deleted (%s)", key, _short(exc))


def open_store(spec: Spec, output_dir: Path, env: dict[str, str] | None = None) -> OutputStore:
    """The store ``output_store.kind`` names. ``output_dir``: the outputs (kind directory) or
    the local staging folder (kind s3)."""
    store = spec.output_store
    if store.kind == "directory":
        return DirectoryStore(output_dir)
    env = dict(os.environ if env is None else env)
    return ObjectStore(s3_store(store, env), store.bucket, store.prefix, output_dir)
