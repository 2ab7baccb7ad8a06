"""BABILong qa1..qa5: bAbI facts interleaved, in order, into book sentences (PG-19-style filler)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

from bench.data import babi_path, books
from bench.tasks.babilong_prompts import PROMPTS
from bench.tasks.sample import Sample
from bench.text import split_sentences
from bench.tokens import count_tokens, decode, encode_many

FAMILY = {"qa1": "single", "qa2": "multi", "qa3": "multi", "qa4": "single", "qa5": "single"}
TEMPLATE = (
    "{instruction}\n\n{examples}\n\n{post_prompt}\n\n<context>\n{context}\n</context>\n\nQuestion: {question}"
)
MIN_SENTENCE_TOKENS = 10


@dataclass(frozen=True)
class BabiSample:
    facts: tuple[str, ...]  # story lines before the question, in order
    question: str
    answer: str
    supporting: tuple[str, ...]  # the supporting-fact sentences


@cache
def load_babi(task: str) -> tuple[BabiSample, ...]:
    """One sample per question; a story restarts whenever the line id goes back to 1."""
    out: list[BabiSample] = []
    story: dict[int, str] = {}
    for line in babi_path(task).read_text().splitlines():
        ident, _, rest = line.partition(" ")
        if int(ident) == 1:
            story = {}
        if "\t" in rest:
            question, answer, ids = rest.split("\t")
            facts = tuple(story.values())
            out.append(BabiSample(facts, question, answer, tuple(story[int(i)] for i in ids.split())))
        else:
            story[int(ident)] = rest.strip()
    return tuple(out)


def filler(budget: int, rng: random.Random) -> list[str]:
    """Sentences from random books at random offsets; the last one is cut so the total is exactly `budget`."""
    out: list[str] = []
    used = 0
    while used < budget:
        book = rng.choice(books())
        start = rng.randrange(len(book))
        sents = split_sentences(book[start : start + 10 * (budget - used)])[1:-1]  # ends are partial
        for sent, ids in zip(sents, encode_many([" " + s for s in sents]), strict=True):
            if len(ids) < MIN_SENTENCE_TOKENS:
                continue
            if used + len(ids) >= budget:
                out.append(decode(ids[: budget - used]).strip())
                return out
            out.append(sent)
            used += len(ids)
    return out


def interleave(facts: tuple[str, ...], sentences: list[str], rng: random.Random) -> str:
    """Each fact gets a gap drawn with replacement; sorted slots keep the facts in story order."""
    slots = sorted(rng.randrange(len(sentences) + 1) for _ in facts)
    pieces: list[str] = []
    k = 0
    for gap in range(len(sentences) + 1):
        while k < len(slots) and slots[k] == gap:
            pieces.append(facts[k])
            k += 1
        if gap < len(sentences):
            pieces.append(sentences[gap])
    return " ".join(p for p in pieces if p).strip()


def generate(task: str, length: int, seed: int) -> Sample:
    rng = random.Random(f"{task}/{seed}")
    cap = (length - 300) // 8  # BABILong drops samples with more facts than this
    pool = [s for s in load_babi(task) if len(s.facts) <= cap]
    item = rng.choice(pool)
    prompt = PROMPTS[task]
    fields = {k: prompt[k] for k in ("instruction", "examples", "post_prompt")}
    head, tail = TEMPLATE.format(**fields, context="\x00", question=item.question).split("\x00")
    overhead = count_tokens(head + tail) + sum(map(len, encode_many([" " + f for f in item.facts])))
    context = interleave(item.facts, filler(max(0, length - overhead), rng), rng)
    text = (head + context + tail).strip()
    start = text.index(context) if context else len(head)
    return Sample(
        text=text,
        needles=list(item.supporting),
        family=FAMILY[task],
        task=task,
        context_span=(start, start + len(context)),
        query=tail.strip(),
        length=length,
        seed=seed,
        tokens=count_tokens(text),
    )
