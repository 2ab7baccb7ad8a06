"""Book-like filler with a needle, built in the tests (no data files needed)."""

from __future__ import annotations

import random

SENTENCES = [
    "The old mill stood at the bend of the river, its wheel turning slowly in the brown water.",
    "Margaret walked along the hedgerow each morning, counting the sparrows that scattered before her.",
    "In the village the baker rose before dawn, and the smell of bread drifted over the square.",
    "Rain had fallen for three days, and the lanes were deep with mud and fallen leaves.",
    "The schoolmaster kept a ledger of every child who had ever sat in his narrow classroom.",
    "Beyond the church the hills rolled away toward the sea, grey-green under a heavy sky.",
    "Her brother wrote letters from the city, full of theatres, omnibuses and crowded streets.",
    "At the inn the travellers argued about the price of wool and the state of the roads.",
    "The vicar's garden was famous for its roses, though he claimed no skill in growing them.",
    "When the harvest came the whole parish worked in the fields until the light was gone.",
    "A carriage passed the gate at noon, its wheels throwing up a fine white dust.",
    "She read by candlelight long after the house had gone quiet and the fire had burned low.",
]
NEEDLE = "The secret code for opening the lighthouse vault is amber-falcon-427."
QUESTION = "What is the secret code for opening the lighthouse vault? Answer with the code only."


def filler(n_sentences: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(SENTENCES) for _ in range(n_sentences))


def haystack(n_sentences: int, needle: str = NEEDLE, seed: int = 0, depth: float = 0.4) -> str:
    """Filler paragraphs with ``needle`` placed at ``depth`` (0 = start, 1 = end)."""
    rng = random.Random(seed)
    paragraphs = [" ".join(rng.choice(SENTENCES) for _ in range(6)) for _ in range(n_sentences // 6)]
    paragraphs.insert(int(len(paragraphs) * depth), needle)
    return "\n\n".join(paragraphs)
