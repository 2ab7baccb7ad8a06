"""A bug in the gateway (an exception nothing handles), seen over real HTTP from a real gateway process.

The fault is put in by the test's own launcher (``FAULTY_GATEWAY``: it wraps two functions, then runs
the real ``mixpr-gateway`` command line), so the production code has no switch a client could flip.
The user-visible promises: a 500 in the API's own error shape with no internal details, the error
counted in ``/metrics``, and one log line without request content unless the operator asks for
``--log-level debug``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import closed_port
from fake_upstream import FakeUpstream

from tests.zygote import Forked, gateway_process

SECRET = "the-launch-code-is-4711"  # prompt text that must never reach the log by default
REPO = Path(__file__).resolve().parents[3]
FAULTY_GATEWAY = """
import dataclasses, sys
from gateway.edge import admission
from gateway.core import chat
from gateway.__main__ import main

run = chat.ChatService.run

async def faulty_run(self, call):
    if call.model == "bug":  # before any byte of the answer: the message quotes the prompt
        raise RuntimeError(f"cannot handle {call.messages}")
    reply = await run(self, call)
    if call.model == "bug-midstream":  # after the status line and the first chunk went out
        field = "chunks" if reply.chunks is not None else "events"  # events: the raw relay's
        first = getattr(reply, field)
        async def chunks():
            async for chunk in first:  # a block of the relay's events: its first event only
                yield chunk if field == "chunks" else chunk[: chunk.index(b"\\n\\n") + 2]
                raise KeyError(str(call.messages))
        reply = dataclasses.replace(reply, **{field: chunks()})
    return reply

middleware = admission.BodyBytesMiddleware.__call__

async def faulty_middleware(self, scope, receive, send):
    bug = scope["type"] == "http" and scope["path"] == "/v1/models" and scope["query_string"]
    if bug == b"bug":
        raise ValueError("a bug in a middleware")
    await middleware(self, scope, receive, send)
    if bug == b"bug-after":  # e.g. in the clean-up after the answer went out
        raise LookupError("a bug after the response")

chat.ChatService.run = faulty_run
admission.BodyBytesMiddleware.__call__ = faulty_middleware
sys.exit(main())
"""


class Gateway:
    """A gateway process whose stderr goes to a file; ``new_log`` is what it wrote since the last call."""

    def __init__(self, url: str, process: subprocess.Popen[bytes] | Forked, log: Path) -> None:
        self.url, self.process, self.log = url, process, log
        self.read = 0

    def new_log(self, waiting_for: str = "unexpected error") -> str:
        """The new lines, once one contains ``waiting_for`` (a log line is written after the reply)."""
        deadline = time.monotonic() + 10
        while True:
            text = self.log.read_text()[self.read:]
            if waiting_for in text or time.monotonic() > deadline:
                time.sleep(0.3)  # anything written right after it (e.g. a traceback) is in too
                text = self.log.read_text()
                new, self.read = text[self.read:], len(text)
                return new
            time.sleep(0.05)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def start(folder: Path, upstream: FakeUpstream, log_level: str) -> Gateway:
    models = [{"model_name": name, "litellm_params": {"model": "openai/echo", "api_base": upstream.base_url,
                                                      "api_key": "sk-up"}}
              for name in ("bug", "bug-midstream")]
    config = folder / "config.json"  # JSON is YAML
    # No request here is compressed: MixPR in threads, so no fork server and worker start beside the
    # gateway (about 1.4 CPU-s a process, issue 59).
    config.write_text(json.dumps({"model_list": models, "mixpr_settings": {"router": "heuristic"},
                                  "general_settings": {"compression_workers": 1,
                                                       "compression_executor": "thread"}}))
    port = closed_port()
    log = folder / "stderr.log"
    log.touch()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    argv = ["--config", str(config), "--port", str(port), "--log-level", log_level]
    process = gateway_process(argv, env, log, code=FAULTY_GATEWAY, cwd=REPO)  # from the tests' zygote
    gateway = Gateway(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + 240  # imports LiteLLM: minutes on a busy 2-core machine
    while True:
        try:
            if httpx.get(gateway.url + "/health/readiness").status_code == 200:
                gateway.new_log(waiting_for="")
                return gateway
        except httpx.ConnectError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            gateway.stop()
            raise RuntimeError("gateway did not start:\n" + log.read_text())
        time.sleep(0.1)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Iterator[Gateway]:
    """One gateway at the default log level (info) for the module's tests."""
    started = start(tmp_path_factory.mktemp("info"), upstream, "info")
    yield started
    started.stop()


def ask(gateway: Gateway, model: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": f"Remember: {SECRET}."}]}
    return httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=30)


def counted(gateway: Gateway, sample: str) -> float:
    """The value of one sample line of ``/metrics`` (0 when absent)."""
    for line in httpx.get(gateway.url + "/metrics").text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return 0.0


def errors_counted(gateway: Gateway, path: str) -> list[float]:
    """The 500s answered on ``path``, and its unexpected errors."""
    return [counted(gateway, f'mixpr_requests_total{{path="{path}",status="500"}}'),
            counted(gateway, f'mixpr_unexpected_errors_total{{path="{path}"}}')]


def test_a_bug_is_a_500_in_the_api_shape_counted_and_logged_in_one_line(gateway: Gateway) -> None:
    before = errors_counted(gateway, "/v1/chat/completions")
    response = ask(gateway, "bug")
    assert response.status_code == 500
    assert response.json() == {"error": {"message": "The gateway hit an internal error.",
                                         "type": "api_error", "param": None, "code": "internal_error"}}
    assert errors_counted(gateway, "/v1/chat/completions") == [n + 1 for n in before]
    log = gateway.new_log()
    assert SECRET not in log and "Traceback" not in log, log
    [line] = log.splitlines()
    assert "ERROR" in line and "RuntimeError" in line and "/v1/chat/completions" in line, line


def test_a_bug_in_a_middleware_is_the_same_500(gateway: Gateway) -> None:
    before = errors_counted(gateway, "/v1/models")
    response = httpx.get(gateway.url + "/v1/models?bug")
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert errors_counted(gateway, "/v1/models") == [n + 1 for n in before]
    log = gateway.new_log()
    assert "Traceback" not in log, log
    [line] = log.splitlines()
    assert "ValueError" in line and "/v1/models" in line, line


def test_a_bug_after_the_answer_went_out_leaves_the_answer_whole_and_is_counted(gateway: Gateway) -> None:
    before = errors_counted(gateway, "/v1/models")
    response = httpx.get(gateway.url + "/v1/models?bug-after")
    assert response.status_code == 200 and response.json()["data"][0]["id"] == "bug"
    assert errors_counted(gateway, "/v1/models") == [before[0], before[1] + 1]
    [line] = gateway.new_log().splitlines()
    assert "LookupError on /v1/models after the response was sent" in line, line


def test_a_bug_after_the_stream_started_cuts_the_stream_and_is_counted(gateway: Gateway) -> None:
    before = errors_counted(gateway, "/v1/chat/completions")
    received = b""
    with pytest.raises(httpx.RemoteProtocolError):  # cut, never a stream that looks complete
        with httpx.stream("POST", gateway.url + "/v1/chat/completions", timeout=30,
                          json={"model": "bug-midstream", "stream": True,
                                "messages": [{"role": "user", "content": f"Remember: {SECRET}."}]}) as reply:
            assert reply.status_code == 200
            for piece in reply.iter_bytes():
                received += piece
    assert b"chat.completion.chunk" in received and b"[DONE]" not in received
    assert errors_counted(gateway, "/v1/chat/completions") == [before[0], before[1] + 1]  # it was a 200
    log = gateway.new_log()
    assert SECRET not in log and "Traceback" not in log, log
    [line] = [line for line in log.splitlines() if "unexpected error" in line]
    assert "KeyError" in line and "after the response started" in line, line


def test_the_request_id_is_logged_when_the_client_sent_a_plain_one(gateway: Gateway) -> None:
    assert ask(gateway, "bug", headers={"x-request-id": "req-42.a_b"}).status_code == 500
    assert "request id req-42.a_b" in gateway.new_log()
    assert ask(gateway, "bug", headers={"x-request-id": "forged ERROR line"}).status_code == 500
    assert "request id" not in gateway.new_log()


def test_anthropic_clients_get_their_own_error_shape(gateway: Gateway) -> None:
    response = httpx.post(gateway.url + "/v1/messages", timeout=30, json={
        "model": "bug", "max_tokens": 16, "messages": [{"role": "user", "content": SECRET}]})
    assert response.status_code == 500
    assert response.json() == {"type": "error", "error": {"type": "api_error",
                                                          "message": "The gateway hit an internal error."}}
    assert SECRET not in gateway.new_log()


def test_debug_logging_shows_the_traceback(tmp_path: Path, upstream: FakeUpstream) -> None:
    """Its own gateway process, for the log level is a process flag (forked from the tests' zygote,
    which imported the gateway: seconds, not the minute a fresh import took under load)."""
    gateway = start(tmp_path, upstream, "debug")
    try:
        assert ask(gateway, "bug").status_code == 500
        log = gateway.new_log(waiting_for="faulty_run")
    finally:
        gateway.stop()
    assert "Traceback" in log and "faulty_run" in log and "RuntimeError" in log
