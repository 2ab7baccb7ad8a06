"""What a multi-turn request sends: the concatenation of its messages' forms, after rare resets.

Providers bill a repeated prompt prefix at a tenth of the price, and Anthropic checks an assistant
turn's thinking blocks against what came before them, so the bytes sent for a conversation's earlier
messages must not change from one request to the next. Here each message's form is a pure function
of that message, what it answers, the task and the config (``gateway.conversation.forms``); resets are
found by a causal scan (``gateway.conversation.resets``). So what is sent is a pure function of the
request: any instance, cold or warm, sends the same bytes, and a cold one only computes the forms
it has not cached. A request with no earlier turn (a single question) is compressed as a whole, as
before (``Compressor.prepare``).

Here is the orchestration: plan (pieces and their tokens) → forms → scan → assemble → outcome. All
per-message work (hashing, counting, the scan, rebuilding) runs in a thread (``gateway.run.offload``);
MixPR runs in the worker pool, reached from that thread through the loop (``gateway.run.bridge``).
What a reset may touch is ``gateway.conversation.resets``; what this instance sent before, for the
report, ``gateway.conversation.sent``; the shape of messages, ``gateway.compress.messages``. Before
anything is forwarded, ``gateway.conversation.checks`` compares it with the client's request.

Around it: the request as the build sees it, ``gateway.conversation.plan``; the room and its units,
``gateway.conversation.room``; counts remembered by content, ``gateway.conversation.counts``; the messages
with their forms, ``gateway.conversation.assembly``; cache breakpoints, ``gateway.conversation.breakpoints``;
the outcome and its report, ``gateway.conversation.report``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gateway.compress import conversation, policy
from gateway.compress.compressor import Compressor, Outcome
from gateway.conversation import (
    checks,
    cold,
    evidence,
    followups,
    forms,
    recut,
    report,
    resets,
    task,
    warmth,
)
from gateway.conversation.assembly import assemble
from gateway.conversation.breakpoints import BREAKPOINT, MAX_BREAKPOINTS
from gateway.conversation.counts import counts
from gateway.conversation.plan import Plan, Request, rest
from gateway.conversation.room import CAP_SHARE, room
from gateway.conversation.sent import REMEMBERED_BYTES, Sent, chain, common, digest
from gateway.conversation.shared_forms import FormStore, SharedForms
from gateway.errors import ContextLengthExceeded, Overloaded
from gateway.run import offload
from gateway.run.bridge import Bridge

__all__ = ["BREAKPOINT", "CAP_SHARE", "MAX_BREAKPOINTS", "History", "Request"]

log = logging.getLogger("gateway.conversation.history")

ORIGINAL = resets.ORIGINAL  # the level of no form at all: the client's own text


class History:
    """Prepares every request; multi-turn ones as the concatenation of their messages' forms."""

    def __init__(self, compressor: Compressor, *, cache_bytes: int, metrics: Any = None,
                 shared: SharedForms | None = None) -> None:
        self.compressor = compressor
        self.cache = forms.FormCache(cache_bytes)
        self.store = FormStore(self.cache, shared, metrics)  # this memory, then the replicas' Redis
        self.metrics = metrics
        self.sent = Sent(REMEMBERED_BYTES)
        self.warmth = warmth.Warmth(self.store)  # when each conversation's prefix was last sent

    async def prepare(self, request: Request, model_name: str = "") -> Outcome:
        """The messages to forward for ``request``, and the report."""
        if not _multi_turn(request):  # a single question: exactly as without this module
            outcome = await self.today(request)
            if request.settings.prefix.enabled and not outcome.failed_open:  # what a follow-up extends
                # Hashing every message grows with the request's bytes, not only its items.
                await self.compressor.builds.run(self._remember, request, outcome.messages, model_name,
                                                 asyncio.get_running_loop())
            return outcome
        started = time.perf_counter()
        ticket = self.compressor.ticket()
        bridge = Bridge(asyncio.get_running_loop(), ticket, self.compressor.workers.size)
        try:
            outcome = await self.compressor.builds.run(self._build, request, bridge, model_name)
        except report.DoesNotFit as exc:  # the whole request, for its question: never refuse what can fit
            log.info("conversation forms do not fit (%s); compressing the whole request", exc.message)
            whole = await self.today(request)
            return await self.compressor.builds.run(self._fell_back, request, whole, model_name)
        except (ContextLengthExceeded, Overloaded):
            raise
        except Exception as exc:  # a failed build must not cost an answer: the whole request, as today
            log.warning("per-message forms failed (%s); compressing the whole request", type(exc).__name__)
            log.debug("traceback", exc_info=exc)
            whole = await self.today(request)
            return await self.compressor.builds.run(self._fell_back, request, whole, model_name)
        finally:
            bridge.closed = True  # a build still running (its client left) submits nothing more
            ticket.release()
        if outcome.action != "passthrough":  # x-mixpr-compress-ms stays 0 when nothing was compressed
            outcome = replace(outcome, compress_ms=(time.perf_counter() - started) * 1000)
        if request.more_evidence == 1.0 and self.metrics is not None:
            self.metrics.record_prefix(model_name, outcome)
        return outcome

    def apart(self) -> History:
        """This history's forms and counts, with a memory of what was sent of its own and no metrics:
        what compressing would have sent (observe mode) kept apart from what was sent."""
        other = copy.copy(self)
        other.metrics = None
        other.sent = Sent(REMEMBERED_BYTES)
        return other

    async def aclose(self) -> None:
        await self.store.aclose()

    async def today(self, request: Request) -> Outcome:
        """The whole request compressed for its last question, as if it had no earlier turns; checked
        like forms (``gateway.conversation.checks``): what fails them is not sent."""
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
        return report.unsafe(request, problems, outcome.original_tokens)

    # -- in a thread ------------------------------------------------------------------------------

    def _build(self, request: Request, bridge: Bridge, model_name: str) -> Outcome:
        space = room(request.target, request.settings, request.control)
        plan = self._plan(request, space.cap, bridge.loop)
        # Under a price line, a document pasted past the line (its first request was cut whole, under
        # the line) has its question's cut at the cap as its form, as in cost mode: the line is far
        # above what a window's room keeps, and the document is cut only as far as it must be.
        plan.cost_mode = space.after is not None or (space.line is not None and plan.pasted_over(space.at))
        if plan.over_document:  # later questions bring their own evidence: a reset keeps less
            space = replace(space, fill=request.settings.prefix.document_fill)
        reach = resets.Reach(request.messages)
        previous = resets.previous_end(request.messages, held_back=request.conversation)
        prefixes = chain(request.messages, model_name)
        visit = self.warmth.last(prefixes[previous], bridge.loop) if previous >= 0 else None
        cold = warmth.cold(visit, request.cache_lifetime_s)
        here = len(request.messages) - 1 if cold and _cold_cut(request, space.gated) else None
        sizes = resets.Sizes([plan.size(j, ORIGINAL) for j in range(len(request.messages))],
                             lambda: self._first_sight(plan, bridge),
                             _verbatim_first(request))
        asked = followups.Followups(plan, space.at, lambda *ask: self._block(plan, bridge, *ask),
                                    bound=space.after)
        rules = resets.Rules(
            room=space.at, share=space.share, older_end=reach.older_end, last_end=reach.last_end,
            movable=lambda i, end, levels, wide: plan.movable(end, levels, wide, reach.user(i)),
            recut=lambda i, end, budget, levels, wide: self._recut(plan, bridge, i, end, budget, levels,
                                                                   wide, reach.user(i)),
            limit=space.limit, worth=lambda i, before, after: space.worth(reach.turns(i), before, after),
            gated=space.gated, cold=warmth.points(visit, here),
            # A document pasted past the line keeps its question's cut (cost mode's rule), not the window's.
            firm=space.line is not None and not plan.cost_mode,
            repeats=lambda i, end, levels: self._repeats(plan, bridge, i, end, levels),
            evidence=asked, evidence_again=asked.again)
        scanned = resets.scan(sizes, plan.constant, rules, snapshot_at=previous)
        sent = assemble(plan, scanned.levels)
        outcome = report.outcome(plan, scanned, sent, previous, model_name, self.sent, space.ratios()[0],
                                 prefixes)
        # Sent now (the provider's cache lifetime runs from here), with where cold turns reset it.
        self.warmth.keep(prefixes[-1], warmth.Visit(time.time(), tuple(sorted(rules.cold))), bridge.loop)
        return replace(outcome, cache=None if cold is None else ("cold" if cold else "warm"))

    def _first_sight(self, plan: Plan, bridge: Bridge) -> list[int]:
        """Every message's tokens at its first-sight form, without a follow-up's evidence, which the
        scan asks for as it goes (``gateway.conversation.followups``); computed only once the scan
        needs them: a conversation that never passes the trigger computes none."""
        self._forms(plan, bridge, range(len(plan.pieces)))
        plan.recuttable = [n for n in range(len(plan.pieces)) if plan.may_cut(n)]
        return [plan.size(j, resets.FIRST_SIGHT) for j in range(len(plan.request.messages))]

    def _recut(self, plan: Plan, bridge: Bridge, i: int, end: int, budget: int,
               levels: Sequence[resets.Level], wide: bool, spare: int) -> dict[int, int]:
        """A reset at ``i``: the long pieces of ``[0, end)`` cut again together, for the task
        (``gateway.conversation.recut``); the new size of each message it cut."""
        numbers = plan.pool(end, wide, spare)
        if not numbers:
            return {}
        pool = cold.lean(plan, i, end, numbers, levels)  # what is sent twice goes first
        query = task.query(plan.request.messages, i)
        name = recut.key(pool, query, budget, plan.salt)
        names = [f"{name}:{k}" for k in range(len(pool))]
        known = self.store.found(names, bridge.loop)
        if len(known) < len(names):
            if self.store.failed(names[:1]):  # it failed before: no reset here, as then
                plan.failed += 1
                return {}
            named = task.named(plan.request.messages, i)
            [done] = bridge.map(recut.recut_job, [(pool, query, budget, plan.request.target.model, named)],
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
        return {j: plan.size(j, level) for j in sorted(touched)}

    def _repeats(self, plan: Plan, bridge: Bridge, i: int, end: int,
                 levels: Sequence[resets.Level]) -> dict[int, int]:
        """A cold point ``i``'s cut over ``[0, end)`` (``gateway.conversation.cold``); the new size of each
        message it cut."""
        cut = cold.cut(plan, i, end, levels)
        # Counted once per text, here or on a replica: every later request makes this cut again.
        tokens = counts(self.store, list(cut.values()), plan.request.target.model, bridge.loop)
        level = resets.cold_level(i, end)
        touched = set()
        for (number, text), size in zip(cut.items(), tokens, strict=True):
            plan.forms[(number, level)] = (text, size)
            touched.add(plan.pieces[number].message)
        # A message's other pieces keep their text at the level it had: carried to the new one.
        for number, piece in enumerate(plan.pieces):
            if piece.message in touched and (number, level) not in plan.forms:
                before = levels[piece.message]
                plan.forms[(number, level)] = (plan.text(number, before), plan.piece_size(number, before))
        return {j: plan.size(j, level) for j in sorted(touched)}

    def _fell_back(self, request: Request, outcome: Outcome, model_name: str) -> Outcome:
        """``outcome`` (the whole request compressed, after a failed build) reported as a reset
        unless the previous request's messages go as this instance sent them (or, not remembered, as
        the client wrote them, the only bytes known without the build); remembered as sent."""
        previous = resets.previous_end(request.messages, held_back=request.conversation)
        digests = [digest(m) for m in outcome.messages]
        prefixes = chain(request.messages, model_name)
        self.sent.put(prefixes[-1], digests)
        if previous < 0:
            return outcome
        before = self.sent.get(prefixes[previous])
        if before is None:
            before = [digest(m) for m in request.messages[: previous + 1]]
        kept = len(before) == previous + 1 and common(digests, before) >= previous + 1
        return outcome if kept else replace(outcome, reset=True)

    def _remember(self, request: Request, sent: list[dict[str, Any]], model_name: str,
                  loop: asyncio.AbstractEventLoop) -> None:
        name = chain(request.messages, model_name)[-1]
        self.sent.put(name, [digest(m) for m in sent])
        self.warmth.keep(name, warmth.Visit(time.time()), loop)  # a follow-up finds its cache warm or cold

    def _plan(self, request: Request, cap: int, loop: asyncio.AbstractEventLoop) -> Plan:
        model = request.target.model
        found = forms.pieces(request.messages)
        by_message: dict[int, list[int]] = {}
        for number, piece in enumerate(found):
            by_message.setdefault(piece.message, []).append(number)
        rests = [rest(m, [found[p] for p in by_message.get(i, [])]) for i, m in enumerate(request.messages)]
        tools = [json.dumps(request.tools)] if request.tools else []
        # Every count at once: one look-up in the shared cache for all of them.
        texts = [*(p.text for p in found), *(t for t, _ in rests), *tools]
        counted = iter(counts(self.store, texts, model, loop))
        tokens = [next(counted) for _ in found]
        others = [conversation.TOKENS_PER_MESSAGE + next(counted) + conversation.TOKENS_PER_MEDIA_PART * media
                  for _, media in rests]
        constant = conversation.TOKENS_PER_REPLY + (next(counted) if tools else 0)
        salt = json.dumps([request.settings.prefix.model_dump(mode="json"), model])
        plan = Plan(request, found, tokens, by_message, others, constant, salt, cap)
        plan.recuttable = [n for n in range(len(found)) if plan.may_cut(n)]
        return plan

    def _forms(self, plan: Plan, bridge: Bridge, numbers: Sequence[int]) -> None:
        """Fill ``plan.forms`` with the first-sight forms of pieces ``numbers``: from memory or Redis,
        else computed in the pool. A piece whose form failed keeps its own text."""
        settings, model = plan.request.settings.prefix, plan.request.target.model
        wanted: dict[str, tuple[int, list[int]]] = {}  # form -> budget, its pieces
        for number in numbers:
            asked = forms.budget(plan.pieces[number], plan.tokens[number], settings, plan.cap,
                                 sent_whole=plan.cost_mode)
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

    def _computed(self, plan: Plan, bridge: Bridge, missing: dict[str, Any], job: Any,
                  jobs: list[tuple[Any, ...]]) -> dict[str, tuple[str, int]]:
        """What the pool computed for ``missing``, kept here and in Redis as each result arrives (so
        what is finished survives a later batch's failure); a job that failed is left out, and
        remembered as failed (``gateway.conversation.failures``) so later requests send the same bytes."""
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

    def _block(self, plan: Plan, bridge: Bridge, piece: forms.Piece, query: str, cap: int,
               spent: evidence.Spent) -> tuple[str, int] | None:
        """One follow-up's block for ``query``: from memory or Redis, else computed in the pool."""
        name = "e" + forms.key(piece, cap, spent.salt() + query)
        known = self.store.found([name], bridge.loop)
        if name not in known:
            job = (query, spent.texts, cap, plan.request.target.model, spent.present())
            known |= self._computed(plan, bridge, {name: job}, evidence.evidence_job, [job])
        return known.get(name)


def _multi_turn(request: Request) -> bool:
    """A request with an earlier turn (an assistant message, or a caller that says its messages are a
    conversation's: ``Request.conversation``), forms on and compression allowed."""
    return (request.settings.prefix.enabled and request.control.enabled is not False
            and (request.conversation or any(m.get("role") == "assistant" for m in request.messages)))


def _cold_cut(request: Request, gated: bool) -> bool:
    """Whether a cold turn cuts (``prefix.cold_reset``; "auto": in cost mode, whose resets are gated)."""
    wanted = request.settings.prefix.cold_reset
    return gated if wanted == "auto" else wanted


def _verbatim_first(request: Request) -> bool:
    """Whether the conversation goes as the client sent it until it first passes the trigger."""
    wanted = request.settings.prefix.first_sight
    if wanted == "auto":
        asked = request.control.budget_tokens or request.settings.budget_tokens
        return asked == policy.AUTO  # window mode; a cost budget cuts at first sight
    return wanted == "after_trigger"
