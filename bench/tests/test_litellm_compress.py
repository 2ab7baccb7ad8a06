"""The litellm.compress() peer column: paragraphs as LiteLLM expects them, kept spans scored honestly."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.litellm_compress import kept_spans, paragraphs  # noqa: E402


def test_paragraphs_split_at_lines_and_html_blocks() -> None:
    text = "Title <P> first para </P> <P> second </P>\nA line.\n\n\nLast line.\n\nQuestion?"
    end = text.index("Question?")
    got = [text[s:e] for s, e in paragraphs(text, end)]
    assert got == ["Title ", "<P> first para </P> ", "<P> second </P>", "A line.", "Last line."]


def test_kept_paragraphs_are_the_matching_ones_and_the_question() -> None:
    filler = [f"Paragraph {i} talks about weather, rivers, trade routes and old bridges." for i in range(300)]
    filler[150] = "The vault combination is kept by the abbot of Saint Brigid's priory."
    question = "Who keeps the vault combination?"
    text = "\n".join(filler) + "\n\n" + question
    start = len(text) - len(question)
    spans = kept_spans(text, start, 300)
    kept = [text[s:e] for s, e in spans]
    assert filler[150] in kept and kept[-1] == question
    assert len(kept) < len(filler) // 2  # it did compress
