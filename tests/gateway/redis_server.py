"""A real ``redis-server`` (Debian's package) on a free 127.0.0.1 port, for the shared form cache's
tests and ``bench.replicas``: started, killed (SIGKILL), stopped (SIGSTOP) and resumed as a process."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from tests.ports import free_port

BINARY = "redis-server"
MISSING = "redis-server is not installed (Debian: apt-get install -y redis-server; .ci/run installs it)"


def available() -> bool:
    return shutil.which(BINARY) is not None


class RedisServer:
    """One ``redis-server``: in memory only (no RDB, no AOF), loopback only, ``maxmemory`` optional."""

    def __init__(self, workdir: Path, *, maxmemory: str | None = None, policy: str = "allkeys-lru") -> None:
        self.workdir = workdir
        self.maxmemory = maxmemory
        self.policy = policy
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [BINARY, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.workdir), "--protected-mode", "yes", "--loglevel", "warning"]
        if self.maxmemory:
            args += ["--maxmemory", self.maxmemory, "--maxmemory-policy", self.policy]
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5)

    def kill(self) -> None:
        """SIGKILL, as an OOM killer or a lost node does: no goodbye to the clients."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
            self.process = None

    def pause(self) -> None:
        """SIGSTOP: connections stay open and nothing answers (a server stuck in a long command)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)  # a stopped process ignores SIGTERM until resumed
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None

    def _answers(self) -> bool:
        try:
            with self.client() as c:
                return bool(c.ping())
        except redis.RedisError:
            return False
