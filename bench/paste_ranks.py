"""Where MixPR ranks the document conversations' answers over the whole paste (issue 45).

A follow-up's evidence can only bring what MixPR ranks within its block; which answers it ranks where
says whether a turn was lost to the spend or to the ranking. For every question of the document
conversations (issue 45's real-size and large sets, issue 39's five): MixPR (local route) over all the
pasted documents, the question asked as the gateway asks a follow-up's (the words every earlier
question shares left out, ``gateway.conversation.evidence``), at each of ``BUDGETS`` tokens; how many
answers each budget holds, per kind of document. Costs nothing and times nothing.

    .venv/bin/python -m bench.paste_ranks              # the table (~1 min on 2 cores)
    .venv/bin/python -m bench.paste_ranks --misses     # and each question no budget holds
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import mixpr
from bench import conversation
from bench.conversation import Conversation
from gateway.conversation import evidence

BUDGETS = (2000, 4000, 8000, 16000)


def asked(conv: Conversation) -> Iterator[tuple[str, str, str]]:
    """Each turn's (pasted documents, query, answer): the first question as sent, each later one
    without the words the earlier ones share, as the gateway searches for it."""
    first = conv.requests[0][-1]["content"]
    paste = "\n\n".join(conv.parts)
    template = evidence.Template()
    for turn, request in enumerate(conv.requests):
        question = first[len(paste):].strip() if turn == 0 else request[-1]["content"]
        shared = template.shared(question)
        template.add(question)
        yield paste, evidence.distinctive(question, shared), conv.evidence[turn][0]


def held(paste: str, query: str, answer: str, budgets: tuple[int, ...] = BUDGETS) -> list[bool]:
    """Whether MixPR's cut of ``paste`` for ``query`` holds ``answer`` (whitespace aside), per budget."""
    wanted = " ".join(answer.split())
    cuts = (mixpr.compress(paste, query=query, budget_tokens=b, route="local").text for b in budgets)
    return [wanted in " ".join(cut.split()) for cut in cuts]


def run(conversations: list[Conversation]) -> dict[str, list[list[bool]]]:
    """Per kind of document ("contracts", "pages"), each question's row of ``held``."""
    rows: dict[str, list[list[bool]]] = {}
    for conv in conversations:
        for paste, query, answer in asked(conv):
            rows.setdefault(conv.name.split("-")[0], []).append(held(paste, query, answer))
    return rows


def table(rows: dict[str, list[list[bool]]]) -> str:
    lines = ["| kind | questions | " + " | ".join(f"held at {b // 1000}k" for b in BUDGETS) + " |",
             "|---|---|" + "---|" * len(BUDGETS)]
    for kind, found in sorted(rows.items()):
        counts = [sum(row[k] for row in found) for k in range(len(BUDGETS))]
        lines.append(f"| {kind} | {len(found)} | " + " | ".join(map(str, counts)) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--misses", action="store_true", help="also list each question no budget holds")
    args = ap.parse_args(argv)
    conversations = [*conversation.real_size(),
                     *conversation.real_size(conversation.LARGE_MIN, conversation.LARGE_COUNT, "large"),
                     *conversation.protocol()]
    print(table(run(conversations)))
    if args.misses:
        for conv in conversations:
            for turn, (paste, query, answer) in enumerate(asked(conv), start=1):
                if not any(held(paste, query, answer)):
                    print(f"{conv.name} turn {turn}: {query[:70]!r} -> {answer[:50]!r}")


if __name__ == "__main__":
    main()
