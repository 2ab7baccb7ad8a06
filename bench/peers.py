"""Peer gateways the benches run beside MixPR Gateway, in front of the same upstream.

Portkey's open-source gateway (npm ``@portkey-ai/gateway``, the pinned ``PORTKEY_VERSION``) is installed
once into ``~/.cache/mixpr-gateway/npm-peers/portkey-<version>`` (``$MIXPR_NPM_PEERS`` moves it) and
started with node. It forwards an OpenAI-shaped request to the provider its headers name, here OpenAI at
a custom host: the upstream the gateway uses. Its start-server listens on every interface; the preload
``bench/loopback.cjs`` makes it listen on 127.0.0.1 only.

The LiteLLM proxy, the other peer, is started by ``bench.gateway_latency.start_proxy``; both are
waited for by :func:`answering`.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

PORTKEY_PACKAGE = "@portkey-ai/gateway"
PORTKEY_VERSION = "1.15.2"
LOOPBACK = Path(__file__).with_name("loopback.cjs")
_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
PEERS = Path(os.environ.get("MIXPR_NPM_PEERS") or _CACHE / "mixpr-gateway" / "npm-peers")


class PeerUnavailable(RuntimeError):
    """The peer cannot run here (no node or npm, or its install failed): the bench says so and goes on."""


def portkey_home(version: str = PORTKEY_VERSION) -> Path:
    """The installed package's folder, installing it first when it is not there."""
    prefix = PEERS / f"portkey-{version}"
    home = prefix / "node_modules" / "@portkey-ai" / "gateway"
    if not (shutil.which("node") and shutil.which("npm")):
        raise PeerUnavailable("node or npm not found: Portkey's gateway cannot run")
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".lock", "w") as lock:  # two benches installing at once share one install
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / "build" / "start-server.js").is_file():
            argv = ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                    f"{PORTKEY_PACKAGE}@{version}"]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise PeerUnavailable(f"npm install {PORTKEY_PACKAGE}@{version} failed: {done.stderr[-500:]}")
    return home


def start_portkey(port: int, version: str = PORTKEY_VERSION, timeout_s: float = 60) -> subprocess.Popen:
    """Portkey's gateway on 127.0.0.1:``port``, answering once it does (any HTTP status counts)."""
    home = portkey_home(version)
    argv = ["node", "--require", str(LOOPBACK), "build/start-server.js", f"--port={port}", "--headless"]
    proc = subprocess.Popen(argv, cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return answering(proc, f"http://127.0.0.1:{port}/", "Portkey's gateway", timeout_s, any_status=True)


def answering(proc: subprocess.Popen, url: str, name: str, timeout_s: float, *,
              any_status: bool = False) -> subprocess.Popen:
    """``proc`` once ``url`` answers 200 (with ``any_status``, any HTTP status); else
    ``PeerUnavailable`` says why: it exited, or stayed silent for ``timeout_s`` (then it is killed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PeerUnavailable(f"{name} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:
                if answer.status == 200 or any_status:
                    return proc
        except urllib.error.HTTPError:
            if any_status:
                return proc
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise PeerUnavailable(f"{name} did not answer in {timeout_s:.0f} s")


def portkey_headers(upstream: str) -> dict[str, str]:
    """What a Portkey client sends for an OpenAI-compatible provider at ``upstream`` (``…/v1``)."""
    return {"x-portkey-provider": "openai", "x-portkey-custom-host": upstream, "authorization": "Bearer k"}
