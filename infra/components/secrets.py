"""Pulumi secrets in, ``secretKeyRef`` out: Kubernetes Secrets from the stack's encrypted config.

``pulumi config set --secret splitstack-secrets:<secret name>.<key> VALUE`` stores the value
encrypted in ``Pulumi.<stack>.yaml``. For every SecretRef of the spec whose value is there, the
program creates the Kubernetes Secret (``string_data`` from a secret Output, so it stays
encrypted in the state too) and the Deployments that read it wait for it. Containers keep
reading it through ``secretKeyRef`` only. A SecretRef without a value keeps today's contract:
the Secret must exist already (the stack output ``create_secrets`` prints the commands).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from pulumi.runtime import config as runtime_config

from contract import naming
from contract.spec import DeploymentMode, InferenceServer, SecretRef, Spec
from infra.components.base import child, metadata

NAMESPACE = "splitstack-secrets"
WORKLOAD_TYPES = ("kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:StatefulSet")

RefKey = tuple[str, str]  # (Secret name, key inside it)


class SecretsConfigError(ValueError):
    """The ``splitstack-secrets:`` config cannot be used as it is; the message says the fix."""


def config_key(name: str, key: str) -> str:
    return f"{NAMESPACE}:{name}.{key}"


def server_refs(server: InferenceServer) -> list[SecretRef]:
    return [ref for ref in (server.api_key, server.hf_token) if ref is not None]


def worker_refs(spec: Spec) -> list[SecretRef]:
    """The worker reads the worker server's hf_token (monolithic: it loads the model) or its
    api_key (split: it calls the server), as naming.worker_env puts them in its env."""
    server = spec.worker_server
    ref = server.hf_token if spec.deployment_mode is DeploymentMode.monolithic else server.api_key
    return [r for r in (ref, queue_ref(spec), *output_store_refs(spec)) if r is not None]


def output_store_refs(spec: Spec) -> list[SecretRef]:
    """The bucket's key pair (kind s3 with keys; none: the pod's default credentials)."""
    store = spec.output_store
    return [r for r in (store.access_key_id, store.secret_access_key)
            if r is not None and store.kind == "s3"]


def queue_ref(spec: Spec) -> SecretRef | None:
    """The in-cluster Redis password (Redis, the workers and KEDA read it)."""
    return spec.queue.password if spec.queue.kind == "in-cluster" else None


def spec_refs(spec: Spec) -> dict[RefKey, list[str]]:
    """Every distinct (name, key) the spec references -> the field paths that reference it."""
    out: dict[RefKey, list[str]] = {}
    for i, server in enumerate(spec.inference_servers):
        for field_name in ("api_key", "hf_token"):
            ref = getattr(server, field_name)
            if ref is not None:
                out.setdefault((ref.name, ref.key), []).append(
                    f"inference_servers[{i}].{field_name}")
    ref = queue_ref(spec)
    if ref is not None:
        out.setdefault((ref.name, ref.key), []).append("queue.password")
    for field_name in ("access_key_id", "secret_access_key"):
        ref = getattr(spec.output_store, field_name)
        if ref is not None and spec.output_store.kind == "s3":
            out.setdefault((ref.name, ref.key), []).append(f"output_store.{field_name}")
    return out


def _configured_keys() -> list[str]:
    """Every ``splitstack-secrets:`` key the engine handed the program (or a test set)."""
    keys = set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())
    return sorted(k for k in keys if k.startswith(f"{NAMESPACE}:"))


def read_secret_values(spec: Spec) -> dict[RefKey, pulumi.Output[str]]:
    """(name, key) -> the secret value as a secret Output, for each value the stack holds."""
    refs = spec_refs(spec)
    known = [config_key(*ref) for ref in sorted(refs)]
    values: dict[RefKey, pulumi.Output[str]] = {}
    for full in _configured_keys():
        if not pulumi.runtime.is_config_secret(full):
            raise SecretsConfigError(
                f"{full}: a plain value sits unencrypted in Pulumi.{pulumi.get_stack()}.yaml; "
                f"remove it (`pulumi config rm {full}`) and set it encrypted with "
                f"`pulumi config set --secret {full} VALUE`")
        name, dot, key = full[len(NAMESPACE) + 1:].partition(".")
        if not dot or (name, key) not in refs:
            raise SecretsConfigError(
                f"{full}: no SecretRef of the spec is Secret {name!r} key {key!r}; the key must "
                f"be '{NAMESPACE}:<secret name>.<key>' of an api_key, hf_token, queue.password or "
                f"output_store key, one of {known}")
        values[(name, key)] = pulumi.Output.secret(pulumi.runtime.get_config(full))
    _check_whole_secrets(refs, values)
    return values


def _check_whole_secrets(refs: dict[RefKey, list[str]], values: Mapping[RefKey, object]) -> None:
    # The program owns a Secret it creates: a key it does not know would be missing from it.
    for name in sorted({n for n, _ in values}):
        missing = sorted(k for n, k in refs if n == name and (n, k) not in values)
        if missing:
            raise SecretsConfigError(
                f"{config_key(name, missing[0])}: Secret {name!r} is created from the stack's "
                f"config, but key(s) {missing} have no value there; set them too with "
                f"`pulumi config set --secret {config_key(name, missing[0])} VALUE`, or remove "
                f"the other {NAMESPACE}:{name}.* keys and create the Secret yourself")


@dataclass(frozen=True)
class SecretsArgs:
    spec: Spec
    values: dict[RefKey, pulumi.Output[str]]


class SecretsComponent(pulumi.ComponentResource):
    """One Opaque Secret per Secret name that has values in the stack's config."""

    def __init__(self, name: str, args: SecretsArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("splitstack:infra:Secrets", name, None, opts)
        by_name: dict[str, dict[str, pulumi.Output[str]]] = {}
        for (secret, key), value in sorted(args.values.items(), key=lambda kv: kv[0]):
            by_name.setdefault(secret, {})[key] = value
        self.secrets: dict[str, k8s.core.v1.Secret] = {
            secret: k8s.core.v1.Secret(
                f"{name}-{secret}",
                metadata=metadata(secret, args.spec.namespace, naming.labels("secret", secret)),
                type="Opaque",
                string_data=data,
                opts=child(self),
            )
            for secret, data in by_name.items()
        }
        self.register_outputs({"names": sorted(self.secrets)})

    def needed_by(self, refs: list[SecretRef]) -> list[pulumi.Resource]:
        return [self.secrets[n] for n in sorted({r.name for r in refs}) if n in self.secrets]


def wait_for(secrets: list[pulumi.Resource]) -> Callable[
        [pulumi.ResourceTransformationArgs], pulumi.ResourceTransformationResult | None]:
    """A transformation for a component: its workloads depend on ``secrets`` (children do
    not inherit a component's depends_on, and the pods would start before their Secret)."""

    def transform(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
        if args.type_ not in WORKLOAD_TYPES or not secrets:
            return None
        return pulumi.ResourceTransformationResult(
            args.props,
            pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(depends_on=secrets)))

    return transform
