"""The CrossGuard pack's validators, called directly on the resources the program registers
under mocks (what `pulumi preview --policy-pack infra/policy` would hand them)."""

from __future__ import annotations

import copy

import pulumi
import pytest
from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from infra.components.inference_server import custom_timeouts
from infra.components.program import build
from infra.policy.pack import POLICIES
from infra.policy.rules import RESOURCE_RULES, STACK_RULES

from .infra_helpers import CLOUD_MODES, ROOT, make_spec


def seconds(duration: str) -> float:
    assert duration.endswith("s")
    return float(duration[:-1])


def options(timeouts: pulumi.CustomTimeouts | None = None) -> PolicyResourceOptions:
    t = PolicyCustomTimeouts(seconds(timeouts.create), seconds(timeouts.update), 0) if timeouts \
        else PolicyCustomTimeouts(0, 0, 0)
    return PolicyResourceOptions(False, [], None, [], t, [])


def resource_args(reg, opts=None) -> ResourceValidationArgs:
    return ResourceValidationArgs(reg.type, reg.inputs, f"urn:{reg.name}", reg.name,
                                  opts or options(), None)


def run_resource_policies(regs, timeouts=None) -> list[str]:
    found: list[str] = []
    for policy in (p for p in POLICIES if isinstance(p, ResourceValidationPolicy)):
        for reg in regs:
            opts = options(timeouts.get(reg.name)) if timeouts else options()
            policy.validate(resource_args(reg, opts), lambda m, urn=None, p=policy: found.append(f"[{p.name}] {m}"))
    return found


def run_stack_policies(regs) -> list[str]:
    resources = [PolicyResource(r.type, r.inputs, f"urn:{r.name}", r.name, options(), None, None,
                                [], {}) for r in regs]
    found: list[str] = []
    for policy in (p for p in POLICIES if isinstance(p, StackValidationPolicy)):
        policy.validate(StackValidationArgs(resources), lambda m, urn=None: found.append(m))
    return found


def test_pack_covers_every_rule():
    names = {p.name for p in POLICIES}
    assert {r.name for r in RESOURCE_RULES} | {r.name for r in STACK_RULES} | {
        "custom-timeouts"} == names


@pytest.mark.parametrize(("cloud", "mode"), CLOUD_MODES)
@pulumi.runtime.test
def test_pack_accepts_the_program(cloud, mode, mocks, after_build):
    spec = make_spec(cloud, mode)
    deployment = build(spec, ROOT)
    server = spec.worker_server
    gpu_deployment = "server-mineru-vlm" if mode == "split" else "workers"

    def check():
        regs = mocks.resources
        assert run_resource_policies(regs, {gpu_deployment: custom_timeouts(server)}) == []
        assert run_stack_policies(regs) == []
        # The same validators do fire on these resources: drop the custom timeouts.
        found = run_resource_policies(regs)
        assert any(f.startswith("[custom-timeouts]") and "< startup budget 600 s" in f
                   for f in found)

    return after_build(deployment, check)


@pulumi.runtime.test
def test_pack_reports_a_broken_object(mocks, after_build):
    deployment = build(make_spec("existing", "split"), ROOT)

    def check():
        (reg,) = [r for r in mocks.resources if r.type == "kubernetes:apps/v1:Deployment"
                  and r.inputs["metadata"]["name"] == "mineru-vlm"]
        broken = copy.deepcopy(reg)
        pod = broken.inputs["spec"]["template"]["spec"]
        pod["enableServiceLinks"] = True
        pod["containers"][0]["image"] = "vllm/vllm-openai:latest"
        found = run_resource_policies([broken], {broken.name: custom_timeouts(
            make_spec().inference_servers[0])})
        assert any(f.startswith("[service-links]") for f in found)
        assert any(f.startswith("[no-latest]") for f in found)
        monitors = [r for r in mocks.resources if r.inputs.get("kind") != "Service"]
        assert any("matches no Service" in m for m in run_stack_policies(monitors))

    return after_build(deployment, check)


def test_the_pack_serves_its_policies_over_grpc():
    """Start infra/policy as the Pulumi engine does (a process that prints its port), then ask
    the analyzer for its policies through the real gRPC interface."""
    import subprocess
    import sys

    import grpc
    from google.protobuf import empty_pb2
    from pulumi.runtime.proto import analyzer_pb2_grpc

    from contract.spec_loader import project_root

    proc = subprocess.Popen([sys.executable, str(project_root() / "infra" / "policy" / "__main__.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline().strip())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
            info = analyzer_pb2_grpc.AnalyzerStub(channel).GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
        assert info.name == "splitstack"
        assert {p.name for p in info.policies} == {p.name for p in POLICIES}
        assert all(p.description for p in info.policies)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
