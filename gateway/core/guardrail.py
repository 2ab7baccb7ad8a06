"""LiteLLM's guardrail inputs as a chat call, and an answer LiteLLM writes back without losing a block.

Shared by the two ways MixPR runs inside a LiteLLM proxy: the generic-guardrail endpoint
(``gateway.api.guardrail_api``) and the guardrail class (``gateway.plugins.litellm_guardrail``).

LiteLLM hands a guardrail the request twice: ``texts``, every text it can write back in place (a
message's content, a text block, a tool result, a system block ...), and ``structured_messages``, the
request as OpenAI chat rows. A *new* ``structured_messages`` list makes LiteLLM rebuild the request
from those rows, and for Anthropic's ``/v1/messages`` that rebuild drops ``document`` (text and PDF)
and ``search_result`` blocks and ``is_error`` on tool results (litellm 1.106,
``AnthropicMessagesHandler._write_back_structured_messages``). ``texts`` of the same length are written
back one to one, each into its own block, which keeps every block's type and flags, on chat
completions, Responses and Anthropic Messages alike. So:

- the rows are what is compressed: roles, order and tool calls are what MixPR needs;
- each text of a row is paired with the text LiteLLM gave for it (in order, by value). A row holding a
  text nothing answers for cannot be changed in place, so it is kept whole (laid out as verbatim text:
  still counted, never cut);
- short tool results, and failed ones (``is_error``, when the caller knows it), are kept whole as well:
  cut down, ``ERROR E503: archive unavailable`` would read as ``[…]``, a failure as a success;
- the answer is ``texts``, each paired text replaced by what was kept of it (rows only for a caller
  that sent rows and no texts, which LiteLLM never does).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.compress.compressor import Outcome
from gateway.compress.policy import Control, parse_control
from gateway.errors import ContextLengthExceeded

log = logging.getLogger("gateway.core.guardrail")

# LiteLLM forwards inbound headers it does not allow-list as this placeholder, never their value.
HIDDEN_HEADER = "[present]"
# The request fields that set the reply's size (chat, Responses, Anthropic Messages).
REPLY_LIMITS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
# A tool result at most this long is sent whole: what MixPR could save is less than what a cut costs.
KEEP_WHOLE_CHARS = 1000
KEPT_ROLE = "developer"  # verbatim in the compressor's layout (``gateway.compress.conversation``)
COMPRESSED_ROLES = frozenset({"user", "assistant", "tool"})


@dataclass(frozen=True)
class Layout:
    """What is compressed for a guardrail call, and where each compressed text goes back."""

    messages: list[dict[str, Any]]  # the rows; rows kept whole are laid out as verbatim
    texts: list[str]  # LiteLLM's texts, in its order
    pairs: tuple[tuple[int, int | None, int], ...]  # (row, part or None for a string, text index)
    kept_whole: int = 0  # rows kept whole (short or failed tool results, texts without a pair)
    unpaired: int = 0  # row texts LiteLLM gave no text for
    by_rows: bool = False  # rows and no texts came (a direct caller): the answer is rows


def guardrail_messages(inputs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The conversation LiteLLM handed over: its structured messages, else each text as a user turn
    (the last text then holds the question, as a legacy completion's prompt does)."""
    structured = inputs.get("structured_messages")
    if isinstance(structured, list) and structured and all(isinstance(m, dict) for m in structured):
        return structured
    texts = _texts(inputs)
    return [{"role": "user", "content": text} for text in texts] if texts else []


def layout(inputs: Mapping[str, Any], messages: list[dict[str, Any]],
           failed_tool_ids: Collection[str] = ()) -> Layout:
    """``messages`` (from ``guardrail_messages``) paired with LiteLLM's texts; rows that must not
    change laid out as verbatim."""
    texts = _texts(inputs)
    if not (isinstance(inputs.get("structured_messages"), list) and inputs["structured_messages"]):
        pairs = tuple((i, None, i) for i in range(len(texts)))
        return Layout(messages, texts, pairs)
    if not texts:
        return Layout(messages, [], (), by_rows=True)
    pairs, unpaired_rows = _pair(messages, texts)
    kept = {i for i, m in enumerate(messages) if m.get("role") == "tool" and _keep_whole(m, failed_tool_ids)}
    kept |= {i for i in unpaired_rows if messages[i].get("role") in COMPRESSED_ROLES}
    laid = [{**m, "role": KEPT_ROLE} if i in kept else m for i, m in enumerate(messages)]
    return Layout(laid, texts, tuple(p for p in pairs if p[0] not in kept), len(kept), len(unpaired_rows))


def answer(plan: Layout, outcome: Outcome) -> dict[str, Any]:
    """The fields of a compressed answer: ``texts``, or ``structured_messages`` for rows alone."""
    if plan.by_rows:
        return {"structured_messages": outcome.messages}
    return {"texts": rewritten_texts(plan, outcome)}


def rewritten_texts(plan: Layout, outcome: Outcome) -> list[str]:
    """LiteLLM's texts with each paired one replaced by what the compressed row keeps of it."""
    out = list(plan.texts)
    prepended: set[int] = set()
    for row, part, index in plan.pairs:
        before, after = plan.messages[row].get("content"), outcome.messages[row].get("content")
        if part is None:
            out[index] = after if isinstance(after, str) else _joined(after)
            continue
        if not isinstance(after, list) or not isinstance(before, list):
            continue
        shift = len(after) - len(before)  # a block of evidence put first (gateway.conversation.history)
        text = after[part + shift].get("text") if 0 <= shift else None
        if not isinstance(text, str):
            continue
        if shift and row not in prepended:
            prepended.add(row)
            text = "\n\n".join([_joined(after[:shift]), text])
        out[index] = text
    return out


def reply_params(request_data: Mapping[str, Any], tools: Any) -> dict[str, Any]:
    """What of the original request the budget needs: the reply's size and the tool definitions."""
    limit = next((request_data.get(k) for k in REPLY_LIMITS if request_data.get(k)), None)
    params: dict[str, Any] = {"max_tokens": limit} if isinstance(limit, int) and limit > 0 else {}
    return {**params, **({"tools": tools} if isinstance(tools, list) and tools else {})}


def control_from(headers: Any, field: Any = None) -> Control:
    """The request's ``x-mixpr-*`` switches (and ``mixpr`` body field), as the gateway reads them."""
    return parse_control(field, visible_headers(headers))


def visible_headers(headers: Any) -> dict[str, str]:
    if not isinstance(headers, Mapping):
        return {}
    return {str(k).lower(): str(v) for k, v in headers.items() if v != HIDDEN_HEADER}


def fails_open(exc: Exception) -> bool:
    """Whether the prompt should go on unchanged: a server fault, or compression cannot make it fit
    (the model's own error then says it best); not when the request is wrong (a bad switch, a model
    the gateway does not know)."""
    return isinstance(exc, ContextLengthExceeded) or getattr(exc, "status_code", 500) >= 500


def failed_headers(exc: Exception) -> dict[str, str]:
    """What the client learns when compression failed and the prompt went on as it was."""
    code = failure_code(exc)
    log.warning("guardrail: compression failed (%s); the prompt goes on unchanged", code)
    return {"x-mixpr-action": "passthrough", "x-mixpr-error": code}


def failure_code(exc: BaseException) -> str:
    return str(getattr(exc, "code", None) or type(exc).__name__)


def _texts(inputs: Mapping[str, Any]) -> list[str]:
    texts = inputs.get("texts")
    return list(texts) if isinstance(texts, list) and all(isinstance(t, str) for t in texts) else []


def _pair(messages: list[dict[str, Any]], texts: list[str]
          ) -> tuple[list[tuple[int, int | None, int]], set[int]]:
    """Each text of each row with the first unused equal text after the last one paired."""
    where: dict[str, list[int]] = {}
    for index, text in enumerate(texts):
        where.setdefault(text, []).append(index)
    pairs: list[tuple[int, int | None, int]] = []
    unpaired: set[int] = set()
    after = 0
    for row, message in enumerate(messages):
        for part, text in _row_texts(message):
            found = where.get(text, [])
            at = bisect.bisect_left(found, after)
            if at == len(found):
                unpaired.add(row)
                continue
            pairs.append((row, part, found[at]))
            after = found[at] + 1
    return pairs, unpaired


def _row_texts(message: Mapping[str, Any]) -> list[tuple[int | None, str]]:
    content = message.get("content")
    if isinstance(content, str):
        return [(None, content)]
    if not isinstance(content, list):
        return []
    return [(i, p["text"]) for i, p in enumerate(content)
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)]


def _keep_whole(message: Mapping[str, Any], failed: Collection[str]) -> bool:
    if message.get("tool_call_id") in failed:
        return True
    return sum(len(text) for _, text in _row_texts(message)) <= KEEP_WHOLE_CHARS


def _joined(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "\n\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
