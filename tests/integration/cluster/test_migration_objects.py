"""While migrating (migration.monolithic_workers), every object the program renders is accepted
by a real API server (schemas, the CRDs' structural schemas of ServiceMonitor and ScaledObject,
strict field validation, admission), created as a server-side dry run in the rendered namespace;
the real scheduler places the monolithic pool's GPU workers beside the server
(test_fit_vs_scheduler.py's migrating variant)."""

from __future__ import annotations

import pytest
from kubernetes import client, dynamic

from infra.render import capture
from stack.cluster.cluster import LocalCluster
from testsupport.cluster import ROOT, variant

pytestmark = pytest.mark.integration


def test_the_migrating_program_is_accepted_by_the_api_server(cluster: LocalCluster) -> None:
    spec = variant("localk8s", {"gpu_node_pool.node_count": 2, "migration.monolithic_workers": 1,
                                "worker_pool.max_replicas": 4})
    objects = capture(spec, ROOT).objects
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert {("Deployment", "router"), ("Deployment", "worker-monolithic"), ("Deployment", "worker"),
            ("ServiceMonitor", "worker-monolithic"), ("ScaledObject", "worker"),
            ("PodDisruptionBudget", "worker-monolithic"),
            ("NetworkPolicy", "router-egress")} <= names
    api = cluster.api()
    (ns,) = [o for o in objects if o["kind"] == "Namespace"]
    client.CoreV1Api(api).create_namespace(ns)  # real: the dry runs below need it to exist
    dyn = dynamic.DynamicClient(api)
    accepted = []
    for obj in objects:
        if obj["kind"] == "Namespace" or obj["metadata"].get("namespace") != spec.namespace:
            continue  # the monitoring namespace's objects are kube-prometheus-stack's, not the migration's
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        # Strict: an unknown or duplicate field is an error, not a silently dropped one.
        resource.create(body=obj, namespace=spec.namespace,
                        query_params=[("dryRun", "All"), ("fieldValidation", "Strict")])
        accepted.append((obj["kind"], obj["metadata"]["name"]))
    assert ("Deployment", "router") in accepted and ("ServiceMonitor", "worker-monolithic") in accepted
    print(f"accepted (server-side dry run, strict): {len(accepted)} objects: "
          + ", ".join(f"{k}/{n}" for k, n in sorted(accepted)))
