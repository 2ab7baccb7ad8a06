"""What a process does once, before its first request, so that the request does not pay for it (issue
59): load the tokenizers and scikit-learn, then run one MixPR job over a made-up document.

A compression worker is forked from a fork server that did the loading (``preload``). Its first use of
each page of that copies the page, and its first large allocations grow its heap; a real request's
first job paid 15 ms for both (``compressor._warm_up``). The job here pays most of that instead, so
the document it reads is written like the ones users send: sections under headings, numbered clauses,
typographic quotes, dashes and symbols, figures. A plainer one (one sentence 1,200 times, ASCII
only) left a worker's first job over a real contract 4 to 5 ms slower than the next ones, and 480 page
faults where the next take 40; this one leaves 2 to 3 ms and 250 (``bench/README.md``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import mixpr.embedding
import mixpr.engine
from mixpr.tokens import count_tokens

_NOUNS = ("buyer", "seller", "invoice", "delivery", "warranty", "licence", "term", "notice", "party",
          "fee", "schedule", "territory", "product", "service", "payment", "audit", "record", "claim",
          "loss", "report")
_VERBS = ("pays", "delivers", "signs", "renews", "terminates", "audits", "assigns", "waives", "reports",
          "covers")
# Typographic quotes, a dash and the section sign, as real documents carry them.
_CLAUSE = ("\u00a7 {section}.{n} The {owner}\u2019s \u201c{thing}\u201d (see Schedule {schedule}) {verb} "
           "within {days} days; interest accrues at {rate}.5% \u2014 per month, up to USD {cap:,}.")
CLAUSES = 1200  # about 150k characters, 53k tokens: as long as the long prompts the gateway cuts
PER_SECTION = 40
QUESTION = "When is an invoice due?"


def sample_document(clauses: int = CLAUSES) -> str:
    """A contract-like document, the same on every call: headings, then numbered clauses that mix
    ASCII with the typographic characters real documents carry (so their strings are not ASCII-only)."""
    parts = []
    for i in range(clauses):
        section, n = divmod(i, PER_SECTION)
        if n == 0:
            heading = f"{_NOUNS[section % 20]} and {_NOUNS[(section + 7) % 20]}".upper()
            parts.append(f"\n\nARTICLE {section + 1}. {heading}\n")
        parts.append(_CLAUSE.format(section=section + 1, n=n + 1, owner=_NOUNS[i % 20],
                                    thing=_NOUNS[(i * 7 + 3) % 20], schedule=i % 7, verb=_VERBS[i * 3 % 10],
                                    days=i % 90 + 10, rate=i % 5, cap=i * 37 % 9000))
    return "\n".join(parts)


def load_tokenizers() -> None:
    """Both bundled encodings loaded (a second each from their files)."""
    count_tokens("warm up", "gpt-4o-mini")  # o200k_base
    count_tokens("warm up", None)  # cl100k_base, also the encoding of every model tiktoken does not know


_WARMED: dict[str, int] = {}  # each warm-up's name: the process it ran in


def once_per_process(warm: Callable[[], None]) -> Callable[[], None]:
    """``warm`` run once in each process: a second gateway built in the same process (the LiteLLM
    plug-in's guardrails, each with its compressor; an application's own tests) finds its pages and heap
    warm. A process forked after it (a pool's worker) is another process and warms again: the pages it
    shares with its parent are copied on its first touch."""

    @functools.wraps(warm)
    def warm_once() -> None:
        if _WARMED.get(warm.__name__) != os.getpid():
            warm()
            _WARMED[warm.__name__] = os.getpid()

    return warm_once


@once_per_process
def first_counts() -> None:
    """Both encodings over the whole sample: a first long text touches far more of an encoding's
    tables than a word does. In the gateway's process, which counts prompts shorter than 200k
    characters itself, and in each worker; not in the fork server, whose pages a worker touches
    again."""
    text = sample_document()
    count_tokens(text, "gpt-4o-mini")
    count_tokens(text, None)


def load_tables() -> None:
    """What a compression job needs loaded: the tokenizers, and scikit-learn, which mixpr.embedding
    imports only when it first weighs words (the gateway's own process never does when workers are
    processes): loaded before the first job, so it does not pay for them."""
    load_tokenizers()
    mixpr.embedding.unit_rows(mixpr.embedding.embed(["warm up", "the worker"]))


@once_per_process
def first_job() -> None:
    """The sample counted, then a MixPR job over it, every stage of it (chunks, words' weights, the
    router's question and its answer read, the graph, PageRank, the cut to a fifth): its arrays'
    memory, freed, stays in the heap for the first request's."""
    first_counts()
    mixpr.engine.compress(f"{sample_document()}\n\n{QUESTION}", budget_tokens=10_000, route="auto",
                          ask_llm=lambda question: "", model=None)  # "": the heuristic decides
