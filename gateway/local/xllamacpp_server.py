"""Run llama.cpp's own HTTP server, from the prebuilt ``xllamacpp`` wheel, in this process until signalled.

:class:`gateway.local.managed.ManagedServer` starts this file as its child, by path (so neither the
gateway package nor LiteLLM is imported here)::

    python -P gateway/local/xllamacpp_server.py --model M.gguf --host 127.0.0.1 --port 4001 --n_ctx 8192

Every ``--name value`` besides ``--model``, ``--host``, ``--port`` and ``--parent-pid`` sets the
field of that name on ``xllamacpp.CommonParams`` (``n_ctx``, ``n_batch``, ``chat_template``, ...); a
dotted name reaches a nested one (``sampling.temp``, ``cpuparams.n_threads``), and ``n_threads``
sets both thread counts. Each value is converted to the field's own type. A name or value that
does not fit exits with code 2 and says why, before the model is loaded.

``xllamacpp.Server`` serves OpenAI's API (``/v1/models``, ``/v1/chat/completions`` with
streaming, ...) from native threads; this process only keeps them alive. SIGTERM ends it at once
(the server keeps no state worth a graceful stop); SIGINT is ignored, so Ctrl-C stops the gateway,
which then stops this. On Linux the death of the gateway ends it too, so a killed gateway never
leaves a server holding the port.
"""

from __future__ import annotations

import argparse
import enum
import os
import signal
import sys
import threading
from typing import Any

ALIASES = {"n_threads": ("cpuparams.n_threads", "cpuparams_batch.n_threads")}
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


class OptionError(ValueError):
    """A ``--name value`` pair that ``CommonParams`` cannot take."""


def die_with_parent(parent: int | None) -> None:
    """PR_SET_PDEATHSIG: the kernel sends SIGTERM when the gateway exits, even by SIGKILL; but only
    if it exits after ``prctl``. A gateway that died while this process started has already left it
    to init, so the parent (``--parent-pid``, the gateway's pid) is checked once more, after."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    if parent is not None and os.getppid() != parent:
        sys.exit(f"xllamacpp_server: the gateway (pid {parent}) exited before this server started")


def _pairs(rest: list[str]) -> list[tuple[str, str]]:
    """``["--n_ctx", "8192", ...]`` -> ``[("n_ctx", "8192"), ...]``."""
    if len(rest) % 2 or not all(flag.startswith("--") for flag in rest[::2]):
        raise OptionError(f"expected --name value pairs, got {' '.join(rest)!r}")
    return [(flag[2:], value) for flag, value in zip(rest[::2], rest[1::2], strict=True)]


def convert(current: Any, value: str) -> Any:
    """``value`` (text) as the type of the field's current value."""
    if isinstance(current, bool):
        if value.lower() not in _TRUE | _FALSE:
            raise OptionError(f"expected true or false, got {value!r}")
        return value.lower() in _TRUE
    if isinstance(current, enum.Enum):
        return _member(type(current), value)
    if isinstance(current, int | float | str):
        return type(current)(value)
    raise OptionError(f"a {type(current).__name__} field cannot be set from the config")


def _member(kind: type[enum.Enum], value: str) -> enum.Enum:
    """A member by number or by name, whole or its last part (``disabled`` for ``..._TYPE_DISABLED``)."""
    if value.lstrip("-").isdigit():
        return kind(int(value))
    for member in kind:
        if member.name == value.upper() or member.name.endswith("_" + value.upper()):
            return member
    raise OptionError(f"expected one of {', '.join(m.name for m in kind)}")


def set_option(params: Any, name: str, value: str) -> None:
    """Set ``params.<name>`` (dotted for nested fields) from its text ``value``."""
    *parents, field = name.split(".")
    target = params
    try:
        for parent in parents:
            target = getattr(target, parent)
        current = getattr(target, field)
        setattr(target, field, convert(current, value))
    except AttributeError:
        raise OptionError(f"--{name}: xllamacpp.CommonParams has no such field") from None
    except (ValueError, TypeError) as exc:
        raise OptionError(f"--{name} {value}: {exc}") from None


def build_params(xllamacpp: Any, model: str, host: str, port: int, options: list[tuple[str, str]]) -> Any:
    """The ``CommonParams`` for one model on ``host:port`` with ``options`` applied."""
    params = xllamacpp.CommonParams()
    params.model.path = model
    params.hostnames = [host]
    params.port = port
    for name, value in options:
        for target in ALIASES.get(name, (name,)):
            set_option(params, target, value)
    return params


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve one GGUF model over HTTP with xllamacpp.",
                                     allow_abbrev=False)  # --model.path is a field, not --model
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, default=None)  # the gateway: this server dies with it
    args, rest = parser.parse_known_args(argv)
    die_with_parent(args.parent_pid)
    # Ctrl-C in a terminal reaches the whole process group: the gateway then stops this server itself
    # (SIGTERM), instead of seeing it die first and scheduling a restart while it shuts down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import xllamacpp
    except ModuleNotFoundError as exc:
        parser.exit(2, f"xllamacpp_server: {exc}; install the embedded model's server with "
                       f"pip install 'mixpr-gateway[local]' (or make run)\n")
    except ImportError as exc:  # a system library it links to, e.g. libgomp.so.1
        parser.exit(2, f"xllamacpp_server: {exc} (on Debian or Ubuntu: apt-get install libgomp1)\n")
    try:
        params = build_params(xllamacpp, args.model, args.host, args.port, _pairs(rest))
    except OptionError as exc:
        parser.exit(2, f"xllamacpp_server: {exc}\n")
    server = xllamacpp.Server(params)  # loads the model, then listens; raises if either fails
    print(f"xllamacpp_server: serving {args.model} on {server.listening_address}", flush=True)
    threading.Event().wait()  # the server's own threads answer; SIGTERM ends the process


if __name__ == "__main__":
    main()
