"""What a cold turn cuts: the prefix is written again anyway, so a cut there costs no extra write.

Where the provider's cache is cold (``gateway.conversation.warmth``) a request writes its whole prefix
again whatever is sent, and every token it leaves out saves its full price then and a cached read at
every later turn. What is cut there loses no fact an earlier tool output alone holds:

* older tool outputs lose the lines a later message repeats word for word (``gateway.conversation.
  repeats``): the same files, logs and greps read again, a file view again after an edit moved its
  line numbers, or the lines the agent itself typed again in a later call (an edit's old text);
* the agent's own notes older than its newest ``NOTES_KEPT`` turns keep their first paragraph, what
  it set out to do (``repeats.notes``), and the fenced command they end with. The facts it used came
  from tool outputs, which stay: on the dev split (issue 46) this kept every fact only an earlier
  output held and all but 0.01% of the strings the agent reused at all, for about three fifths of the
  cold turn's saving. A cut made for the task (MixPR over the older outputs) at the same point lost a
  fifth of the facts the next steps used.

A pure function of the messages up to the cold point and their levels, so every later request
makes the same cut again (``gateway.conversation.history``).

A reset (``gateway.conversation.recut``) drops the same first (``lean``): its MixPR cut then spends
its budget on what is not sent twice. On the dev split the 32k window's resets lost half as many
facts the agent used later (55 to 28), strict evidence 0.919 to 0.960 on one half (issue 46).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from gateway.compress import messages as shape
from gateway.conversation import forms, json_values, repeats
from gateway.conversation.plan import Plan
from gateway.conversation.resets import Level

# The agent's notes of its newest turns stay whole (as SWE-agent's masking keeps the newest five
# outputs): they carry what it is doing now.
NOTES_KEPT = 5


def cut(plan: Plan, i: int, end: int, levels: Sequence[Level]) -> dict[int, str]:
    """The cut at cold point ``i`` over ``[0, end)``: piece -> its new text, for each piece it shortens."""
    numbers = [n for n, p in enumerate(plan.pieces) if p.message <= i]
    texts = {n: plan.text(n, levels[plan.pieces[n].message]) for n in numbers}
    notes = _notes(plan, i, end, texts)
    return _dropped(plan, i, texts | notes, notes, lambda n: _output(plan, n, end))


def lean(plan: Plan, i: int, end: int, numbers: list[int], levels: Sequence[Level]) -> list[forms.Piece]:
    """A reset's pool ``numbers`` at ``i``, each piece with its own text less what a cold turn drops:
    the lines a later message repeats (as sent, or for the pool, as written) and, in an agent loop,
    the older notes past their first paragraph (a conversation without tool outputs keeps its
    answers for the reset's cut)."""
    pool = set(numbers)
    upto = [n for n, p in enumerate(plan.pieces) if p.message <= i]
    texts = {n: plan.pieces[n].text if n in pool else plan.text(n, levels[plan.pieces[n].message])
             for n in upto}
    agent = any(p.role == "tool" for p in plan.pieces)
    notes = _notes(plan, i, end, {n: texts[n] for n in numbers}) if agent else {}
    new = _dropped(plan, i, texts | notes, notes, lambda n: n in pool and _output(plan, n, end))
    return [replace(plan.pieces[n], text=new[n]) if n in new else plan.pieces[n] for n in numbers]


def _dropped(plan: Plan, i: int, texts: dict[int, str], notes: dict[int, str],
             cuttable: Callable[[int], bool]) -> dict[int, str]:
    """Pieces ``texts`` (in order; ``notes`` already cut) without the lines a later text or a later
    call of the agent's (sent as written) repeats: piece -> its new text, for each one changed."""
    items: list[tuple[int, int | None, str, bool]] = [
        (plan.pieces[n].message, n, text, cuttable(n)) for n, text in texts.items()]
    items += [(j, None, text, False) for j, text in call_texts(plan, i)]
    items.sort(key=lambda item: item[0])  # stable: a message's pieces before its calls
    found = repeats.cut([(text, may) for _, _, text, may in items])
    cuts = {n: text for (_, n, _, _), text in zip(items, found, strict=True) if n is not None}
    return notes | {n: text for n, text in cuts.items() if text is not None}


def _output(plan: Plan, number: int, end: int) -> bool:
    piece = plan.pieces[number]
    return piece.role == "tool" and piece.message < end


def _notes(plan: Plan, i: int, end: int, texts: dict[int, str]) -> dict[int, str]:
    """The agent's words (not its calls) in messages before its ``NOTES_KEPT`` newest up to ``i`` and
    before ``end``, cut to their first paragraph."""
    answers = [j for j in range(i + 1) if plan.request.messages[j].get("role") == "assistant"]
    if len(answers) < NOTES_KEPT:
        return {}
    before = min(end, answers[-NOTES_KEPT])
    out = {}
    for number, text in texts.items():
        piece = plan.pieces[number]
        if piece.role == "assistant" and piece.call is None and piece.message < before:
            short = repeats.notes(text)
            if short is not None:
                out[number] = short
    return out


def call_texts(plan: Plan, upto: int) -> list[tuple[int, str]]:
    """The string values of the tool-call arguments of messages ``0..upto`` sent as the agent wrote
    them (no piece of theirs: a long one is a piece, sent as its form), one text per message."""
    out = []
    for j, message in enumerate(plan.request.messages[: upto + 1]):
        formed = {plan.pieces[n].call for n in plan.by_message.get(j, ())}
        values = [_strings(shape.function(call).get("arguments"))
                  for number, call in enumerate(shape.calls(message)) if number not in formed]
        if any(values):
            out.append((j, "\n".join(values)))
    return out


def _strings(arguments: Any) -> str:
    """A call's arguments as the lines the agent typed: their JSON's string values, unescaped (as
    written when they are not JSON)."""
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else None
        return "\n".join(v for v in json_values.leaves(parsed) if isinstance(v, str))
    except (ValueError, RecursionError):  # not JSON, or nested too deep to walk: as written
        return arguments if isinstance(arguments, str) else ""
