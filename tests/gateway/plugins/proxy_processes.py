"""The gateway and a LiteLLM proxy as child processes, for the tests through a real proxy."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx

from tests.zygote import Forked, gateway_process, litellm_process

ROOT = Path(__file__).resolve().parents[3]
STARTUP_TIMEOUT_S = 240  # the proxy imports most of LiteLLM; on a busy 2-core machine that is slow


def start(args: list[str], log: Path) -> subprocess.Popen[bytes] | Forked:
    """``args`` (``python -m gateway ...`` or ``litellm ...``) as a process logging to ``log``, forked
    from the run's zygote for its kind when there is one (``tests/zygote.py``)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests' / 'gateway'}",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"}
    env.pop("DATABASE_URL", None)
    if args[1:3] == ["-m", "gateway"]:
        return gateway_process(args[3:], env, log, cwd=ROOT)
    if Path(args[0]).name == "litellm":
        return litellm_process(args[1:], env, log, cwd=ROOT, stdout=log)
    with log.open("wb") as out:
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_alive(url: str, process: subprocess.Popen[bytes] | Forked, log: Path, started: float,
               path: str = "/health/liveliness") -> float:
    """Seconds from ``started`` until ``url`` answers 200 on ``path`` (the gateway's readiness: it
    listens before it has loaded, issue 59)."""
    while time.monotonic() - started < STARTUP_TIMEOUT_S:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return time.monotonic() - started
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{url} did not start within {STARTUP_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen[bytes] | Forked) -> None:
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
