"""Over-long prompts arrive at the upstream compressed, fitting the window, question and needle kept."""

from __future__ import annotations

import concurrent.futures
import json
import math
from collections.abc import Iterator

import httpx
import openai
import pytest
from conftest import MASTER_KEY, SMALL_WINDOW, ServerThread, gateway_config
from corpus import NEEDLE, QUESTION, haystack
from fake_upstream import REPLY_TEXT, FakeUpstream

from gateway.app import create_app
from gateway.compress import conversation
from gateway.config import parse_config
from gateway.core.model_tokens import DEFAULT_MARGIN
from mixpr.tokens import count_tokens

SYSTEM = "You answer questions about the document the user sends."


@pytest.fixture(scope="module")
def routed_client(upstream: FakeUpstream) -> Iterator[openai.OpenAI]:
    """A gateway with ``small-auto``, whose auto router its worker processes ask through LiteLLM."""
    app = create_app(parse_config(gateway_config(upstream.base_url, auto_router=True)))
    server = ServerThread(app).start()
    with openai.OpenAI(base_url=server.url + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=120) as c:
        yield c
    server.stop()


def _long_messages(seed: int = 0, needle: str = NEEDLE, question: str = QUESTION) -> list[dict]:
    document = haystack(600, needle=needle, seed=seed)  # about 11k tokens, window is 3k
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"{document}\n\n{question}"},
    ]


def _prompt_tokens(messages: list[dict]) -> int:
    """OpenAI's accounting, with the encoding the gateway picks for upstream model ``openai/small``."""
    return sum(count_tokens(m["content"], "openai/small") + 4 for m in messages) + 3


def _model_tokens(messages: list[dict]) -> int:
    """The gateway's estimate in ``openai/small``'s tokens: tiktoken does not know the model, so its
    count of the text is raised by the default margin; framing is counted as for OpenAI."""
    text = conversation.SEPARATOR.join(m["content"] for m in messages)
    return math.ceil(count_tokens(text, "openai/small") * (1 + DEFAULT_MARGIN)) + 4 * len(messages) + 3


def _chat_requests(upstream: FakeUpstream, model: str) -> list[dict]:
    return [r.json for r in upstream.received(model) if not r.is_router_call]


@pytest.mark.parametrize("stream", [False, True])
def test_long_prompt_arrives_compressed(client: openai.OpenAI, upstream: FakeUpstream, stream: bool) -> None:
    upstream.clear()
    messages = _long_messages(seed=1)
    raw = client.chat.completions.with_raw_response.create(model="small", messages=messages, stream=stream)
    result = raw.parse()
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in result)
    else:
        text = result.choices[0].message.content
    assert text == REPLY_TEXT
    [sent] = _chat_requests(upstream, "small")
    kept = sent["messages"]
    assert [m["role"] for m in kept] == ["system", "user"]
    assert kept[0] == messages[0]  # system prompt verbatim
    assert kept[1]["content"].endswith(QUESTION)
    assert NEEDLE in kept[1]["content"]
    assert _prompt_tokens(kept) + 1024 <= SMALL_WINDOW  # fits, with the default reply reserve
    headers = raw.headers
    assert headers["x-mixpr-action"] == "compressed"
    assert int(headers["x-mixpr-original-tokens"]) > 10_000
    assert int(headers["x-mixpr-compressed-tokens"]) <= SMALL_WINDOW - 1024
    assert headers["x-mixpr-route"] == "local"
    assert float(headers["x-mixpr-compress-ms"]) > 0


def test_conversation_keeps_roles_places_and_parts(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    function = {"name": "search", "arguments": "{\"q\": \"vault\"}"}
    call = {"id": "call_9", "type": "function", "function": function}
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": [{"type": "text", "text": haystack(300, seed=2)}, image],
         "name": "reader"},
        {"role": "assistant", "content": "Let me search.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_9", "content": haystack(300, needle="No vault here.", seed=3)},
        {"role": "user", "content": QUESTION},
    ]
    client.chat.completions.create(model="small", messages=messages, max_tokens=200)
    [sent] = _chat_requests(upstream, "small")
    kept = sent["messages"]
    assert [m["role"] for m in kept] == [m["role"] for m in messages]
    # A request with an earlier turn is its messages' forms (gateway.conversation.history): the pasted
    # text was cut for what it was pasted with, and the later question brings its own evidence.
    assert kept[0] == messages[0] and kept[4]["content"].endswith(QUESTION)
    assert kept[1]["name"] == "reader" and kept[1]["content"][1] == image
    assert kept[2]["tool_calls"] == [call]
    assert kept[3]["tool_call_id"] == "call_9"
    assert NEEDLE in kept[1]["content"][0]["text"] + kept[4]["content"]
    assert len(json.dumps(kept)) < len(json.dumps(messages)) / 3
    assert sent["max_tokens"] == 200


def test_router_is_asked_once_per_content(routed_client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    messages = _long_messages(seed=4, question="Where is the lighthouse vault code written down?")
    for _ in range(2):
        raw = routed_client.chat.completions.with_raw_response.create(model="small-auto", messages=messages)
        assert raw.headers["x-mixpr-route"] == "local"  # the fake upstream answers "n"
    router_calls = [r.json for r in upstream.received("small-auto") if r.is_router_call]
    assert len(router_calls) == 1
    [call] = router_calls
    assert call["max_tokens"] == 2 and call["temperature"] == 0
    assert call["messages"][0]["content"].rstrip().endswith("Answer:")
    assert len(_chat_requests(upstream, "small-auto")) == 2


def test_per_request_control(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    messages = [{"role": "user", "content": haystack(120, seed=5) + "\n\n" + QUESTION}]  # ~2k tokens: fits
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-test", messages=messages, extra_body={"mixpr": {"enabled": True, "budget_tokens": 300}}
    )
    assert raw.headers["x-mixpr-action"] == "compressed"
    assert int(raw.headers["x-mixpr-compressed-tokens"]) < 400
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-test", messages=messages,
        extra_headers={"x-mixpr-enabled": "true", "x-mixpr-budget-tokens": "300", "x-mixpr-route": "global"},
    )
    assert raw.headers["x-mixpr-action"] == "compressed"
    assert raw.headers["x-mixpr-route"] == "global"
    first, second = _chat_requests(upstream, "echo")
    assert "mixpr" not in first and first["messages"][0]["content"].endswith(QUESTION)


def test_disabled_compression_forwards_the_long_prompt(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    messages = _long_messages(seed=6)
    raw = client.chat.completions.with_raw_response.create(
        model="small", messages=messages, extra_headers={"x-mixpr-enabled": "false"}
    )
    assert raw.headers["x-mixpr-action"] == "passthrough"
    [sent] = _chat_requests(upstream, "small")
    assert sent["messages"] == messages


def test_verbatim_parts_too_big_for_the_window(http: httpx.Client) -> None:
    messages = [{"role": "system", "content": haystack(300, seed=7)}, {"role": "user", "content": QUESTION}]
    response = http.post("/v1/chat/completions", json={"model": "small", "messages": messages})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "context_length_exceeded"
    assert error["param"] == "messages"
    assert "never compressed" in error["message"] and f"{SMALL_WINDOW}" in error["message"]


class _Boom(RuntimeError):
    pass


def _failing_compress(*args: object, **kwargs: object) -> None:
    raise _Boom("simulated failure inside MixPR")


def test_compression_failure_forwards_the_original_when_it_fits(
    thread_gateway_url: str, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gateway.compress.compressor.mixpr.engine.compress", _failing_compress)
    upstream.clear()
    messages = [{"role": "user", "content": haystack(60, seed=8) + "\n\n" + QUESTION}]
    client = openai.OpenAI(base_url=thread_gateway_url + "/v1", api_key=MASTER_KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-test", messages=messages, extra_body={"mixpr": {"enabled": True, "budget_tokens": 100}}
    )
    assert raw.headers["x-mixpr-action"] == "passthrough"
    assert _chat_requests(upstream, "echo")[0]["messages"] == messages


def test_compression_failure_on_a_prompt_that_cannot_fit(
    thread_gateway_url: str, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gateway.compress.compressor.mixpr.engine.compress", _failing_compress)
    upstream.clear()
    messages = _long_messages(seed=9)
    response = httpx.post(thread_gateway_url + "/v1/chat/completions",
                          json={"model": "small", "messages": messages},
                          headers={"Authorization": f"Bearer {MASTER_KEY}"})
    assert response.status_code == 500  # the gateway's fault, not the client's
    assert response.json() == {"error": {
        "message": f"The prompt is {_model_tokens(messages)} tokens but the model accepts 3000 "
                   "(with 1024 kept for the reply), and compressing it failed on the server (_Boom), "
                   "so it was not sent.",
        "type": "api_error", "param": None, "code": "compression_failed"}}
    assert upstream.received("small") == []


def test_empty_pieces_get_a_placeholder(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.clear()
    messages = [
        {"role": "user", "content": haystack(400, needle="Nothing to see.", seed=10)},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": haystack(400, seed=11) + "\n\n" + QUESTION},
    ]
    client.chat.completions.create(model="small", messages=messages)
    [sent] = _chat_requests(upstream, "small")
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert all(m["content"] for m in sent["messages"])  # never empty: providers reject that
    assert NEEDLE in sent["messages"][2]["content"]
    # A request with an earlier turn is its messages' forms (gateway.conversation.history): a short
    # message passes as it is; each long one is cut for what it asks, never to nothing.
    assert sent["messages"][1]["content"] == "Noted."
    assert len(sent["messages"][0]["content"]) < len(messages[0]["content"]) // 10


def test_identical_requests_at_once_ask_the_router_once(
    routed_client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    upstream.clear()
    messages = _long_messages(seed=9, question="Which harbour keeps the lighthouse vault code?")

    def send(_: int) -> str:
        raw = routed_client.chat.completions.with_raw_response.create(model="small-auto", messages=messages)
        return raw.headers["x-mixpr-route"]

    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        assert list(pool.map(send, range(3))) == ["local"] * 3
    assert len([r for r in upstream.received("small-auto") if r.is_router_call]) == 1
    assert len(_chat_requests(upstream, "small-auto")) == 3
