"""The migration's names: both topologies at once, a share of documents on the split one.

While migrating, producers keep writing to the one jobs stream (``queue.stream``). A router
(worker/router.py) consumes it with the workers' own group (``queue.group``) and forwards each
entry to one cohort stream, ``<stream>:split`` or ``<stream>:monolithic``, where that cohort's
workers read it. The share of documents on the split cohort lives in Redis next to the stream
(``<stream>:migration:share``, an integer 0..100), so it changes live and every forward reads it
in the same atomic step that moves the entry.

The cohort of a document is deterministic: ``bucket(job_id) < share`` puts it on split, where
``bucket`` is a hash of the job id onto 0..99. Raising the share only adds buckets, so a
document on split at 10 % stays on split at 50 % and 100 %.

The shadow sample: a second share (``<stream>:migration:shadow``, percent, absent = 0) picks
documents by another hash of the job id (independent of the cohort's bucket, so the sample
holds both cohorts' documents in proportion). While both cohorts take documents (share 1..99),
the router also puts a copy of each sampled document on the OTHER cohort's stream, under the
id ``<job_id>:shadow``: its output lands beside the primary one (its own folder), its job
record is not in the submission index, and its worker counts it in no metric, so it is never
a second completion of the document. The gate compares the two outputs.
"""

from __future__ import annotations

import hashlib
import re

SPLIT = "split"
MONOLITHIC = "monolithic"
TOPOLOGIES = (SPLIT, MONOLITHIC)
SHARE_STEPS = (10, 50, 100)  # the rollout's steps (and 0: every document on monolithic)
# The worker reads its cohort's stream when this is "1" (the launcher sets it while migrating).
ENV_COHORT_STREAMS = "SPLITSTACK_MIGRATION_COHORTS"
TOPOLOGY_LABEL = "topology"  # the Prometheus label and output-record field naming the cohort
# Kubernetes, while migrating (infra/components/migration.py): the router's Deployment, and the
# monolithic pool's objects (its own name: not deployment_mode monolithic's worker-gpu, which a
# cluster coming from that mode still holds until `pulumi up` deletes it).
ROUTER_DEPLOYMENT = "router"
MONOLITHIC_POOL_DEPLOYMENT = "worker-monolithic"


SHADOW_SUFFIX = ":shadow"  # the shadow copy's job id: the document's id + this (a valid job id)
_SHADOW_ID = re.compile(r"^(.+):shadow(?:\.p\d{4})?$")  # a part's id: worker/fanout.py part_id
SHADOW_ID_MAX = 128  # worker/jobs.py JOB_ID_PATTERN: a longer shadow id is not made (no copy)


def share_key(stream: str) -> str:
    """The Redis key holding the split cohort's share in percent (absent = 0)."""
    return f"{stream}:migration:share"


def cohort_stream(stream: str, topology: str) -> str:
    """The stream one cohort's workers read while migrating."""
    if topology not in TOPOLOGIES:
        raise ValueError(f"topology {topology!r} is not one of {', '.join(TOPOLOGIES)}")
    return f"{stream}:{topology}"


def bucket(document_id: str) -> int:
    """The document's bucket, 0..99: the same id always gives the same bucket (any process,
    any Python: not ``hash()``, which is salted per process)."""
    digest = hashlib.sha256(document_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % 100


def cohort_of(document_id: str, share_percent: int) -> str:
    """The cohort a document lands in at this share."""
    return SPLIT if bucket(document_id) < share_percent else MONOLITHIC


def check_share(value: int) -> int:
    if not 0 <= value <= 100:
        raise ValueError(f"share {value} is outside 0..100 (percent of documents on the split cohort)")
    return value


def shadow_key(stream: str) -> str:
    """The Redis key holding the shadow sample's share in percent (absent = 0: no sample)."""
    return f"{stream}:migration:shadow"


def shadow_bucket(document_id: str) -> int:
    """The document's shadow bucket, 0..99: ``< shadow share`` puts it in the sample. Salted,
    so it does not follow the cohort's bucket."""
    return bucket(f"shadow|{document_id}")


def shadow_id(document_id: str) -> str:
    """The job id of a document's shadow copy."""
    return document_id + SHADOW_SUFFIX


def shadow_of(job_id: str) -> str | None:
    """The document a shadow copy's job id shadows (its parts' too: ``<id>:shadow.p0001``);
    None for a document's own job."""
    m = _SHADOW_ID.match(job_id)
    return m.group(1) if m else None
