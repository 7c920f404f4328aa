"""The local stack's secrets: the inference server's API key and the Redis password, each in a
file of its own under ``<state_dir>/secrets`` (folder 0700, files 0600).

No secret is ever written into a command line (visible in `ps`) or into supervisord's config
file: a program that needs one is started through :mod:`stack.secretexec`, which reads the file
into the program's environment and execs it (``/proc/PID/environ`` is readable by its owner
only); Redis reads its password from a 0600 config file.
"""

from __future__ import annotations

import hashlib
import os
import secrets as pysecrets
from pathlib import Path

from contract.spec import Spec
from contract.worker_env import redis_password_env, with_password
from slo.alertmanager import secret_refs
from stack.paths import StackPaths

REDIS_PASSWORD_FILE = "redis-password"
REDIS_CONF_FILE = "redis-auth.conf"
ALERTMANAGER_USER = "splitstack"
ALERTMANAGER_PASSWORD_FILE = "alertmanager-password"
ALERTMANAGER_WEB_CONFIG = "alertmanager-web.yml"


def _write_private(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value)
    path.chmod(0o600)


def _read_or_make(path: Path) -> str:
    if path.is_file():
        return path.read_text().strip()
    value = pysecrets.token_urlsafe(24)
    _write_private(path, value)
    return value


def api_key_file(spec: Spec, paths: StackPaths) -> Path | None:
    ref = spec.worker_server.api_key
    return None if ref is None else paths.secrets / ref.key


def _key_env_and_file(spec: Spec, paths: StackPaths) -> tuple[str | None, Path] | None:
    """The worker server's key from its environment variable (None when unset) and the stack's key
    file; None when the server takes no key."""
    ref = spec.worker_server.api_key
    path = api_key_file(spec, paths)
    if ref is None or path is None:
        return None
    return os.environ.get(ref.env) or None, path


def resolve_api_key(spec: Spec, paths: StackPaths) -> str | None:
    """The worker server's API key: from its env var, else one generated for this stack.

    Kept in the state dir (mode 0600) so the bench, the workers and the runbooks of the same
    stack find it, and so programs get it from the file (never from their command line); the
    spec only ever holds the reference.
    """
    found = _key_env_and_file(spec, paths)
    if found is None:
        return None
    value, path = found
    if value:
        if not path.is_file() or path.read_text().strip() != value:
            _write_private(path, value)
        return value
    return _read_or_make(path)


def running_api_key(spec: Spec, paths: StackPaths) -> str | None:
    """The API key a client of a RUNNING stack sends: its env var when set, else the key the stack
    was started with. Unlike :func:`resolve_api_key` it never writes the key file, so a client
    with a wrong key in its environment cannot change the key of the stack it reads."""
    found = _key_env_and_file(spec, paths)
    if found is None:
        return None
    value, path = found
    if value:
        return value
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def output_store_key_files(spec: Spec, paths: StackPaths) -> dict[str, Path]:
    """``output_store.kind: s3`` with a key pair: {variable: file} of each key, written from the
    variable its SecretRef names when the launcher has it (else the file from an earlier start,
    else nothing: the worker then refuses to start, naming the variable)."""
    store = spec.output_store
    out: dict[str, Path] = {}
    for ref in (store.access_key_id, store.secret_access_key) if store.kind == "s3" else ():
        if ref is None:
            continue
        path = paths.secrets / f"output-store-{ref.env}"
        value = os.environ.get(ref.env)
        if value and (not path.is_file() or path.read_text().strip() != value):
            _write_private(path, value)
        if path.is_file():
            out[ref.env] = path
    return out


def alertmanager_secrets_dir(spec: Spec, paths: StackPaths) -> Path:
    """The receivers' credentials for the local Alertmanager: each SecretRef of
    ``observability.alertmanager.receivers`` written from the variable it names to
    ``<state>/secrets/alertmanager/<name>/<key>`` (0600), the ``*_file`` paths of the rendered
    config. A variable not set: ValueError naming it (no receiver silently drops its pages)."""
    root = paths.secrets / "alertmanager"
    for ref in secret_refs(spec.observability.alertmanager):
        value = os.environ.get(ref.env)
        if not value:
            raise ValueError(
                f"observability.alertmanager.receivers: secret {ref.name}/{ref.key} is read from the "
                f"environment variable {ref.env}, which is not set; export it and run `splitstack up` again")
        _write_private(root / ref.name / ref.key, value)
    return root


def redis_password_file(paths: StackPaths) -> Path:
    return paths.secrets / REDIS_PASSWORD_FILE


def redis_password(paths: StackPaths) -> str:
    """The local Redis' AUTH password (generated once per state dir)."""
    return _read_or_make(redis_password_file(paths))


def redis_auth_conf(paths: StackPaths) -> Path:
    """A 0600 Redis config file holding only ``requirepass``: Redis reads it at start, so the
    password is in neither its command line nor supervisord's config."""
    path = paths.secrets / REDIS_CONF_FILE
    _write_private(path, f"requirepass {redis_password(paths)}\n")
    return path


def queue_url(spec: Spec, paths: StackPaths) -> str:
    """The local queue's URL with its password, for clients of this machine (never printed:
    show ``queue_url_display`` instead)."""
    return f"redis://:{redis_password(paths)}@{spec.local.host}:{spec.queue.port}/0"


def queue_url_display(spec: Spec) -> str:
    return f"redis://{spec.local.host}:{spec.queue.port}/0"


def client_queue_url(spec: Spec, project_root: Path, environ: dict[str, str] | None = None) -> str | None:
    """The queue URL a command on this machine uses: the spec's ``queue.url_env``, else the
    local stack's Redis; None for a deployed stack without that variable. The password comes
    from the URL itself, else ``queue.password.env``, else (local stack) its secrets folder."""
    env = os.environ if environ is None else environ
    local = spec.target.value == "local"
    url = env.get(spec.queue.url_env) or (queue_url_display(spec) if local else None)
    if url is None:
        return None
    password = env.get(redis_password_env(spec))
    path = redis_password_file(StackPaths.at(spec.local.state_dir, project_root))
    if not password and local and path.is_file():
        password = path.read_text().strip()
    return with_password(url, password)


def read_secrets(secrets: dict[str, Path]) -> dict[str, str]:
    """{VAR: value} of a component's secret files, for code that starts it without supervisord
    (the values go into the child's environment only)."""
    return {var: path.read_text().strip() for var, path in secrets.items() if path.is_file()}


def alertmanager_password_file(paths: StackPaths) -> Path:
    """The password of the local Alertmanager's API (user ``ALERTMANAGER_USER``), made once."""
    path = paths.secrets / ALERTMANAGER_PASSWORD_FILE
    _read_or_make(path)
    return path


def alertmanager_web_config(paths: StackPaths) -> Path:
    """Alertmanager's ``--web.config.file``: HTTP basic auth on every endpoint of its API (any
    local user can reach loopback; without it one `POST /api/v2/silences` silences every alert,
    the Watchdog included). Alertmanager takes a bcrypt hash of the password; Prometheus, the
    health check and the stack's clients send the password from its 0600 file."""
    import warnings

    password = _read_or_make(paths.secrets / ALERTMANAGER_PASSWORD_FILE)
    path = paths.secrets / ALERTMANAGER_WEB_CONFIG
    stamp = paths.secrets / f"{ALERTMANAGER_WEB_CONFIG}.for"  # which password the hash is of
    digest = hashlib.sha256(password.encode()).hexdigest()
    if path.is_file() and stamp.is_file() and stamp.read_text() == digest:
        return path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt  # the C library's bcrypt ($2b$); deprecated in Python 3.11, used for nothing else

        hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=2 ** 10))
    _write_private(path, f"basic_auth_users:\n  {ALERTMANAGER_USER}: '{hashed}'\n")
    _write_private(stamp, digest)
    return path


def alertmanager_auth(paths: StackPaths) -> tuple[str, str] | None:
    """(user, password) for the local Alertmanager's API; None before the stack made one."""
    try:
        return ALERTMANAGER_USER, (paths.secrets / ALERTMANAGER_PASSWORD_FILE).read_text().strip()
    except OSError:
        return None
