"""A real gateway (uvicorn, in a thread) in front of a real recording upstream, both on 127.0.0.1."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import uvicorn
from fake_upstream import FakeUpstream
from redis_server import MISSING, RedisServer, available

from gateway import create_app
from gateway.config import parse_config
from tests.ports import free_port as closed_port  # the suite's one port helper, by its old name here

# A gateway without a master key keeps its install's secret under the state dir: the tests' own,
# never the user's (gateway subprocesses inherit it). The process that made it removes it as it exits:
# each run left one folder per pytest worker in /tmp.
if "MIXPR_STATE_DIR" not in os.environ:
    os.environ["MIXPR_STATE_DIR"] = _STATE_DIR = tempfile.mkdtemp(prefix="mixpr-test-state-")
    atexit.register(shutil.rmtree, _STATE_DIR, ignore_errors=True)

MASTER_KEY = "sk-gateway-test"
UPSTREAM_KEY = "sk-upstream-secret"
SMALL_WINDOW = 3000  # the window of the models that get long prompts in these tests
MAX_BODY_BYTES = 1_000_000


class ServerThread:
    """uvicorn serving ``app`` on a free 127.0.0.1 port, in a background thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerThread:
        """Serve, and wait until a gateway's compression pool is warm: it warms in the background
        (issue 59), and these tests count its workers and time its jobs from their first request."""
        self.thread.start()
        deadline = time.monotonic() + 120
        gateway = getattr(getattr(self.app, "state", None), "gateway", None)
        while not self.server.started or (gateway is not None and gateway.warming):
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("gateway did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def model(name: str, upstream_model: str, api_base: str, **extra: Any) -> dict[str, Any]:
    params = {"model": f"openai/{upstream_model}", "api_base": api_base, "api_key": UPSTREAM_KEY}
    params.update(extra.pop("litellm_params", {}))
    return {"model_name": name, "litellm_params": params, **extra}


def gateway_config(base: str, *, auto_router: bool = False) -> dict[str, Any]:
    """The test models; ``auto_router`` adds ``small-auto``, whose router makes every compression worker
    import LiteLLM as it warms (seconds per worker, a minute under load): only for tests that ask it."""
    small = {"max_input_tokens": SMALL_WINDOW}
    routed = [model("small-auto", "small-auto", base, model_info=small,
                    mixpr={"budget_tokens": 800, "router": "auto"})] if auto_router else []
    return {
        "model_list": [
            model("gpt-test", "echo", base),
            model("small", "small", base, model_info=small, mixpr={"budget_tokens": 800}),
            *routed,
            model("rate-limited", "mode-429", base),
            model("broken", "mode-500", base),
            model("slow", "mode-hang", base, litellm_params={"timeout": 0.5}),
            model("dropper", "mode-close", base),
            model("midstream", "mode-midstream", base),
            model("refuses-400", "mode-400", base),
            model("refuses-404", "mode-404", base),
            model("refuses-422", "mode-422", base),
            model("llama-invalid", "mode-llama-invalid", base),
            model("trickle", "mode-slowstream", base),
            model("tool-user", "mode-tool", base),
            model("thinker", "mode-think", base),
            model("cached", "mode-cached", base),
            model("stall", "mode-stall", base),
            model("unreachable", "x", f"http://127.0.0.1:{closed_port()}/v1"),
        ],
        "mixpr_settings": {"router": "heuristic", "budget_tokens": 4000},
        # 120 s, not 30: a first compression that also asks the auto router (its worker's fork server
        # importing LiteLLM) took longer than 30 s on a 2-core machine running the whole suite.
        "general_settings": {"master_key": MASTER_KEY, "max_body_bytes": MAX_BODY_BYTES,
                             "compression_workers": 1, "compression_timeout_s": 120},
    }


@pytest.fixture(scope="session")
def upstream() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gateway_app(upstream: FakeUpstream) -> Any:
    """The shared gateway, its MixPR in worker processes; without the auto router, whose LiteLLM each
    pytest worker's fork server would import (5 CPU-s each) for the two tests that ask it
    (``test_gateway_compression``'s ``routed_client`` starts their gateway)."""
    return create_app(parse_config(gateway_config(upstream.base_url)))


@pytest.fixture(scope="session")
def gateway_url(gateway_app: Any) -> Iterator[str]:
    server = ServerThread(gateway_app).start()
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def thread_gateway_url(upstream: FakeUpstream) -> Iterator[str]:
    """The same gateway with MixPR in threads, so a test can make ``mixpr.compress`` fail."""
    raw = gateway_config(upstream.base_url, auto_router=True)
    raw["general_settings"]["compression_executor"] = "thread"
    server = ServerThread(create_app(parse_config(raw))).start()
    yield server.url
    server.stop()


@pytest.fixture
def client(gateway_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway_url + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=30) as c:
        yield c


@pytest.fixture
def http(gateway_url: str) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {MASTER_KEY}"}
    with httpx.Client(base_url=gateway_url, headers=headers, timeout=30) as c:
        yield c


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server on loopback for the session (tests that kill or stop one start their own)."""
    if not available():
        pytest.skip(MISSING)
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()
