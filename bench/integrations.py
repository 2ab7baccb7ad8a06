"""Evidence recall of MixPR inside LangChain and LlamaIndex, beside BM25 through the same interface.

    .venv/bin/python -m bench.integrations            # every dev record (~10 min on 2 loaded cores)
    .venv/bin/python -m bench.integrations --quick    # every 3rd question

A pipeline hands a compressor its retrieved documents and the query. Here the documents are:

- ``hotpot``/``musique``: every paragraph of ``bench.real_sets``' haystack (the question's own 10 or 20
  paragraphs among others' until ~64,000 characters, shuffled), one document per paragraph; budget 1,000
  and 2,000 tokens; kept = every supporting sentence (HotpotQA) or paragraph (MuSiQue) kept.
- ``nq``/``contracts``/``papers``: one L-Eval document cut into passages at blank lines (merged up to
  ``PASSAGE_CHARS``, as a text splitter would), one document per passage; budget 1,000 tokens; kept =
  some occurrence of the answer kept (answers that cross a passage boundary are not counted).

"Kept" is the project's rule (at least 90% of the evidence's characters inside the kept spans), read from
each returned document's ``metadata["mixpr"]["kept_spans"]``. Four compressors, each given the documents
and the query: ``MixPRCompressor`` (LangChain ``BaseDocumentCompressor``) and ``MixPRNodePostprocessor``
(LlamaIndex ``BaseNodePostprocessor``), and a BM25 one of each (``bm25s``, default parameters, over the
same sentence chunks MixPR ranks, best-first into the same budget, each document's chunks in order);
and ``langchain-bm25-doc``, BM25 over whole documents (a paragraph, a passage: the unit the evidence
is), best-first, each kept whole or not at all (the sentence-level one ranks sentences against
evidence that is a whole paragraph). Both interfaces call the same code, so the document-level
baseline runs through one.
Both halves of the dev split are reported apart: even-indexed and odd-indexed records (questions for
hotpot and musique, documents for the L-Eval files). Writes bench/out/integrations.json.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

import numpy as np
from langchain_core.documents import BaseDocumentCompressor, Document
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from bench import real_docs, real_sets
from mixpr import engine, selection
from mixpr.chunking import chunk_text
from mixpr.integrations.langchain import MixPRCompressor
from mixpr.integrations.llama_index import MixPRNodePostprocessor
from mixpr.integrations.passages import Kept
from mixpr.tokens import count_tokens, encoding_for

OUT = Path(__file__).with_name("out")
SETS = {"hotpot": 1000, "musique": 2000, "nq": 1000, "contracts": 1000, "papers": 1000}
LEVAL = {"nq": "nq", "contracts": "contracts", "papers": "papers"}  # real_docs.FILES keys
PASSAGE_CHARS = 1500
COVERED = 0.9
QUICK_STRIDE = 3  # odd: a quick run still sees both halves
COMPRESSORS = ["langchain-mixpr", "langchain-bm25", "llamaindex-mixpr", "llamaindex-bm25",
               "langchain-bm25-doc"]
_BLANK = re.compile(r"\n[ \t]*\n")


@dataclass(frozen=True)
class Case:
    """A query over retrieved documents; ``evidence``: (document, start, end) spans scored by ``rule``."""

    set: str
    record: int
    query: str
    documents: tuple[str, ...]
    evidence: tuple[tuple[int, int, int], ...]
    rule: str  # "all" | "any"


def multihop_cases(name: str) -> Iterator[Case]:
    items = real_sets.load(name)
    for record, item in enumerate(items):
        if item["answer"].strip().lower() in real_sets._SKIPPED_ANSWERS:
            continue
        documents, sentences = [], {}
        for title, pieces, own in real_sets._haystack(name, record, items):
            at, parts = len(title) + 1, []
            for i, piece in enumerate(p.strip() for p in pieces):
                if own:
                    sentences[(title, i)] = (len(documents), at, at + len(piece))
                parts.append(piece)
                at += len(piece) + 1
            documents.append(f"{title}\n{' '.join(parts)}")
        wanted = [sentences.get((title, i)) for title, i in item["supporting"]]
        if all(wanted):  # a few HotpotQA facts point past their paragraph's end (as bench.real_sets)
            yield Case(name, record, item["question"].strip(), tuple(documents), tuple(wanted), "all")


def leval_cases(name: str) -> Iterator[Case]:
    for record, row in enumerate(real_docs.load(LEVAL[name])):
        documents, starts = passages(row["input"])
        for question, answer in zip(row["instructions"], row["outputs"], strict=True):
            if not answer or answer not in row["input"]:
                continue
            found = []
            for a, b in real_docs.occurrences(row["input"], answer, 0, len(row["input"])):
                i = int(np.searchsorted(starts, a, side="right")) - 1
                if b <= starts[i] + len(documents[i]):
                    found.append((i, a - starts[i], b - starts[i]))
            if found:
                yield Case(name, record, question.strip(), tuple(documents), tuple(found), "any")


def passages(text: str) -> tuple[list[str], list[int]]:
    """``text`` cut at blank lines into passages of at least ``PASSAGE_CHARS`` (the last may be
    shorter), and where each starts in ``text``."""
    cuts = [m.end() for m in _BLANK.finditer(text)]
    documents, starts, start = [], [], 0
    for cut in [*cuts, len(text)]:
        if cut - start >= PASSAGE_CHARS or cut == len(text):
            piece = text[start:cut].rstrip()
            if piece.strip():
                documents.append(piece)
                starts.append(start)
            start = cut
    return documents, starts


def bm25_keep(texts: Sequence[str], query: str, budget: int, *, whole: bool = False) -> list[Kept]:
    """BM25 (bm25s defaults) over the texts' sentence chunks (MixPR's chunker), or with ``whole``
    over the texts themselves, best-first into ``budget`` tokens of kept text in all; each text's
    kept chunks in order."""
    import bm25s

    if whole:
        pieces = [(i, 0, len(text)) for i, text in enumerate(texts)]
    else:
        pieces = [(i, s, e) for i, text in enumerate(texts)
                  for s, e in zip(*(a.tolist() for a in _bounds(text)), strict=True)]  # fmt: skip
    chunk_texts = [texts[i][s:e] for i, s, e in pieces]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(chunk_texts, show_progress=False), show_progress=False)
    asked = bm25s.tokenize([query], return_ids=False, show_progress=False)[0]
    scores = np.asarray(retriever.get_scores(asked) if asked else np.zeros(len(pieces)), dtype=np.float64)
    counted = encoding_for(None).encode_ordinary_batch(chunk_texts)
    sizes = np.array([len(t) for t in counted], dtype=np.float64)
    keep = list(selection.within_budget(scores, sizes, budget, np.zeros(0, dtype=np.int64)))
    while True:
        kept = _kept(texts, [pieces[k] for k in keep])
        if sum(k.kept_tokens for k in kept) <= budget or not keep:
            return kept
        keep.remove(min(keep, key=lambda k: scores[k]))  # the seams added a token or two: drop the worst


def _bounds(text: str):
    chunks = chunk_text(text)
    return chunks.starts, chunks.ends


def _kept(texts: Sequence[str], chosen: Sequence[tuple[int, int, int]]) -> list[Kept]:
    spans: list[list[tuple[int, int]]] = [[] for _ in texts]
    for i, s, e in sorted(chosen):
        spans[i].append((s, e))
    out = []
    for text, own in zip(texts, spans, strict=True):
        part = engine.join_spans(text, own)
        out.append(Kept(own, part, count_tokens(text), count_tokens(part) if own else 0))
    return out


class BM25Compressor(BaseDocumentCompressor):
    """The baseline through LangChain's interface, with MixPRCompressor's output form; ``whole``:
    over whole documents."""

    budget_tokens: int = 1000
    whole: bool = False

    def compress_documents(self, documents, query, callbacks=None) -> list[Document]:
        kept = bm25_keep([d.page_content for d in documents], query, self.budget_tokens, whole=self.whole)
        return [Document(page_content=k.text, metadata={**d.metadata, "mixpr": k.metadata()}, id=d.id)
                for d, k in zip(documents, kept, strict=True) if k.spans]  # fmt: skip


class BM25NodePostprocessor(BaseNodePostprocessor):
    """The baseline through LlamaIndex's interface, with MixPRNodePostprocessor's output form."""

    budget_tokens: int = 1000

    def _postprocess_nodes(self, nodes, query_bundle=None) -> list[NodeWithScore]:
        texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
        kept = bm25_keep(texts, query_bundle.query_str, self.budget_tokens)
        out = []
        for n, k in zip(nodes, kept, strict=True):
            if k.spans:
                node = n.node.model_copy(deep=True)
                node.set_content(k.text)
                node.metadata["mixpr"] = k.metadata()
                out.append(NodeWithScore(node=node, score=n.score))
        return out


def run_langchain(compressor: BaseDocumentCompressor, case: Case) -> tuple[dict[int, list], int]:
    documents = [Document(page_content=t, id=str(i)) for i, t in enumerate(case.documents)]
    kept = compressor.compress_documents(documents, case.query)
    return ({int(d.id): d.metadata["mixpr"]["kept_spans"] for d in kept},
            sum(count_tokens(d.page_content) for d in kept))  # fmt: skip


def run_llama_index(postprocessor: BaseNodePostprocessor, case: Case) -> tuple[dict[int, list], int]:
    nodes = [NodeWithScore(node=TextNode(text=t, id_=str(i)), score=1.0)
             for i, t in enumerate(case.documents)]
    kept = postprocessor.postprocess_nodes(nodes, QueryBundle(case.query))
    return ({int(n.node.node_id): n.node.metadata["mixpr"]["kept_spans"] for n in kept},
            sum(count_tokens(n.node.get_content(metadata_mode=MetadataMode.NONE)) for n in kept))  # fmt: skip


def evidence_kept(case: Case, spans: dict[int, list]) -> bool:
    hits = []
    for doc, a, b in case.evidence:
        inside = sum(max(0, min(e, b) - max(s, a)) for s, e in spans.get(doc, ()))
        hits.append(inside >= COVERED * (b - a))
    return all(hits) if case.rule == "all" else any(hits)


def compressors(budget: int) -> dict[str, tuple]:
    return {
        "langchain-mixpr": (run_langchain, MixPRCompressor(budget_tokens=budget)),
        "langchain-bm25": (run_langchain, BM25Compressor(budget_tokens=budget)),
        "llamaindex-mixpr": (run_llama_index, MixPRNodePostprocessor(budget_tokens=budget)),
        "llamaindex-bm25": (run_llama_index, BM25NodePostprocessor(budget_tokens=budget)),
        "langchain-bm25-doc": (run_langchain, BM25Compressor(budget_tokens=budget, whole=True)),
    }


def cases(name: str, quick: bool) -> list[Case]:
    found = list(multihop_cases(name) if name in ("hotpot", "musique") else leval_cases(name))
    return found[::QUICK_STRIDE] if quick else found


def measure(names: Sequence[str], quick: bool) -> list[dict]:
    rows = []
    for name in names:
        budget = SETS[name]
        for case in cases(name, quick):
            row = {"set": name, "record": case.record, "half": "even" if case.record % 2 == 0 else "odd",
                   "budget": budget}  # fmt: skip
            for label, (run, compressor) in compressors(budget).items():
                spans, tokens = run(compressor, case)
                assert tokens <= budget, (label, name, case.record, tokens)
                row[label] = evidence_kept(case, spans)
            rows.append(row)
        print(f"{name}: {sum(r['set'] == name for r in rows)} questions", flush=True)
    return rows


def table(rows: list[dict]) -> str:
    head = "| set | budget | half | questions | " + " | ".join(COMPRESSORS) + " |"
    lines = [head, "|" + "---|" * (4 + len(COMPRESSORS))]
    for name in SETS:
        for half in ("even", "odd"):
            cell = [r for r in rows if r["set"] == name and r["half"] == half]
            if cell:
                recall = " | ".join(f"{mean(r[c] for r in cell):.2f}" for c in COMPRESSORS)
                lines.append(f"| {name} | {cell[0]['budget']} | {half} | {len(cell)} | {recall} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.integrations", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"every {QUICK_STRIDE}th question")
    ap.add_argument("--sets", default=",".join(SETS), help="comma list of: " + ", ".join(SETS))
    args = ap.parse_args(argv)
    names = [n for n in SETS if n in args.sets.split(",")]
    rows = measure(names, args.quick)
    OUT.mkdir(exist_ok=True)
    (OUT / "integrations.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(table(rows))


if __name__ == "__main__":
    main()
