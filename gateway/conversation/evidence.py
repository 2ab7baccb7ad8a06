"""Evidence for a follow-up question: passages retrieved for it from what earlier forms cut.

A document pasted once is compressed at first sight for the question asked with it; a later question
needs other passages. Its user message's form therefore starts with an evidence block: MixPR over the
texts of the earlier messages that were cut, the new question as the query, within a cap (a share
of the room). The block is a pure function of the question and the earlier messages, so it is as
stable as any other form. Its size follows the retrieval scores: of what MixPR returns within the
cap, only passages whose match with the question's distinctive words reaches ``KEEP_SHARE`` of the
best match are kept, so a question the earlier text does not answer adds little.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import mixpr.engine
from mixpr import quoted
from mixpr.lexical import compounds
from mixpr.tokens import count_tokens

OPEN = "<earlier_context note=\"passages from earlier in this conversation, not repeated above\">"
CLOSE = "</earlier_context>"
GAP = "\n[…]\n"  # between passages that were not next to each other
SEPARATOR = "\n\n"
KEEP_SHARE = 0.1
# With first-sight forms to leave out, MixPR is asked for this many times the cap: the passages they
# already hold are dropped and the best of the rest fill it.
WIDEN = 1.25
SENT_WORDS = 4  # a unit shorter than this is known as sent by its place, not by its text (``Known``)
# What lies between two kept units of a sent text: blanks, gap marks ("[…]", "[… lines 12–40 omitted
# …]", "[... 9 lines ...]"), the evidence block's tags.
_SKIP = re.compile(r"(?:\s|…|\[(?:…|\.\.\.)[^\]\n]*\]|<earlier_context[^>]*>|</earlier_context>)*")
_WORD = re.compile(r"[^\W_]{3,}")
# Where a kept span is split into the units compared with what was sent before: line ends, and
# sentence ends in a long line (a page flattened to one line, a contract clause).
_LINE = re.compile(r"\n+")
_SENTENCE = re.compile(r"(?<=[.!?;:])\s+(?=\S)")
LONG_LINE_CHARS = 300
MIN_TOKENS = 64  # a block smaller than this is not worth its tags
# A follow-up over a small document still gets this share of the room (what sizing by the room alone
# gave every follow-up before sizing by the document).
FLOOR_SHARE = 0.1
TAG_TOKENS = 24  # the tags and gaps of one block, about


@dataclass
class Spent:
    """The evidence of one conversation's follow-ups over the same documents, in order: what every
    block searches (``texts``), what was sent of them before the next block (the documents' forms as
    they are now, then each block since) and how many of the tokens the forms cut no block has brought
    yet. So a block never repeats a passage and all of them never bring more than was cut: a request
    is never longer than the client's own. A reset that cuts the documents again starts a new one."""

    texts: list[str]
    sent: list[str]
    unsent: int  # tokens the forms cut, less what the blocks brought
    base: Any  # a hash of the salt and ``texts`` (``searched``): hashed once, whatever the resets
    whole: int = 0  # the documents' own tokens
    _hash: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._hash = self.base.copy()
        for text in self.sent:
            self._update(text)

    def cap(self, wanted: int) -> int:
        """The next block's tokens: ``wanted``, at most what is still unsent (its tags included)."""
        return min(wanted, self.unsent - TAG_TOKENS)

    def present(self) -> tuple[str, ...]:
        """What was sent of the documents, each text apart: each keeps their order, so each is walked
        beside them on its own (``Known``)."""
        return tuple(self.sent)

    def salt(self) -> str:
        """The next block's name salt: the documents and everything sent of them so far."""
        return self._hash.copy().hexdigest()

    def add(self, block: tuple[str, int]) -> None:
        self.sent.append(block[0])
        self.unsent -= block[1]
        self._update(block[0])

    def _update(self, text: str) -> None:
        _update(self._hash, text)


def searched(salt: str, texts: list[str]) -> Any:
    """The hash every ``Spent`` over ``texts`` starts from."""
    digest = hashlib.blake2b(digest_size=20)
    for text in (salt, *texts):
        _update(digest, text)
    return digest


def _update(digest: Any, text: str) -> None:
    digest.update(text.encode("utf-8", "surrogatepass"))
    digest.update(b"\x00")


def evidence_job(question: str, texts: list[str], cap: int, model: str | None,
                 present: str | Sequence[str] = "") -> tuple[str, int]:
    """In a worker: the evidence block for ``question`` from the earlier ``texts`` (whole: a later
    reset may send less of them than their first forms did, and the block must not depend on it),
    within ``cap`` tokens, and its tokens; ("", 0) when nothing matches. Passages that ``present``
    (the texts' first-sight forms, sent before the question) already holds are not repeated: MixPR
    is asked for ``WIDEN`` times the cap, and of the new passages the best matches with the
    question fill the cap, in the document's order."""
    sent = [text for text in ([present] if isinstance(present, str) else present) if text]
    present = "\n".join(sent)
    joined = SEPARATOR.join([*texts, question])
    starts = _starts(texts)
    asked = int(cap * (WIDEN if present else 1)) + count_tokens(question, model)
    result = mixpr.engine.compress(joined, budget_tokens=asked, route="local", model=model,
                            boundaries=[*starts, starts[-1] + len(texts[-1])],
                            query_span=(len(joined) - len(question), len(joined)))
    # Unit by unit, whatever span MixPR returned (a budget over the text returns it as one span),
    # before touching units are joined into passages.
    known = Known(joined, [unit for start, text in zip(starts, texts, strict=True)
                           for unit in units(joined, (start, start + len(text)))], sent)
    spans = [unit for span in result.spans for unit in units(joined, span)
             if not _sent(joined[unit[0]:unit[1]].strip(), present) and not known.holds(unit)]
    found = [p for p in _passages(spans, texts, starts, joined) if p not in present]
    passages = _best(found, _scores(found, question), cap, model)
    if not passages:
        return "", 0
    block = f"{OPEN}\n{GAP.join(passages)}\n{CLOSE}"
    return block, count_tokens(block, model)


def _sent(unit: str, present: str) -> bool:
    """Whether ``present`` holds ``unit``: only a unit of ``SENT_WORDS`` words or more says so. A
    redaction mark ("[***].") or a "Yes." is in many places, so finding it says nothing about this
    passage, and dropping it cut the clause it ends short (the passage-level check in
    ``evidence_job`` still drops one that stands alone)."""
    return bool(present) and len(_WORD.findall(unit)) >= SENT_WORDS and unit in present


class Known:
    """Which short units of the documents (a table's row, a log line, a list item: under
    ``SENT_WORDS`` words, which ``_sent`` cannot tell by their text) were sent, decided by their
    place. Each text sent (a form, an earlier block) keeps the documents' order, so it is walked once
    beside their units: a short unit is sent when it stands where the walk stands (past blanks and
    gap marks), or, when the documents hold it once, as a whole line further on. Finding a "Yes." or
    a "[***]." somewhere says nothing about this one; a row the form kept is the next thing in the
    form when its turn comes."""

    def __init__(self, joined: str, doc_units: list[tuple[int, int]], sent: Sequence[str]) -> None:
        texts = [joined[lo:hi].strip() for lo, hi in doc_units]
        once = {unit for unit, n in Counter(texts).items() if n == 1}
        found: set[int] = set()
        for text in sent:
            found.update(_aligned(texts, once, text))
        self.spans = [doc_units[k] for k in sorted(found)]
        self.starts = [lo for lo, _ in self.spans]

    def holds(self, unit: tuple[int, int]) -> bool:
        """Whether ``unit`` (offsets in the documents) lies inside a short unit that was sent."""
        at = bisect.bisect_right(self.starts, unit[0]) - 1
        return at >= 0 and self.spans[at][0] <= unit[0] and unit[1] <= self.spans[at][1]


def _aligned(units: list[str], once: set[str], text: str) -> list[int]:
    """The numbers of the short ``units`` that ``text`` holds, in one walk in the documents' order
    (linear: a long unit moves the walk only where it stands; the whole lines are indexed once)."""
    lines: dict[str, list[int]] = {}
    for match in re.finditer(r"[^\n]+", text):
        lines.setdefault(match.group().strip(), []).append(match.start())
    found, at = [], 0
    for number, unit in enumerate(units):
        where = _SKIP.match(text, at).end()  # type: ignore[union-attr]  # (it matches the empty string)
        if not text.startswith(unit, where):
            places = lines.get(unit, []) if unit in once else []
            later = bisect.bisect_left(places, at)
            where = places[later] if later < len(places) else -1
        if where < 0:
            continue
        at = where + len(unit)
        if len(_WORD.findall(unit)) < SENT_WORDS:
            found.append(number)
    return found


def wanted(room: int, document: int, share: float, document_share: float) -> float:
    """A follow-up's evidence in tokens: ``document_share`` of the pasted ``document``'s tokens (what
    sending it whole costs grows with it), at least ``FLOOR_SHARE`` and at most ``share`` of the
    ``room`` (capped by the most a model reads well); ``document_share`` 0: ``share`` of the room."""
    if not document_share:
        return room * share
    return min(room * share, max(room * min(share, FLOOR_SHARE), document * document_share))


class Template:
    """The words every question of a conversation so far shares (a checklist's or a form's template:
    "Highlight the parts of this contract related to ..."), kept as the questions come, so each
    follow-up costs its own words, not all the earlier questions again. With one earlier question,
    a shared word may be the topic both ask about ("harry potter"): then only the runs of ``RUN``
    words or more the two share are a template (a form's sentence), not single words."""

    RUN = 4

    def __init__(self) -> None:
        self.words: set[str] | None = None
        self.first: list[str] = []  # the first question's words, in order
        self.questions = 0

    def add(self, question: str) -> None:
        found = _words(question)
        self.words = set(found) if self.words is None else self.words & set(found)
        self.first = self.first or found
        self.questions += 1

    def shared(self, question: str = "") -> frozenset[str]:
        """The words all the questions so far share; with one so far, the words ``question`` shares
        with it in runs of ``RUN`` or more; none before that."""
        if self.questions >= 2:
            return frozenset(self.words or ())
        if self.questions == 1 and question:
            return _runs_shared(_words(question), self.first, self.RUN)
        return frozenset()


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _runs_shared(words: list[str], other: list[str], run: int) -> frozenset[str]:
    """The ``words`` inside a run of ``run`` consecutive words that ``other`` has too (linear: the
    runs of ``other`` are hashed once)."""
    runs = {tuple(other[k : k + run]) for k in range(len(other) - run + 1)}
    covered = [False] * len(words)
    for k in range(len(words) - run + 1):
        if tuple(words[k : k + run]) in runs:
            covered[k : k + run] = [True] * run
    return frozenset(w for w, hit in zip(words, covered, strict=True) if hit)


def distinctive(question: str, template: frozenset[str]) -> str:
    """What a follow-up asks besides the ``template``'s words, which would rank the same passages
    first for every question; ``question`` itself when fewer than two of its words are left."""
    if not template:
        return question
    kept = [w for w in _WORD.findall(question) if w.lower() not in template]
    if len(kept) < 2:
        return question
    # the terms it quotes stay quoted, MixPR matches them where the text quotes them (``mixpr.quoted``);
    # not a term of the template ('In the "Agreement", ...'), which would rank the same chunks each time
    kept += [f'"{term}"' for term in quoted.terms(question)
             if any(w.lower() not in template for w in _WORD.findall(term))]
    return " ".join(kept)


def units(text: str, span: tuple[int, int]) -> list[tuple[int, int]]:
    """``span`` of ``text`` as its lines, a long line as its sentences: the units that are compared
    with what was sent before, so a passage already sent is left out whatever span held it."""
    lo, hi = span
    out = []
    for line in _pieces(_LINE, text, lo, hi):
        out += _pieces(_SENTENCE, text, *line) if line[1] - line[0] > LONG_LINE_CHARS else [line]
    return out


def _pieces(pattern: re.Pattern[str], text: str, lo: int, hi: int) -> list[tuple[int, int]]:
    """``text[lo:hi]`` split where ``pattern`` matches, as non-blank (start, end) offsets."""
    out, at = [], lo
    for match in pattern.finditer(text, lo, hi):
        if text[at:match.start()].strip():
            out.append((at, match.start()))
        at = match.end()
    if text[at:hi].strip():
        out.append((at, hi))
    return out


def _starts(texts: list[str]) -> list[int]:
    starts, at = [], 0
    for text in texts:
        starts.append(at)
        at += len(text) + len(SEPARATOR)
    return starts


def _passages(spans: list[tuple[int, int]], texts: list[str], starts: list[int], joined: str) -> list[str]:
    """The kept spans inside the texts (not the question), as passages: spans with nothing but
    whitespace between them are one passage (MixPR keeps sentences; a clause of two kept sentences is
    one run of the text, and a gap marker inside it would say that something was left out).
    ``joined``: the texts as MixPR was given them (``SEPARATOR`` between them), which ``spans`` index."""
    found = []
    for lo, hi in _runs(spans, texts, starts, joined):
        for text, start in zip(texts, starts, strict=True):
            a, b = max(lo, start), min(hi, start + len(text))
            passage = text[a - start : b - start].strip() if a < b else ""
            if passage:
                found.append(passage)
    return found


def _runs(spans: list[tuple[int, int]], texts: list[str], starts: list[int],
          joined: str) -> list[tuple[int, int]]:
    """``spans`` with the ones that only whitespace separates joined (never across two texts)."""
    ends = [start + len(text) for start, text in zip(starts, texts, strict=True)]
    runs: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if runs and not joined[runs[-1][1]:lo].strip() and not any(runs[-1][1] <= e < lo for e in ends):
            runs[-1] = (runs[-1][0], max(hi, runs[-1][1]))
        else:
            runs.append((lo, hi))
    return runs


def _scores(passages: list[str], question: str) -> list[float]:
    """Each passage's idf-weighted match with the question's distinctive words."""
    # and a compound the question writes open and the passage closed ("nontransferable"), as MixPR does
    asked = {w.lower() for w in _WORD.findall(question)} | compounds(question)
    words = [asked & {w.lower() for w in _WORD.findall(p)} for p in passages]
    frequency = Counter(w for found in words for w in found)
    # fsum: exactly rounded, so the same in every process whatever order its hash seed gives the set
    return [math.fsum(math.log(1 + len(passages) / frequency[w]) for w in found) for found in words]


def _best(passages: list[str], scores: list[float], cap: int, model: str | None) -> list[str]:
    """The passages whose match reaches ``KEEP_SHARE`` of the best, best first until ``cap`` tokens
    (ties: the earlier passage), returned in the document's order."""
    best = max(scores, default=0.0)
    if best <= 0:
        return []
    order = sorted((i for i, score in enumerate(scores) if score >= KEEP_SHARE * best),
                   key=lambda i: (-scores[i], i))
    chosen, used = [], 0
    for i in order:
        tokens = count_tokens(passages[i], model)
        if used + tokens <= cap:
            chosen.append(i)
            used += tokens
    return [passages[i] for i in sorted(chosen)]
