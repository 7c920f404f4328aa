"""The output store: one folder (or key prefix) per job id, written atomically and idempotently.

Two stores implement :class:`OutputStore`: :class:`DirectoryStore` here (a folder every worker
mounts) and :class:`worker.objectstore.ObjectStore` (a bucket through the S3 API); the worker
picks one by ``output_store.kind`` (:func:`worker.objectstore.open_store`).

In a directory, a job's outputs are written into a hidden staging directory next to the final one and renamed
into place in one ``rename(2)``: readers see all files or none, and a crash leaves only a
staging directory that the next attempt removes. The first complete output of a job id wins: a
redelivered job finds it and acks without writing a second, different output.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Protocol

MARKDOWN = "document.md"
CONTENT_LIST = "content_list.json"
METADATA = "metadata.json"
IMAGES = "images"


class OutputStore(Protocol):
    """What the worker, the fan-in merge and the readers need of an output store.

    Outputs are prepared in a local ``staging`` folder (the backend writes images there) and
    published by :meth:`commit`; readers see a job's outputs complete or not at all, and the
    first complete output of a job id wins."""

    def location(self, job_id: str) -> str:
        """Where ``job_id``'s outputs are, for people: a folder or an ``s3://`` URL."""
        ...

    def exists(self, job_id: str) -> bool: ...

    def read_metadata(self, job_id: str) -> dict[str, Any]: ...

    def read_file(self, job_id: str, name: str) -> bytes:
        """``MARKDOWN`` or ``CONTENT_LIST`` of a committed output."""
        ...

    def copy_images(self, job_id: str, into: Path) -> int:
        """Copy a committed output's images into the folder ``into``; returns how many."""
        ...

    def staging(self, job_id: str) -> Path: ...

    def commit(self, job_id: str, staging: Path, markdown: str, content_list: list[Any],
               metadata: dict[str, Any]) -> bool: ...

    def discard(self, staging: Path) -> None: ...

    def discard_job_staging(self, job_id: str) -> int:
        """Remove every staging folder of ``job_id`` (a dead worker's, when its job is taken
        over); returns how many."""
        ...

    def sweep_staging(self, older_than_s: float, now: float) -> int: ...


class DirectoryStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def final_dir(self, job_id: str) -> Path:
        return self.root / job_id

    def location(self, job_id: str) -> str:
        return str(self.final_dir(job_id))

    def exists(self, job_id: str) -> bool:
        return (self.final_dir(job_id) / METADATA).is_file()

    def read_file(self, job_id: str, name: str) -> bytes:
        return (self.final_dir(job_id) / name).read_bytes()

    def copy_images(self, job_id: str, into: Path) -> int:
        images = self.final_dir(job_id) / IMAGES
        if not images.is_dir():
            return 0
        shutil.copytree(images, into, dirs_exist_ok=True)
        return sum(1 for p in images.rglob("*") if p.is_file())

    def staging(self, job_id: str) -> Path:
        path = self.root / f".staging-{job_id}-{uuid.uuid4().hex[:8]}"
        path.mkdir(parents=True)
        return path

    def read_metadata(self, job_id: str) -> dict[str, Any]:
        return json.loads((self.final_dir(job_id) / METADATA).read_text())

    def commit(self, job_id: str, staging: Path, markdown: str, content_list: list[Any],
               metadata: dict[str, Any]) -> bool:
        """Write the three files into ``staging``, fsync, rename into place.

        Returns False when another delivery of the same job committed first (the staging
        directory is discarded and the existing output stays untouched)."""
        _write(staging / MARKDOWN, markdown.encode())
        _write(staging / CONTENT_LIST, json.dumps(content_list, ensure_ascii=False, indent=1).encode())
        _write(staging / METADATA, json.dumps(metadata, ensure_ascii=False, indent=1).encode())
        _fsync_dir(staging)
        final = self.final_dir(job_id)
        try:
            os.rename(staging, final)  # fails if final exists and is not empty
        except OSError:
            if self.exists(job_id):
                shutil.rmtree(staging, ignore_errors=True)
                return False
            shutil.rmtree(final, ignore_errors=True)  # a partial dir from an older layout
            os.rename(staging, final)
        _fsync_dir(self.root)
        return True

    def discard(self, staging: Path) -> None:
        shutil.rmtree(staging, ignore_errors=True)

    def discard_job_staging(self, job_id: str) -> int:
        count = 0
        prefix = f".staging-{job_id}-"
        for path in self.root.glob(f"{prefix}*"):
            tail = path.name[len(prefix):]  # the attempt's 8 hex digits (not job "a-b" for job "a")
            if len(tail) == 8 and all(c in "0123456789abcdef" for c in tail):
                shutil.rmtree(path, ignore_errors=True)
                count += 1
        return count

    def sweep_staging(self, older_than_s: float, now: float) -> int:
        """Remove staging dirs left by crashed attempts. Other workers share the store, so only
        dirs older than ``older_than_s`` (longer than any live attempt keeps one) go."""
        count = 0
        for path in self.root.glob(".staging-*"):
            try:
                if now - path.stat().st_mtime > older_than_s:
                    shutil.rmtree(path, ignore_errors=True)
                    count += 1
            except FileNotFoundError:
                continue
        return count


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
