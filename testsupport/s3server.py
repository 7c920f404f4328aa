"""An S3-compatible server on loopback for tests: moto's standalone server (``moto_server``).

moto cannot live in the project's virtualenv: it requires boto3/botocore, whose
``python-dateutil<3`` conflicts with ``kubernetes>=37`` (the ``runbooks`` extra). `make s3server`
installs it into a virtualenv of its own (``.cache/s3server``), as a tool like redis-server.

moto 5.2 honours ``If-None-Match: *`` on PutObject (412 PreconditionFailed when the key
exists), the conditional write the object store commits with.
"""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from testsupport.procs import ROOT, free_port, running

MOTO_SERVER = ROOT / ".cache" / "s3server" / "bin" / "moto_server"
ACCESS_KEY_ID = "testing-key-id"  # moto accepts any key pair
SECRET_ACCESS_KEY = "testing-secret"


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str

    def create_bucket(self, bucket: str) -> None:
        # moto does not check signatures: an unsigned CreateBucket is enough.
        request = urllib.request.Request(f"{self.endpoint_url}/{bucket}", data=b"", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200, answer.status


@contextlib.contextmanager
def s3_server(log_path: Path | None = None) -> Iterator[S3Server]:
    if not MOTO_SERVER.is_file():
        raise RuntimeError(f"{MOTO_SERVER} is missing: run `make s3server` (moto's S3 server in a "
                           "virtualenv of its own)")
    port = free_port()
    argv = [str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)]
    with running("moto-s3", argv, log_path, port=port, ready="/moto-api/"):
        yield S3Server(f"http://127.0.0.1:{port}")
