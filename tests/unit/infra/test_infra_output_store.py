"""output_store.kind s3 in the Pulumi program: no ReadWriteMany volume or shared class, the key
pair only as secretKeyRefs, HTTPS egress for the workers, and `infra plan` names the bucket."""

from __future__ import annotations

from functools import cache

from contract.cluster_fit import check_cluster_fit, storage_needs
from infra.components.network_policies import HTTPS, policies
from infra.compose import worker_environment
from infra.plan import build_plan, render_plan
from infra.render import Capture, capture

from .cluster_variants import derive
from .infra_helpers import ROOT

S3 = {"output_store.kind": "s3", "output_store.bucket": "doc-outputs", "output_store.prefix": "prod/v1",
      "output_store.endpoint_url": "https://storage.googleapis.com",
      "output_store.access_key_id": {"name": "outputs-hmac", "key": "id", "env": "OUT_KEY_ID"},
      "output_store.secret_access_key": {"name": "outputs-hmac", "key": "secret", "env": "OUT_SECRET"}}


@cache
def _render() -> Capture:
    return capture(derive("prod", S3), ROOT)


def test_no_rwx_volume_and_the_key_pair_only_by_reference() -> None:
    result = _render()
    claims = [o for o in result.objects if o["kind"] == "PersistentVolumeClaim"]
    assert [c["metadata"]["name"] for c in claims if "ReadWriteMany" in c["spec"]["accessModes"]] == []
    (worker,) = [o for o in result.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "worker"]
    pod = worker["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["outputs"]["emptyDir"] == {}  # where outputs are staged before the upload
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["OUT_KEY_ID"] == {"name": "OUT_KEY_ID",
                                 "valueFrom": {"secretKeyRef": {"name": "outputs-hmac", "key": "id"}}}
    assert env["OUT_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "outputs-hmac", "key": "secret"}
    assert result.outputs["output_store"] == "s3://doc-outputs/prod/v1"
    assert any(c.startswith("kubectl -n splitstack create secret generic outputs-hmac "
                            '--from-literal=id="$OUT_KEY_ID" --from-literal=secret="$OUT_SECRET"')
               for c in result.outputs["commands"]["create_secrets"]), result.outputs["commands"]


def test_no_shared_storage_class_needed_and_workers_reach_https() -> None:
    spec = derive("prod", S3)
    assert not any("output_store" in who for who in storage_needs(spec)["shared"])
    assert not [p for p in check_cluster_fit(spec) if p.field.startswith("output_store")]
    egress = policies(spec)["worker-egress"]["egress"]
    assert any(rule["ports"] == [HTTPS] for rule in egress), egress


def test_plan_names_the_bucket_and_no_output_volume() -> None:
    text = render_plan(build_plan(derive("prod", S3), ROOT))
    assert ("outputs: bucket s3://doc-outputs/prod/v1/ through https://storage.googleapis.com "
            "(keys from Secret 'outputs-hmac'); no volume; the bucket must exist") in text
    assert "PVC splitstack-outputs" not in text


def test_compose_takes_the_key_pair_from_host_variables() -> None:
    env = worker_environment(derive("dev", S3))
    assert env["OUT_KEY_ID"] == "${OUT_KEY_ID:?set OUT_KEY_ID in the environment of docker compose}"
    assert env["OUT_SECRET"] == "${OUT_SECRET:?set OUT_SECRET in the environment of docker compose}"
