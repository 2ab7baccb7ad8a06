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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.compress import checks, conversation, evidence, forms, policy, recut, resets, task
from gateway.compress import messages as shape
from gateway.compress.compressor import Compressor, Outcome, Router
from gateway.compress.policy import Control, Target
from gateway.compress.sent import REMEMBERED_BYTES, Sent, chain, common, digest
from gateway.compress.shared_forms import FormStore, SharedForms
from gateway.config import MixprSettings
from gateway.errors import ContextLengthExceeded, Overloaded
from gateway.run import offload
from gateway.run.bridge import Bridge
from mixpr.tokens import count_tokens

log = logging.getLogger("gateway.compress.history")

ORIGINAL = resets.ORIGINAL  # the level of no form at all: the client's own text
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
    # (piece, level) -> its form
    forms: dict[tuple[int, resets.Level], tuple[str, int]] = field(default_factory=dict)
    evidence: dict[int, tuple[str, int]] = field(default_factory=dict)  # follow-up piece -> its block
    new_forms: int = 0  # forms computed for this request (found neither in memory nor in Redis)
    failed: int = 0  # forms and evidence blocks the pool failed to compute (their pieces keep what they had)
    recuttable: list[int] = field(default_factory=list)  # the pieces a reset may cut


class History:
    """Prepares every request; multi-turn ones as the concatenation of their messages' forms."""

    def __init__(self, compressor: Compressor, *, cache_bytes: int, metrics: Any = None,
                 shared: SharedForms | None = None) -> None:
        self.compressor = compressor
        self.cache = forms.FormCache(cache_bytes)
        self.store = FormStore(self.cache, shared, metrics)  # this memory, then the replicas' Redis
        self.metrics = metrics
        self.sent = Sent(REMEMBERED_BYTES)

    async def prepare(self, request: Request, model_name: str = "") -> Outcome:
        """The messages to forward for ``request``, and the report."""
        if not _multi_turn(request):  # a single question: exactly as without this module
            outcome = await self.today(request)
            if request.settings.prefix.enabled and not outcome.failed_open:  # what a follow-up extends
                # Hashing every message grows with the request's bytes, not only its items.
                await self.compressor.builds.run(self._remember, request, outcome.messages, model_name)
            return outcome
        started = time.perf_counter()
        ticket = self.compressor.ticket()
        bridge = Bridge(asyncio.get_running_loop(), ticket, self.compressor.workers.size)
        try:
            outcome = await self.compressor.builds.run(self._build, request, bridge, model_name)
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

    async def aclose(self) -> None:
        await self.store.aclose()

    async def today(self, request: Request) -> Outcome:
        """The whole request compressed for its last question, as if it had no earlier turns; checked
        like forms (``gateway.compress.checks``): what fails them is not sent."""
        outcome = await self.compressor.prepare(
            request.messages, tools=request.tools, target=request.target, settings=request.settings,
            control=request.control, router=request.router)
        if outcome.action != "compressed":
            return outcome
        problems = await offload.inline_or_run(offload.many(request.messages), checks.problems,
                                               request.messages, outcome.messages)
        if not problems:
            return outcome
        log.warning("compressed request failed its checks (%s)", "; ".join(problems[:3]))
        return _unsafe(request, problems, outcome.original_tokens)

    # -- in a thread ------------------------------------------------------------------------------

    def _build(self, request: Request, bridge: Bridge, model_name: str) -> Outcome:
        plan = self._plan(request, bridge.loop)
        room, share = _room(request)
        ends = resets.turn_ends(request.messages)
        reach = resets.Reach(request.messages)
        previous = ends[-2] if len(ends) > 1 else -1
        sizes = resets.Sizes([self._size(plan, j, ORIGINAL) for j in range(len(request.messages))],
                             lambda: self._first_sight(plan, bridge, room),
                             _verbatim_first(request))
        scanned = resets.scan(
            sizes, plan.constant, room=room, share=share,
            older_end=reach.older_end, last_end=reach.last_end,
            movable=lambda end, levels, wide: self._movable(plan, end, levels, wide),
            recut=lambda i, end, budget, levels, wide: self._recut(plan, bridge, i, end, budget, levels,
                                                                   wide),
            snapshot_at=previous)
        sent = self._assemble(plan, scanned.levels)
        return self._outcome(plan, scanned, sent, previous, model_name)

    def _first_sight(self, plan: _Plan, bridge: Bridge, room: int) -> list[int]:
        """Every message's tokens at its first-sight form (computed only once the scan needs them: a
        conversation that never passes the trigger computes none)."""
        self._forms(plan, bridge, range(len(plan.pieces)))
        self._evidence(plan, bridge, room)
        return [self._size(plan, j, resets.FIRST_SIGHT) for j in range(len(plan.request.messages))]

    def _recuttable(self, plan: _Plan, number: int, wide: bool = False) -> bool:
        """A piece a reset may cut: long text (a user message only when it does not fit whole);
        ``wide``: anything a placeholder shortens, when nothing else makes the request fit."""
        piece, tokens = plan.pieces[number], plan.tokens[number]
        if wide:
            return tokens > recut.PLACEHOLDER_TOKENS * 2
        return tokens > (plan.cap if piece.question else plan.request.settings.prefix.reset_min_tokens)

    def _pool(self, plan: _Plan, end: int, wide: bool) -> list[int]:
        numbers = range(len(plan.pieces)) if wide else plan.recuttable
        return [n for n in numbers
                if plan.pieces[n].message < end and (not wide or self._recuttable(plan, n, wide))]

    def _movable(self, plan: _Plan, end: int, levels: Sequence[resets.Level], wide: bool) -> int:
        """Tokens of the pieces a reset over ``[0, end)`` may cut, as they are now."""
        total = 0
        for number in self._pool(plan, end, wide):
            form = plan.forms.get((number, levels[plan.pieces[number].message]))
            total += form[1] if form is not None else plan.tokens[number]
        return total

    def _recut(self, plan: _Plan, bridge: Bridge, i: int, end: int, budget: int,
               levels: Sequence[resets.Level], wide: bool) -> dict[int, int]:
        """A reset at ``i``: the long pieces of ``[0, end)`` cut again together, for the task
        (``gateway.compress.recut``); the new size of each message it cut."""
        numbers = self._pool(plan, end, wide)
        if not numbers:
            return {}
        pool = [plan.pieces[n] for n in numbers]
        query = task.query(plan.request.messages, i)
        name = recut.key(pool, query, budget, plan.salt)
        names = [f"{name}:{k}" for k in range(len(pool))]
        known = self.store.found(names, bridge.loop)
        if len(known) < len(names):
            if self.store.failed(names[:1]):  # it failed before: no reset here, as then
                plan.failed += 1
                return {}
            [done] = bridge.map(recut.recut_job, [(pool, query, budget, plan.request.target.model)],
                                failed=lambda *_: self.store.keep_failed(names[:1], bridge.loop))
            if done is None:  # the pool failed it: no reset here (the request may still fit, or not)
                plan.failed += 1
                return {}
            known = dict(zip(names, done, strict=True))
            self.store.keep(known, bridge.loop)
            plan.new_forms += 1
        found = [known[n] for n in names]
        level = (i, end)
        for number, form in zip(numbers, found, strict=True):
            plan.forms[(number, level)] = form
        touched = {plan.pieces[n].message for n in numbers}
        return {j: self._size(plan, j, level) for j in sorted(touched)}

    def _remember(self, request: Request, sent: list[dict[str, Any]], model_name: str) -> None:
        self.sent.put(chain(request.messages, model_name)[-1], [digest(m) for m in sent])

    def _plan(self, request: Request, loop: asyncio.AbstractEventLoop) -> _Plan:
        model = request.target.model
        found = forms.pieces(request.messages)
        by_message: dict[int, list[int]] = {}
        for number, piece in enumerate(found):
            by_message.setdefault(piece.message, []).append(number)
        rests = [_rest(m, [found[p] for p in by_message.get(i, [])]) for i, m in enumerate(request.messages)]
        tools = [json.dumps(request.tools)] if request.tools else []
        # Every count at once: one look-up in the shared cache for all of them.
        counted = iter(self._counts([*(p.text for p in found), *(t for t, _ in rests), *tools], model, loop))
        tokens = [next(counted) for _ in found]
        rest = [conversation.TOKENS_PER_MESSAGE + next(counted) + conversation.TOKENS_PER_MEDIA_PART * media
                for _, media in rests]
        constant = conversation.TOKENS_PER_REPLY + (next(counted) if tools else 0)
        salt = json.dumps([request.settings.prefix.model_dump(mode="json"), model])
        cap = _cap(request)
        plan = _Plan(request, found, tokens, by_message, rest, constant, salt, cap)
        plan.recuttable = [n for n in range(len(found)) if self._recuttable(plan, n)]
        return plan

    def _counts(self, texts: list[str], model: str, loop: asyncio.AbstractEventLoop) -> list[int]:
        """Tokens of each of ``texts``, remembered by content hash (histories repeat every message)."""
        names = ["n" + hashlib.blake2b(f"{model}\x00{text}".encode("utf-8", "surrogatepass"),
                                       digest_size=20).hexdigest() for text in texts]
        known = self.store.found(names, loop)
        computed: dict[str, tuple[str, int]] = {}
        for name, text in zip(names, texts, strict=True):
            if name not in known and name not in computed:
                computed[name] = ("", count_tokens(text, model) if text else 0)
        self.store.keep(computed, loop)
        return [(known.get(name) or computed[name])[1] for name in names]

    def _forms(self, plan: _Plan, bridge: Bridge, numbers: Sequence[int]) -> None:
        """Fill ``plan.forms`` with the first-sight forms of pieces ``numbers``: from memory or Redis,
        else computed in the pool. A piece whose form failed keeps its own text."""
        settings, model = plan.request.settings.prefix, plan.request.target.model
        wanted: dict[str, tuple[int, list[int]]] = {}  # form -> budget, its pieces
        for number in numbers:
            asked = forms.budget(plan.pieces[number], plan.tokens[number], settings, plan.cap)
            if asked is not None:  # the same text at the same budget (a repeated output): one form
                name = forms.key(plan.pieces[number], asked, plan.salt)
                wanted.setdefault(name, (asked, []))[1].append(number)
        known = self.store.found(list(wanted), bridge.loop)
        missing = {name: job for name, job in wanted.items() if name not in known}
        if missing:
            jobs = [(plan.pieces[uses[0]], asked, model) for asked, uses in missing.values()]
            known |= self._computed(plan, bridge, missing, forms.form_job, jobs)
        for name, (_, uses) in wanted.items():
            for number in uses:
                if name in known:
                    plan.forms[(number, resets.FIRST_SIGHT)] = known[name]

    def _computed(self, plan: _Plan, bridge: Bridge, missing: dict[str, Any], job: Any,
                  jobs: list[tuple[Any, ...]]) -> dict[str, tuple[str, int]]:
        """What the pool computed for ``missing``, kept here and in Redis as each result arrives (so
        what is finished survives a later batch's failure); a job that failed is left out, and
        remembered as failed (``gateway.compress.failures``) so later requests send the same bytes."""
        names = list(missing)
        failed = self.store.failed(names)  # failed before: they keep their text, as then
        todo = [number for number, name in enumerate(names) if name not in failed]
        done = bridge.map(job, [jobs[n] for n in todo],
                          lambda index, form: self.store.keep({names[todo[index]]: form}, bridge.loop),
                          lambda index, _: self.store.keep_failed([names[todo[index]]], bridge.loop))
        computed = {names[n]: form for n, form in zip(todo, done, strict=True) if form is not None}
        plan.new_forms += len(computed)
        plan.failed += len(names) - len(computed)
        return computed

    def _evidence(self, plan: _Plan, bridge: Bridge, room: int) -> None:
        """Evidence blocks for follow-up questions: each user message after the first, from the
        earlier user messages (pasted documents) their first-sight forms cut
        (``gateway.compress.evidence``). Tool results are not searched: an agent reads again what it
        needs, and a framework's own user messages ("use the tool format") ask nothing of them."""
        settings, model = plan.request.settings.prefix, plan.request.target.model
        last = len(plan.request.messages) - 1
        first_user = min((p.message for p in plan.pieces if p.role == "user"), default=last)
        wanted: dict[str, tuple[int, tuple[Any, ...]]] = {}  # block -> its piece, its job
        for number, piece in enumerate(plan.pieces):
            if not piece.question or piece.message <= first_user or settings.evidence == 0:
                continue
            cut = [q for q in range(number) if plan.pieces[q].question and plan.tokens[q] > plan.cap
                   and plan.pieces[q].message < piece.message]
            if not cut:
                continue
            more = plan.request.more_evidence if piece.message == last else 1.0
            # A share of the room, and never more than that share of the most a model reads well.
            cap = max(1, int(min(room, plan.request.settings.max_budget_tokens) * settings.evidence * more))
            question = forms.split_question(piece.text)[1] or piece.text
            texts = [plan.pieces[q].text for q in cut]
            name = "e" + forms.key(piece, cap, plan.salt + "\x00".join(texts))
            wanted[name] = (number, (question, texts, cap, model))
        known = self.store.found(list(wanted), bridge.loop)
        missing = {name: job for name, job in wanted.items() if name not in known}
        if missing:
            known |= self._computed(plan, bridge, missing, evidence.evidence_job,
                                    [job for _, job in missing.values()])
        for name, (number, _) in wanted.items():
            if name in known:  # a failed block: that follow-up goes without evidence
                plan.evidence[number] = known[name]

    def _size(self, plan: _Plan, message: int, level: resets.Level) -> int:
        total = plan.rest[message]
        for number in plan.by_message.get(message, ()):
            form = plan.forms.get((number, level))
            total += form[1] if form is not None else plan.tokens[number]
            if level == 0 and number in plan.evidence:
                total += plan.evidence[number][1]
        return total

    def _assemble(self, plan: _Plan, levels: list[resets.Level]) -> list[dict[str, Any]]:
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
        sent = _with_breakpoint(sent, previous, request.settings.prefix.breakpoint, request.tools)
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
            return _unsafe(request, problems, original)
        if original <= request.target.limit:
            return Outcome(request.messages, "passthrough", original, original)
        if plan.failed:  # not the client's fault: the whole request, as today (503 if the pool is down)
            raise RuntimeError(f"{plan.failed} forms failed and what was built does not fit")
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


def _unsafe(request: Request, problems: list[str], original: int) -> Outcome:
    """The client's own request in place of a compressed one that failed its checks, if it fits."""
    target = request.target
    if original <= target.limit:
        return Outcome(request.messages, "passthrough", original, original, failed_open=True)
    raise ContextLengthExceeded(
        f"The prompt is {original} tokens and the model accepts {target.window} (with {target.reserve} "
        f"kept for the reply); compressing it would have broken its structure ({problems[0]}), so it "
        f"was not sent.", param="messages")


def _text(plan: _Plan, number: int, level: resets.Level) -> str:
    """What is sent for a piece at ``level``: its form (or its text), after its evidence block."""
    form = plan.forms.get((number, level))
    text = form[0] if form is not None else plan.pieces[number].text
    block = plan.evidence.get(number, ("", 0))[0] if level == 0 else ""
    return f"{block}\n\n{text}" if block else text


# -- pure helpers ------------------------------------------------------------------------------


def _rest(message: dict[str, Any], own: list[forms.Piece]) -> tuple[str, int]:
    """A message's text besides its pieces (verbatim text, names, calls), and its media parts."""
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
    return "\n".join(texts), media



def _multi_turn(request: Request) -> bool:
    """A request with an earlier turn (an assistant message), forms on and compression allowed."""
    return (request.settings.prefix.enabled and request.control.enabled is not False
            and any(m.get("role") == "assistant" for m in request.messages))


def _room(request: Request) -> tuple[int, Callable[[int], int]]:
    """Where a reset happens (tokens), and what a reset leaves the text it may cut, given the tokens
    it cannot (``fixed``): in window mode ``reset_fill`` of the room those leave; in cost mode what
    the budget leaves."""
    target, settings, control = request.target, request.settings, request.control
    threshold = policy.threshold(target, settings, control)
    room = target.counted(target.limit if threshold is None else min(threshold, target.limit))
    asked = control.budget_tokens or settings.budget_tokens
    if asked != policy.AUTO:
        after = target.counted(min(int(asked), room))
        return room, lambda fixed: after - fixed
    fill = settings.prefix.reset_fill
    return room, lambda fixed: int(fill * (room - fixed))


def _verbatim_first(request: Request) -> bool:
    """Whether the conversation goes as the client sent it until it first passes the trigger."""
    wanted = request.settings.prefix.first_sight
    if wanted == "auto":
        asked = request.control.budget_tokens or request.settings.budget_tokens
        return asked == policy.AUTO  # window mode; a cost budget cuts at first sight
    return wanted == "after_trigger"


def _cap(request: Request) -> int:
    """The most one first-sight form keeps: ``reset_fill`` of the room (cost mode: the budget)."""
    target, settings, control = request.target, request.settings, request.control
    threshold = policy.threshold(target, settings, control)
    room = target.limit if threshold is None else min(threshold, target.limit)
    asked = control.budget_tokens or settings.budget_tokens
    after = min(int(asked), room) if asked != policy.AUTO else int(room * settings.prefix.reset_fill)
    return max(1, target.counted(after) // CAP_SHARE)


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


def _with_breakpoint(sent: list[dict[str, Any]], previous: int, wanted: bool,
                     tools: Any = None) -> list[dict[str, Any]]:
    """A ``cache_control`` breakpoint on the last message of the previous request (what repeats), for
    providers that cache only at explicit breakpoints; never past ``MAX_BREAKPOINTS`` in all, the
    tools' own counted."""
    if not wanted or previous < 0 or checks.breakpoints(sent, tools) >= MAX_BREAKPOINTS:
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
