"""``python -m gateway`` as a real process on a free 127.0.0.1 port, this checkout first on the path:
forked from the run's zygote (``tests/zygote.py``: the gateway already imported) when there is one,
unless the test is about a start (``fresh=True``); else a fresh interpreter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import httpx
from conftest import closed_port

from tests.zygote import Forked, forked_gateway

ROOT = Path(__file__).resolve().parents[2]


def run_gateway(argv: list[str], env: dict[str, str], folder: Path, timeout: float = 240) -> tuple[int, str]:
    """``python -m gateway <argv>`` run to its exit, forked from the run's zygote when there is one:
    its exit code and what it wrote to stderr (kept in ``folder``)."""
    log = folder / "gateway-stderr.log"
    log.unlink(missing_ok=True)
    forked = forked_gateway(argv, env, log)
    if forked is None:
        done = subprocess.run([sys.executable, "-m", "gateway", *argv], capture_output=True, text=True,
                              timeout=timeout, env=env)
        return done.returncode, done.stderr
    code = forked.wait(timeout)
    return code, log.read_text() if log.exists() else ""


class GatewayProcess:
    """One gateway process; its log (stderr) goes to ``log`` when given, else nowhere; ``port``: a
    given one (a restart where the load balancer expects it), else a free one."""

    def __init__(self, config: Path, log: Path | None = None, port: int | None = None, *,
                 fresh: bool = False) -> None:
        """``fresh``: a new interpreter even when the run has a zygote (a test about the start itself)."""
        self.port = port or closed_port()
        self.log = log
        env = {
            **os.environ,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        argv = ["--config", str(config), "--port", str(self.port), "--log-level", "warning"]
        self._log: IO[bytes] | None = None
        self.process: subprocess.Popen[bytes] | Forked
        forked = None if fresh else forked_gateway(argv, env, log)
        if forked is not None:
            self.process = forked
            return
        self._log = log.open("ab") if log is not None else None
        self.process = subprocess.Popen([sys.executable, "-m", "gateway", *argv], env=env,
                                        stdout=subprocess.DEVNULL, stderr=self._log or subprocess.DEVNULL)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait(self) -> GatewayProcess:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(self.url + "/health/readiness").status_code == 200:
                    return self
            except httpx.ConnectError:
                pass
            assert self.process.poll() is None and time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.1)

    def logged(self) -> str:
        return self.log.read_text(errors="replace") if self.log is not None else ""

    def kill(self) -> None:
        """SIGKILL: requests in flight get a closed connection, as when a node dies."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self._close_log()

    def stop(self) -> None:
        if self.process.poll() is not None:
            self._close_log()
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

