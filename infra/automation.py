"""Run the Pulumi engine on this program offline: the Pulumi CLI built from Go modules
(tools/go-tools.env), a local file backend, a passphrase secrets provider, no plugin downloads
and no update check. The program runs inline (Pulumi's Automation API, `pulumi up --client`):
the CLI's Python language host lives in a Go module the module proxy does not serve, so the
engine talks to a language runtime inside this process instead, which runs the same
``infra.entry.run_program`` that ``infra/__main__.py`` runs under `pulumi up`.

A :class:`PulumiSession` owns one work directory: a copy of Pulumi.yaml and the stack's
Pulumi.<stack>.yaml (so a test or an operator edits its own copy), the backend's state, the
plugin cache with the Kubernetes provider installed from its file, and the passphrase file.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi.automation as auto
import yaml

from infra.entry import run_program
from stack.cluster.tools import GoTools

PROVIDER = "kubernetes"


@dataclass
class PulumiSession:
    stack: str
    project_root: Path  # the checkout: Pulumi.yaml, alerts/, dashboards/
    work_dir: Path
    tools: GoTools
    kubeconfig: Path | None = None

    @property
    def state_dir(self) -> Path:
        return self.work_dir / ".pulumi-state"

    @property
    def pulumi_home(self) -> Path:
        return self.work_dir / ".pulumi-home"

    @property
    def passphrase_file(self) -> Path:
        return self.work_dir / ".passphrase"

    @property
    def stack_file(self) -> Path:
        return self.work_dir / f"Pulumi.{self.stack}.yaml"

    def env(self) -> dict[str, str]:
        out = {
            "PULUMI_BACKEND_URL": f"file://{self.state_dir}",
            "PULUMI_HOME": str(self.pulumi_home),
            "PULUMI_CONFIG_PASSPHRASE_FILE": str(self.passphrase_file),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",  # the cache's exact version, nothing on PATH
            "PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK": "false",
            "PATH": f"{self.tools.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        }
        if self.kubeconfig is not None:
            out["KUBECONFIG"] = str(self.kubeconfig)
        return out

    def prepare(self, source_stack_file: Path | None = None) -> None:
        """Lay out the work directory once: project and stack files, passphrase, provider plugin."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        project = yaml.safe_load((self.project_root / "Pulumi.yaml").read_text())
        project.pop("main", None)  # the program runs inline; the checkout's infra/ is its source
        (self.work_dir / "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
        if not self.stack_file.exists():
            shutil.copyfile(source_stack_file or self.project_root / f"Pulumi.{self.stack}.yaml",
                            self.stack_file)
        if not self.passphrase_file.exists():
            fd = os.open(self.passphrase_file, os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(24))
        self.state_dir.mkdir(exist_ok=True)
        version = self.tools.versions["PULUMI_KUBERNETES_VERSION"]
        if not (self.pulumi_home / "plugins" / f"resource-{PROVIDER}-v{version}").is_dir():
            self.pulumi(["plugin", "install", "resource", PROVIDER, version,
                         "--file", self.tools.path("pulumi-resource-kubernetes")])

    def pulumi(self, args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        """The CLI itself, in the work directory with this session's environment."""
        result = subprocess.run([self.tools.path("pulumi"), *args, "--non-interactive"],
                                cwd=self.work_dir, env={**os.environ, **self.env()},
                                capture_output=True, text=True, timeout=600)
        if check and result.returncode != 0:
            raise RuntimeError(f"`pulumi {' '.join(args)}` failed (exit {result.returncode}):\n"
                               f"{result.stdout}\n{result.stderr}")
        return result

    def program(self) -> Callable[[], None]:
        root = self.project_root

        def run() -> None:
            run_program(root)

        return run

    def stack_handle(self) -> Any:
        """The Automation API's stack, created on first use (passphrase secrets provider)."""
        workspace = auto.LocalWorkspace(
            work_dir=str(self.work_dir), pulumi_home=str(self.pulumi_home), program=self.program(),
            env_vars=self.env(), secrets_provider="passphrase",
            pulumi_command=auto.PulumiCommand(root=str(self.tools.root)))
        return auto.Stack.create_or_select(self.stack, workspace)

    def set_secret(self, key: str, value: str) -> None:
        """An encrypted config value (``splitstack-secrets:<Secret>.<key>``) in the stack file."""
        self.stack_handle().set_config(key, auto.ConfigValue(value=value, secret=True))
