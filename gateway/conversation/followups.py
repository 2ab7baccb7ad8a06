"""Follow-up questions over pasted documents: which get an evidence block, searching what, and each
block as the scan (``gateway.conversation.resets``) first takes its message at first sight.

A block leaves out what is sent of the documents at that point (``evidence.Spent``): their first-sight
forms and the blocks since, or, after a reset, the reset's forms and the blocks since. Computed before
the scan, as they were, the blocks after a reset left out what the first-sight forms had held and the
reset had dropped: every later question of a long conversation lost those passages. A block reads
the messages before it and the levels the causal scan gave them, so every instance, warm or cold,
sends the same bytes.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.conversation import evidence, forms, resets
from gateway.conversation.plan import Plan

# One block: (the follow-up's piece, its query, its cap in tokens, what was sent) -> (block, tokens),
# None when it failed (the follow-up then goes without).
Block = Callable[[forms.Piece, str, int, evidence.Spent], "tuple[str, int] | None"]


@dataclass(frozen=True)
class Ask:
    """One follow-up question that may bring evidence."""

    number: int  # its piece
    query: str  # its question without the words every earlier question shares (``evidence.Template``)
    cut: tuple[int, ...]  # what it searches: the earlier pasted documents (pieces) their forms cut


def asks(plan: Plan) -> dict[int, list[Ask]]:
    """Each message's follow-up questions (user messages after the first) that have earlier pasted
    documents to search. Tool results are not searched: an agent reads again what it needs, and a
    framework's own user messages ("use the tool format") ask nothing of them."""
    if plan.request.settings.prefix.evidence == 0:
        return {}
    last = len(plan.request.messages) - 1
    first_user = min((p.message for p in plan.pieces if p.role == "user"), default=last)
    template = evidence.Template()  # the words every question so far shares, kept as they come
    documents: list[int] = []  # questions over the cap: pasted documents, in order
    found: dict[int, list[Ask]] = {}
    for number, piece in enumerate(plan.pieces):
        if not piece.question:
            continue
        if not piece.query:  # a document part's question is its message's last part (``forms``)
            question = forms.split_question(piece.text)[1] or piece.text
            shared = template.shared(question)
            template.add(question)
            cut = tuple(q for q in documents if plan.pieces[q].message < piece.message)
            if piece.message > first_user and cut:
                ask = Ask(number, evidence.distinctive(question, shared), cut)
                found.setdefault(piece.message, []).append(ask)
        if plan.tokens[number] > plan.cap:
            documents.append(number)
    return found


class Followups:
    """The scan's evidence hook for one request (``resets.Rules.evidence``): message ``i``'s blocks,
    given the levels of the messages before it, set in ``plan.evidence``; their tokens. ``again``:
    after a reset at ``i``, message ``i``'s blocks asked again, leaving out what the reset kept rather
    than what it dropped."""

    def __init__(self, plan: Plan, room: int, block: Block, bound: int | None = None) -> None:
        # ``bound``: cost mode's budget (what a reset brings the total to), which a block never passes
        # (the room may be the whole window when no trigger is set: a tenth of it is no budget's bound)
        self.plan, self.room, self.block, self.bound = plan, room, block, bound
        self.asks = asks(plan)
        self.bases: dict[tuple[int, ...], Any] = {}  # the documents hashed once (``evidence.searched``)
        self.given: dict[tuple[int, ...], list[int]] = {}  # documents -> the asks that got blocks
        # documents -> the levels they were sent at and what was sent of them since
        self.chains: dict[tuple[int, ...], tuple[tuple[resets.Level, ...], evidence.Spent]] = {}

    def __call__(self, i: int, levels: Sequence[resets.Level]) -> int:
        plan, settings = self.plan, self.plan.request.settings
        added = 0
        for ask in self.asks.get(i, ()):
            spent = self._spent(ask.cut, levels)
            more = plan.request.more_evidence if i == len(plan.request.messages) - 1 else 1.0
            wanted = evidence.wanted(min(self.room, settings.max_budget_tokens), spent.whole,
                                     settings.prefix.evidence, settings.prefix.evidence_document)
            if self.bound is not None:
                wanted = min(wanted, self.bound)
            cap = spent.cap(int(wanted * more))
            if cap < evidence.MIN_TOKENS:  # the forms and the earlier blocks hold about all of it
                continue
            found = self.block(plan.pieces[ask.number], ask.query, cap, spent)
            if found is None:  # a failed block: no evidence for this follow-up
                continue
            plan.evidence[ask.number] = found
            spent.add(found)
            self.given.setdefault(ask.cut, []).append(ask.number)
            bisect.insort(plan.recuttable, ask.number)  # a reset cuts a block too
            added += found[1]
        return added

    def again(self, i: int, levels: Sequence[resets.Level]) -> int:
        """Message ``i``'s blocks after a reset at ``i`` (which kept them: the newest question is not
        cut), asked again from what is sent now; their tokens."""
        for ask in self.asks.get(i, ()):
            if self.plan.evidence.pop(ask.number, None) is not None:
                self.given[ask.cut].remove(ask.number)
                self.plan.recuttable.remove(ask.number)
                self.chains.pop(ask.cut, None)
        return self(i, levels)

    def _spent(self, cut: tuple[int, ...], levels: Sequence[resets.Level]) -> evidence.Spent:
        """What was sent of the documents ``cut`` so far: the chain of blocks since they were last
        cut (at first sight or by a reset), a new one when a reset has cut them since."""
        plan = self.plan
        sent_at = tuple(levels[plan.pieces[q].message] for q in cut)
        chain = self.chains.get(cut)
        if chain is not None and chain[0] == sent_at:
            return chain[1]
        texts = [plan.pieces[q].text for q in cut]
        if cut not in self.bases:
            self.bases[cut] = evidence.searched(plan.salt, texts)
        sent = [plan.text(q, level) for q, level in zip(cut, sent_at, strict=True)]
        sizes = sum(plan.piece_size(q, level) for q, level in zip(cut, sent_at, strict=True))
        kept = [k for k in self.given.get(cut, ()) if self._still_sent(k, levels)]
        sent += [plan.evidence[k][0] for k in kept]
        sizes += sum(plan.evidence[k][1] for k in kept)
        whole = sum(plan.tokens[q] for q in cut)
        spent = evidence.Spent(texts, sent, whole - sizes, self.bases[cut], whole)
        self.chains[cut] = (sent_at, spent)
        return spent

    def _still_sent(self, number: int, levels: Sequence[resets.Level]) -> bool:
        """Whether a follow-up's block is still sent at its message's level (a reset drops it)."""
        level = levels[self.plan.pieces[number].message]
        return self.plan.text(number, level).startswith(self.plan.evidence[number][0])
