"""The 15-file task of issue 28, as a user would set it for an agent CLI.

"Read the files f0.txt to f14.txt in this folder, one file per step, in order. Then tell me the
codeword written in f3.txt": each file about 1,000 tokens of real book text (the public-domain
novels under ``../shared/data/haystack/books``, or, where the shared data is absent, the Python
language reference every CPython ships in ``pydoc_data``) with one codeword line in its middle.
Every file has a codeword, so what survives a reset shows whether it kept what the task names.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from pydoc_data.topics import topics

FILES = 15
ASKED = 3  # the file whose codeword the task asks for
TASK = (f"Read the files f0.txt to f{FILES - 1}.txt in this folder, one file per step, in order. "
        f"Then tell me the codeword written in f{ASKED}.txt")
FILE_CHARS = 4300  # about 1,000 tokens of English prose
# Distinct words, none of them a word the books use in this shape: CODE-<file>-<word>, which the
# scripted upstreams' final answers list (``fake_anthropic.CODE``, ``fake_chat_agent.CODE``).
WORDS = ("amberfalcon", "quillmoth", "saltkestrel", "ironheron", "velvetorca", "cinderlynx", "mossviper",
         "glassotter", "emberwren", "frostibis", "copperyak", "duskmarten", "opalcrane", "tidalnewt",
         "rustgecko")
BOOKS = Path(__file__).resolve().parents[3] / "shared" / "data" / "haystack" / "books"


def codeword(n: int) -> str:
    return f"CODE-{n}-{WORDS[n]}"


def write(folder: Path) -> list[str]:
    """``f0.txt`` .. ``f14.txt`` in ``folder``; their paths, in order."""
    text = _source()
    paths = []
    for n in range(FILES):
        start = (n * 7919 * FILE_CHARS) % (len(text) - 2 * FILE_CHARS)
        paragraphs = _paragraphs(text[start:start + FILE_CHARS])
        paragraphs.insert(len(paragraphs) * 2 // 5, f"The codeword is {codeword(n)}.")
        path = folder / f"f{n}.txt"
        path.write_text("\n\n".join(paragraphs) + "\n")
        paths.append(str(path))
    return paths


def _source() -> str:
    """The books (without their Project Gutenberg front and back matter), else the Python reference."""
    folder = Path(os.environ.get("MIXPR_DATA_DIR", BOOKS.parents[1])) / "haystack" / "books"
    books = sorted(folder.glob("*.txt"))
    if books:
        return "\n\n".join(_body(p.read_text(encoding="utf-8")) for p in books)
    return "\n\n".join(topics[name] for name in sorted(topics))


def _body(book: str) -> str:
    """A Gutenberg book between its START and END markers (the licence is not a story)."""
    start, end = book.find("*** START OF"), book.find("*** END OF")
    body = book[book.find("\n", start) + 1 if start >= 0 else 0:end if end >= 0 else None]
    return body[len(body) // 10:]  # past the contents page and preface


def _paragraphs(window: str) -> list[str]:
    """Whole lines of ``window`` (its cut first and last lines dropped), grouped in paragraphs."""
    lines = window.splitlines()[1:-1]
    paragraphs = re.split(r"\n\s*\n", "\n".join(lines))
    return [p.strip() for p in paragraphs if p.strip()]
