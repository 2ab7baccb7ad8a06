"""What a multi-turn request sends: the concatenation of its messages' forms, after rare resets.

Providers bill a repeated prompt prefix at a tenth of the price, and Anthropic checks an assistant
turn's thinking blocks against what came before them, so the bytes sent for a conversation's earlier
messages must not change from one request to the next. Here each message's form is a pure function
of that message, what it answers, the task and the config (``gateway.compress.forms``); resets are
found by a causal scan (``gateway.compress.resets``). So what is sent is a pure function of the
request: any instance, cold or warm, sends the same bytes, and a cold one only computes the forms
it has not cached. A request with no earlier turn (a single question) is compressed as a whole, as
before (``Compressor.prepare``).

Here is the orchestration: plan (pieces and their tokens) → forms → scan → assemble → outcome. All
per-message work (hashing, counting, the scan, rebuilding) runs in a thread (``gateway.run.offload``);
MixPR runs in the worker pool, reached from that thread through the loop (``gateway.run.bridge``).
What a reset may touch is ``gateway.compress.resets``; what this instance sent before, for the
report, ``gateway.compress.sent``; the shape of messages, ``gateway.compress.messages``. Before
anything is forwarded, ``gateway.compress.checks`` compares it with the client's request.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.compress import checks, conversation, evidence, forms, policy, resets
from gateway.compress import messages as shape
from gateway.compress.compressor import Compressor, Outcome, Router
from gateway.compress.policy import Control, Target
from gateway.compress.sent import REMEMBERED_BYTES, Sent, chain, common, digest
from gateway.config import MixprSettings
from gateway.errors import ContextLengthExceeded, Overloaded
from gateway.run import offload
from gateway.run.bridge import Bridge
from mixpr.tokens import count_tokens

log = logging.getLogger("gateway.compress.history")

ORIGINAL = -1  # the level of no form at all: the client's own text
MAX_LEVEL = forms.TOP_LEVEL  # resets a message can go through; at the last one it is a placeholder
BREAKPOINT = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4  # Anthropic's limit per request
CAP_SHARE = 1  # one first-sight form keeps at most 1/this of what a reset brings the forms down to


@dataclass(frozen=True)
class Request:
    """One request's fixed parts: everything its forms and resets depend on besides the messages."""

    messages: list[dict[str, Any]]
    tools: Any
    target: Target
    settings: MixprSettings
    control: Control
    router: Router | None
    more_evidence: float = 1.0  # Self-Route's retry: this many times the evidence, on the last message only


@dataclass
class _Plan:
    """One request as the thread builds it."""

    request: Request
    pieces: list[forms.Piece]
    tokens: list[int]  # each piece's own tokens
    by_message: dict[int, list[int]]  # message -> its pieces (indices into ``pieces``)
    rest: list[int]  # each message's tokens besides its pieces (framing, names, calls, media)
    constant: int  # tools and the reply's priming
    salt: str
    cap: int  # the most one first-sight form keeps: half of what a reset brings the forms down to
    forms: dict[tuple[int, int], tuple[str, int]] = field(default_factory=dict)  # (piece, level) -> form
    evidence: dict[int, tuple[str, int]] = field(default_factory=dict)  # follow-up piece -> its block
    new_forms: int = 0  # forms computed for this request (not found in the cache)


class History:
    """Prepares every request; multi-turn ones as the concatenation of their messages' forms."""

    def __init__(self, compressor: Compressor, *, cache_bytes: int, metrics: Any = None) -> None:
        self.compressor = compressor
        self.cache = forms.FormCache(cache_bytes)
        self.metrics = metrics
        self.sent = Sent(REMEMBERED_BYTES)

    async def prepare(self, request: Request, model_name: str = "") -> Outcome:
        """The messages to forward for ``request``, and the report."""
        if not _multi_turn(request):  # a single question: exactly as without this module
            outcome = await self.today(request)
            if request.settings.prefix.enabled and not outcome.failed_open:  # what a follow-up extends
                await offload.inline_or_run(offload.many(request.messages), self._remember, request,
                                            outcome.messages, model_name)
            return outcome
        started = time.perf_counter()
        ticket = self.compressor.ticket()
        bridge = Bridge(asyncio.get_running_loop(), ticket, self.compressor.workers.size)
        try:
            outcome = await offload.run(self._build, request, bridge, model_name)
        except (ContextLengthExceeded, Overloaded):
            raise
        except Exception as exc:  # a failed build must not cost an answer: the whole request, as today
            log.warning("per-message forms failed (%s); compressing the whole request", type(exc).__name__)
            log.debug("traceback", exc_info=exc)
            return await self.today(request)
        finally:
            bridge.closed = True  # a build still running (its client left) submits nothing more
            ticket.release()
        if outcome.action != "passthrough":  # x-mixpr-compress-ms stays 0 when nothing was compressed
            outcome = replace(outcome, compress_ms=(time.perf_counter() - started) * 1000)
        if request.more_evidence == 1.0 and self.metrics is not None:
            self.metrics.record_prefix(model_name, outcome)
        return outcome

    async def today(self, request: Request) -> Outcome:
        """The whole request compressed for its last question, as if it had no earlier turns."""
        return await self.compressor.prepare(
            request.messages, tools=request.tools, target=request.target, settings=request.settings,
            control=request.control, router=request.router)

    # -- in a thread ------------------------------------------------------------------------------

    def _build(self, request: Request, bridge: Bridge, model_name: str) -> Outcome:
        plan = self._plan(request)
        self._forms(plan, bridge, [(p, 0) for p in range(len(plan.pieces))])
        room, after = _room(request)
        self._evidence(plan, bridge, request.target.counted(room))
        ends = resets.turn_ends(request.messages)
        previous = ends[-2] if len(ends) > 1 else -1
        scanned = resets.scan(
            [self._size(plan, j, 0) for j in range(len(request.messages))], plan.constant,
            room=request.target.counted(room), after=request.target.counted(after),
            older_end=lambda i: resets.older_end(request.messages, i),
            last_end=lambda i: resets.last_end(request.messages, i),
            harder=lambda js, levels: self._sizes(plan, bridge, js, levels),
            max_level=MAX_LEVEL, snapshot_at=previous,
            stale=lambda i, older: resets.stale(request.messages, i, older))
        sent = self._assemble(plan, scanned.levels)
        return self._outcome(plan, scanned, sent, previous, model_name)

    def _remember(self, request: Request, sent: list[dict[str, Any]], model_name: str) -> None:
        self.sent.put(chain(request.messages, model_name)[-1], [digest(m) for m in sent])

    def _plan(self, request: Request) -> _Plan:
        model = request.target.model
        found = forms.pieces(request.messages)
        tokens = [self._count(p.text, model) for p in found]
        by_message: dict[int, list[int]] = {}
        for number, piece in enumerate(found):
            by_message.setdefault(piece.message, []).append(number)
        rest = [self._rest(m, [found[p] for p in by_message.get(i, [])], model)
                for i, m in enumerate(request.messages)]
        constant = conversation.TOKENS_PER_REPLY
        if request.tools:
            constant += self._count(json.dumps(request.tools), model)
        salt = json.dumps([request.settings.prefix.model_dump(mode="json"), model])
        cap = max(1, request.target.counted(_room(request)[1]) // CAP_SHARE)
        return _Plan(request, found, tokens, by_message, rest, constant, salt, cap)

    def _count(self, text: str, model: str) -> int:
        """Tokens of ``text``, remembered by content hash (histories repeat every message)."""
        name = "n" + hashlib.blake2b(f"{model}\x00{text}".encode("utf-8", "surrogatepass"),
                                     digest_size=20).hexdigest()
        known = self.cache.get(name)
        if known is not None:
            return known[1]
        tokens = count_tokens(text, model)
        self.cache.put(name, ("", tokens))
        return tokens

    def _rest(self, message: dict[str, Any], own: list[forms.Piece], model: str) -> int:
        """A message's tokens besides its pieces: framing, verbatim text, names, calls, media."""
        texts: list[str] = []
        content = message.get("content")
        if not any(p.part is None and p.call is None for p in own) and isinstance(content, str):
            texts.append(content)
        media = 0
        if isinstance(content, list):
            parts = {p.part for p in own if p.call is None}
            for i, part in enumerate(content):
                if i in parts:
                    continue
                if shape.is_text(part):
                    texts.append(part["text"])
                else:
                    media += 1
        calls = {p.call for p in own if p.call is not None}
        for number, call in enumerate(message.get("tool_calls") or ()):
            function = call.get("function") or {} if isinstance(call, dict) else {}
            texts.append(str(function.get("name", "")))
            if number not in calls:
                texts.append(str(function.get("arguments", "")))
        for name in ("name", "tool_call_id"):
            if isinstance(message.get(name), str):
                texts.append(message[name])
        counted = self._count("\n".join(texts), model) if texts else 0
        return conversation.TOKENS_PER_MESSAGE + counted + conversation.TOKENS_PER_MEDIA_PART * media

    def _forms(self, plan: _Plan, bridge: Bridge, pairs: Sequence[tuple[int, int]]) -> None:
        """Fill ``plan.forms`` for (piece, level) pairs: from the cache, else computed in the pool."""
        settings, model = plan.request.settings.prefix, plan.request.target.model
        missing: dict[str, tuple[int, list[tuple[int, int]]]] = {}  # form -> budget, its (piece, level)s
        for number, level in pairs:
            if (number, level) in plan.forms:
                continue
            piece = plan.pieces[number]
            asked = forms.budget(piece, plan.tokens[number], level, settings, plan.cap)
            if asked is None:
                continue
            name = forms.key(piece, asked, plan.salt)
            cached = self.cache.get(name)
            if cached is not None:
                plan.forms[(number, level)] = cached
            else:  # the same text at the same budget (a repeated output, two levels): computed once
                missing.setdefault(name, (asked, []))[1].append((number, level))
        if not missing:
            return
        jobs = [(plan.pieces[wanted[0][0]], asked, model) for asked, wanted in missing.values()]
        for (name, (_, uses)), form in zip(missing.items(), bridge.map(forms.form_job, jobs), strict=True):
            self.cache.put(name, form)
            for use in uses:
                plan.forms[use] = form
        plan.new_forms += len(missing)

    def _evidence(self, plan: _Plan, bridge: Bridge, room: int) -> None:
        """Evidence blocks for follow-up questions: each user message after the first, from the
        earlier user messages (pasted documents) their first-sight forms cut
        (``gateway.compress.evidence``). Tool results are not searched: an agent reads again what it
        needs, and a framework's own user messages ("use the tool format") ask nothing of them."""
        settings, model = plan.request.settings.prefix, plan.request.target.model
        last = len(plan.request.messages) - 1
        first_user = min((p.message for p in plan.pieces if p.role == "user"), default=last)
        missing: dict[str, tuple[int, tuple[Any, ...]]] = {}
        for number, piece in enumerate(plan.pieces):
            if not piece.question or piece.message <= first_user or settings.evidence == 0:
                continue
            cut = [q for q in range(number) if (q, 0) in plan.forms and plan.pieces[q].question
                   and plan.pieces[q].message < piece.message]
            if not cut:
                continue
            more = plan.request.more_evidence if piece.message == last else 1.0
            # A share of the room, and never more than that share of the most a model reads well.
            cap = max(1, int(min(room, plan.request.settings.max_budget_tokens) * settings.evidence * more))
            question = forms.split_question(piece.text)[1] or piece.text
            texts = [plan.pieces[q].text for q in cut]
            name = "e" + forms.key(piece, cap, plan.salt + "\x00".join(texts))
            cached = self.cache.get(name)
            if cached is not None:
                plan.evidence[number] = cached
            else:
                missing[name] = (number, (question, texts, cap, model))
        if missing:
            done = bridge.map(evidence.evidence_job, [job for _, job in missing.values()])
            for (name, (number, _)), block in zip(missing.items(), done, strict=True):
                self.cache.put(name, block)
                plan.evidence[number] = block
            plan.new_forms += len(missing)

    def _size(self, plan: _Plan, message: int, level: int) -> int:
        total = plan.rest[message]
        for number in plan.by_message.get(message, ()):
            form = plan.forms.get((number, level))
            total += form[1] if form is not None else plan.tokens[number]
            if level == 0 and number in plan.evidence:
                total += plan.evidence[number][1]
        return total

    def _sizes(self, plan: _Plan, bridge: Bridge, messages: Sequence[int],
               levels: Sequence[int]) -> list[int]:
        pairs = list(zip(messages, levels, strict=True))
        self._forms(plan, bridge, [(p, level) for j, level in pairs for p in plan.by_message.get(j, ())])
        return [self._size(plan, j, level) for j, level in zip(messages, levels, strict=True)]

    def _assemble(self, plan: _Plan, levels: list[int]) -> list[dict[str, Any]]:
        """The client's messages with each piece's form in its place (copied on write)."""
        sent = list(plan.request.messages)
        for message, numbers in plan.by_message.items():
            level = levels[message]
            replaced = [(plan.pieces[n], _text(plan, n, level)) for n in numbers
                        if (n, level) in plan.forms or (level == 0 and n in plan.evidence)]
            if replaced:
                sent[message] = _with_forms(sent[message], replaced)
        return sent

    def _outcome(self, plan: _Plan, scanned: resets.Scan, sent: list[dict[str, Any]], previous: int,
                 model_name: str) -> Outcome:
        request = plan.request
        target = request.target
        original = target.tokens(plan.constant + sum(self._size(plan, j, ORIGINAL) for j in range(len(sent))))
        final = target.tokens(scanned.total)
        sizes = [self._size(plan, j, level) for j, level in enumerate(scanned.levels)]
        # Compared before the breakpoint is added: a marker that moves along is not a changed byte
        # of the prompt the provider caches.
        problems = checks.problems(request.messages, sent)
        if problems or final > target.limit:
            return self._fallback(plan, problems, original, final)
        same, basis = self._same(plan, scanned, sent, previous, model_name)
        reused = plan.constant + sum(sizes[:same]) if same else 0
        sent = _with_breakpoint(sent, previous, request.settings.prefix.breakpoint)
        # A reset: the previous request's messages are not all sent as they were (a reset point since
        # then, or, as remembered, other bytes: a changed max_tokens moves the points).
        moved = any(point > previous for point in scanned.points)
        reset = previous >= 0 and (moved or (basis != "none" and same < previous + 1))
        action = "compressed" if sent != request.messages else "passthrough"
        return Outcome(sent, action, original, final, "forms" if action == "compressed" else None,
                       budget=target.tokens(scanned.total - plan.constant), room=target.limit,
                       reused_tokens=target.tokens(reused), reset=reset, new_forms=plan.new_forms,
                       reuse_basis=basis, resets=len(scanned.points))

    def _fallback(self, plan: _Plan, problems: list[str], original: int, final: int) -> Outcome:
        """The client's own request when what was built is unsafe or does not fit; else a 400."""
        request = plan.request
        if problems:
            log.warning("built request failed its checks (%s); sending the original", "; ".join(problems[:3]))
        if original <= request.target.limit:
            return Outcome(request.messages, "passthrough", original, original, failed_open=bool(problems))
        if problems:
            raise ContextLengthExceeded(
                f"The prompt is {original} tokens and the model accepts {request.target.window} (with "
                f"{request.target.reserve} kept for the reply); compressing it would have broken its "
                f"structure ({problems[0]}), so it was not sent.", param="messages")
        raise ContextLengthExceeded(
            f"The prompt is {original} tokens and the model accepts {request.target.window} (with "
            f"{request.target.reserve} kept for the reply). Compressed it is still {final} tokens: the "
            f"parts kept verbatim (system messages, tool definitions, images, the newest turn) alone "
            f"take too much.", param="messages")

    def _same(self, plan: _Plan, scanned: resets.Scan, sent: list[dict[str, Any]], previous: int,
              model_name: str) -> tuple[int, str]:
        """How many messages at the start of ``sent`` are byte-identical to what was sent for the
        previous request, and how that is known: ``remembered`` (this instance sent it),
        ``recomputed`` (the scan as it stood at the previous request, with this request's
        parameters) or ``none`` (no previous request)."""
        digests = [digest(m) for m in sent]
        prefixes = chain(plan.request.messages, model_name)
        self.sent.put(prefixes[-1], digests)
        if previous < 0:
            return 0, "none"
        remembered = self.sent.get(prefixes[previous])
        if remembered is not None:
            same = common(digests[: previous + 1], remembered)
            basis = "remembered"
        elif not any(m.get("role") == "assistant" for m in plan.request.messages[: previous + 1]):
            same, basis = 0, "none"  # a single question was compressed whole: unknown, so not claimed
        else:
            before = scanned.snapshot or []
            same = next((j for j in range(previous + 1) if before[j] != scanned.levels[j]), previous + 1)
            basis = "recomputed"
        return same, basis


def _text(plan: _Plan, number: int, level: int) -> str:
    """What is sent for a piece at ``level``: its form (or its text), after its evidence block."""
    form = plan.forms.get((number, level))
    text = form[0] if form is not None else plan.pieces[number].text
    block = plan.evidence.get(number, ("", 0))[0] if level == 0 else ""
    return f"{block}\n\n{text}" if block else text


# -- pure helpers ------------------------------------------------------------------------------


def _multi_turn(request: Request) -> bool:
    """A request with an earlier turn (an assistant message), forms on and compression allowed."""
    return (request.settings.prefix.enabled and request.control.enabled is not False
            and any(m.get("role") == "assistant" for m in request.messages))


def _room(request: Request) -> tuple[int, int]:
    """Where a reset happens (tokens) and what it brings the forms down to."""
    target, settings, control = request.target, request.settings, request.control
    threshold = policy.threshold(target, settings, control)
    room = target.limit if threshold is None else min(threshold, target.limit)
    asked = control.budget_tokens or settings.budget_tokens
    if asked != policy.AUTO:
        return room, min(int(asked), room)  # a cost budget: the trigger (or the window), then the budget
    return room, int(room * settings.prefix.reset_fill)


def _with_forms(message: dict[str, Any], replaced: list[tuple[forms.Piece, str]]) -> dict[str, Any]:
    copy = dict(message)
    for piece, text in replaced:
        if piece.call is not None:
            calls = list(copy["tool_calls"])
            call = dict(calls[piece.call])
            call["function"] = {**call["function"], "arguments": text}
            calls[piece.call] = call
            copy["tool_calls"] = calls
        elif piece.part is None:
            copy["content"] = text
        else:
            content = list(copy["content"])
            content[piece.part] = {**content[piece.part], "text": text}
            copy["content"] = content
    return copy


def _with_breakpoint(sent: list[dict[str, Any]], previous: int, wanted: bool) -> list[dict[str, Any]]:
    """A ``cache_control`` breakpoint on the last message of the previous request (what repeats), for
    providers that cache only at explicit breakpoints; never past ``MAX_BREAKPOINTS`` in all."""
    if not wanted or previous < 0 or checks.breakpoints(sent) >= MAX_BREAKPOINTS:
        return sent
    out = list(sent)
    message = dict(out[previous])
    content = message.get("content")
    if isinstance(content, str) and content:
        message["content"] = [{"type": "text", "text": content, "cache_control": BREAKPOINT}]
    elif isinstance(content, list) and content and isinstance(content[-1], dict):
        if "cache_control" in content[-1]:
            return sent
        message["content"] = [*content[:-1], {**content[-1], "cache_control": BREAKPOINT}]
    else:
        return sent
    out[previous] = message
    return out
