"""A conversation's memory without state: each turn starts with the exact bytes sent for the one before.

Providers bill a repeated prompt prefix at a tenth of the price, so a conversation compressed anew
on every turn (for the newest question) never hits their cache. Here what is sent for a request is
a pure function of its messages and the config, walked turn by turn from the start:

* until the conversation first exceeds the trigger, its turns pass through untouched;
* at the first turn that does (the *anchor*), everything up to it is compressed for its question,
  to a budget that leaves ``prefix.headroom`` free (a first user turn gets today's whole budget, so
  a single question is answered as without this module);
* every later turn sends the previous turn's bytes, then its own new messages verbatim, with an
  *evidence* block in its new user message: what MixPR retrieves for the new question from the
  anchor's text that has not been sent yet, in original order, at most ``prefix.evidence`` of the
  budget. The block belongs to the prefix from then on;
* when that no longer fits the budget, the turn is compressed afresh (a *reset*): one deliberate
  cache miss, and the new anchor.

The walk depends on nothing but the request, so any instance sends the same bytes; the per-instance
cache (by content hash, bounded in bytes) only saves the CPU of walking the earlier turns again.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import mixpr
from gateway.compress import conversation, policy
from gateway.compress.compressor import Compressor, Outcome, Router, Ticket, split
from gateway.compress.policy import Control, Target
from gateway.config import MixprSettings
from gateway.errors import ContextLengthExceeded, Overloaded
from mixpr.tokens import count_tokens

log = logging.getLogger("gateway.compress.prefix")

Span = tuple[int, int]
EVIDENCE_OPEN = "<earlier_context note=\"passages from earlier in this conversation, not repeated above\">"
EVIDENCE_CLOSE = "</earlier_context>"
EVIDENCE_GAP = "\n[…]\n"  # between passages that were not next to each other
TURN_END_ROLES = frozenset({"user", "tool"})  # a request ends here when a reply follows
BREAKPOINT = {"type": "ephemeral"}


@dataclass(frozen=True)
class Turn:
    """What was sent for ``messages[: end + 1]``."""

    end: int
    sent: list[dict[str, Any]] | None  # None: the request itself (nothing compressed yet)
    stream_tokens: int  # compressible tokens of what was sent: the unit of the budget
    fixed_tokens: int
    anchor: int | None = None  # the end of the last request compressed afresh
    used: tuple[Span, ...] = ()  # spans of the anchor's stream already sent, kept or as evidence
    route: str | None = None
    reset: bool = False

    @property
    def tokens(self) -> int:
        return self.stream_tokens + self.fixed_tokens

    @property
    def size(self) -> int:
        """Bytes this turn holds in the cache, roughly."""
        return 200 + 16 * len(self.used) + (len(json.dumps(self.sent)) if self.sent is not None else 0)


def turn_ends(messages: Sequence[dict[str, Any]]) -> list[int]:
    """Where earlier requests of this conversation ended (a user or tool message answered by the
    assistant), and the end of this one."""
    ends = [i for i in range(len(messages) - 1)
            if messages[i].get("role") in TURN_END_ROLES and messages[i + 1].get("role") == "assistant"]
    return [*ends, len(messages) - 1]


def prefix_keys(messages: Sequence[dict[str, Any]], ends: Sequence[int], salt: str) -> list[str]:
    """A content hash of each ``messages[: end + 1]`` (and ``salt``), in one pass over the messages."""
    digest = hashlib.sha256(salt.encode())
    keys, wanted = [], set(ends)
    for i, message in enumerate(messages):
        digest.update(json.dumps(message, sort_keys=True).encode())
        digest.update(b"\x00")
        if i in wanted:
            keys.append(digest.copy().hexdigest())
    return keys


class TurnCache:
    """Least recently used turns by content hash, at most ``limit`` bytes in all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._turns: OrderedDict[str, Turn] = OrderedDict()

    def get(self, key: str) -> Turn | None:
        turn = self._turns.get(key)
        if turn is not None:
            self._turns.move_to_end(key)
        return turn

    def put(self, key: str, turn: Turn) -> None:
        if key in self._turns or turn.size > self.limit:
            return
        self._turns[key] = turn
        self.used += turn.size
        while self.used > self.limit:
            _, old = self._turns.popitem(last=False)
            self.used -= old.size


@dataclass(frozen=True)
class Request:
    """One request's fixed parts: everything the walk depends on besides the messages."""

    messages: list[dict[str, Any]]
    tools: Any
    target: Target
    settings: MixprSettings
    control: Control
    router: Router | None
    more_evidence: float = 1.0  # Self-Route's retry: this many times the evidence, on the last turn only

    @property
    def salt(self) -> str:
        """The config and parameters in the cache key: other settings, other bytes."""
        parts = [self.target, self.settings.model_dump(mode="json"), self.control, self.tools,
                 self.router.name if self.router else None]
        return json.dumps(parts, default=repr, sort_keys=True)


class Prefixes:
    """Prepares each request of a conversation so that it extends the bytes sent for the last one."""

    def __init__(self, compressor: Compressor, *, cache_bytes: int, metrics: Any = None) -> None:
        self.compressor = compressor
        self.cache = TurnCache(cache_bytes)
        self.metrics = metrics

    async def prepare(self, request: Request, model_name: str = "") -> Outcome:
        """The messages to forward for ``request``, and the report."""
        ends = turn_ends(request.messages)
        if not request.settings.prefix.enabled or len(ends) == 1 or request.control.enabled is False:
            return await self.today(request)  # a single question: exactly as without this module
        ticket = Ticket(self.compressor)
        try:
            outcome = await self._walk(ticket, request, ends)
        except (ContextLengthExceeded, Overloaded):
            raise
        except Exception as exc:  # a failed walk must not cost an answer: the whole request, as today
            log.warning("conversation prefix failed (%s); compressing the whole request", type(exc).__name__)
            log.debug("traceback", exc_info=exc)
            return await self.today(request)
        finally:
            ticket.release()
        if request.more_evidence == 1.0:  # Self-Route's retry is the same request, already counted
            self._record(model_name, outcome)
        return outcome

    async def today(self, request: Request, pool: Ticket | None = None, headroom: float = 0.0) -> Outcome:
        """The whole request compressed for its last question, as if it had no earlier turns."""
        return await self.compressor.prepare(
            request.messages, tools=request.tools, target=request.target, settings=request.settings,
            control=request.control, router=request.router, pool=pool, headroom=headroom)

    async def _walk(self, ticket: Ticket, request: Request, ends: list[int]) -> Outcome:
        started = time.perf_counter()
        keys = prefix_keys(request.messages, ends, request.salt)
        # Resume after the latest turn this instance has seen; a cold instance walks from the start.
        last = len(ends) - 1 if request.more_evidence == 1 else len(ends) - 2  # a retry is never cached
        known = next((i for i in range(last, -1, -1) if self.cache.get(keys[i])), -1)
        turn = self.cache.get(keys[known]) if known >= 0 else None
        before = self.cache.get(keys[known - 1]) if known >= 1 else None
        if turn is None or turn.anchor is None:  # the turns below the trigger need no walk, only counts
            first = await self._first_over(ticket, request, ends, known + 1)
            if first > known + 1:
                before, turn = await self._below(ticket, request, ends[max(first - 2, 0) : first])
                known = first - 1
                self.cache.put(keys[known], turn)
        for i in range(known + 1, len(ends)):
            before, turn = turn, await self._turn(ticket, request, turn, ends[i], first=i == 0)
            if i <= last:
                self.cache.put(keys[i], turn)
        assert turn is not None
        return await self._outcome(ticket, request, before, turn, started)

    async def _first_over(self, ticket: Ticket, request: Request, ends: list[int], lo: int) -> int:
        """The first of ``ends[lo:]`` whose request exceeds the trigger (len(ends) if none): a binary
        search, as a conversation only grows."""
        hi = len(ends)
        while lo < hi:
            mid = (lo + hi) // 2
            part = request.messages[: ends[mid] + 1]
            if await self.compressor.passes(ticket, part, tools=request.tools, target=request.target,
                                            settings=request.settings, control=request.control):
                lo = mid + 1
            else:
                hi = mid
        return lo

    async def _below(self, ticket: Ticket, request: Request, ends: list[int]) -> tuple[Turn | None, Turn]:
        """The last (one or two) turns below the trigger, sent as they are."""
        turns = [await self._fresh(ticket, request, None, end, 0.0) for end in ends]
        return (turns[0] if len(turns) == 2 else None), turns[-1]

    async def _turn(self, ticket: Ticket, request: Request, before: Turn | None, end: int, *,
                    first: bool) -> Turn:
        """What is sent for ``request.messages[: end + 1]``, given what was sent for the turn before."""
        if before is not None and before.anchor is not None:
            appended = await self._append(ticket, request, before, end)
            if appended is not None:
                return appended
        headroom = 0.0 if first else request.settings.prefix.headroom
        return await self._fresh(ticket, request, before, end, headroom)

    async def _fresh(self, ticket: Ticket, request: Request, before: Turn | None, end: int,
                     headroom: float) -> Turn:
        part = replace(request, messages=request.messages[: end + 1])
        outcome = await self.today(part, ticket, headroom)
        conv = await split(part.messages)
        fixed = await self.compressor.fixed_tokens(ticket, conv, request.target, request.tools)
        if outcome.failed_open:
            raise RuntimeError("compression failed for an earlier turn")  # the caller falls back
        if outcome.action == "passthrough":
            return Turn(end, None, outcome.final_tokens - fixed, fixed)
        return Turn(end, outcome.messages, outcome.final_tokens - fixed, fixed, anchor=end,
                    used=outcome.spans, route=outcome.route, reset=before is not None)

    async def _append(self, ticket: Ticket, request: Request, before: Turn, end: int) -> Turn | None:
        """The turn before's bytes, the new messages and evidence; None when that does not fit."""
        assert before.sent is not None and before.anchor is not None
        messages = request.messages[: end + 1]
        conv = await split(messages)
        fixed = await self.compressor.fixed_tokens(ticket, conv, request.target, request.tools)
        budget = policy.budget(fixed, request.target, request.settings, request.control)
        new = messages[before.end + 1 :]
        # Split once: the evidence is retrieved from the anchor's stream and cut out of the same text.
        anchor = await split(request.messages[: before.anchor + 1])
        spans: tuple[Span, ...] = ()
        question = _question(conv, before.end)
        if question:
            more = request.more_evidence if end == len(request.messages) - 1 else 1.0
            share = int(budget * min(1.0, request.settings.prefix.evidence * more))
            spans = await self._evidence(ticket, request, anchor, before, question, share)
        sent = [*before.sent, *with_evidence(new, evidence_block(anchor.text, spans))]
        stream = await self.compressor.count(ticket, (await split(sent)).text, request.target)
        if stream > budget:
            return None
        used = merge([*before.used, *spans])
        return Turn(end, sent, stream, fixed, anchor=before.anchor, used=used, route=before.route)

    async def _evidence(self, ticket: Ticket, request: Request, anchor: conversation.Conversation,
                        before: Turn, question: str, budget: int) -> tuple[Span, ...]:
        gaps = complement(before.used, len(anchor.text))
        if not gaps or budget < 1:
            return ()
        route = request.control.route or request.settings.router
        route = route if route in ("local", "global") else "heuristic"  # no LLM call per turn
        return await ticket.run(evidence_job, anchor.text, gaps, anchor.boundaries, question,
                                budget_tokens=request.target.counted(budget), route=route,
                                method=request.settings.method,
                                model=request.target.model)

    async def _outcome(self, ticket: Ticket, request: Request, before: Turn | None, turn: Turn,
                       started: float) -> Outcome:
        if turn.sent is None:
            return Outcome(request.messages, "passthrough", turn.tokens, turn.tokens,
                           reused_tokens=before.tokens if before else 0)
        text = (await split(request.messages)).text
        original = await self.compressor.count(ticket, text, request.target) + turn.fixed_tokens
        reused = before.tokens if before is not None and not turn.reset else 0
        sent = turn.sent
        if request.settings.prefix.breakpoint:  # after a reset nothing before this turn repeats
            sent = with_breakpoint(turn.sent, None if turn.reset else before)
        elapsed = (time.perf_counter() - started) * 1000
        budget = policy.budget(turn.fixed_tokens, request.target, request.settings, request.control)
        return Outcome(sent, "compressed", original, turn.tokens, turn.route, elapsed, budget,
                       request.target.limit - turn.fixed_tokens, reused_tokens=reused,
                       reset=turn.reset)

    def _record(self, model: str, outcome: Outcome) -> None:
        if self.metrics is not None:
            self.metrics.record_prefix(model, outcome)


def _question(conv: conversation.Conversation, before_end: int) -> str:
    """The new question: the query of the last user message, when it came after ``before_end``."""
    span = conv.query_span
    if span is None or conv.pieces[-1].message <= before_end:
        return ""
    return conv.text[span[0] : span[1]]


def complement(spans: Sequence[Span], length: int) -> list[Span]:
    """The parts of ``[0, length)`` outside ``spans`` (sorted, disjoint)."""
    gaps, at = [], 0
    for start, end in merge(spans):
        if start > at:
            gaps.append((at, start))
        at = max(at, end)
    if at < length:
        gaps.append((at, length))
    return gaps


def merge(spans: Sequence[Span]) -> tuple[Span, ...]:
    """Sorted spans with overlapping and touching ones joined."""
    out: list[list[int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return tuple((s, e) for s, e in out)


def evidence_job(text: str, gaps: list[Span], boundaries: Sequence[int], question: str, *,
                 budget_tokens: int, route: str, method: str, model: str) -> tuple[Span, ...]:
    """In a worker: MixPR over the unsent gaps of ``text`` with ``question`` as the query; the
    spans of ``text`` it keeps, within ``budget_tokens`` besides the question."""
    pieces, starts, offset = [], [], 0
    for start, end in gaps:
        starts.append(offset)
        pieces.append(text[start:end])
        offset += end - start + len(conversation.SEPARATOR)
    joined = conversation.SEPARATOR.join([*pieces, question])
    cuts = _gap_boundaries(gaps, starts, boundaries)
    asked = budget_tokens + count_tokens(question, model)
    result = mixpr.compress(joined, budget_tokens=asked, route=route, method=method, model=model,
                            boundaries=cuts, query_span=(offset, offset + len(question)))
    return _back_to_text(result.spans, gaps, starts)


def _gap_boundaries(gaps: list[Span], starts: list[int], boundaries: Sequence[int]) -> list[int]:
    """Each gap's ends, and the stream's own boundaries (messages) inside it, in joined offsets."""
    cuts = []
    for (start, end), at in zip(gaps, starts, strict=True):
        inside = boundaries[bisect.bisect_right(boundaries, start) : bisect.bisect_left(boundaries, end)]
        cuts += [at, *(at + b - start for b in inside), at + end - start]
    return cuts


def _back_to_text(spans: Sequence[Span], gaps: list[Span], starts: list[int]) -> tuple[Span, ...]:
    found = []
    for lo, hi in spans:
        first = max(bisect.bisect_right(starts, lo) - 1, 0)
        for (start, end), at in zip(gaps[first:], starts[first:], strict=True):
            if at >= hi:
                break
            a, b = max(lo, at), min(hi, at + end - start)
            if a < b:
                found.append((start + a - at, start + b - at))
    return merge(found)


def evidence_block(text: str, spans: Sequence[Span]) -> str:
    """The passages at ``spans`` of ``text``, in order, delimited; "" when there are none."""
    passages = [text[s:e].strip() for s, e in spans]
    passages = [p for p in passages if p]
    if not passages:
        return ""
    return f"{EVIDENCE_OPEN}\n{EVIDENCE_GAP.join(passages)}\n{EVIDENCE_CLOSE}"


def with_evidence(new: Sequence[dict[str, Any]], block: str) -> list[dict[str, Any]]:
    """``new`` with ``block`` at the start of its last user message (copied; the rest as sent)."""
    out = list(new)
    if not block:
        return out
    index = max(i for i, m in enumerate(out) if m.get("role") == "user")
    message = dict(out[index])
    content = message.get("content")
    if isinstance(content, list):
        message["content"] = [{"type": "text", "text": block}, *content]
    else:
        message["content"] = f"{block}\n\n{content}" if content else block
    out[index] = message
    return out


def with_breakpoint(sent: list[dict[str, Any]], before: Turn | None) -> list[dict[str, Any]]:
    """A copy of ``sent`` with a ``cache_control`` breakpoint on the last message of the turn before
    (the frozen prefix), for providers that cache only at explicit breakpoints. Added on the way
    out, never kept in the prefix: providers allow only a few breakpoints per request."""
    if before is None or before.end >= len(sent) or before.sent is None:
        return sent
    index = len(before.sent) - 1
    out = list(sent)
    message = dict(out[index])
    content = message.get("content")
    if isinstance(content, str) and content:
        message["content"] = [{"type": "text", "text": content, "cache_control": BREAKPOINT}]
    elif isinstance(content, list) and content and isinstance(content[-1], dict):
        message["content"] = [*content[:-1], {**content[-1], "cache_control": BREAKPOINT}]
    out[index] = message
    return out
