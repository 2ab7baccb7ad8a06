"""bench.integrations' own parts: the passages it cuts, its BM25 compressors' budget and order, its rule."""

from mixpr.tokens import count_tokens


def test_passages_cut_at_blank_lines_and_map_back():
    from bench import integrations
    text = "\n\n".join(f"Paragraph {i}. " + "word " * 100 for i in range(12))
    documents, starts = integrations.passages(text)
    assert len(documents) > 1 and all(len(d) >= integrations.PASSAGE_CHARS for d in documents[:-1])
    for document, start in zip(documents, starts, strict=True):
        assert text[start : start + len(document)] == document


def test_bm25_keeps_the_matching_chunks_within_the_budget_in_order():
    from bench import integrations
    texts = [" ".join(f"Filler sentence {i} about rivers and stones." for i in range(60)) for _ in range(4)]
    texts[2] = texts[2].replace("Filler sentence 30 about", "The vault code 4417 is kept about")
    kept = integrations.bm25_keep(texts, "What is the vault code?", 80)
    assert sum(count_tokens(k.text) for k in kept) <= 80
    assert "vault code 4417" in kept[2].text
    for k in kept:
        assert k.spans == sorted(k.spans)


def test_evidence_rule():
    from bench import integrations
    case = integrations.Case("x", 0, "q", ("abcdefghij", "klmnop"), ((0, 0, 10), (1, 0, 5)), "all")
    assert integrations.evidence_kept(case, {0: [[0, 10]], 1: [[0, 5]]})
    assert not integrations.evidence_kept(case, {0: [[0, 10]]})
    anyone = integrations.Case("x", 0, "q", case.documents, case.evidence, "any")
    assert integrations.evidence_kept(anyone, {0: [[0, 9]]})  # 90% of the first is enough


def test_document_level_bm25_keeps_whole_documents_best_first_within_the_budget():
    """The baseline that ranks what the evidence is (a paragraph, a passage): whole documents,
    best-first, each kept whole or not at all."""
    from bench import integrations
    texts = [" ".join(f"Filler sentence {i} about rivers and stones." for i in range(12)) for _ in range(6)]
    texts[4] = "The vault code is 4417. " + texts[4]
    kept = integrations.bm25_keep(texts, "What is the vault code?", 200, whole=True)
    assert sum(k.kept_tokens for k in kept) <= 200
    assert kept[4].spans == [(0, len(texts[4]))] and kept[4].text == texts[4]
    assert all(k.spans in ([], [(0, len(t))]) for k, t in zip(kept, texts, strict=True))
    assert "langchain-bm25-doc" in integrations.compressors(200)
