"""Big upstream requests are built off the event loop (``gateway.upstream.patches``), over real HTTP.

One chat message of 100,000 tiny parts (the fixture raises ``max_body_objects`` for it) takes
LiteLLM and the openai SDK seconds to walk before it is sent upstream (19,000 took 7 s with
LiteLLM 1.106 and 0.7 s with 1.108: too short a flight for the short requests to show anything).
A gateway (uvicorn, real sockets) serves it while one client sends
short requests one after another: those sent in the second half of the big request's flight must
still reach the upstream before the big one does. With the walk on the loop, at most the one caught
waiting can (the loop runs nothing else until the big request is on the wire). Embeddings and
legacy completions with many inputs go through the worker threads whole, and must answer as the
small path does, errors included. The gateway's own per-part passes (the API's validation, the
conversation split) and LiteLLM's (its request translation, its logging copy) run in those threads
for a big request on every API, and on the loop for a small one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from conftest import MASTER_KEY, ServerThread, gateway_config, model
from fake_upstream import REPLY_TEXT, FakeUpstream
from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig

from gateway import create_app
from gateway.api import anthropic_messages, openai_chat, openai_responses
from gateway.compress import conversation
from gateway.config import parse_config
from gateway.run.offload import INLINE_ITEMS, THREAD_PREFIX
from gateway.upstream import patches as upstream_offload

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
PARTS = 100_000  # over the default max_body_objects (20,000): the fixture allows it


@pytest.fixture(scope="module")
def big_gateway(upstream: FakeUpstream) -> Iterator[str]:
    """A gateway with ``big``, a model whose window the 100,000 parts fit in, so they are forwarded
    as they are (MixPR in a thread: no worker process to wait for). Through LiteLLM: these tests are
    about its per-part work, which the raw relay (``gateway.upstream.chat_relay``) does not do at all."""
    raw = gateway_config(upstream.base_url)
    window = {"max_input_tokens": 1_000_000}
    raw["model_list"].append(model("big", "big", upstream.base_url, model_info=window))
    raw["general_settings"].update(compression_executor="thread", max_body_bytes=8_000_000, raw_relay=False,
                                   max_body_objects=2 * PARTS)
    server = ServerThread(create_app(parse_config(raw))).start()
    yield server.url
    server.stop()


class ShortSender:
    """Sends short chat requests one after another, each with its own marker, until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sent: list[tuple[str, float]] = []  # (marker, time.monotonic() when sent)
        self.statuses: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, headers=AUTH, timeout=120) as http:
            while not self.stop.is_set():
                marker = f"short-{len(self.sent)}-{time.monotonic()}"
                self.sent.append((marker, time.monotonic()))
                body = {"model": "gpt-test", "messages": [{"role": "user", "content": marker}]}
                self.statuses.append(http.post("/v1/chat/completions", json=body).status_code)

    def __enter__(self) -> ShortSender:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(120)


def _big_chat(http: httpx.Client, stream: bool) -> httpx.Response:
    parts = [{"type": "text", "text": "w"} for _ in range(PARTS)]
    body = {"model": "big", "messages": [{"role": "user", "content": parts}], "stream": stream}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text[:300]
    if stream:
        assert response.text.rstrip().endswith("data: [DONE]")
    return response


@pytest.mark.parametrize("stream", [False, True])
def test_short_requests_overtake_a_request_of_100000_parts_while_it_is_built(
    big_gateway: str, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.clear()
    with httpx.Client(base_url=big_gateway, headers=AUTH, timeout=300) as http:
        with ShortSender(big_gateway) as shorts:
            began = time.monotonic()
            _big_chat(http, stream)
            ended = time.monotonic()
    arrived = [r for r in upstream.received() if r.json.get("model") in ("echo", "big")]
    big_at = next(i for i, r in enumerate(arrived) if r.json["model"] == "big" and len(r.raw_body) > 100_000)
    before_big = {str(r.json["messages"][0]["content"]) for r in arrived[:big_at]}
    # Sent once the big request had been in flight for half its time: it was being built by then.
    late = [marker for marker, sent in shorts.sent if sent > began + (ended - began) / 2]
    overtook = [marker for marker in late if marker in before_big]
    assert set(shorts.statuses) == {200}
    assert len(overtook) >= 5, f"{len(overtook)} of {len(late)} late short requests overtook the big one"


def test_many_embedding_inputs_are_answered_in_order(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    inputs = [f"w{i}" for i in range(INLINE_ITEMS * 3)]
    raw = client.embeddings.with_raw_response.create(model="gpt-test", input=inputs)  # base64, decoded
    expected = [[float(len(text)), float(i), 0.5] for i, text in enumerate(inputs)]
    assert [d.embedding for d in raw.parse().data] == expected
    assert raw.headers["x-mixpr-action"] == "passthrough"
    [sent] = [r.json for r in upstream.received("echo") if r.path.endswith("/embeddings")]
    assert sent["input"] == inputs


@pytest.mark.parametrize("stream", [False, True])
def test_many_legacy_prompts_are_answered(client: openai.OpenAI, upstream: FakeUpstream,
                                          stream: bool) -> None:
    upstream.clear()
    prompts = [f"Once upon a time {i}" for i in range(INLINE_ITEMS * 3)]
    result = client.completions.create(model="gpt-test", prompt=prompts, max_tokens=5, stream=stream)
    text = "".join(c.choices[0].text or "" for c in result) if stream else result.choices[0].text
    assert text == REPLY_TEXT
    [sent] = [r.json for r in upstream.received("echo") if r.path.endswith("/completions")]
    assert sent["prompt"] == prompts


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/completions"])
def test_upstream_errors_of_big_requests_keep_their_status(http: httpx.Client, path: str) -> None:
    field = "input" if path.endswith("embeddings") else "prompt"
    body: dict[str, Any] = {"model": "rate-limited", field: ["w"] * (INLINE_ITEMS * 3)}
    response = http.post(path, json=body)
    assert (response.status_code, response.headers.get("retry-after")) == (429, "7")
    assert response.json()["error"]["type"] == "rate_limit_error"
    response = http.post(path, json={**body, "model": "unreachable"})
    assert (response.status_code, response.json()["error"]["code"]) == (502, "upstream_connection_error")


def _parts(count: int) -> list[dict[str, str]]:
    return [{"type": "text", "text": f"w{i}"} for i in range(count)]


API_BODIES: dict[str, tuple[str, Callable[[int], dict[str, Any]]]] = {
    "chat": ("/v1/chat/completions", lambda n: {"model": "big", "messages": [{"role": "user",
                                                                             "content": _parts(n)}]}),
    "responses": ("/v1/responses", lambda n: {"model": "big",
                                              "input": [{"role": "user", "content": "w"}] * n}),
    "anthropic": ("/v1/messages", lambda n: {"model": "big", "max_tokens": 5,
                                             "messages": [{"role": "user", "content": _parts(n)}]}),
}
API_VALIDATION = {"chat": (openai_chat, "validate_messages"), "responses": (openai_responses, "_validate"),
                  "anthropic": (anthropic_messages, "_validate")}


@pytest.mark.parametrize("api", sorted(API_BODIES))
def test_per_part_work_of_a_big_request_runs_in_worker_threads(
    big_gateway: str, monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    ran: dict[str, set[str]] = {}

    def recorded(owner: Any, name: str) -> None:
        original = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            ran.setdefault(name, set()).add(threading.current_thread().name)
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    recorded(*API_VALIDATION[api])
    recorded(conversation, "split")
    recorded(OpenAIGPTConfig, "transform_request")
    recorded(upstream_offload, "truncate_base64_in_messages")  # LiteLLM's logging copy, big requests only
    path, body = API_BODIES[api]
    with httpx.Client(base_url=big_gateway, headers=AUTH, timeout=120) as http:
        assert http.post(path, json=body(2)).status_code == 200
        small, ran = ran, {}
        assert http.post(path, json=body(INLINE_ITEMS * 3)).status_code == 200
        deadline = time.monotonic() + 10  # LiteLLM logs a success after the answer is sent
        while "truncate_base64_in_messages" not in ran and time.monotonic() < deadline:
            time.sleep(0.05)
    names = {API_VALIDATION[api][1], "split", "transform_request", "truncate_base64_in_messages"}
    assert set(ran) == names
    assert {name: {t.startswith(THREAD_PREFIX) for t in threads} for name, threads in ran.items()} == {
        name: {True} for name in names}
    assert {name: {t.startswith(THREAD_PREFIX) for t in threads} for name, threads in small.items()} == {
        name: {False} for name in names - {"truncate_base64_in_messages"}}
