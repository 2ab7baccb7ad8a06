import numpy as np

from mixpr.chunking import chunk_text
from mixpr.embedding import bm25
from mixpr.engine import _counts
from mixpr.headings import heading_texts
from mixpr.lexical import lexical_scores
from mixpr.query import query_weights

WORKERS = ["Anna Berg", "Carl Dunn", "Eva Frost", "Gus Hale", "Ida Juel", "Kai Lund", "Mia Nord", "Ola Pike"]


def _paragraph(name: str, company: str) -> str:
    return f"{name}\n{name} is a poet from the north. He worked as an engineer at {company} for years."


def test_a_paragraphs_title_belongs_to_its_sentences():
    # The sentence that answers never names the person the question asks about; only its title does.
    paragraphs = [_paragraph(n, f"Firm{i}") for i, n in enumerate(WORKERS * 3)]
    paragraphs[13] = _paragraph("Sachin Warrier", "Tata Consultancy")
    text = "\n\n".join(paragraphs) + "\n\nWhich company did Sachin Warrier work for as an engineer?"
    chunks = chunk_text(text)
    counts, words, _ = _counts(chunks)
    relevance = lexical_scores(bm25(counts), query_weights(chunks), words)
    answers = [i for i, t in enumerate(chunks.texts()) if t.startswith("He worked as an engineer")]
    best = max(answers, key=lambda i: relevance[i])
    assert "Tata Consultancy" in chunks.texts()[best]
    assert np.sum(relevance[answers] == relevance[best]) == 1


def test_headings_are_short_first_lines_of_blocks():
    text = (
        "Title One\nBody sentence one. Body two.\n\nA first line that is far too long to be a heading "
        "of anything at all here\nmore text.\n\nLone line.\n\nUSER: Hi there.\nASSISTANT: Hello."
    )
    texts, owner = heading_texts(chunk_text(text))
    assert texts == ["Title One"]
    assert owner.tolist()[:2] == [-1, 0]  # the first chunk holds the title itself
    assert (owner[2:] == -1).all()
