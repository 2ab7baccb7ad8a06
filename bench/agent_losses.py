"""What a lost string costs and where it was lost, for one replayed agent run (issue #34).

* **Cost with recovery**: at a step whose strict evidence is missing, the agent re-runs the tools that
  held it. Priced as their original outputs sent again uncached (the rendered tokens of each original
  message that held a missing entry, once per step: 1.0 a token OpenAI-style, 1.25 Anthropic-style,
  a cache write) beside one more cached read of the step's prefix (0.1 x the step's request tokens).
  The replay itself goes on with the trajectory as recorded (the re-run outputs do not enter later
  requests), so a string missed at several steps is paid for at each.
* **Where it was lost**, for each strict entry missed at step ``k``, from the text of message
  ``e.msg`` as sent (the gateway and the client-side cuts keep each message at its index):
  ``first sight`` (the first request that held message ``e.msg`` already lacked the string),
  ``reset`` (present at first sight, gone by ``k``) and ``last resort`` (lost at first sight in a
  request where the gateway reported a reset, ``x-mixpr-reset: true``: at first sight ``e.msg`` is in
  the newest turn, which an ordinary reset never touches, so there the newest turn was cut; its
  first-sight form in that same request may have lost it too, so this is an upper bound on last
  resort and first sight a lower bound). ``unaligned``: the request did not hold a message at that
  index (a client that drops messages), or the step failed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

READ, WRITE = 0.1, 1.25  # a cached read; an Anthropic-style cache write
WHERE = ("first sight", "reset", "last resort", "unaligned")

Entry = dict[str, Any]


def recovery(missing: Sequence[Entry], original_tokens: Callable[[int], int],
             request_tokens: int) -> dict[str, float]:
    """The extra price of one step that missed ``missing`` (strict entries): their original messages
    sent again, each once, uncached, plus one more cached read of the step's prefix."""
    if not missing:
        return {"recovered_tokens": 0, "recovery_openai": 0.0, "recovery_anthropic": 0.0}
    resent = sum(original_tokens(m) for m in sorted({e["msg"] for e in missing}))
    prefix = READ * request_tokens
    return {"recovered_tokens": resent, "recovery_openai": resent + prefix,
            "recovery_anthropic": WRITE * resent + prefix}


def where_lost(entry: Entry, steps: Sequence[int], views: dict[int, list[str] | None],
               resets: dict[int, bool], normal: Callable[[str], str]) -> str:
    """Where a strict entry missed at a later step was lost: see the module's docstring.
    ``views[s]``: each message's text (normalised) as the upstream received it at step ``s``."""
    first = next(s for s in steps if s > entry["msg"])
    view = views.get(first)
    if view is None or len(view) <= entry["msg"]:
        return "unaligned"
    if normal(entry["text"]) in view[entry["msg"]]:
        return "reset"
    return "last resort" if resets.get(first) else "first sight"


def losses(steps: Sequence[int], evidence: dict[int, list[Entry]], found: dict[int, list[bool]],
           views: dict[int, list[str] | None], resets: dict[int, bool],
           normal: Callable[[str], str], strict: Callable[[Entry, int], bool]) -> dict[int, dict[str, int]]:
    """Per step: how many of its missed strict entries were lost where (:data:`WHERE`)."""
    out = {}
    for k in steps:
        counts = dict.fromkeys(WHERE, 0)
        for entry, got in zip(evidence.get(k, []), found.get(k, []), strict=True):
            if strict(entry, k) and not got:
                counts[where_lost(entry, steps, views, resets, normal)] += 1
        out[k] = counts
    return out
