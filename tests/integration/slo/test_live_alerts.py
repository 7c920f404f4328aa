"""Every generated and hand-written rule file loads into a real Prometheus and evaluates without
errors. The live firing proof (InferenceServerDown fires after its `for`, within one scrape and
one evaluation, with its labels and runbook annotations, and resolves after a restart) runs on
the full local stack in test_full_stack_slo.py; a copy of it here cost a minute of CI."""

import time

import pytest

pytestmark = pytest.mark.integration

EVAL_S = 1


def test_every_rule_file_is_loaded_and_healthy(stack):
    prom, _, _ = stack
    groups = prom.client.get(f"{prom.url}/api/v1/rules").json()["data"]["groups"]
    names = {g["name"] for g in groups}
    assert {"inference-server", "workers", "slo-availability", "slo-pdf-error-rate", "slo-ttft-p95"} <= names
    # Rules are evaluated every second; give them two evaluations, then none may be unhealthy.
    time.sleep(2 * EVAL_S)
    groups = prom.client.get(f"{prom.url}/api/v1/rules").json()["data"]["groups"]
    bad = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r.get("health") == "err"]
    assert bad == []
