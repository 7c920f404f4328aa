"""A local Kubernetes cluster (real etcd, API server, controller manager, scheduler; kwok nodes
shaped like dev's) for the tests of this folder, one per test file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stack.cluster.cluster import LocalCluster
from stack.cluster.tools import go_tools
from stack.component import SetupError
from testsupport.cluster import ROOT, running_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    try:
        go_tools(ROOT)
    except SetupError as exc:  # `make test` builds them first (`make tools`); say so, loudly
        pytest.fail(str(exc))
    state: Path = tmp_path_factory.mktemp("cluster")
    with running_cluster(state) as c:
        yield c
