"""LiteLLM's own compressor, ``litellm.compress()`` (BM25 per message, beta), as a peer column.

Fed the way its design expects: the document as one user message per paragraph, the question as the
last user message, ``compression_target`` = the budget (and the trigger too, so it always compresses).
A paragraph it returns verbatim is kept; one it replaced by a retrieval stub (or cut) is not. L-Eval's
Wikipedia pages have no line breaks, so their HTML block tags (``<P>``, ``<H2>``, ``<Table>`` ...) start
paragraphs too. It keeps whole messages and may exceed the target, so ``kept_tokens`` says how much.
"""

from __future__ import annotations

import re

# A paragraph ends at a line break or before an HTML block tag (zero-width: the tag stays with its text).
_BREAK = re.compile(r"\n+|(?=<(?:P|H[1-6]|Table|Tr|Li|Ul|Ol|Dl)>)")
MODEL = "gpt-4o-mini"  # its token counter; the tokenizer is cl100k-like, as for the other methods


def paragraphs(text: str, end: int) -> list[tuple[int, int]]:
    """Spans of the non-blank paragraphs of ``text[:end]``."""
    spans, at = [], 0
    for match in _BREAK.finditer(text, 0, end):
        if text[at : match.start()].strip():
            spans.append((at, match.start()))
        at = max(at, match.end())
    if text[at:end].strip():
        spans.append((at, end))
    return spans


def kept_spans(text: str, question_start: int, budget: int) -> list[tuple[int, int]]:
    """What ``litellm.compress`` keeps of ``text`` (document, then the question from ``question_start``)."""
    import litellm

    paras = paragraphs(text, question_start)
    sent = [{"role": "user", "content": text[s:e]} for s, e in paras]
    sent.append({"role": "user", "content": text[question_start:]})
    result = litellm.compress(sent, model=MODEL, compression_trigger=budget, compression_target=budget)
    back = result["messages"]
    if len(back) != len(sent):  # never seen; a changed contract must not be scored silently
        raise RuntimeError(f"litellm.compress returned {len(back)} messages for {len(sent)}")
    kept = [span for span, a, b in zip(paras, sent, back, strict=False) if b.get("content") == a["content"]]
    return [*kept, (question_start, len(text))]


def compress_chat(messages: list[dict], tools: list[dict], trigger: int,
                  target: int) -> tuple[list[dict], list[dict]]:
    """A chat request as a client using ``litellm.compress()`` would send it: its messages, and its tools
    with the retrieval tool LiteLLM adds when it replaced something."""
    import litellm

    result = litellm.compress(messages, model=MODEL, compression_trigger=trigger, compression_target=target)
    added = [t for t in result.get("tools") or [] if t not in tools]
    return list(result["messages"]), [*tools, *added]
