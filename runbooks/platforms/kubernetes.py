"""Kubernetes as a runbook platform, through the official client (PyPI `kubernetes`).

Objects are the ones infra/ renders: Deployment ``<server name>`` (container ``server``, vLLM
flags as args) and Deployment ``worker`` (settings as SPLITSTACK_* env), selected by the
app.kubernetes.io labels of contract/naming.py. The API clients are injected, so tests
pass a fake; `from_kubeconfig` builds the real ones. API errors become the two failure kinds:
401/403/404 are Refused (permissions, wrong target: retrying will not help), connection errors
and 5xx are PlatformError.
"""

from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

from urllib3.exceptions import HTTPError as Urllib3Error

from contract import naming
from contract.extras import require
from contract.spec import DeploymentMode, Spec
from runbooks.model import PlatformError, Refused
from runbooks.platforms.base import WORKERS, ComponentState, HttpResult, NodeState
from runbooks.platforms.specpatch import SERVER_SETTINGS, WORKER_SETTINGS, typed_changes

RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"  # what `kubectl rollout restart` sets
SERVER_CONTAINER = "server"
SERVER_FLAGS = {"max_num_batched_tokens": "--max-num-batched-tokens", "max_num_seqs": "--max-num-seqs",
                "max_model_len": "--max-model-len", "gpu_memory_utilization": "--gpu-memory-utilization"}
# The worker settings a runbook may change on Kubernetes: fields of worker_pool in the spec the
# workers read from their ConfigMap (contract/naming.py worker_spec_config_map).
WORKER_FIELDS = ("concurrency_per_worker", "jobs_per_worker", "request_timeout_s", "max_retries")


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class KubernetesPlatform:
    kind = "kubernetes"

    def __init__(self, spec: Spec, core: Any, apps: Any, context: str = "", clock=None) -> None:
        self.spec = spec
        self.core, self.apps = core, apps
        self.context = context
        self.ns = spec.namespace
        self._now = clock or (lambda: datetime.now(UTC))

    @classmethod
    def from_kubeconfig(cls, spec: Spec, context: str | None = None) -> KubernetesPlatform:
        client, config = _kubernetes().client, _kubernetes().config
        try:
            # KUBECONFIG read now, not at the client's import (its default is frozen then).
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), context=context)
        except (config.ConfigException, OSError) as exc:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                fix = (f"check that context {context!r} is in the kubeconfig (`kubectl config get-contexts`)"
                       if context else "set KUBECONFIG or pass --kube-context")
                raise Refused(f"no Kubernetes credentials: {exc}; {fix}") from exc
        api = client.ApiClient()
        return cls(spec, client.CoreV1Api(api), client.AppsV1Api(api), context or "current-context")

    # -- errors -------------------------------------------------------------------------------
    def _call(self, what: str, fn, *args, **kwargs):
        ApiException = _kubernetes().client.exceptions.ApiException  # noqa: N806 - a class
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            if exc.status in (401, 403):
                raise Refused(f"missing permissions: the cluster refused to {what} in namespace "
                              f"{self.ns} (HTTP {exc.status}); the runbooks need get/list/patch on "
                              "deployments, pods, pods/log, pods/eviction, nodes, secrets and "
                              "services/proxy") from exc
            if exc.status == 404:
                raise Refused(f"cannot {what}: not found in namespace {self.ns} (is stack "
                              f"{self.spec.stack!r} deployed? `pulumi up`)") from exc
            raise PlatformError(f"the cluster failed to {what}: HTTP {exc.status} {exc.reason}") from exc
        except (Urllib3Error, OSError) as exc:
            raise PlatformError(f"the cluster is unreachable ({type(exc).__name__}: {exc}); check "
                                f"the kube context {self.context!r} and the VPN") from exc

    # -- names --------------------------------------------------------------------------------
    def _deployment(self, component: str) -> tuple[str, dict[str, str]]:
        if component == WORKERS:
            mono = self.spec.deployment_mode.value == "monolithic"
            return (naming.MONOLITHIC_NAME if mono else naming.WORKER_NAME), naming.worker_labels(mono)
        if component.startswith("server-"):
            server = self.spec.server(component[len("server-"):])
            return server.name, naming.server_labels(server)
        raise Refused(f"component {component!r}: use server-<name> or workers")

    def target(self) -> str:
        return f"kubernetes {self.context} namespace {self.ns}"

    def verify_target(self) -> list[str]:
        problems = []
        for comp in [f"server-{s.name}" for s in self.spec.inference_servers if s.replicas] + [WORKERS]:
            if comp == WORKERS and self.spec.worker_pool.replicas == 0:
                continue
            name, labels = self._deployment(comp)
            dep = self._call(f"read deployment {name}", self.apps.read_namespaced_deployment, name, self.ns)
            have = dep.metadata.labels or {}
            wrong = {k: have.get(k) for k, v in labels.items() if have.get(k) != v}
            if wrong:
                problems.append(f"deployment {self.ns}/{name} is not the spec's {comp} (labels {wrong}, "
                                f"expected {labels})")
        return problems

    # -- reading ------------------------------------------------------------------------------
    def _pods(self, labels: dict[str, str], node: str | None = None) -> list[Any]:
        kwargs: dict[str, Any] = {"label_selector": _selector(labels)}
        if node:
            kwargs["field_selector"] = f"spec.nodeName={node}"
        return self._call("list pods", self.core.list_namespaced_pod, self.ns, **kwargs).items

    def units(self, component: str) -> list[str]:
        self._deployment(component)
        return [component]  # a Deployment rolls its pods itself (maxUnavailable)

    def state(self, component: str) -> ComponentState:
        name, labels = self._deployment(component)
        dep = self._call(f"read deployment {name}", self.apps.read_namespaced_deployment, name, self.ns)
        pods = self._pods(labels)
        want = dep.spec.replicas or 0
        st = dep.status
        rolled = ((st.observed_generation or 0) >= (dep.metadata.generation or 0)
                  and (st.updated_replicas or 0) >= want and (st.available_replicas or 0) >= want
                  and (st.replicas or 0) <= want)
        failed = any(c.type == "Progressing" and c.reason == "ProgressDeadlineExceeded"
                     for c in (st.conditions or []))
        state, reason, code, restarts = "running", None, None, 0
        for pod in pods:
            for cs in pod.status.container_statuses or []:
                restarts += cs.restart_count or 0
                waiting = cs.state.waiting if cs.state else None
                last = cs.last_state.terminated if cs.last_state else None
                now = cs.state.terminated if cs.state else None
                term = now or last
                if term is not None and reason is None:
                    reason, code = term.reason or f"exit code {term.exit_code}", term.exit_code
                if waiting is not None and waiting.reason == "CrashLoopBackOff":
                    state = "crashloop"
                elif waiting is not None and state == "running":
                    state = "starting" if waiting.reason == "ContainerCreating" else waiting.reason.lower()
            if pod.status.phase == "Pending" and state == "running":
                state = "pending"
        if not pods:
            state = "stopped" if want == 0 else "missing"
        ready = st.ready_replicas or 0
        images = sorted({c.image for p in pods for c in p.spec.containers})
        return ComponentState(
            name=component, state=state, healthy=rolled and want > 0 and ready >= want,
            detail=f"{ready}/{want} ready, {st.updated_replicas or 0} updated", exit_reason=reason,
            exit_code=code, restarts=restarts, failed=failed,
            pids_or_pods=[p.metadata.name for p in pods],
            nodes=sorted({p.spec.node_name for p in pods if p.spec.node_name}),
            version=", ".join(i.rsplit(":", 1)[-1] for i in images))

    def logs(self, component: str, tail_lines: int = 200) -> str:
        _, labels = self._deployment(component)
        out = []
        for pod in self._pods(labels):
            crashed = any((cs.restart_count or 0) > 0 for cs in pod.status.container_statuses or [])
            try:
                text = self._call(f"read log of {pod.metadata.name}", self.core.read_namespaced_pod_log,
                                  pod.metadata.name, self.ns, tail_lines=tail_lines, previous=crashed)
            except PlatformError as exc:
                # The API server reads logs from the node's kubelet: on a failed node (the very
                # case a runbook is for) it answers 5xx. Logs are evidence, not a precondition.
                text = f"[logs of pod {pod.metadata.name} unavailable: {exc}]"
            out.append(text or "")
        return "\n".join(out)

    def _container(self, dep: Any, component: str) -> Any:
        containers = dep.spec.template.spec.containers
        if component == WORKERS:
            return containers[0]
        return next((c for c in containers if c.name == SERVER_CONTAINER), containers[0])

    def settings(self, component: str) -> dict[str, Any]:
        name, _ = self._deployment(component)
        dep = self._call(f"read deployment {name}", self.apps.read_namespaced_deployment, name, self.ns)
        c = self._container(dep, component)
        out: dict[str, Any] = {"image_tag": c.image.rsplit(":", 1)[-1]}
        if component == WORKERS:
            pool = self._worker_spec()[1].get("worker_pool", {})
            out.update({k: pool[k] for k in WORKER_FIELDS if k in pool})
            return out
        args = list(c.args or c.command or [])
        for key, flag in SERVER_FLAGS.items():
            if flag in args:
                out[key] = typed_changes(self.spec, component, {key: args[args.index(flag) + 1]})[key]
        return out

    # -- acting -------------------------------------------------------------------------------
    def restart(self, component: str) -> None:
        name, _ = self._deployment(component)
        patch = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: self._now().isoformat()}}}}}
        self._call(f"restart deployment {name}", self.apps.patch_namespaced_deployment, name, self.ns, patch)

    def apply_settings(self, component: str, changes: dict[str, Any]) -> None:
        typed = typed_changes(self.spec, component, changes)
        name, _ = self._deployment(component)
        dep = self._call(f"read deployment {name}", self.apps.read_namespaced_deployment, name, self.ns)
        c = self._container(dep, component)
        patch_c: dict[str, Any] = {"name": c.name}
        unsupported = [k for k in typed if k not in ("image_tag", *(WORKER_FIELDS if component == WORKERS
                                                                   else (*SERVER_FLAGS, "extra_args")))]
        if unsupported:
            raise Refused(f"{component}: {', '.join(unsupported)} is not a run-time setting of the "
                          "Kubernetes objects infra/ renders; change it in the spec and `pulumi up`")
        if "image_tag" in typed:
            patch_c["image"] = f"{c.image.rsplit(':', 1)[0]}:{typed['image_tag']}"
        template_meta: dict[str, Any] = {}
        if component == WORKERS:
            fields = {k: v for k, v in typed.items() if k in WORKER_FIELDS}
            if fields:
                template_meta = self._patch_worker_spec(fields)
        else:
            args = list(c.args or [])
            for key, value in typed.items():
                if key in SERVER_FLAGS:
                    flag = SERVER_FLAGS[key]
                    text = f"{value:g}" if isinstance(value, float) else str(value)
                    if flag in args:
                        args[args.index(flag) + 1] = text
                    else:
                        args += [flag, text]
            if "extra_args" in typed:
                args = _replace_extra(args, self.spec.server(component[7:]).extra_args, typed["extra_args"])
            if args != list(c.args or []):
                patch_c["args"] = args
        patch = {"spec": {"template": {"spec": {"containers": [patch_c]}, **template_meta}}}
        self._call(f"patch deployment {name}", self.apps.patch_namespaced_deployment, name, self.ns, patch)

    def _worker_spec(self) -> tuple[str, dict[str, Any]]:
        name = naming.worker_spec_config_map(self.spec.deployment_mode is DeploymentMode.monolithic)
        cm = self._call(f"read configmap {name}", self.core.read_namespaced_config_map, name, self.ns)
        return name, json.loads((cm.data or {}).get(naming.WORKER_SPEC_KEY, "{}"))

    def _patch_worker_spec(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Write ``fields`` into the workers' spec ConfigMap; the template metadata that rolls
        them (its new digest). A later `pulumi up` puts the stack file's values back: the spec
        file stays the source of truth, as `tune`'s report says."""
        name, doc = self._worker_spec()
        doc.setdefault("worker_pool", {}).update(fields)
        text = json.dumps(doc, indent=2)
        self._call(f"patch configmap {name}", self.core.patch_namespaced_config_map, name, self.ns,
                   {"data": {naming.WORKER_SPEC_KEY: text}})
        return {"metadata": {"annotations": {naming.WORKER_SPEC_DIGEST_ANNOTATION: naming.spec_digest(text)}}}

    def http(self, component: str, method: str, path: str, json_body: Any = None,
             timeout_s: float = 30.0) -> HttpResult:
        name, _ = self._deployment(component)
        port = self.spec.server(component[7:]).port if component.startswith("server-") \
            else self.spec.worker_pool.metrics_port
        return self.service_http(self.ns, name, port, method, path, json_body, timeout_s)

    def rendered(self, deployment: str) -> bool:
        """Does Deployment ``deployment`` exist in the stack's namespace (did `pulumi up` create it)?"""
        ApiException = _kubernetes().client.exceptions.ApiException  # noqa: N806 - a class

        def read() -> bool:
            try:
                self.apps.read_namespaced_deployment(deployment, self.ns)
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise  # _call says what it means
            return True

        return bool(self._call(f"read deployment {deployment}", read))

    def service_http(self, namespace: str, service: str, port: int, method: str, path: str,
                     json_body: Any = None, timeout_s: float = 30.0) -> HttpResult:
        """An HTTP request to a Service, through the API server's service proxy, with the
        client's own auth (no port-forward). The generated connect_*_proxy methods take no
        request body (client 37), so the request is built with the ApiClient the way they
        build theirs."""
        api = self.core.api_client
        resource = f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy/{path.lstrip('/')}"
        params = api.param_serialize(method=method, resource_path=resource,
                                     header_params={"Content-Type": "application/json",
                                                    "Accept": "application/json"},
                                     body=json_body, auth_settings=["BearerToken"])
        response = self._call(f"proxy {method} {path} to service {namespace}/{service}", api.call_api, *params,
                              _request_timeout=timeout_s)
        data = response.read()
        return HttpResult(response.status, data.decode(errors="replace") if isinstance(data, bytes) else str(data))

    def scale(self, component: str, replicas: int) -> None:
        name, _ = self._deployment(component)
        self._call(f"scale deployment {name}", self.apps.patch_namespaced_deployment_scale, name,
                   self.ns, {"spec": {"replicas": replicas}})

    def set_deployment_mode(self, mode: DeploymentMode) -> list[str]:
        # The two modes are different objects (the `worker` Deployment and the server's, or the
        # GPU `worker-gpu` Deployment with its model cache): the Pulumi program creates and
        # deletes them, so a cluster switches with `pulumi up`, not with patches made here.
        other = "split" if mode is DeploymentMode.monolithic else "monolithic"
        raise Refused(
            f"on Kubernetes the switch to deployment_mode {mode.value!r} is a Pulumi change, in two "
            f"`pulumi up --stack {self.spec.stack}` runs: first scale the {other} GPU pods to 0 "
            "(worker_pool.replicas: 0" + (", every inference_servers[].replicas: 0" if other == "split"
                                          else "") +
            f"; the queue keeps the documents), then set splitstack:deployment_mode: {mode.value} "
            f"with the counts back in Pulumi.{self.spec.stack}.yaml (in one run the new GPU pods "
            "would wait for GPUs the old ones still hold until Pulumi times out). Check it first "
            f"with `splitstack infra plan --stack {self.spec.stack}` (the dry run of `runbook "
            f"rollback` lists what changes and whether the cluster fits); afterwards `runbook "
            f"rollback --to {mode.value} --apply` checks the result")

    def nodes(self) -> list[NodeState]:
        selector = naming.gpu_node_selector(self.spec)
        kwargs = {"label_selector": _selector(selector)} if selector else {}
        out = []
        for n in self._call("list nodes", self.core.list_node, **kwargs).items:
            conds = {c.type: f"{c.status} {c.reason or ''}".strip() for c in n.status.conditions or []}
            gpus = int((n.status.allocatable or {}).get(naming.GPU_RESOURCE, "0"))
            out.append(NodeState(n.metadata.name, ready=conds.get("Ready", "").startswith("True"),
                                 schedulable=not n.spec.unschedulable, gpu_allocatable=gpus,
                                 conditions=conds))
        return out

    def cordon(self, node: str, on: bool = True) -> None:
        self._call(f"{'cordon' if on else 'uncordon'} node {node}", self.core.patch_node, node,
                   {"spec": {"unschedulable": on}})

    def evict_component_pods(self, component: str, node: str, force: bool = False) -> list[str]:
        client = _kubernetes().client
        _, labels = self._deployment(component)
        names = []
        for pod in self._pods(labels, node):
            name = pod.metadata.name
            if force:  # the node is gone: the kubelet can no longer confirm a graceful stop
                self._call(f"delete pod {name}", self.core.delete_namespaced_pod, name, self.ns,
                           grace_period_seconds=0)
            else:  # the Eviction API honours PodDisruptionBudgets, as `kubectl drain` does
                body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=self.ns))
                self._call(f"evict pod {name}", self.core.create_namespaced_pod_eviction, name, self.ns, body)
            names.append(name)
        return names

    def secret_value(self, name: str, key: str) -> str | None:
        secret = self._call(f"read secret {name}", self.core.read_namespaced_secret, name, self.ns)
        raw = (secret.data or {}).get(key)
        return base64.b64decode(raw).decode() if raw is not None else None

    def set_secret_value(self, name: str, key: str, value: str) -> None:
        patch = {"data": {key: base64.b64encode(value.encode()).decode()}}
        self._call(f"patch secret {name}", self.core.patch_namespaced_secret, name, self.ns, patch)


def _replace_extra(args: list[str], old: list[str], new: list[str]) -> list[str]:
    n = len(old)
    if n and args[-n:] == old:
        args = args[:-n]
    return [*args, *new]


__all__ = ["KubernetesPlatform", "SERVER_SETTINGS", "WORKER_SETTINGS"]


def _kubernetes() -> ModuleType:
    """The official Kubernetes client (the `runbooks` extra), imported when a cluster is used."""
    kubernetes = require("kubernetes", "runbooks", "runbook actions on a Kubernetes stack")
    require("kubernetes.client.exceptions", "runbooks", "runbook actions on a Kubernetes stack")
    return kubernetes
