"""Follow-up questions over a pasted document, as the bytes sent show them: a compressed request never
carries more than the client sent, nor one paragraph twice (a follow-up's evidence leaves out what the
document's form and the earlier blocks hold, at passage level), and a later tool call never rewrites
what a reset kept (warm and cold instances send the same bytes and say the same). In-process gateways
(uvicorn in threads) in front of the tests' recording upstream; the documents are Python's own
reference (``pydoc_data.topics``), which every Python ships."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pydoc_data.topics import topics
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY, ServerThread
from fake_upstream import FakeUpstream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import create_app
from gateway.config import parse_config
from gateway.conversation.evidence import CLOSE
from mixpr.tokens import count_tokens

# The review's shape: a cost budget of 1,000 tokens and a document of about 1.4k.
SMALL_TOPICS = ("assert", "pass", "del", "return", "break", "continue", "raise", "global")
QUESTIONS = ("What does the assert statement do?", "What does pass do?", "What does del do to a name?",
             "What does return do inside a generator?", "When is AssertionError raised?",
             "What does break leave?", "What happens when continue runs in a finally clause?")
WINDOW = 16_000
# Half the room a follow-up (not a share of the document), so a few follow-ups reach a reset.
EVIDENCE = {"evidence": 0.5, "evidence_document": 0}


def _config(upstream: str) -> dict[str, Any]:
    def entry(name: str, window: int, **mixpr: Any) -> dict[str, Any]:
        return {"model_name": name, "model_info": {"max_input_tokens": window}, "mixpr": mixpr,
                "litellm_params": {"model": f"openai/{name}", "api_base": upstream, "api_key": "x"}}

    models = [entry("budget", 32_000, budget_tokens=1000), entry("window", WINDOW, prefix=EVIDENCE),
              entry("budget-100", 32_000, budget_tokens=100)]
    return {"model_list": models,
            "mixpr_settings": {"router": "heuristic", "token_margin": 0},
            "general_settings": {"master_key": MASTER_KEY, "compression_workers": 1,
                                 "compression_executor": "thread"}}


def _server(upstream: FakeUpstream) -> ServerThread:
    return ServerThread(create_app(parse_config(_config(upstream.base_url)))).start()


@pytest.fixture(scope="module")
def warm(upstream: FakeUpstream) -> Iterator[httpx.Client]:
    server = _server(upstream)
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {MASTER_KEY}"},
                      timeout=600) as http:
        yield http
    server.stop()


def _document(tokens: int) -> str:
    """Topics of the Python reference, whole paragraphs, until about ``tokens``."""
    paragraphs: list[str] = []
    for name in sorted(topics):
        for paragraph in topics[name].split("\n\n"):
            if paragraph.strip() and paragraph not in paragraphs:
                paragraphs.append(paragraph)
        if count_tokens("\n\n".join(paragraphs), None) > tokens:
            break
    return "\n\n".join(paragraphs)


def _send(http: httpx.Client, upstream: FakeUpstream, model: str,
          messages: list[dict[str, Any]]) -> tuple[httpx.Response, list[dict[str, Any]]]:
    upstream.clear()
    body = {"model": model, "messages": messages, "max_tokens": 50}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text[:300]
    [seen] = [r.json["messages"] for r in upstream.received() if r.path.endswith("/chat/completions")]
    return response, seen


def _tokens(messages: list[dict[str, Any]]) -> int:
    return sum(count_tokens(json.dumps(m.get("content"), ensure_ascii=False), None) for m in messages)


def _repeated(seen: list[dict[str, Any]], sent: list[dict[str, Any]]) -> list[str]:
    """The client's sentences of some length that occur in what the upstream received more often than
    in what the client sent (the reference repeats a few itself): a passage sent twice. Whitespace
    normalised (a kept sentence's line breaks may differ)."""
    def normal(messages: list[dict[str, Any]]) -> str:
        texts = (m["content"] for m in messages if isinstance(m.get("content"), str))
        return re.sub(r"\s+", " ", " ".join(texts))
    ours, theirs = normal(seen), normal(sent)
    sentences = {s for s in re.split(r"(?<=[.!?])\s+", theirs) if len(s) > 40}
    return [s for s in sentences if ours.count(s) > theirs.count(s)]


def _conversation(http: httpx.Client, upstream: FakeUpstream, model: str, document: str,
                  questions: tuple[str, ...]) -> list[tuple[list[dict[str, Any]], httpx.Response,
                                                            list[dict[str, Any]]]]:
    """The document pasted with the first question, then one follow-up a turn: per turn, what the
    client sent, the gateway's response and what the upstream received."""
    turns, messages = [], []
    for i, question in enumerate(questions):
        content = f"{document}\n\n{question}" if i == 0 else question
        messages = [*messages, {"role": "user", "content": content}]
        response, seen = _send(http, upstream, model, messages)
        turns.append((messages, response, seen))
        messages = [*messages, {"role": "assistant", "content": "As the reference says."}]
    return turns


def test_a_compressed_follow_up_never_carries_more_than_the_client_sent(
    upstream: FakeUpstream, warm: httpx.Client,
) -> None:
    """A cost budget of 1,000 tokens, a 1.4k-token document, six follow-ups: each request the upstream
    receives is no longer than the client's, and no paragraph of it is sent twice. (The evidence block
    was a share of the room, 3.2k, larger than the document: each follow-up sent the whole document
    again, and the requests grew past what the client sent.)"""
    document = "\n\n".join(topics[name] for name in SMALL_TOPICS)
    document = _cut_to(document, 1400)
    turns = _conversation(warm, upstream, "budget", document, QUESTIONS)
    assert [r.headers["x-mixpr-action"] for _, r, _ in turns[1:]] == ["compressed"] * 6
    for sent, _, seen in turns:
        assert _tokens(seen) <= _tokens(sent)
        assert not _repeated(seen, sent)


def test_compress_endpoint_never_returns_more_than_it_was_sent(warm: httpx.Client) -> None:
    """The same rows through ``/v1/compress`` (as LiteLLM sends them: no assistant rows): what comes
    back is never longer than what was sent (it answered 11,534 tokens for 1,820)."""
    document = _cut_to("\n\n".join(topics[name] for name in SMALL_TOPICS), 1400)
    rows = [{"role": "user", "content": f"{document}\n\n{QUESTIONS[0]}"},
            *({"role": "user", "content": q} for q in QUESTIONS[1:])]
    response = warm.post("/v1/compress", json={"model": "budget", "messages": rows})
    assert response.status_code == 200, response.text[:300]
    body = response.json()
    assert body["tokens_after"] <= body["tokens_before"]
    assert _tokens(body["messages"]) <= _tokens(rows)
    assert not _repeated(body["messages"], rows)


def _cut_to(text: str, tokens: int) -> str:
    """``text``'s first paragraphs, about ``tokens`` of them."""
    kept = text[: int(len(text) * tokens / count_tokens(text, None))]
    return kept.rsplit("\n\n", 1)[0]


def test_a_tool_call_after_a_reset_never_rewrites_what_it_kept(upstream: FakeUpstream,
                                                                warm: httpx.Client) -> None:
    """A document conversation through a 16k window (evidence: half of it a follow-up), past a reset,
    then the assistant calls a tool and the client sends its result: the messages before the call are
    sent as in the request before it (a tool result switched the whole conversation's reset share, 0.3
    to 0.6, and rewrote them), and a cold instance sends the same bytes and the same report as the
    warm one."""
    turns = _conversation(warm, upstream, "window", _document(40_000), QUESTIONS)
    # Turn 2 switches to forms; a later reset cuts the document again for every question so far.
    assert any(r.headers["x-mixpr-reset"] == "true" for _, r, _ in turns[2:]), "no reset to keep"
    before, _, sent_before = turns[-1]
    function = {"name": "lookup", "arguments": '{"topic": "del"}'}
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": function}]}
    result = {"role": "tool", "tool_call_id": "call_1", "content": topics["del"]}
    messages = [*before, call, result]
    warm_response, warm_seen = _send(warm, upstream, "window", messages)
    assert warm_seen[: len(sent_before)] == sent_before
    cold = _server(upstream)
    try:
        with httpx.Client(base_url=cold.url, headers={"Authorization": f"Bearer {MASTER_KEY}"},
                          timeout=600) as http:
            cold_response, cold_seen = _send(http, upstream, "window", messages)
    finally:
        cold.stop()
    assert cold_seen == warm_seen
    report = ("x-mixpr-reset", "x-mixpr-compressed-tokens", "x-mixpr-prefix-reused-tokens")
    assert [cold_response.headers[h] for h in report] == [warm_response.headers[h] for h in report]


def _block(message: dict[str, Any]) -> str:
    """The evidence block the gateway put before a follow-up's question ("" if none)."""
    found = re.search(r"<earlier_context[^>]*>(.*?)</earlier_context>", message["content"], re.S)
    return found.group(1) if found else ""


def _sentences(text: str) -> set[str]:
    """``text``'s sentences of some length, whitespace normalised, none across a block's gaps."""
    pieces = re.split(r"(?<=[.!?])\s+|\[…\]", re.sub(r"\s+", " ", text))
    return {p.strip() for p in pieces if len(p.strip()) > 40}


# Asked again after a reset, and (with another question, which makes its block larger) at one.
AFTER = (*QUESTIONS, QUESTIONS[2])
AT = (*QUESTIONS[:4], QUESTIONS[2] + " And what happens when continue runs in a finally clause?")


@pytest.mark.parametrize(("questions", "share"), [(AFTER, 0.6), (AT, 0.4)], ids=["after", "at"])
def test_a_question_asked_again_after_a_reset_brings_its_passages_again(
    upstream: FakeUpstream, warm: httpx.Client, questions: tuple[str, ...], share: float,
) -> None:
    """A follow-up's passages, then a reset that cuts the document again for every question so far
    (and drops the earlier evidence), then the same question again, after the reset or at it: its
    passages reach the upstream again. (Blocks were computed before the resets, leaving out what the
    first-sight forms and the earlier blocks had held: after a reset a question went without what the
    reset dropped, 8 of 95 passages again; at the reset, 13 of 95.) A cold instance sends the same
    bytes."""
    turns = _conversation(warm, upstream, "window", _document(40_000), questions)
    first = _sentences(_block(turns[2][2][-1]))
    assert len(first) >= 5, "the first asking brought no evidence to compare"
    resets = [i for i, (_, r, _) in enumerate(turns) if r.headers["x-mixpr-reset"] == "true"]
    if questions is AT:
        assert resets[-1] == len(turns) - 1, f"not at a reset: {resets}"
    else:
        assert any(2 < i < len(turns) - 1 for i in resets), f"no reset between the askings: {resets}"
    sent, response, seen = turns[-1]
    again = _sentences(" ".join(m["content"] for m in seen if isinstance(m.get("content"), str)))
    # Most of them (the query differs: the second asking's leaves out the words the questions share,
    # or shares the block with another question).
    assert len(first & again) >= share * len(first), f"{len(first & again)} of {len(first)} again"
    cold = _server(upstream)
    try:
        with httpx.Client(base_url=cold.url, headers={"Authorization": f"Bearer {MASTER_KEY}"},
                          timeout=600) as http:
            assert _send(http, upstream, "window", sent)[1] == seen
    finally:
        cold.stop()


def test_a_document_sent_as_its_own_part_is_cut_for_the_question_in_the_next_part(
    upstream: FakeUpstream, warm: httpx.Client,
) -> None:
    """A client that attaches a document sends it as a text part of its own and the question as the
    last part (OpenAI content parts, Anthropic text blocks): the document's form is cut for that
    question, as a pasted string's body is cut for its last paragraph, and the question part is sent
    as written. (It was cut for the document's own last paragraph: what the question asked about was
    gone from the next request on.)"""
    document = _document(40_000)
    answer = "Suspend the execution of *coroutine* on an *awaitable* object."
    question = "What does an await expression do to a coroutine?"
    assert answer in document
    parts = [{"type": "text", "text": document}, {"type": "text", "text": question}]
    first = {"role": "user", "content": parts}
    messages = [first, {"role": "assistant", "content": "It suspends it."},
                {"role": "user", "content": "And what does del do?"}]
    response, seen = _send(warm, upstream, "window", messages)
    assert response.headers["x-mixpr-action"] == "compressed"
    form, asked = seen[0]["content"]
    assert _tokens([{"content": form["text"]}]) < 8_000  # cut: the document is 40k
    assert answer in form["text"]
    assert asked == {"type": "text", "text": question}


def _ledger(rows: int) -> str:
    """A pasted ledger of three-word rows ("Haskett012 casks 576"): every unit under four words."""
    names = ("Haskett", "Marlowe", "Pennick", "Tregoze", "Ashdown", "Quiller", "Brannock")
    goods = ("casks", "nets", "ropes", "sails", "oars", "hooks")
    return "\n".join(f"{names[n % 7]}{n:03d} {goods[(n * 5) % 6]} {(n * 37) % 900 + 10}" for n in range(rows))


def test_a_follow_up_over_a_pasted_table_sends_no_row_twice(upstream: FakeUpstream,
                                                            warm: httpx.Client) -> None:
    """Issue 57, defect 1: a ledger of 420 short rows, a cost budget of 1,000 tokens. The follow-up's
    evidence leaves out the rows the document's form already sends (decided by their place in the
    document, not by finding a three-word row's text), and the request is no larger than the
    client's (it was 3,229 -> 3,319 tokens, 102 rows sent twice)."""
    ledger = _ledger(420)
    questions = ("Which casks did the Marlowe entries hold?", "How many nets did the Haskett entries mend?")
    turns = _conversation(warm, upstream, "budget", ledger, questions)
    _, response, seen = turns[-1]
    assert response.headers["x-mixpr-action"] == "compressed"  # and smaller: the rows are not resent
    headers = response.headers
    assert int(headers["x-mixpr-compressed-tokens"]) < int(headers["x-mixpr-original-tokens"])
    for sent, _, seen in turns:
        assert _tokens(seen) <= _tokens(sent)
        text = "\n".join(m["content"] for m in seen if isinstance(m.get("content"), str))
        twice = [row for row in ledger.splitlines() if text.count(row + "\n") + text.endswith(row) > 1]
        assert not twice, (len(twice), twice[:5])


# -- the property: whatever shape is pasted, no follow-up is larger than the client's, no unit twice ---

WORDS = ("harbour", "ledger", "anchor", "beacon", "cargo", "dock", "ferry", "gale", "hull", "keel", "mast",
         "pier", "quay", "rudder", "tide", "wharf")


def _prose(rng: random.Random, rows: int) -> str:
    names = sorted(topics)
    start = rng.randrange(len(names) - 40)
    paragraphs: list[str] = []
    for name in names[start:]:
        paragraphs += [p for p in topics[name].split("\n\n") if p.strip() and p not in paragraphs]
        if len(paragraphs) >= rows // 8:
            break
    return "\n\n".join(paragraphs)


SHAPES: dict[str, Any] = {
    "prose": _prose,
    "table": lambda rng, rows: "| id | item | qty |\n|---|---|---|\n" + "\n".join(
        f"| R{n:04d} | {rng.choice(WORDS)} | {rng.randrange(1000)} |" for n in range(rows)),
    "csv": lambda rng, rows: "id,item,qty,port\n" + "\n".join(
        f"{n},{rng.choice(WORDS)},{rng.randrange(1000)},{rng.choice(WORDS).title()}" for n in range(rows)),
    "log": lambda rng, rows: "\n".join(
        f"2026-03-01T10:{n // 60 % 60:02d}:{n % 60:02d}Z {rng.choice(('INFO', 'WARN', 'ERROR'))} "
        f"worker-{rng.randrange(8)} {rng.choice(WORDS)} job {n} took {rng.randrange(900)}ms"
        for n in range(rows)),
    "code": lambda rng, rows: "\n\n".join(
        f"def {rng.choice(WORDS)}_{n}(x):\n    total = x * {rng.randrange(97)}\n    return total + {n}"
        for n in range(rows // 3)),
    "list": lambda rng, rows: "\n".join(f"- {rng.choice(WORDS)} {n}" for n in range(rows)),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))  # every shape, each with a few drawn documents
@settings(max_examples=4, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10_000), rows=st.integers(250, 450), word=st.sampled_from(WORDS))
def test_no_pasted_shape_makes_a_follow_up_larger_or_sends_a_unit_twice(
    upstream: FakeUpstream, warm: httpx.Client, shape: str, seed: int, rows: int, word: str,
) -> None:
    """Prose, a table, a CSV, a log, code, a list of short lines: every request the upstream receives
    is no larger than the client's, and no line of the document (of prose: no sentence) arrives more
    often than the client sent it."""
    document = SHAPES[shape](random.Random(seed), rows)
    questions = (f"Which entries mention the {word}?", f"How many {word} entries are there, and which ids?")
    for sent, _, seen in _conversation(warm, upstream, "budget", document, questions):
        assert _tokens(seen) <= _tokens(sent), shape
        theirs = "\n".join(m["content"] for m in sent if isinstance(m.get("content"), str))
        ours = "\n".join(m["content"] for m in seen if isinstance(m.get("content"), str))
        lines = set(document.splitlines()) if shape != "prose" else set()  # prose: by its sentences
        twice = [line for line in lines if len(line.strip()) > 3 and ours.count(line) > theirs.count(line)]
        assert not twice, (shape, len(twice), twice[:3])
        assert not _repeated(seen, sent), shape


def _evidence(seen: list[dict[str, Any]]) -> int:
    """The tokens of the evidence block the last message of what the upstream received starts with."""
    content = seen[-1]["content"]
    block = content[: content.index(CLOSE) + len(CLOSE)] if content.startswith("<earlier_context") else ""
    return count_tokens(block, None) if block else 0


def test_in_cost_mode_the_budget_bounds_a_follow_ups_evidence(upstream: FakeUpstream,
                                                              warm: httpx.Client) -> None:
    """Issue 57, defect 9: cost mode, no trigger, a 32k window, a 3.3k-token document. A follow-up's
    evidence is within the budget, and a lower budget never sends more (it was a tenth of the window
    whatever the budget: 1,000 sent 1,693 tokens, 100 sent 3,141)."""
    document = _document(3300)
    questions = ("What does the assert statement do?", "What does a global statement declare?")
    sizes = {}
    for model, budget in (("budget", 1000), ("budget-100", 100)):
        *_, (sent, response, seen) = _conversation(warm, upstream, model, document, questions)
        assert response.headers["x-mixpr-action"] == "compressed"
        assert _evidence(seen) <= budget
        sizes[budget] = _tokens(seen)
    assert sizes[100] <= sizes[1000], sizes
