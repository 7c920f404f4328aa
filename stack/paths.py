"""Where a local stack keeps its state: one directory holds config, data, logs and PIDs."""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from contract.inputs import SECRETS_DIR

# A unix socket path must fit in sockaddr_un.sun_path (108 bytes on Linux, with the NUL).
_MAX_SOCKET_PATH = 100


@dataclass(frozen=True)
class StackPaths:
    root: Path

    @classmethod
    def at(cls, state_dir: str | Path, project_root: Path) -> StackPaths:
        path = Path(state_dir)
        if not path.is_absolute():
            path = project_root / path
        return cls(path.resolve())

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def secrets(self) -> Path:
        return self.root / SECRETS_DIR  # jobs may never name files here (contract/inputs.py)

    @property
    def supervisord_conf(self) -> Path:
        return self.config / "supervisord.conf"

    @property
    def supervisord_pid(self) -> Path:
        return self.root / "supervisord.pid"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def runbook_overrides(self) -> Path:
        """Spec changes runbook actions made to the running stack (runbooks/platforms/local.py);
        `up` starts from the spec file, so it removes them."""
        return self.root / "runbook-overrides.json"

    @property
    def audit_log(self) -> Path:
        return self.root / "audit.jsonl"

    @property
    def socket(self) -> Path:
        """The supervisord control socket; moved to the temp dir when the state path is long."""
        preferred = self.root / "supervisor.sock"
        if len(str(preferred)) <= _MAX_SOCKET_PATH:
            return preferred
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"splitstack-{digest}.sock"

    @property
    def stack_id(self) -> str:
        """Tag put in every child's environment so `down` can find strays after a crash."""
        return hashlib.sha256(str(self.root).encode()).hexdigest()[:16]

    def log(self, component: str) -> Path:
        return self.logs / f"{component.replace(':', '-')}.log"

    def make(self) -> None:
        for folder in (self.root, self.logs, self.data, self.config, self.secrets):
            folder.mkdir(parents=True, exist_ok=True)
        self.secrets.chmod(0o700)
