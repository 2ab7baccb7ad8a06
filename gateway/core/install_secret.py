"""A random secret of this install, kept in a file: the ``prompt_cache_key`` MAC's key when the
config names no secret (``gateway.core.cache_key``).

The file is ``secret`` under ``$MIXPR_STATE_DIR``, else ``$XDG_STATE_HOME/mixpr-gateway``, else
``~/.local/state/mixpr-gateway``: 32 random bytes, mode 0600, made once and read on every start, so a
restart keeps the keys. Instances that start at once agree (the file appears whole or not at all, and
the first one written wins). Replicas on other machines share it only by sharing the file; the simple
way is a ``deployment_secret`` in the config. A state dir that cannot be written costs only stable
keys: the secret is then this process's own (warned once).
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
from pathlib import Path

log = logging.getLogger("gateway.core.install_secret")

STATE_ENV = "MIXPR_STATE_DIR"
FILE_NAME = "secret"
SECRET_BYTES = 32
_fallback: bytes | None = None  # this process's own, when no file could be kept


def state_dir() -> Path:
    """Where this install keeps its state."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "mixpr-gateway"


def install_secret() -> bytes:
    """This install's secret: read from its file, made first if there is none."""
    path = state_dir() / FILE_NAME
    try:
        found = _read(path)
        return found if found is not None else _made(path)
    except OSError as exc:
        return _process_secret(path, exc)


def _read(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) != SECRET_BYTES:
        raise OSError(f"{path} is not a secret of {SECRET_BYTES} bytes")
    return data


def _made(path: Path) -> bytes:
    """A new secret written to ``path`` whole (a temporary file linked in place); if another
    instance was first, its secret."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".secret-")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(secrets.token_bytes(SECRET_BYTES))
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, path)  # fails if the file exists: never replaces another's secret
        except FileExistsError:
            pass
    finally:
        os.unlink(temporary)
    found = _read(path)
    if found is None:
        raise OSError(f"{path} vanished")
    return found


def _process_secret(path: Path, exc: OSError) -> bytes:
    global _fallback
    if _fallback is None:
        _fallback = secrets.token_bytes(SECRET_BYTES)
        log.warning("could not keep this install's secret in %s (%s): prompt_cache_key values change "
                    "at each restart; set general_settings.deployment_secret or %s", path.parent,
                    type(exc).__name__, STATE_ENV)
    return _fallback
