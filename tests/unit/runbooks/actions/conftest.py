"""The runbook tests' fixtures: the prod spec, the fake Kubernetes API (testsupport/fakekube.py)
and an action context on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contract.spec import Spec
from contract.spec_loader import load_stack, project_root
from runbooks.audit import AuditLog
from runbooks.context import ActionContext
from runbooks.platforms.kubernetes import KubernetesPlatform
from runbooks.settings import SafetySettings
from testsupport.fakekube import Clock, FakeApiClient, FakeKube, FakeResponse

ROOT = project_root(Path(__file__))
__all__ = ["Clock", "FakeApiClient", "FakeKube", "FakeResponse"]


@pytest.fixture
def prod_spec() -> Spec:
    return load_stack("prod", ROOT)


@pytest.fixture
def kube(prod_spec: Spec) -> FakeKube:
    return FakeKube(prod_spec)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_ctx(prod_spec: Spec, kube: FakeKube, clock: Clock, tmp_path: Path):
    def make(apply: bool = False, prometheus: Any = None, **safety: Any) -> ActionContext:
        platform = KubernetesPlatform(prod_spec, kube, kube, context="fake")
        return ActionContext(spec=prod_spec, platform=platform, audit=AuditLog(tmp_path / "audit.jsonl", clock),
                             apply=apply, actor="oncall@test", prometheus=prometheus,
                             safety=SafetySettings(**{"ready_timeout_s": 30, **safety}),
                             use_real_nvml=False, clock=clock, sleep=clock.sleep)
    return make

