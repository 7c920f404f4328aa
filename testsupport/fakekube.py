"""A fake of the Kubernetes API clients (CoreV1Api + AppsV1Api): no cluster exists here.

It returns the official client's model objects (V1Deployment, V1Pod...), applies patches the
way the API server would for the fields the runbooks touch (strategic merge of containers by
name, env by name), and plays the controller: after a template change the pods are replaced,
healthy unless `breaks(image, args)` says the new version crashes. The runbook tests use it
(tests/unit/runbooks/actions, and with a real Redis tests/integration/runbooks).
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from contract import naming
from contract.spec import Spec
from infra.workloads import vllm_args

_ids = itertools.count(1)


class FakeKube:
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.ns = spec.namespace
        self.calls: list[tuple[str, Any]] = []
        self.errors: dict[str, Exception] = {}  # method name -> exception to raise
        self.breaks: Callable[[str, list[str]], bool] = lambda image, args: "broken" in image
        self.logs: dict[str, str] = {}  # deployment name -> log text of its pods
        self.proxy: dict[str, tuple[int, str]] = {}  # path -> (status, body)
        self.deployments: dict[str, dict] = {}
        self.pods: dict[str, dict] = {}
        self.nodes = {f"gpu-{i}": {"ready": True, "unschedulable": False, "gpus": 1}
                      for i in range(spec.gpu_node_pool.node_count if spec.gpu_node_pool else 1)}
        self.secrets: dict[str, dict[str, str]] = {}
        for s in spec.inference_servers:
            self._deploy(s.name, naming.server_labels(s), "server", f"{s.image}:{s.image_tag}",
                         vllm_args(s), [], s.replicas)
            if s.hf_token:
                self.secrets[s.hf_token.name] = {s.hf_token.key: _b64("old-token")}
        w = spec.worker_pool
        # What the program renders: the spec in ConfigMap worker-spec, mounted by the workers
        # (infra/components/worker_pool.py); the worker reads nothing else of it.
        self.config_maps = {naming.worker_spec_config_map():
                            {naming.WORKER_SPEC_KEY: spec.model_dump_json(indent=2)}}
        self._deploy(naming.WORKER_NAME, naming.worker_labels(), "worker", f"{w.image}:{w.image_tag}",
                     [], [], w.replicas)

    # -- the controller ------------------------------------------------------------------------
    def _deploy(self, name, labels, container, image, args, env, replicas) -> None:
        self.deployments[name] = {"labels": labels, "container": container, "image": image,
                                  "args": list(args), "env": list(env), "replicas": replicas,
                                  "generation": 1, "annotations": {}, "failed": False}
        self._roll(name)

    def _roll(self, name: str) -> None:
        d = self.deployments[name]
        for pod in [p for p, v in self.pods.items() if v["deployment"] == name]:
            del self.pods[pod]
        crash = self.breaks(d["image"], d["args"])
        d["failed"] = crash
        for _ in range(d["replicas"]):
            self._new_pod(name, crash)

    def _new_pod(self, name: str, crash: bool = False, reason: str | None = None) -> str:
        d = self.deployments[name]
        node = next((n for n, v in sorted(self.nodes.items()) if v["ready"] and not v["unschedulable"]), None)
        pod = f"{name}-{next(_ids):05d}"
        self.pods[pod] = {"deployment": name, "node": node, "image": d["image"],
                          "crash": crash or node is None, "reason": reason or ("Error" if crash else None),
                          "restarts": 4 if crash else 0}
        return pod

    def crash(self, name: str, reason: str, log: str = "") -> None:
        """Make a deployment's pods crash-loop with `reason` (OOMKilled, Error...)."""
        for p in self.pods.values():
            if p["deployment"] == name:
                p.update(crash=True, reason=reason, restarts=3)
        self.logs[name] = log

    # -- AppsV1Api ----------------------------------------------------------------------------
    def _maybe_fail(self, method: str) -> None:
        if method in self.errors:
            raise self.errors[method]

    def read_namespaced_deployment(self, name: str, namespace: str) -> client.V1Deployment:
        self._maybe_fail("read_namespaced_deployment")
        assert namespace == self.ns
        if name not in self.deployments:
            raise ApiException(status=404, reason="Not Found")
        d = self.deployments[name]
        pods = [p for p in self.pods.values() if p["deployment"] == name]
        ok = sum(1 for p in pods if not p["crash"])
        conds = [client.V1DeploymentCondition(type="Progressing", status="False",
                                              reason="ProgressDeadlineExceeded")] if d["failed"] else []
        container = client.V1Container(name=d["container"], image=d["image"], args=d["args"] or None,
                                       env=[client.V1EnvVar(**e) for e in d["env"]] or None)
        return client.V1Deployment(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels=d["labels"],
                                         generation=d["generation"]),
            spec=client.V1DeploymentSpec(
                replicas=d["replicas"], selector=client.V1LabelSelector(match_labels=d["labels"]),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(annotations=d["annotations"] or None),
                    spec=client.V1PodSpec(containers=[container]))),
            status=client.V1DeploymentStatus(
                observed_generation=d["generation"], replicas=len(pods), updated_replicas=len(pods),
                ready_replicas=ok, available_replicas=ok, conditions=conds or None))

    def patch_namespaced_deployment(self, name: str, namespace: str, body: dict) -> None:
        self._maybe_fail("patch_namespaced_deployment")
        self.calls.append(("patch_deployment", (name, body)))
        d = self.deployments[name]
        tmpl = body["spec"]["template"]
        d["annotations"].update((tmpl.get("metadata") or {}).get("annotations") or {})
        for c in (tmpl.get("spec") or {}).get("containers", []):
            assert c["name"] == d["container"], "strategic merge needs the container name"
            if "image" in c:
                d["image"] = c["image"]
            if "args" in c:
                d["args"] = list(c["args"])
            for e in c.get("env", []):
                d["env"] = [x for x in d["env"] if x["name"] != e["name"]] + [e]
        d["generation"] += 1
        self._roll(name)

    def patch_namespaced_deployment_scale(self, name: str, namespace: str, body: dict) -> None:
        self.calls.append(("scale", (name, body)))
        self.deployments[name]["replicas"] = body["spec"]["replicas"]
        self._roll(name)

    # -- CoreV1Api ----------------------------------------------------------------------------
    def list_namespaced_pod(self, namespace: str, label_selector: str = "",
                            field_selector: str | None = None) -> client.V1PodList:
        self._maybe_fail("list_namespaced_pod")
        wanted = dict(kv.split("=", 1) for kv in label_selector.split(",") if kv)
        items = []
        for name, p in sorted(self.pods.items()):
            d = self.deployments[p["deployment"]]
            if any(d["labels"].get(k) != v for k, v in wanted.items()):
                continue
            if field_selector and field_selector != f"spec.nodeName={p['node']}":
                continue
            waiting = client.V1ContainerStateWaiting(reason="CrashLoopBackOff") if p["crash"] else None
            exit_code = 137 if p["reason"] == "OOMKilled" else 1
            last = client.V1ContainerStateTerminated(reason=p["reason"], exit_code=exit_code) if p["reason"] else None
            status = client.V1ContainerStatus(
                name=d["container"], image=p["image"], image_id="", ready=not p["crash"],
                restart_count=p["restarts"],
                state=client.V1ContainerState(waiting=waiting,
                                              running=None if waiting else client.V1ContainerStateRunning()),
                last_state=client.V1ContainerState(terminated=last))
            items.append(client.V1Pod(
                metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels=d["labels"]),
                spec=client.V1PodSpec(node_name=p["node"],
                                      containers=[client.V1Container(name=d["container"], image=p["image"])]),
                status=client.V1PodStatus(phase="Running" if p["node"] else "Pending", container_statuses=[status])))
        return client.V1PodList(items=items)

    def read_namespaced_pod_log(self, name: str, namespace: str, tail_lines: int = 100,
                                previous: bool = False) -> str:
        self.calls.append(("log", (name, previous)))
        return self.logs.get(self.pods[name]["deployment"], "")

    def list_node(self, label_selector: str | None = None) -> client.V1NodeList:
        self._maybe_fail("list_node")
        items = []
        for name, n in sorted(self.nodes.items()):
            items.append(client.V1Node(
                metadata=client.V1ObjectMeta(name=name),
                spec=client.V1NodeSpec(unschedulable=n["unschedulable"] or None),
                status=client.V1NodeStatus(
                    allocatable={"nvidia.com/gpu": str(n["gpus"])},
                    conditions=[client.V1NodeCondition(type="Ready", status="True" if n["ready"] else "Unknown",
                                                       reason=None if n["ready"] else "NodeStatusUnknown")])))
        return client.V1NodeList(items=items)

    def patch_node(self, name: str, body: dict) -> None:
        self.calls.append(("patch_node", (name, body)))
        self.nodes[name]["unschedulable"] = body["spec"]["unschedulable"]

    def _reschedule(self, pod: str) -> None:
        dep = self.pods.pop(pod)["deployment"]
        self._new_pod(dep)

    def create_namespaced_pod_eviction(self, name: str, namespace: str, body: Any) -> None:
        assert body.metadata.name == name
        self.calls.append(("evict", name))
        self._reschedule(name)

    def delete_namespaced_pod(self, name: str, namespace: str, grace_period_seconds: int | None = None) -> None:
        self.calls.append(("delete_pod", (name, grace_period_seconds)))
        self._reschedule(name)

    def read_namespaced_config_map(self, name: str, namespace: str) -> client.V1ConfigMap:
        if name not in self.config_maps:
            raise ApiException(status=404, reason="Not Found")
        return client.V1ConfigMap(data=dict(self.config_maps[name]))

    def patch_namespaced_config_map(self, name: str, namespace: str, body: dict) -> None:
        self.calls.append(("patch_configmap", name))
        self.config_maps[name].update(body["data"])

    def read_namespaced_secret(self, name: str, namespace: str) -> client.V1Secret:
        if name not in self.secrets:
            raise ApiException(status=404, reason="Not Found")
        return client.V1Secret(data=dict(self.secrets[name]))

    def patch_namespaced_secret(self, name: str, namespace: str, body: dict) -> None:
        self.calls.append(("patch_secret", name))
        self.secrets[name].update(body["data"])

    @property
    def api_client(self) -> FakeApiClient:
        return FakeApiClient(self)

    def changes(self) -> list[tuple[str, Any]]:
        return [c for c in self.calls if c[0] not in ("log",)]


class FakeResponse:
    def __init__(self, status: int, body: str) -> None:
        self.status, self._body = status, body.encode()

    def read(self) -> bytes:
        return self._body


class FakeApiClient:
    """The two ApiClient calls the platform's service-proxy requests use."""

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube

    def param_serialize(self, method, resource_path, header_params=None, body=None, auth_settings=None):
        assert auth_settings == ["BearerToken"]
        return method, "https://k8s.test" + resource_path, header_params, body, []

    def call_api(self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None):
        self.kube._maybe_fail("call_api")  # noqa: SLF001 - the fake API client is part of the fake
        prefix, _, path = url.partition("/proxy/")
        # /api/v1/namespaces/{namespace}/services/{name}:{port}/proxy/{path} (the services/proxy API)
        _, namespace, kind, service = prefix.rsplit("/", 3)
        assert prefix.endswith(f"/api/v1/namespaces/{namespace}/services/{service}") and kind == "services"
        if namespace != self.kube.ns:  # another namespace's Service (the Alertmanager): named with it
            service = f"{namespace}/{service}"
        self.kube.calls.append((f"proxy_{method.lower()}", (service, path, body)))
        default = '{"choices":[{"message":{"content":"ok"}}]}' if path.endswith("completions") else '{"data":[]}'
        return FakeResponse(*self.kube.proxy.get(path, (200, default)))


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class Clock:
    """A clock that advances only when the code sleeps: waits take no real time."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
