"""Pulumi secrets in, secretKeyRef out: Secrets from the encrypted ``splitstack-secrets:`` config.

The real program runs under mocks; the stack's config is set the way the engine hands it to the
program (``pulumi.runtime.set_all_config`` with the secret keys listed). A recording monitor
keeps what the SDK put on the wire: whether a value went as a secret, and each resource's
dependencies.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pulumi
import pytest
import yaml
from pulumi.runtime import rpc

from contract.spec_loader import parse_spec
from infra.components.program import build
from infra.components.secrets import SecretsConfigError, config_key
from infra.render import REDACTED, CaptureMocks, capture, write_manifests

from .infra_helpers import ROOT, RecordingMonitor, make_raw, make_spec

API_KEY = "sk-test-3f9a-never-in-plaintext"
HF_TOKEN = "hf_test_token_never_in_plaintext"
API_KEY_KEY = config_key("splitstack-api-key", "api-key")
HF_TOKEN_KEY = config_key("splitstack-hf-token", "token")
SECRET_TYPE = "kubernetes:core/v1:Secret"
DEPLOYMENT_TYPE = "kubernetes:apps/v1:Deployment"


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig


@pytest.fixture
def recorder() -> RecordingMonitor:
    mocks = CaptureMocks()
    monitor = RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="splitstack", stack="test", preview=False,
                             monitor=monitor)
    return monitor


@pytest.fixture
def stack_config() -> Iterator[Any]:
    """stack_config(values, secret=True): the stack's config as the engine passes it."""

    def set_config(values: dict[str, str], secret: bool = True) -> None:
        pulumi.runtime.set_all_config(dict(values), list(values) if secret else [])

    yield set_config
    pulumi.runtime.set_all_config({}, [])


def container_env(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for c in obj["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])]


def test_sdk_reads_secret_config_as_the_program_does(stack_config):
    stack_config({API_KEY_KEY: API_KEY})
    assert pulumi.runtime.get_config(API_KEY_KEY) == API_KEY
    assert pulumi.runtime.is_config_secret(API_KEY_KEY)


@pulumi.runtime.test
def test_secret_values_become_secrets_that_deployments_wait_for(recorder, stack_config, after_build):
    stack_config({API_KEY_KEY: API_KEY, HF_TOKEN_KEY: HF_TOKEN})
    deployment = build(make_spec("existing", "split"), ROOT)

    def check() -> None:
        mocks: CaptureMocks = recorder.mocks
        secrets = {r.inputs["metadata"]["name"]: r for r in mocks.of_type(SECRET_TYPE)}
        assert sorted(secrets) == ["splitstack-api-key", "splitstack-hf-token"]
        api = secrets["splitstack-api-key"]
        assert api.inputs["type"] == "Opaque"
        assert api.inputs["metadata"]["namespace"] == "splitstack-test"
        assert api.inputs["stringData"] == {"api-key": REDACTED}
        # On the wire the value went as a Pulumi secret: encrypted in the state.
        wire = recorder.wire[api.name]["stringData"]
        assert is_secret(wire) and wire["value"] == {"api-key": API_KEY}
        assert is_secret(recorder.wire[secrets["splitstack-hf-token"].name]["stringData"])
        urn = {n: recorder.urns[r.name] for n, r in secrets.items()}
        server = recorder.dependencies[(DEPLOYMENT_TYPE, "server-mineru-vlm")]
        assert urn["splitstack-api-key"] in server and urn["splitstack-hf-token"] in server
        workers = recorder.dependencies[(DEPLOYMENT_TYPE, "workers")]
        assert urn["splitstack-api-key"] in workers and urn["splitstack-hf-token"] not in workers
        # Containers read the values through secretKeyRef only.
        deployments = {r.inputs["metadata"]["name"]: r.inputs for r in mocks.of_type(DEPLOYMENT_TYPE)}
        env = {e["name"]: e for e in container_env(deployments["mineru-vlm"])}
        assert env["VLLM_API_KEY"]["valueFrom"] == {
            "secretKeyRef": {"name": "splitstack-api-key", "key": "api-key"}}
        assert env["HF_TOKEN"]["valueFrom"] == {
            "secretKeyRef": {"name": "splitstack-hf-token", "key": "token"}}
        captured = json.dumps([r.inputs for r in mocks.resources])
        assert API_KEY not in captured and HF_TOKEN not in captured
        # The program creates both: only the Redis password (no value in the config) is left.
        assert deployment.outputs["commands"]["create_secrets"] == [
            'kubectl -n splitstack-test create secret generic splitstack-redis-auth '
            '--from-literal=password="$SPLITSTACK_REDIS_PASSWORD"']

    return after_build(deployment, check)


@pulumi.runtime.test
def test_monolithic_workers_wait_for_the_hf_token_secret(recorder, stack_config, after_build):
    stack_config({HF_TOKEN_KEY: HF_TOKEN})
    deployment = build(make_spec("existing", "monolithic"), ROOT)

    def check() -> None:
        secrets = recorder.mocks.of_type(SECRET_TYPE)
        assert [r.inputs["metadata"]["name"] for r in secrets] == ["splitstack-hf-token"]
        assert recorder.urns[secrets[0].name] in recorder.dependencies[(DEPLOYMENT_TYPE, "workers")]
        # The API key has no value in the config: its Secret must still be created by hand.
        assert deployment.outputs["commands"]["create_secrets"] == [
            'kubectl -n splitstack-test create secret generic splitstack-api-key '
            '--from-literal=api-key="$SPLITSTACK_API_KEY"',
            'kubectl -n splitstack-test create secret generic splitstack-redis-auth '
            '--from-literal=password="$SPLITSTACK_REDIS_PASSWORD"']

    return after_build(deployment, check)


@pulumi.runtime.test
def test_without_values_no_secret_is_created(recorder, stack_config, after_build):
    stack_config({})
    deployment = build(make_spec("existing", "split"), ROOT)

    def check() -> None:
        assert recorder.mocks.of_type(SECRET_TYPE) == []
        assert deployment.secrets is None
        assert len(deployment.outputs["commands"]["create_secrets"]) == 3  # + Redis password
        server_deps = recorder.dependencies[(DEPLOYMENT_TYPE, "server-mineru-vlm")]
        assert not any("Secret" in urn for urn in server_deps)

    return after_build(deployment, check)


@pulumi.runtime.test
def test_plain_value_is_refused(recorder, stack_config):
    stack_config({API_KEY_KEY: API_KEY}, secret=False)
    with pytest.raises(SecretsConfigError) as err:
        build(make_spec("existing", "split"), ROOT)
    assert str(err.value) == (
        "splitstack-secrets:splitstack-api-key.api-key: a plain value sits unencrypted in "
        "Pulumi.test.yaml; remove it (`pulumi config rm splitstack-secrets:splitstack-api-key"
        ".api-key`) and set it encrypted with `pulumi config set --secret "
        "splitstack-secrets:splitstack-api-key.api-key VALUE`")
    assert API_KEY not in str(err.value)


@pulumi.runtime.test
def test_key_of_no_secret_ref_is_refused(recorder, stack_config):
    stack_config({config_key("splitstack-api-key", "apikey"): API_KEY})
    with pytest.raises(SecretsConfigError, match=(
            r"splitstack-api-key.apikey: no SecretRef of the spec is Secret 'splitstack-api-key' "
            r"key 'apikey'.*one of \['splitstack-secrets:splitstack-api-key.api-key', "
            r"'splitstack-secrets:splitstack-hf-token.token', "
            r"'splitstack-secrets:splitstack-redis-auth.password'\]")):
        build(make_spec("existing", "split"), ROOT)


@pulumi.runtime.test
def test_half_a_secret_is_refused(recorder, stack_config):
    raw = make_raw("existing", "split")
    raw["inference_servers"][0]["hf_token"] = {
        "name": "splitstack-api-key", "key": "token", "env": "HF_TOKEN"}
    stack_config({API_KEY_KEY: API_KEY})
    with pytest.raises(SecretsConfigError, match=(
            r"splitstack-api-key.token: Secret 'splitstack-api-key' is created from the stack's "
            r"config, but key\(s\) \['token'\] have no value there; set them too")):
        build(parse_spec(raw), ROOT)


def test_render_never_writes_a_secret_value(stack_config, tmp_path):
    stack_config({API_KEY_KEY: API_KEY, HF_TOKEN_KEY: HF_TOKEN})
    result = capture(make_spec("existing", "split"), ROOT)
    files = write_manifests(result, tmp_path)
    text = "".join(p.read_text() for p in files)
    assert API_KEY not in text and HF_TOKEN not in text
    secret = yaml.safe_load((tmp_path / "secret.splitstack-test.splitstack-api-key.yaml").read_text())
    assert secret["kind"] == "Secret" and secret["stringData"] == {"api-key": REDACTED}
