"""Where the shared benchmark data lives, and cached loaders for it.

CI clones the repo with ``../shared`` beside it, so the default data dir is ``<repo>/../shared/data``;
``MIXPR_DATA_DIR`` overrides it. Without it the benches stop (their figures are the real data's); only
the self-checks in bench/tests run on a stand-in from the standard library (bench/tests/standin.py).
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

BABI_FILES = {
    # BABILong reads en-10k train; our snapshot lacks its qa3 train file, so qa3 uses en/ (1k).
    "qa1": "en-10k/qa1_single-supporting-fact_train.txt",
    "qa2": "en-10k/qa2_two-supporting-facts_train.txt",
    "qa3": "en/qa3_three-supporting-facts_train.txt",
    "qa4": "en-10k/qa4_two-arg-relations_train.txt",
    "qa5": "en-10k/qa5_three-arg-relations_train.txt",
}


def data_dir() -> Path:
    env = os.environ.get("MIXPR_DATA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


@cache
def books() -> tuple[str, ...]:
    """The public-domain novels, sorted by file name (fixed order keeps generators deterministic)."""
    paths = sorted((data_dir() / "haystack" / "books").glob("*.txt"))
    if not paths:
        raise FileNotFoundError(f"no books under {data_dir() / 'haystack' / 'books'}; set MIXPR_DATA_DIR")
    return tuple(p.read_text(encoding="utf-8") for p in paths)


@cache
def corpus_words() -> tuple[str, ...]:
    """All books as one whitespace-collapsed word sequence (the RULER 'essay' haystack source)."""
    return tuple(" ".join(books()).split())


@cache
def book_vocabulary() -> tuple[str, ...]:
    """Distinct plain lowercase words from the books, sorted: the pool for the common-words task."""
    found = set(re.findall(r"\b[a-z]{3,12}\b", " ".join(books())))
    return tuple(sorted(found))


def babi_path(task: str) -> Path:
    return data_dir() / "babi" / BABI_FILES[task]
