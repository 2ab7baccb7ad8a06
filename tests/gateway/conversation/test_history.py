"""Multi-turn requests are the concatenation of their messages' forms, over real HTTP.

Two gateways on one config in front of the session's recording upstream: one in this process
(``ServerThread``), and a ``python -m gateway`` process, the instance that never saw a conversation (a
process of its own: nothing this one computed can reach it). The conversations are coding-agent loops
(a task, then tool calls whose results are long file views: this repository's own source, numbered
like ``cat -n``) on every API, and a long document pasted in the first message, then one question per
turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import yaml
from agent_loops import FILES, TASK, chat_loop, view
from conftest import MASTER_KEY, ServerThread
from corpus import SENTENCES
from fake_upstream import CACHED_TOKENS, REPLY_TEXT, FakeUpstream
from processes import GatewayProcess

from gateway import create_app
from gateway.compress import messages as shape
from gateway.config import parse_config
from gateway.conversation import checks
from gateway.conversation.evidence import CLOSE, OPEN

KEY = "sk-forms-test"
FORMS = {"min_tokens": 400, "keep_tokens": 150, "keep": 0.1, "reset_min_tokens": 100, "first_sight": "always"}
SMALL_WINDOW = 5000  # a few steps fill it: the loop must reset


FILES_WINDOW = 8000  # 15 files of ~800 tokens do not fit: the loop must reset
FILES_TASK = ("Read the files f0.txt to f14.txt in this folder, one file per step, in order. Then tell me "
              "the codeword written in f3.txt")
BUDGET = 1600  # tokens of conversation text; the document is ~11k, so every turn is compressed
TRIGGER = 2000
FACTS = [
    (
        "The harbour master keeps the spare lighthouse key under the third blue flagstone.",
        "Where does the harbour master keep the spare lighthouse key?",
    ),
    (
        "The miller's daughter married a clockmaker from Ostend in the spring of 1841.",
        "Whom did the miller's daughter marry, and from which town was he?",
    ),
    (
        "The password for the parish archive cabinet is copper-heron-58.",
        "What is the password for the parish archive cabinet?",
    ),
    (
        "The travelling surgeon charged nine shillings for setting a broken wrist.",
        "How much did the travelling surgeon charge for setting a broken wrist?",
    ),
]


def _config(upstream_url: str) -> dict[str, Any]:
    def entry(name: str, window: int, upstream_model: str = "", **mixpr: Any) -> dict[str, Any]:
        params = {
            "model": f"openai/{upstream_model or name}",
            "api_base": upstream_url,
            "api_key": "sk-upstream",
        }
        forms = mixpr.pop("prefix", FORMS)
        return {
            "model_name": name,
            "litellm_params": params,
            "model_info": {"max_input_tokens": window},
            "mixpr": {"prefix": forms, **mixpr},
        }

    document = {"compress_above_tokens": TRIGGER, "budget_tokens": BUDGET}
    return {
        "model_list": [
            entry("agent", 200_000),
            entry("agent-small", SMALL_WINDOW),
            entry("agent-files", FILES_WINDOW, prefix={}),
            entry("agent-wide", 1_000_000, prefix={}),
            entry("agent-off", 200_000, prefix={"enabled": False}),
            # Resets that pay by a long future (cost mode weighs each against its cache write): the
            # budget, once full, is made room in by one reset, as these tests follow it.
            entry("conv", 100_000, prefix={"reset_horizon": 50}, **document),
            entry("conv-today", 100_000, prefix={"enabled": False}, **document),
            entry(
                "conv-routed",
                100_000,
                "mode-needle-conv",
                prefix={"evidence": 0.04},
                self_route={"enabled": True},
                **document,
            ),
            entry("conv-breakpoint", 100_000, prefix={"breakpoint": True}, **document),
        ],
        "mixpr_settings": {"router": "heuristic", "token_margin": 0},
        "general_settings": {"master_key": KEY, "compression_workers": 1, "compression_executor": "thread"},
    }


@pytest.fixture(scope="module")
def gateways(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The warm instance (in this process: it shares the imports, no process to start) and the cold one,
    a fresh process on the same config (issue 59: one gateway process, not two)."""
    raw = _config(upstream.base_url)
    config = tmp_path_factory.mktemp("forms") / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    cold = GatewayProcess(config)  # it starts while the warm one is built
    try:
        warm = ServerThread(create_app(parse_config(raw))).start()
        try:
            yield [warm.url, cold.wait().url]
        finally:
            warm.stop()
    finally:
        cold.stop()


# -- conversations ---------------------------------------------------------------------------------


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def _chat(
    url: str, upstream: FakeUpstream, messages: list[dict[str, Any]], model: str = "agent", **extra: Any
) -> tuple[Any, bytes, list[dict[str, Any]]]:
    """One chat request: its headers, and the raw body and messages the upstream received."""
    upstream.clear()
    with _client(url) as client:
        raw = client.chat.completions.with_raw_response.create(model=model, messages=messages, **extra)
    assert raw.parse().choices[0].message.content == REPLY_TEXT
    [seen] = [r for r in upstream.received() if r.path.endswith("/chat/completions")]
    return raw.headers, seen.raw_body, seen.json["messages"]


def _starts_with(messages: list[dict[str, Any]], prefix: list[dict[str, Any]]) -> bool:
    return len(messages) > len(prefix) and messages[: len(prefix)] == prefix


def _metric(url: str, name: str, model: str) -> float:
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).text
    lines = [line for line in text.splitlines() if line.startswith(name + "{") and f'model="{model}"' in line]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


# -- tests -----------------------------------------------------------------------------------------


def test_a_cold_process_sends_the_bytes_a_warm_one_sends(gateways: list[str], upstream: FakeUpstream) -> None:
    """No sticky sessions: process B, which never saw the conversation, sends byte for byte what
    instance A (which saw every earlier step, and cached their forms) sends."""
    warm, cold = gateways
    loop = chat_loop(5)
    for messages in loop[:-1]:
        _chat(warm, upstream, messages)
    headers_warm, body_warm, _ = _chat(warm, upstream, loop[-1])
    headers_cold, body_cold, _ = _chat(cold, upstream, loop[-1])
    assert body_cold == body_warm
    assert headers_warm["x-mixpr-action"] == headers_cold["x-mixpr-action"] == "compressed"
    assert int(headers_warm["x-mixpr-new-forms"]) == 1 < int(headers_cold["x-mixpr-new-forms"])
    assert headers_warm["x-mixpr-prefix-basis"] == "remembered"
    assert headers_cold["x-mixpr-prefix-basis"] == "recomputed"
    assert headers_cold["x-mixpr-prefix-reused-tokens"] == headers_warm["x-mixpr-prefix-reused-tokens"] != "0"


def test_an_agent_loop_only_appends(gateways: list[str], upstream: FakeUpstream) -> None:
    """Each step sends the previous step's bytes, then its new messages; every long result is cut
    once, with markers that say what was left out, and later steps never change it."""
    sent: list[list[dict[str, Any]]] = []
    for messages in chat_loop(6):
        headers, _, seen = _chat(gateways[0], upstream, messages)
        if sent:
            assert _starts_with(seen, sent[-1])
            assert headers["x-mixpr-reset"] == "false" and int(headers["x-mixpr-prefix-reused-tokens"]) > 0
        assert shape.pairing(seen) == []
        newest = seen[-1]["content"]
        assert len(newest) < len(messages[-1]["content"]) / 2 and "omitted" in newest
        sent.append(seen)
    assert seen[1] == {"role": "user", "content": TASK} and seen[0]["content"] == "You are a coding agent."


def test_forms_off_sends_the_loop_as_it_is(gateways: list[str], upstream: FakeUpstream) -> None:
    """``prefix.enabled: false``: below the window nothing is cut (the contrast to the test above)."""
    messages = chat_loop(3)[-1]
    headers, _, seen = _chat(gateways[0], upstream, messages, model="agent-off")
    assert seen == messages and headers["x-mixpr-action"] == "passthrough"


def test_parallel_calls_keep_their_results_together(gateways: list[str], upstream: FakeUpstream) -> None:
    loop = chat_loop(3, parallel=True)
    _, _, before = _chat(gateways[0], upstream, loop[1])
    _, _, seen = _chat(gateways[0], upstream, loop[2])
    assert _starts_with(seen, before)
    assert shape.pairing(seen) == []
    calls = [c["id"] for c in seen[-3]["tool_calls"]]
    assert [m["tool_call_id"] for m in seen[-2:]] == calls == ["call_20", "call_21"]
    assert all("omitted" in m["content"] for m in seen[-2:])


def test_a_reset_is_rare_deliberate_and_then_appends(gateways: list[str], upstream: FakeUpstream) -> None:
    """In a small window the older results go harder once, and the steps after it append again."""
    url = gateways[1]
    before = _metric(url, "mixpr_resets_total", "agent-small")
    sent, resets = [], []
    for messages in chat_loop(12):
        headers, _, seen = _chat(url, upstream, messages, model="agent-small", max_tokens=200)
        assert int(headers["x-mixpr-compressed-tokens"]) <= SMALL_WINDOW - 200
        resets.append(headers["x-mixpr-reset"] == "true")
        if sent and not resets[-1]:
            assert _starts_with(seen, sent[-1])
        sent.append(seen)
    assert 1 <= sum(resets) <= 4 and not resets[0]
    first = resets.index(True)
    assert not _starts_with(sent[first], sent[first - 1])
    assert _metric(url, "mixpr_resets_total", "agent-small") == before + sum(resets)


def test_a_change_of_max_tokens_is_reported_truthfully(gateways: list[str], upstream: FakeUpstream) -> None:
    """The same conversation with less room for the prompt: resets move, earlier bytes change, and
    the headers say so instead of claiming the prefix was reused. The tighter max_tokens is a quarter
    of the window, the most the gateway leaves a reply beside a long prompt (``gateway.core.reply``),
    asked once the conversation no longer fits beside it."""
    url = gateways[1]
    tighter = SMALL_WINDOW // 4
    roomy: list[dict[str, Any]] = []
    for request in chat_loop(10):
        headers, _, same = _chat(url, upstream, request, model="agent-small", max_tokens=16)
        if roomy and int(headers["x-mixpr-compressed-tokens"]) > SMALL_WINDOW - tighter:
            break
        roomy = same
    assert _starts_with(same, roomy) and headers["x-mixpr-reset"] == "false"
    reused = int(headers["x-mixpr-prefix-reused-tokens"])
    headers, _, tight = _chat(url, upstream, request, model="agent-small", max_tokens=tighter)
    assert "x-mixpr-max-tokens" not in headers
    assert not _starts_with(tight, roomy)
    assert headers["x-mixpr-reset"] == "true" and headers["x-mixpr-prefix-basis"] == "remembered"
    assert int(headers["x-mixpr-prefix-reused-tokens"]) < reused


def _anthropic_loop(steps: int, *, error_at: int = -1, mark_at: int = -1) -> list[list[dict[str, Any]]]:
    """A Claude-Code-shaped loop: each assistant turn thinks (signed), says a line, calls a tool."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    requests = []
    for step in range(steps):
        path = FILES[step % len(FILES)]
        thinking = {
            "type": "thinking",
            "thinking": f"Step {step}: I should read {path}.",
            "signature": f"sig-{step}",
        }
        call = {"type": "tool_use", "id": f"toolu_{step}", "name": "Read", "input": {"file_path": path}}
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": f"toolu_{step}",
            "content": view(path),
        }
        if step == error_at:
            result = {**result, "is_error": True, "content": "Error: " + view(path)}
        if step == mark_at:
            result = {**result, "cache_control": {"type": "ephemeral"}}
        messages = [
            *messages,
            {"role": "assistant", "content": [thinking, {"type": "text", "text": "Reading."}, call]},
            {"role": "user", "content": [result]},
        ]
        requests.append(messages)
    return requests


def _messages(
    url: str, upstream: FakeUpstream, blocks: list[dict[str, Any]]
) -> tuple[Any, list[dict[str, Any]]]:
    import anthropic
    upstream.clear()
    with anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0, timeout=120) as claude:
        raw = claude.messages.with_raw_response.create(
            model="agent", max_tokens=256, system="You are Claude Code.", messages=blocks
        )
    assert raw.parse().content[0].text == REPLY_TEXT
    [seen] = [r for r in upstream.received() if r.path.endswith("/chat/completions")]
    return raw.headers, seen.json["messages"]


def test_claude_code_loop_never_changes_what_precedes_a_thinking_block(
    gateways: list[str], upstream: FakeUpstream
) -> None:
    sent = []
    for blocks in _anthropic_loop(5):
        headers, seen = _messages(gateways[0], upstream, blocks)
        if sent:
            assert _starts_with(seen, sent[-1]) and headers["x-mixpr-reset"] == "false"
        sent.append(seen)
    assert shape.pairing(seen) == []
    assistants = [m for m in seen if m["role"] == "assistant"]
    assert len(assistants) == 5 and all("Reading." in json.dumps(m) for m in assistants)
    assert "omitted" in seen[-1]["content"] if isinstance(seen[-1]["content"], str) else True


def test_is_error_results_pass_whole(gateways: list[str], upstream: FakeUpstream) -> None:
    loop = _anthropic_loop(3, error_at=1)
    _, seen = _messages(gateways[0], upstream, loop[-1])
    results = [m for m in seen if m["role"] == "tool"]
    assert ("Error: " + view(FILES[1])) in results[1]["content"]  # whole, though long
    assert len(results[2]["content"]) < len(view(FILES[2])) / 2  # its neighbour is cut


def test_cache_control_on_a_tool_result_reaches_the_upstream(
    gateways: list[str], upstream: FakeUpstream
) -> None:
    loop = _anthropic_loop(3, mark_at=1)
    _, seen = _messages(gateways[0], upstream, loop[-1])
    marked = [m for m in seen if "cache_control" in json.dumps(m)]
    assert [m.get("tool_call_id") for m in marked] == ["toolu_1"]
    [part] = marked[0]["content"]
    assert part["cache_control"] == {"type": "ephemeral"} and "omitted" in part["text"]
    assert checks.breakpoints(seen) <= checks.MAX_BREAKPOINTS


def _responses_loop(steps: int) -> list[list[dict[str, Any]]]:
    """A Codex-shaped loop: function_call items and their function_call_output items."""
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": TASK}]
    requests = []
    for step in range(steps):
        path = FILES[step % len(FILES)]
        items = [
            *items,
            {
                "type": "function_call",
                "call_id": f"fc_{step}",
                "name": "shell",
                "arguments": json.dumps({"command": ["cat", "-n", path]}),
            },
            {"type": "function_call_output", "call_id": f"fc_{step}", "output": view(path)},
        ]
        requests.append(items)
    return requests


def test_codex_loop_over_responses_only_appends(gateways: list[str], upstream: FakeUpstream) -> None:
    sent = []
    for items in _responses_loop(4):
        upstream.clear()
        with _client(gateways[0]) as client:
            raw = client.responses.with_raw_response.create(
                model="agent", instructions="You are Codex.", input=items, store=False
            )
        assert raw.parse().output_text == REPLY_TEXT
        [seen] = [r for r in upstream.received() if r.path.endswith("/chat/completions")]
        messages = seen.json["messages"]
        if sent:
            assert _starts_with(messages, sent[-1]) and raw.headers["x-mixpr-reset"] == "false"
        assert shape.pairing(messages) == []
        sent.append(messages)
    assert "omitted" in messages[-1]["content"] and messages[-1]["tool_call_id"] == "fc_3"


# -- document conversations ------------------------------------------------------------------------


def _document(seed: int = 7) -> str:
    import random

    rng = random.Random(seed)
    paragraphs = [" ".join(rng.choice(SENTENCES) for _ in range(6)) for _ in range(100)]
    for i, (fact, _) in enumerate(FACTS):
        paragraphs.insert(10 + 25 * i, fact)
    return "\n\n".join(paragraphs)


def _turns(count: int, document: str | None = None) -> list[list[dict[str, Any]]]:
    """The messages of each of ``count`` turns: the document and a question, then one question a turn."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Answer from the document."}]
    turns = []
    for i in range(count):
        question = FACTS[i % len(FACTS)][1]
        content = f"{document or _document()}\n\n{question}" if i == 0 else question
        messages = [*messages, {"role": "user", "content": content}]
        turns.append(messages)
        messages = [*messages, {"role": "assistant", "content": REPLY_TEXT}]
    return turns


def test_follow_up_appends_and_brings_evidence(gateways: list[str], upstream: FakeUpstream) -> None:
    """The document's form is what the first question was sent with (a pasted document is compressed
    for its own question, as a single question is); each later question brings evidence retrieved for
    it, and when the budget is full one reset makes room, after which the turns append again."""
    url = gateways[0]
    turns = _turns(4, _document(seed=11))
    _, _, sent1 = _chat(url, upstream, turns[0], model="conv")
    headers2, _, sent2 = _chat(url, upstream, turns[1], model="conv")
    assert _starts_with(sent2, sent1) and headers2["x-mixpr-reset"] == "false"
    assert headers2["x-mixpr-prefix-basis"] == "remembered"
    assert int(headers2["x-mixpr-prefix-reused-tokens"]) > 0
    assert sent2[-2] == turns[1][-2]  # the reply, verbatim
    headers3, _, sent3 = _chat(url, upstream, turns[2], model="conv")
    fact = FACTS[2][0]
    assert fact not in json.dumps(sent2)
    block, question = sent3[-1]["content"].rsplit("\n\n", 1)
    assert question == FACTS[2][1]
    assert block.startswith(OPEN) and block.endswith(CLOSE) and fact in block
    # Cost mode grows past the budget by the follow-ups' words and evidence, up to the trigger, where
    # a reset makes room.
    assert int(headers3["x-mixpr-compressed-tokens"]) <= TRIGGER
    headers4, _, sent4 = _chat(url, upstream, turns[3], model="conv")
    assert (
        headers2["x-mixpr-reset"] == "false"
        and (headers3["x-mixpr-reset"], headers4["x-mixpr-reset"]).count("true") <= 1
    )
    if headers4["x-mixpr-reset"] == "false":
        assert _starts_with(sent4, sent3)  # the block belongs to its message from then on


def test_forms_off_recompresses_every_turn(gateways: list[str], upstream: FakeUpstream) -> None:
    """The same conversation with ``prefix.enabled: false``: no turn starts with the one before."""
    turns = _turns(3, _document(seed=11))
    sent = [_chat(gateways[0], upstream, messages, model="conv-today")[2] for messages in turns]
    assert not _starts_with(sent[2], sent[1])


def test_streamed_turn_sends_the_same_bytes(gateways: list[str], upstream: FakeUpstream) -> None:
    url = gateways[0]
    turns = _turns(2, _document(seed=17))
    _, _, sent1 = _chat(url, upstream, turns[0], model="conv")
    upstream.clear()
    with _client(url) as client:
        stream = client.chat.completions.create(model="conv", messages=turns[1], stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream) == REPLY_TEXT
    [seen] = [r for r in upstream.received() if r.path.endswith("/chat/completions")]
    _, _, plain = _chat(url, upstream, turns[1], model="conv")
    assert seen.json["messages"] == plain and _starts_with(plain, sent1)


def _prefix_turns(url: str, model: str) -> float:
    return _metric(url, "mixpr_prefix_turns_total", model)


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
        raw = client.chat.completions.with_raw_response.create(
            model="conv-routed", messages=turns[2], extra_body={"needle": fact}
        )
    assert _prefix_turns(url, "conv-routed") == before + 1  # one request, counted once despite the retry
    assert raw.parse().choices[0].message.content == fact
    assert raw.headers["x-mixpr-self-route"] == "evidence"
    first, second = [r.json["messages"] for r in upstream.received() if r.path.endswith("/chat/completions")]
    assert fact not in json.dumps(first) and fact in json.dumps(second)
    assert first[:-1] == second[:-1]  # the same prefix; only the new question's evidence grew


def test_breakpoint_marks_the_end_of_the_previous_request(
    gateways: list[str], upstream: FakeUpstream
) -> None:
    """``prefix.breakpoint``: for providers that cache only at explicit breakpoints, the last message
    of the previous request (what this one repeats) carries one ``cache_control``, nothing else does."""
    turns = _turns(4, _document(seed=17))
    sent = [_chat(gateways[0], upstream, messages, model="conv-breakpoint")[2] for messages in turns]
    end = len(sent[2]) - 1
    assert [i for i, m in enumerate(sent[3]) if "cache_control" in json.dumps(m)] == [end]
    [*_, part] = sent[3][end]["content"]
    assert part["cache_control"] == {"type": "ephemeral"}
    moved = len(sent[1]) - 1  # where the previous request had its breakpoint: the marker moves on
    assert sent[3][:moved] == sent[2][:moved] and "cache_control" in json.dumps(sent[2][moved])
    assert sent[3][moved]["content"] == sent[2][moved]["content"][0]["text"]


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
        chunks = list(
            client.chat.completions.create(
                model="cached", messages=hello, stream=True, stream_options={"include_usage": True}
            )
        )
        usage = chunks[-1].usage
    else:
        usage = client.chat.completions.create(model="cached", messages=hello).usage
    assert usage.prompt_tokens_details.cached_tokens == CACHED_TOKENS
    assert cached_total() == before + CACHED_TOKENS


def test_anthropic_clients_see_cache_reads(gateway_url: str) -> None:
    import anthropic
    with anthropic.Anthropic(base_url=gateway_url, api_key=MASTER_KEY, max_retries=0, timeout=30) as claude:
        message = claude.messages.create(
            model="cached", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert message.usage.cache_read_input_tokens == CACHED_TOKENS
    assert message.usage.input_tokens == 10 - CACHED_TOKENS


# -- a reset keeps what the task names -------------------------------------------------------------


def _codeword(number: int) -> str:
    colour = ["amber", "cobalt", "saffron", "umber", "jade"][number % 5]
    return f"The codeword is {colour}-{number * 37 + 11}."


def _book_file(number: int) -> str:
    """~800 tokens of book text, one sentence a line, with one codeword line somewhere in it."""
    import random

    rng = random.Random(number)
    lines = [rng.choice(SENTENCES) for _ in range(40)]
    lines.insert(rng.randrange(5, 35), _codeword(number))
    return "\n".join(lines)


def _file_loop() -> list[list[dict[str, Any]]]:
    """The 15 steps of an agent that reads f0.txt .. f14.txt, one a step (Claude Code's Read tool)."""
    # A client's own instructions take a good part of a short window (Codex's and Claude Code's ~11k
    # of 32k): what is left for the history must go where the task needs it.
    rules = [f"Rule {k}: {SENTENCES[k % len(SENTENCES)]}" for k in range(110)]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the tools.\n" + "\n".join(rules)},
        {"role": "user", "content": FILES_TASK},
    ]
    requests = []
    for number in range(15):
        call = {"id": f"toolu_{number}", "type": "function",
                "function": {"name": "Read", "arguments": json.dumps({"file_path": f"/work/f{number}.txt"})}}
        messages = [
            *messages,
            {"role": "assistant", "content": f"Reading f{number}.txt.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": _book_file(number)},
        ]
        requests.append(messages)
    return requests


def test_a_reset_keeps_the_file_the_task_names(gateways: list[str], upstream: FakeUpstream) -> None:
    """When the window forces resets, what the older results keep is chosen for the task: the file it
    names keeps its codeword, and most files nobody asked for give up their room. A cold instance
    sends the same bytes."""
    resets = 0
    for messages in _file_loop():
        headers, warm, seen = _chat(gateways[0], upstream, messages, model="agent-files", max_tokens=500)
        resets += headers["x-mixpr-reset"] == "true"
    _, cold, _ = _chat(gateways[1], upstream, messages, model="agent-files", max_tokens=500)
    assert cold == warm  # an instance that never saw the run finds the same resets, cut the same way
    sent = json.dumps(seen)
    assert resets >= 1 and shape.pairing(seen) == []
    assert _codeword(3) in sent
    results = {m["tool_call_id"]: m["content"] for m in seen if m["role"] == "tool"}
    unnamed = [1, 2, 4, 5, 6, 7]  # the first half of the run, which a reset covers; the task names f0
    cut = [n for n in unnamed if len(results[f"toolu_{n}"]) < len(_book_file(n)) / 2]
    assert len(cut) >= 5, cut


def test_a_conversation_that_fits_goes_as_the_client_sent_it(
    gateways: list[str], upstream: FakeUpstream
) -> None:
    """Below the trigger (a 1M window, no compress_above_tokens) nothing is cut: every request of a
    loop whose tool results are long reaches the upstream byte for byte as the client sent it."""
    for messages in chat_loop(6):
        upstream.clear()
        body = {"model": "agent-wide", "messages": messages}
        response = httpx.post(f"{gateways[0]}/v1/chat/completions", json=body,
                              headers={"Authorization": f"Bearer {KEY}"}, timeout=120)
        assert response.status_code == 200 and response.headers["x-mixpr-action"] == "passthrough"
        [seen] = [r for r in upstream.received() if r.path.endswith("/chat/completions")]
        assert seen.json["messages"] == messages
