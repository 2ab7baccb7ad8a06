"""What the compressor counts for a compressed request, and that what it reports is what it sends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.compress import compressor as compressor_module
from gateway.compress import conversation
from gateway.compress.compressor import Compressor, Outcome
from gateway.compress.policy import Control, Target
from gateway.config import MixprSettings
from gateway.run.workers import Workers
from mixpr.tokens import count_tokens
from tests.mixpr.filler import haystack

MODEL = "gpt-4o-mini"
QUESTION = "Which harbor did the captain remember?"


def _one_message() -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"{haystack(1000, {})}\n\n{QUESTION}"}]


def _conversation() -> list[dict[str, Any]]:
    """Three long turns with paragraphs: cut inside and between messages, the stream is rebuilt with
    each message's own joins, not as one text's kept spans."""
    turns = ["\n\n".join(haystack(40, {}, seed=100 * turn + p) for p in range(6)) for turn in range(3)]
    return [{"role": "system", "content": "Answer from the notes."},
            {"role": "user", "content": turns[0]}, {"role": "assistant", "content": turns[1]},
            {"role": "user", "content": f"{turns[2]}\n\n{QUESTION}"}]


def _prepared(messages: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> tuple[Outcome, int]:
    """The compressor's outcome for ``messages`` over an 8k window, and the characters the gateway's own
    process encoded for it (MixPR's counts, in the pool's worker, are not among them)."""
    counted: list[int] = []

    def tally(text: str, model: str | None = None) -> int:
        counted.append(len(text))
        return count_tokens(text, model)

    monkeypatch.setattr(compressor_module, "count_tokens", tally)

    async def main() -> Outcome:
        compressor = Compressor(Workers(workers=1, executor="thread", timeout_s=120), route_cache_size=16)
        await compressor.start(with_router=False)
        try:
            return await compressor.prepare(messages, tools=None, target=Target(MODEL, 8000, 1000),
                                            settings=MixprSettings(router="heuristic"), control=Control(),
                                            router=None)
        finally:
            compressor.close()

    outcome = asyncio.run(main())
    assert outcome.action == "compressed"
    return outcome, sum(counted)


@pytest.mark.parametrize("messages", [_one_message(), _conversation()], ids=["one message", "conversation"])
def test_the_tokens_reported_for_a_compressed_prompt_are_the_tokens_sent(messages, monkeypatch):
    """The final count (the usage headers, the window check) is the rebuilt prompt's exact count,
    whether the worker's count of the kept text stood in for it or it was counted again."""
    outcome, _ = _prepared(messages, monkeypatch)
    fixed = outcome.original_tokens - count_tokens(conversation.split(messages).text, MODEL)
    assert outcome.final_tokens == count_tokens(conversation.split(outcome.messages).text, MODEL) + fixed
    assert outcome.final_tokens <= 7000


def test_a_compressed_message_is_not_encoded_again_after_its_cut(monkeypatch):
    """One long message cut to fit: the gateway encodes the prompt once, to decide; the kept text's
    count comes from the worker that counted it while choosing (~6 ms saved on 12k kept tokens)."""
    messages = _one_message()
    _, encoded = _prepared(messages, monkeypatch)
    assert encoded == len(conversation.split(messages).text)


def test_a_conversation_rebuilt_otherwise_is_counted_again(monkeypatch):
    """Where the rebuilt messages are not the kept spans joined as MixPR joins them, the worker's
    count is not used: the rebuilt stream is encoded."""
    messages = _conversation()
    outcome, encoded = _prepared(messages, monkeypatch)
    original = len(conversation.split(messages).text)
    assert encoded >= original + len(conversation.split(outcome.messages).text)
