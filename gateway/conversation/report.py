"""A multi-turn build's outcome: what is sent (or the client's own request when what was built is
unsafe or does not fit), and the report: tokens, reuse of what was sent before, resets."""

from __future__ import annotations

import logging
from typing import Any

from gateway.compress.compressor import Outcome
from gateway.conversation import checks, resets
from gateway.conversation.breakpoints import with_breakpoint
from gateway.conversation.plan import Plan, Request
from gateway.conversation.sent import Sent, chain, common, digest
from gateway.errors import ContextLengthExceeded

log = logging.getLogger("gateway.conversation.history")

ORIGINAL = resets.ORIGINAL


def outcome(plan: Plan, scanned: resets.Scan, sent: list[dict[str, Any]], previous: int,
            model_name: str, memory: Sent, read: float = 0.1, prefixes: list[str] | None = None) -> Outcome:
    """What is sent for ``plan`` at the scan's levels (``sent``), with its report; ``memory``: what
    this instance sent for earlier requests (updated with this one); ``prefixes``: the request's
    ``sent.chain``, when the caller has it."""
    request = plan.request
    target = request.target
    original = target.tokens(plan.constant + sum(plan.size(j, ORIGINAL) for j in range(len(sent))))
    final = target.tokens(scanned.total)
    sizes = [plan.size(j, level) for j, level in enumerate(scanned.levels)]
    # Compared before the breakpoint is added: a marker that moves along is not a changed byte
    # of the prompt the provider caches.
    problems = checks.problems(request.messages, sent)
    # never more than the client sent (a follow-up's evidence that repeats what the forms hold, a form
    # whose gap marks outweigh what it cut): then the request goes as the client sent it
    if problems or final > target.limit or final > original:
        return fallback(plan, problems, original, final)
    same, basis = reused(plan, scanned, sent, previous, model_name, memory, prefixes)
    kept = plan.constant + sum(sizes[:same]) if same else 0
    # Never on /v1/compress's rows: they go back among rows the caller held back (whose own
    # breakpoints this request cannot count toward Anthropic's 4), each in the shape it came.
    wanted = request.settings.prefix.breakpoint and not request.conversation
    sent = with_breakpoint(sent, previous, wanted, request.tools)
    # A reset: the previous request's messages are not all sent as they were. As remembered (or
    # recomputed), other bytes (a changed max_tokens moves the points); else a reset point since then.
    # A point whose deeper cut left the remembered bytes as they were is none: nothing cached broke.
    moved = any(point > previous for point in scanned.points)
    reset = previous >= 0 and (same < previous + 1 if basis != "none" else moved)
    action = "compressed" if sent != request.messages else "passthrough"
    return Outcome(sent, action, original, final, "forms" if action == "compressed" else None,
                   budget=target.tokens(scanned.total - plan.constant), room=target.limit,
                   reused_tokens=target.tokens(kept), reset=reset, new_forms=plan.new_forms,
                   reuse_basis=basis, resets=len(scanned.points),
                   reset_saving=saving(plan, scanned, previous, read) if scanned.points else None)


def saving(plan: Plan, scanned: resets.Scan, previous: int, read: float) -> tuple[float, float]:
    """The resets' report (``Outcome.reset_saving``): expected, of the resets made since the previous
    request; realised, the cache reads this request saves by every reset so far (``read``: the
    cache-read price over the input price)."""
    target = plan.request.target
    expected = sum(worth for point, worth in scanned.expected.items() if point > previous)
    formed = plan.constant + sum(plan.size(j, resets.FIRST_SIGHT) for j in range(len(scanned.levels)))
    return target.tokens(expected), read * target.tokens(max(0, formed - scanned.total))


def fallback(plan: Plan, problems: list[str], original: int, final: int) -> Outcome:
    """The client's own request when what was built is unsafe or does not fit; else a 400."""
    request = plan.request
    if problems:
        log.warning("built request failed its checks (%s); sending the original", "; ".join(problems[:3]))
        return unsafe(request, problems, original)
    if original <= request.target.limit:
        return Outcome(request.messages, "passthrough", original, original)
    if plan.failed:  # not the client's fault: the whole request, as today (503 if the pool is down)
        raise RuntimeError(f"{plan.failed} forms failed and what was built does not fit")
    # The forms and resets could not bring it into the window (what they may not cut, or a cut that
    # came out larger than asked): the whole request compressed for its question still may, and a
    # conversation that can fit is never refused (the caller falls back to it).
    raise DoesNotFit(f"built {final} tokens where {request.target.limit} fit", param="messages")


class DoesNotFit(ContextLengthExceeded):
    """The conversation's forms at their deepest resets do not fit the window: the caller compresses
    the whole request instead, which raises the client's 400 only when the parts never cut exceed it."""


def reused(plan: Plan, scanned: resets.Scan, sent: list[dict[str, Any]], previous: int,
           model_name: str, memory: Sent, prefixes: list[str] | None = None) -> tuple[int, str]:
    """How many messages at the start of ``sent`` are byte-identical to what was sent for the
    previous request, and how that is known: ``remembered`` (this instance sent it),
    ``recomputed`` (the scan as it stood at the previous request, with this request's
    parameters) or ``none`` (no previous request)."""
    digests = [digest(m) for m in sent]
    prefixes = prefixes or chain(plan.request.messages, model_name)
    memory.put(prefixes[-1], digests)
    if previous < 0:
        return 0, "none"
    remembered = memory.get(prefixes[previous])
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


def unsafe(request: Request, problems: list[str], original: int) -> Outcome:
    """The client's own request in place of a compressed one that failed its checks, if it fits."""
    target = request.target
    if original <= target.limit:
        return Outcome(request.messages, "passthrough", original, original, failed_open=True)
    raise ContextLengthExceeded(
        f"The prompt is {original} tokens and the model accepts {target.window} (with {target.reserve} "
        f"kept for the reply); compressing it would have broken its structure ({problems[0]}), so it "
        f"was not sent.", param="messages")
