import json
import random

import pytest

from mixpr.chunking import MAX_CHARS, MAX_WORDS, chunk_text


def texts_of(text, **kwargs):
    return chunk_text(text, **kwargs).texts()


def assert_exact_cover(text, chunks):
    """Spans are in order, never overlap, and only whitespace lies between them."""
    previous = 0
    for start, end in zip(chunks.starts.tolist(), chunks.ends.tolist(), strict=True):
        assert previous <= start < end
        assert text[previous:start].strip() == ""
        previous = end
    assert text[previous:].strip() == ""


def test_sentences_become_chunks_with_their_trailing_whitespace():
    assert texts_of("It rained. Then it stopped!  Did it? Yes.") == [
        "It rained. ",
        "Then it stopped!  ",
        "Did it? ",
        "Yes.",
    ]


def test_long_sentence_is_split_on_newlines_first():
    line = " ".join(["word"] * 20)
    text = f"{line}\n{line}\n{line}."
    assert texts_of(text) == [f"{line}\n", f"{line}\n", f"{line}."]


def test_long_line_is_split_into_near_equal_word_runs():
    text = " ".join(f"w{i}" for i in range(100))
    chunks = chunk_text(text)
    assert chunks.words.tolist() == [25, 25, 25, 25]
    assert "".join(chunks.texts()) == text


def test_short_sentences_spanning_lines_stay_whole():
    text = "key one\nkey two\nkey three."
    assert texts_of(text) == [text]


def test_hash_hop_style_lines_get_one_chunk_each():
    lines = [f"Abc{i}def = Ghi{i}jkl" for i in range(20)]
    assert texts_of("\n".join(lines)) == [line + "\n" for line in lines[:-1]] + [lines[-1]]


def test_inline_numbered_list_is_not_a_flood_of_tiny_chunks():
    words = [f"item{i % 7}" for i in range(640)]
    text = " ".join(f"{i + 1}. {w}" for i, w in enumerate(words))
    chunks = chunk_text(text)
    assert len(chunks) == 40  # 1280 words in runs of 32, not 640 two-word "sentences"
    assert chunks.words.max() <= MAX_WORDS


def test_ellipsis_does_not_end_a_sentence():
    assert len(texts_of("abcdef ... ... ghijkl ... abcdef ... .... mnopqr")) == 1


def test_number_at_sentence_end_still_splits():
    assert texts_of("The code is 1234567. The sky is blue.") == ["The code is 1234567. ", "The sky is blue."]


def test_empty_and_whitespace_give_no_chunks():
    assert len(chunk_text("")) == 0
    assert len(chunk_text(" \n\t \n ")) == 0


def test_text_without_spaces_is_cut_into_bounded_runs():
    text = "x" * 2000
    chunks = chunk_text(text)
    assert "".join(chunks.texts()) == text
    assert max(len(t) for t in chunks.texts()) <= MAX_CHARS


def test_languages_without_spaces_split_on_their_full_stops():
    assert texts_of("今天天气很好。我们去公园吧！好的？") == ["今天天气很好。", "我们去公园吧！", "好的？"]


def test_boundaries_cut_chunks():
    text = "first message without a full stop second message"
    cut = text.index("second")
    assert texts_of(text, boundaries=[cut]) == [text[:cut], text[cut:]]


@pytest.mark.parametrize(
    "text",
    [
        "def f(x):\n    return x + 1\n\n\nclass A:\n    pass\n" * 30,
        json.dumps({"items": [{"id": i, "name": f"n{i}", "tags": ["a", "b"]} for i in range(200)]}),
        json.dumps({"items": list(range(500))}, indent=2),
        "Съешь же ещё этих мягких французских булок, да выпей чаю. " * 50,
        "no punctuation at all just words " * 300,
        "a\u00a0b\u2003c d\u3000e. " * 40,
        "\n\n\nleading and trailing blank lines\n\n\n",
    ],
)
def test_any_text_is_covered_by_bounded_chunks(text):
    chunks = chunk_text(text)
    assert_exact_cover(text, chunks)
    assert chunks.words.max() <= MAX_WORDS
    assert max(len(t) for t in chunks.texts()) <= MAX_CHARS
    assert chunks.words.tolist() == [len(t.split()) for t in chunks.texts()]


def test_random_texts_are_covered_exactly():
    rng = random.Random(7)
    alphabet = ["word", "x", ".", "!", "?", "\n", "\n\n", " ", "  ", "1.", "...", "é", "。", "\t"]
    for _ in range(200):
        text = "".join(rng.choice(alphabet) + rng.choice(["", " "]) for _ in range(rng.randint(0, 400)))
        chunks = chunk_text(text)
        assert_exact_cover(text, chunks)
        assert all(len(t) <= MAX_CHARS for t in chunks.texts())


def test_opens_marks_sentence_and_line_starts_not_cuts_for_length():
    long = "Start " + " ".join(["word"] * 50) + " clause."
    chunks = chunk_text("Short one. " + long + " Next one.\nA line " + " ".join(["x"] * 40))
    # The 52-word sentence is cut in two for length, so does the 42-word line; a line opens.
    assert chunks.opens.tolist() == [True, True, False, True, True, False]


def test_levels_mark_sentences_lines_turns_and_blocks():
    from mixpr.chunking import BLOCK, LINE, SENTENCE, TURN

    text = "DATE: 8 May\nCaroline: Hi there. How are you?\nOk then.\n\nMelanie: Fine."
    chunks = chunk_text(text)
    assert [text[s:e].strip() for s, e in zip(chunks.starts, chunks.ends, strict=True)] == [
        "DATE: 8 May\nCaroline: Hi there.",
        "How are you?",
        "Ok then.",
        "Melanie: Fine.",
    ]
    assert chunks.levels.tolist() == [BLOCK, SENTENCE, LINE, BLOCK]
    at = text.index("Caroline")
    assert chunk_text(text, boundaries=[at]).levels.tolist()[:2] == [BLOCK, BLOCK]
    assert chunk_text("Intro.\nBob: hi.").levels.tolist() == [BLOCK, TURN]
