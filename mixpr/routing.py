"""The mixture's router: does the query need local (PPR) or global (PageRank) retrieval?

The paper asks the base LLM a zero-shot y/n question about the first two and
last two chunks ('y' -> global). Small models answer it unreliably, so a
keyword heuristic stands in when no LLM is given or its answer is neither.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

LOCAL, GLOBAL = "local", "global"
ALPHA = {LOCAL: 0.6, GLOBAL: 0.0}

_INSTRUCTION = (
    "If the query asks for summarization, most frequent words, or descriptions of an entire document, "
    "answer 'y' with no other text. If the query does not and only asks a specific question, "
    "answer 'n' with no other text."
)
# Verbatim from the paper (appendix A.2); [query] is filled by router_prompt.
ROUTER_PROMPT = f"{_INSTRUCTION}\n\nQUERY: [query]\n\n{_INSTRUCTION}\n\nAnswer:"

# What global tasks say: summaries, overall descriptions, word frequencies.
_GLOBAL_CUES = re.compile(
    r"\b(summar\w*|overview|tl;?dr|gist|synopsis|outline"
    r"|(main|key|central) (idea|point|theme|topic|takeaway|character|event)s?"
    r"|most (frequent|common|often|used|repeated)\w*|appear\w* most|frequen\w+|common words"
    r"|(whole|entire|full) (document|text|book|story|article|report|paper|list|transcript|conversation)"
    r"|what is (this|the) (document|text|book|story|article|paper) about)\b",
    re.IGNORECASE,
)


def router_query(chunk_texts: Sequence[str]) -> str:
    """The first two and last two chunks: the instruction and the question, in practice."""
    picked = list(chunk_texts[:2]) + list(chunk_texts[max(2, len(chunk_texts) - 2) :])
    return " ".join(text.strip() for text in picked)


def router_prompt(chunk_texts: Sequence[str]) -> str:
    return ROUTER_PROMPT.replace("[query]", router_query(chunk_texts))


def parse_route(answer: str) -> str | None:
    """'y' -> global, 'n' -> local (first letter, case and quotes ignored); anything else -> None."""
    word = answer.strip().strip("'\"`*.").lower()
    if word in {"y", "yes"}:
        return GLOBAL
    if word in {"n", "no"}:
        return LOCAL
    return None


# A cue under a negation is an instruction against it: "Only give me the topic name. Do not
# summarize yourself." asks a local question (L-Eval's topic retrieval asks every question so).
_NEGATION = re.compile(r"(\bnot|\bnever|\bwithout|\bno|n't)\W+(\w+\W+){0,2}$", re.IGNORECASE)


# A summary scoped to a topic ("Summarize the discussion about the remote's price", "the manager's
# opinions towards X") asks for the passages on X: a local question. QMSum asks most of its summary
# queries so (dev split: 66 of 251 queries, share of the evidence kept 0.19 global, 0.31 local). A
# summary of a whole thing stays global, however it goes on ("Summarize the article about the war",
# "Summarize what the text is about").
_WHOLE = re.compile(
    r"\b(document|text|book|story|article|paper|report|transcript|chapter|email|letter|meeting|conversation"
    r"|chat|call|interview|essay|thread|all|everything|whole|entire|full)\b",
    re.IGNORECASE,
)
_SCOPED = re.compile(r"\W+((?:[\w'-]+\W+){0,6}?)(?:about|regarding|concerning|towards?)\s+(\w+(?:\W+\w+)?)",
                     re.IGNORECASE)  # fmt: skip


def _scoped(query: str, at: int) -> bool:
    """The words after a cue at ``at`` narrow it to a topic, not to a whole document."""
    match = _SCOPED.match(query, at)
    return bool(match) and not _WHOLE.search(match.group(1)) and not _WHOLE.search(match.group(2))


def heuristic_route(query: str) -> str:
    for cue in _GLOBAL_CUES.finditer(query):
        negated = _NEGATION.search(query, max(0, cue.start() - 40), cue.start())
        if not negated and not _scoped(query, cue.end()):
            return GLOBAL
    return LOCAL


def choose_route(
    chunk_texts: Sequence[str], ask_llm: Callable[[str], str] | None, *, heuristic_query: str | None = None
) -> tuple[str, str]:
    """(route, how it was decided: "llm" or "heuristic") for the auto router.

    ``heuristic_query``: what the fallback heuristic reads (default: the same chunks as the LLM)."""
    if ask_llm is not None:
        try:
            route = parse_route(ask_llm(router_prompt(chunk_texts)))
        except Exception:  # the router is advisory: any failure falls back to the heuristic
            route = None
        if route is not None:
            return route, "llm"
    query = router_query(chunk_texts) if heuristic_query is None else heuristic_query
    return heuristic_route(query), "heuristic"
