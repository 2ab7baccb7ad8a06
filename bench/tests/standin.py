"""A stand-in for ``../shared/data`` built from what every Python has, for the self-checks only.

The task generators read public-domain novels (haystack/books) and bAbI stories (babi/). A clone
without ``../shared`` beside it has neither, so the tests build the same layout in a temporary folder:

- the "books" are the Python language reference that ships with CPython (``pydoc_data.topics``:
  79 topics, ~465k characters in 3.11), in four files;
- the bAbI files are stories written here in bAbI's own line format (``id sentence`` and
  ``id question<TAB>answer<TAB>supporting ids``), one small set per task qa1..qa5.

The figures in bench/README.md come from the real data only: the benches themselves never fall back.
"""

from __future__ import annotations

import random
from pathlib import Path
from pydoc_data.topics import topics

from bench.data import BABI_FILES

PEOPLE = ("Mary", "John", "Daniel", "Sandra", "Bill", "Fred", "Jeff", "Julie")
PLACES = ("bathroom", "hallway", "garden", "office", "kitchen", "bedroom")
OBJECTS = ("football", "apple", "milk")
DIRECTIONS = ("north", "south", "east", "west")
STORIES = 200


def build(root: Path) -> Path:
    """Write the stand-in data dir under ``root`` and return it (what ``MIXPR_DATA_DIR`` points to)."""
    books = root / "haystack" / "books"
    books.mkdir(parents=True)
    names = sorted(topics)
    for part in range(4):
        text = "\n\n".join(topics[name] for name in names[part::4])
        (books / f"python_reference_{part}.txt").write_text(text, encoding="utf-8")
    for task, relative in BABI_FILES.items():
        path = root / "babi" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        rng = random.Random(task)
        path.write_text("".join(STORY[task](rng) for _ in range(STORIES)), encoding="utf-8")
    return root


def _lines(entries: list[str]) -> str:
    return "".join(f"{i} {entry}\n" for i, entry in enumerate(entries, 1))


def _moves(rng: random.Random, supporting: int) -> str:
    """qa1..qa3: people move about; one carries an object. The question's answer needs the pickup and
    the carrier's last moves (qa2: where is it; qa3: where was it before its last place)."""
    entries: list[str] = []
    where: dict[str, int] = {}
    for _ in range(rng.randint(2, 6)):
        person = rng.choice(PEOPLE)
        entries.append(f"{person} went to the {rng.choice(PLACES)}.")
        where[person] = len(entries)
    carrier, thing = rng.choice(PEOPLE), rng.choice(OBJECTS)
    entries.append(f"{carrier} picked up the {thing} there.")
    pickup = len(entries)
    trail: list[tuple[int, str]] = []
    for _ in range(max(supporting - 1, 1)):
        place = rng.choice([p for p in PLACES if not trail or p != trail[-1][1]])
        entries.append(f"{carrier} travelled to the {place}.")
        trail.append((len(entries), place))
    if supporting == 1:
        question, answer, ids = f"Where is {carrier}?", trail[-1][1], [trail[-1][0]]
    elif supporting == 2:
        question, answer, ids = f"Where is the {thing}?", trail[-1][1], [pickup, trail[-1][0]]
    else:
        question = f"Where was the {thing} before the {trail[-1][1]}?"
        answer, ids = trail[-2][1], [pickup, trail[-2][0], trail[-1][0]]
    return _lines(entries) + f"{len(entries) + 1} {question}\t{answer}\t{' '.join(map(str, ids))}\n"


def _relations(rng: random.Random) -> str:
    """qa4: two places and a direction."""
    a, b = rng.sample(PLACES, 2)
    direction = rng.choice(DIRECTIONS)
    return _lines([f"The {a} is {direction} of the {b}."]) + f"2 What is {direction} of the {b}?\t{a}\t1\n"


def _giving(rng: random.Random) -> str:
    """qa5: objects handed from one person to another."""
    entries = []
    for _ in range(rng.randint(1, 4)):
        giver, taker = rng.sample(PEOPLE, 2)
        entries.append(f"{giver} gave the {rng.choice(OBJECTS)} to {taker}.")
    thing = entries[-1].split(" the ")[1].split(" to ")[0]
    taker = entries[-1].rsplit(" to ", 1)[1].rstrip(".")
    return _lines(entries) + f"{len(entries) + 1} Who received the {thing}?\t{taker}\t{len(entries)}\n"


STORY = {
    "qa1": lambda rng: _moves(rng, 1),
    "qa2": lambda rng: _moves(rng, 2),
    "qa3": lambda rng: _moves(rng, 3),
    "qa4": _relations,
    "qa5": _giving,
}
