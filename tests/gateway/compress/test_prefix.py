"""Conversations keep the provider's prompt cache: each turn starts with the bytes sent for the last one.

Two gateway processes (``python -m gateway``) in front of the session's recording upstream; the
conversation is a long document pasted in the first message, then one question per turn.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
import yaml
from conftest import MASTER_KEY, closed_port
from corpus import SENTENCES
from fake_upstream import CACHED_TOKENS, REPLY_TEXT, FakeUpstream

from gateway.compress.prefix import EVIDENCE_CLOSE, EVIDENCE_OPEN
from mixpr.tokens import count_tokens

ROOT = Path(__file__).resolve().parents[3]
KEY = "sk-prefix-test"
BUDGET = 1600  # tokens of conversation text; the document is ~11k, so every turn is compressed
FACTS = [
    ("The harbour master keeps the spare lighthouse key under the third blue flagstone.",
     "Where does the harbour master keep the spare lighthouse key?"),
    ("The miller's daughter married a clockmaker from Ostend in the spring of 1841.",
     "Whom did the miller's daughter marry, and from which town was he?"),
    ("The password for the parish archive cabinet is copper-heron-58.",
     "What is the password for the parish archive cabinet?"),
    ("The travelling surgeon charged nine shillings for setting a broken wrist.",
     "How much did the travelling surgeon charge for setting a broken wrist?"),
]
SECOND_DOCUMENT_SENTENCES = 160  # pasted in a later turn: too much for the room that is left


def _document(seed: int = 7) -> str:
    import random

    rng = random.Random(seed)
    paragraphs = [" ".join(rng.choice(SENTENCES) for _ in range(6)) for _ in range(100)]
    for i, (fact, _) in enumerate(FACTS):
        paragraphs.insert(10 + 25 * i, fact)
    return "\n\n".join(paragraphs)


def _config(upstream_url: str) -> dict:
    params = {"model": "openai/conv", "api_base": upstream_url, "api_key": "sk-upstream"}
    return {
        "model_list": [
            {"model_name": "conv", "litellm_params": params, "model_info": {"max_input_tokens": 100_000},
             "mixpr": {"compress_above_tokens": 2000, "budget_tokens": BUDGET}},
            {"model_name": "conv-today", "litellm_params": {**params, "model": "openai/conv-today"},
             "model_info": {"max_input_tokens": 100_000},
             "mixpr": {"compress_above_tokens": 2000, "budget_tokens": BUDGET, "prefix": {"enabled": False}}},
            {"model_name": "conv-routed", "litellm_params": {**params, "model": "openai/mode-needle-conv"},
             "model_info": {"max_input_tokens": 100_000},
             "mixpr": {"compress_above_tokens": 2000, "budget_tokens": BUDGET, "prefix": {"evidence": 0.004},
                       "self_route": {"enabled": True}}},
            {"model_name": "conv-breakpoint", "litellm_params": {**params, "model": "openai/conv-breakpoint"},
             "model_info": {"max_input_tokens": 100_000},
             "mixpr": {"compress_above_tokens": 2000, "budget_tokens": BUDGET,
                       "prefix": {"breakpoint": True}}},
        ],
        "mixpr_settings": {"router": "heuristic"},
        "general_settings": {"master_key": KEY, "compression_workers": 1, "compression_executor": "thread"},
    }


class GatewayProcess:
    """``python -m gateway`` on a free port, this checkout first on the path."""

    def __init__(self, config: Path) -> None:
        self.port = closed_port()
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--config", str(config), "--port", str(self.port),
             "--log-level", "warning"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

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

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture(scope="module")
def gateways(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    config = tmp_path_factory.mktemp("prefix") / "config.yaml"
    config.write_text(yaml.safe_dump(_config(upstream.base_url)))
    started = [GatewayProcess(config), GatewayProcess(config)]
    try:
        yield [g.wait().url for g in started]
    finally:
        for gateway in started:
            gateway.stop()


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=60)


def _turns(count: int, document: str | None = None) -> list[list[dict]]:
    """The messages of each of ``count`` turns: the document and a question, then one question a turn."""
    messages: list[dict] = [{"role": "system", "content": "Answer from the document."}]
    turns = []
    for i in range(count):
        question = FACTS[i % len(FACTS)][1]
        content = f"{document or _document()}\n\n{question}" if i == 0 else question
        messages = [*messages, {"role": "user", "content": content}]
        turns.append(messages)
        messages = [*messages, {"role": "assistant", "content": REPLY_TEXT}]
    return turns


def _send(url: str, messages: list[dict], upstream: FakeUpstream, model: str = "conv", **extra) -> tuple:
    """One chat request; the headers, and the raw body and messages the upstream received for it."""
    upstream.clear()
    with _client(url) as client:
        raw = client.chat.completions.with_raw_response.create(model=model, messages=messages, **extra)
        if extra.get("stream"):
            assert "".join(c.choices[0].delta.content or "" for c in raw.parse()) == REPLY_TEXT
    [seen] = [r for r in upstream.received() if r.path.endswith("/chat/completions")]
    return raw.headers, seen.raw_body, seen.json["messages"]


def _starts_with(messages: list[dict], prefix: list[dict]) -> bool:
    return len(messages) > len(prefix) and messages[: len(prefix)] == prefix


def test_a_cold_gateway_extends_the_bytes_another_one_sent(
    gateways: list[str], upstream: FakeUpstream
) -> None:
    """No sticky sessions: process B, which never saw the conversation, continues what A sent."""
    first, second = gateways
    turns = _turns(3)
    for messages in turns[:2]:
        _, _, sent_a = _send(first, messages, upstream)
    headers, body_b, sent_b = _send(second, turns[2], upstream)
    assert _starts_with(sent_b, sent_a)
    assert headers["x-mixpr-reset"] == "false"
    assert int(headers["x-mixpr-prefix-reused-tokens"]) > 0
    _, body_a, _ = _send(first, turns[2], upstream)  # A has the earlier turns cached; same bytes
    assert body_a == body_b


def test_follow_up_starts_with_the_previous_bytes_and_brings_evidence(
    gateways: list[str], upstream: FakeUpstream
) -> None:
    url = gateways[0]
    turns = _turns(3, _document(seed=11))
    _send(url, turns[0], upstream)
    headers2, _, sent2 = _send(url, turns[1], upstream)
    headers3, _, sent3 = _send(url, turns[2], upstream)
    # The first question got today's whole budget; the second turn compressed afresh with headroom.
    assert headers2["x-mixpr-reset"] == "true" and headers2["x-mixpr-prefix-reused-tokens"] == "0"
    assert _starts_with(sent3, sent2)
    assert [m["role"] for m in sent3[len(sent2):]] == ["assistant", "user"]
    assert sent3[len(sent2)] == turns[2][-2]  # the reply, verbatim
    fact = FACTS[2][0]
    assert fact not in json.dumps(sent2)  # compressed for the second question, it was left out
    block, question = sent3[-1]["content"].rsplit("\n\n", 1)
    assert question == FACTS[2][1]
    assert block.startswith(EVIDENCE_OPEN) and block.endswith(EVIDENCE_CLOSE) and fact in block
    assert headers3["x-mixpr-reset"] == "false" and headers3["x-mixpr-action"] == "compressed"
    reused = int(headers3["x-mixpr-prefix-reused-tokens"])
    assert reused == int(headers2["x-mixpr-compressed-tokens"])
    assert int(headers3["x-mixpr-compressed-tokens"]) - 50 <= reused + count_tokens(block, "openai/conv") + 50


def test_today_recompresses_every_turn_when_the_prefix_is_off(
    gateways: list[str], upstream: FakeUpstream
) -> None:
    """The same conversation with ``prefix.enabled: false``: no turn starts with the one before."""
    turns = _turns(3, _document(seed=11))
    sent = [_send(gateways[0], messages, upstream, model="conv-today")[2] for messages in turns]
    assert not _starts_with(sent[2], sent[1])


def test_reset_when_the_room_runs_out(gateways: list[str], upstream: FakeUpstream) -> None:
    url = gateways[1]
    turns = _turns(3, _document(seed=13))
    for messages in turns:
        _, _, sent3 = _send(url, messages, upstream)
    second = " ".join(SENTENCES[i % len(SENTENCES)] for i in range(SECOND_DOCUMENT_SENTENCES))
    pasted = [*turns[2], {"role": "assistant", "content": REPLY_TEXT},
              {"role": "user", "content": f"{second}\n\nAnd what does this second text add?"}]
    headers, _, sent4 = _send(url, pasted, upstream)
    assert headers["x-mixpr-reset"] == "true" and headers["x-mixpr-prefix-reused-tokens"] == "0"
    assert not _starts_with(sent4, sent3)
    assert int(headers["x-mixpr-compressed-tokens"]) <= BUDGET + 100  # the budget, and the system prompt
    assert sent4[-1]["content"].endswith("And what does this second text add?")


def test_streamed_turn_sends_the_same_bytes(gateways: list[str], upstream: FakeUpstream) -> None:
    url = gateways[0]
    turns = _turns(3, _document(seed=17))
    for messages in turns[:2]:
        _, _, sent2 = _send(url, messages, upstream)
    headers, _, streamed = _send(url, turns[2], upstream, stream=True)
    _, _, plain = _send(url, turns[2], upstream)
    assert streamed == plain and _starts_with(streamed, sent2)
    assert headers["x-mixpr-reset"] == "false"


def test_cache_control_on_kept_parts_survives(gateways: list[str], upstream: FakeUpstream) -> None:
    marker = {"type": "ephemeral"}
    turns = _turns(3, _document(seed=19))
    parts = [[{"type": "text", "text": m["content"], "cache_control": marker}] if m["role"] == "user" else
             m["content"] for m in turns[2]]
    messages = [{**m, "content": c} for m, c in zip(turns[2], parts, strict=True)]
    headers, _, sent = _send(gateways[0], messages, upstream)
    assert headers["x-mixpr-action"] == "compressed"
    users = [m for m in sent if m["role"] == "user"]
    assert all(part.get("cache_control") == marker for m in users for part in m["content"]
               if part.get("text") and not part["text"].startswith(EVIDENCE_OPEN))


def test_responses_api_conversation_keeps_its_prefix(gateways: list[str], upstream: FakeUpstream) -> None:
    turns = _turns(3, _document(seed=23))
    sent = []
    for messages in turns[1:]:
        items = [{"role": m["role"], "content": m["content"]} for m in messages[1:]]
        upstream.clear()
        with _client(gateways[0]) as client:
            raw = client.responses.with_raw_response.create(model="conv", instructions=messages[0]["content"],
                                                            input=items, store=False)
        assert raw.parse().output_text == REPLY_TEXT
        [seen] = [r for r in upstream.received() if r.path.endswith("/chat/completions")]
        sent.append(seen.json["messages"])
    assert _starts_with(sent[1], sent[0]) and raw.headers["x-mixpr-reset"] == "false"


@pytest.mark.parametrize("stream", [False, True])
def test_messages_api_conversation_keeps_its_prefix(
    gateways: list[str], upstream: FakeUpstream, stream: bool
) -> None:
    turns = _turns(3, _document(seed=29))
    marker = {"type": "ephemeral"}
    system = [{"type": "text", "text": turns[0][0]["content"], "cache_control": marker}]
    sent = []
    with anthropic.Anthropic(base_url=gateways[1], api_key=KEY, max_retries=0, timeout=60) as claude:
        for messages in turns[1:]:
            upstream.clear()
            document = {"type": "text", "text": messages[1]["content"], "cache_control": marker}
            blocks = [{"role": "user", "content": [document]}, *messages[2:]]
            raw = claude.messages.with_raw_response.create(
                model="conv", max_tokens=64, system=system, messages=blocks, stream=stream)
            if not stream:
                assert raw.parse().content[0].text == REPLY_TEXT
            else:
                assert b"message_stop" in raw.http_response.read()
            [seen] = [r for r in upstream.received() if r.path.endswith("/chat/completions")]
            sent.append(seen.json["messages"])
    assert _starts_with(sent[1], sent[0]) and raw.headers["x-mixpr-reset"] == "false"
    # The client's cache_control markers reach the upstream on the system prompt and the kept document.
    assert sent[1][0]["content"] == system
    assert sent[1][1]["content"][0]["cache_control"] == marker
    assert len(sent[1][1]["content"][0]["text"]) < len(document["text"]) / 2


def test_legacy_completion_is_one_turn_as_today(gateways: list[str], upstream: FakeUpstream) -> None:
    """A completions prompt has no turns: it is compressed as one question, and says so."""
    prompt = f"{_document(seed=31)}\n\n{FACTS[0][1]}"
    upstream.clear()
    with _client(gateways[0]) as client:
        raw = client.completions.with_raw_response.create(model="conv", prompt=prompt, max_tokens=16)
    assert raw.parse().choices[0].text == REPLY_TEXT
    assert raw.headers["x-mixpr-action"] == "compressed"
    assert (raw.headers["x-mixpr-reset"], raw.headers["x-mixpr-prefix-reused-tokens"]) == ("false", "0")
    [seen] = [r for r in upstream.received() if r.path.endswith("/completions")]
    assert FACTS[0][0] in seen.json["prompt"]


@pytest.mark.parametrize("stream", [False, True])
def test_cached_tokens_reach_the_client_and_the_metrics(
    client: openai.OpenAI, http: httpx.Client, stream: bool
) -> None:
    """The upstream's prompt-cache usage goes back to the client as sent, and into /metrics."""
    def cached_total() -> float:
        for line in http.get("/metrics").text.splitlines():
            if line.startswith('mixpr_upstream_cached_tokens_total{kind="read",model="cached"}'):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    before = cached_total()
    hello = [{"role": "user", "content": "hello"}]
    if stream:
        chunks = list(client.chat.completions.create(model="cached", messages=hello, stream=True,
                                                     stream_options={"include_usage": True}))
        usage = chunks[-1].usage
    else:
        usage = client.chat.completions.create(model="cached", messages=hello).usage
    assert usage.prompt_tokens_details.cached_tokens == CACHED_TOKENS
    assert cached_total() == before + CACHED_TOKENS


def test_anthropic_clients_see_cache_reads(gateway_url: str) -> None:
    with anthropic.Anthropic(base_url=gateway_url, api_key=MASTER_KEY, max_retries=0, timeout=30) as claude:
        message = claude.messages.create(model="cached", max_tokens=16,
                                         messages=[{"role": "user", "content": "hi"}])
    assert message.usage.cache_read_input_tokens == CACHED_TOKENS
    assert message.usage.input_tokens == 10 - CACHED_TOKENS


def _prefix_turns(url: str, model: str) -> float:
    """``mixpr_prefix_turns_total`` for ``model``, summed over its kinds."""
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).text
    lines = [line for line in text.splitlines()
             if line.startswith("mixpr_prefix_turns_total{") and f'model="{model}"' in line]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


def test_self_route_first_asks_the_same_prefix_with_more_evidence(
    gateways: list[str], upstream: FakeUpstream
) -> None:
    """An "unanswerable" turn is asked again with the same prefix and four times the evidence."""
    url = gateways[0]
    turns = _turns(3, _document(seed=37))
    fact = FACTS[2][0]
    with _client(url) as client:
        for messages in turns[:2]:
            client.chat.completions.create(model="conv-routed", messages=messages, extra_body={"needle": "-"})
        upstream.clear()
        before = _prefix_turns(url, "conv-routed")
        raw = client.chat.completions.with_raw_response.create(model="conv-routed", messages=turns[2],
                                                               extra_body={"needle": fact})
    assert _prefix_turns(url, "conv-routed") == before + 1  # one request, counted once despite the retry
    assert raw.parse().choices[0].message.content == fact
    assert raw.headers["x-mixpr-self-route"] == "evidence"
    first, second = [r.json["messages"] for r in upstream.received() if r.path.endswith("/chat/completions")]
    assert fact not in json.dumps(first) and fact in json.dumps(second)
    assert first[:-1] == second[:-1]  # the same prefix; only the new question's evidence grew


def test_breakpoint_marks_the_end_of_the_frozen_prefix(gateways: list[str], upstream: FakeUpstream) -> None:
    """``prefix.breakpoint``: for providers that cache only at explicit breakpoints, the last message
    of the previous turn (what this turn repeats) carries one ``cache_control``, and nothing else does."""
    turns = _turns(3, _document(seed=17))
    sent = [_send(gateways[0], messages, upstream, model="conv-breakpoint")[2] for messages in turns]
    end = len(sent[1]) - 1
    assert [i for i, m in enumerate(sent[2]) if "cache_control" in json.dumps(m)] == [end]
    [part] = sent[2][end]["content"]
    assert part == {"type": "text", "text": sent[1][end]["content"], "cache_control": {"type": "ephemeral"}}
    assert sent[2][:end] == sent[1][:end]
