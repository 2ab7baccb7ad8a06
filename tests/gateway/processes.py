"""``python -m gateway`` as a real process on a free 127.0.0.1 port, this checkout first on the path:
forked from the run's zygote (``tests/zygote.py``: the gateway already imported) when there is one,
unless the test is about a start (``fresh=True``); else a fresh interpreter."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
from conftest import closed_port

from tests.zygote import gateway_process

ROOT = Path(__file__).resolve().parents[2]


def run_gateway(argv: list[str], env: dict[str, str], folder: Path, timeout: float = 240) -> tuple[int, str]:
    """``python -m gateway <argv>`` run to its exit (forked from the run's zygote when there is one):
    its exit code and what it wrote to stderr (kept in ``folder``)."""
    log = folder / "gateway-stderr.log"
    log.unlink(missing_ok=True)
    code = gateway_process(argv, env, log).wait(timeout)
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
        self.process = gateway_process(argv, env, log, fresh=fresh)

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

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

