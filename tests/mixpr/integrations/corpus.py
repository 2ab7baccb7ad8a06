"""Retrieved documents for the integrations' tests: filler, one of them holding the answer."""

import random

from tests.mixpr.filler import haystack

FACT = "The vault code is 4417, and only the night porter knows it."
QUERY = "What is the vault code that the night porter knows?"
HOLDER = 5


def texts(count: int = 8, sentences: int = 150) -> list[str]:
    return [haystack(sentences, {sentences // 2: FACT} if i == HOLDER else {}, seed=i) for i in range(count)]


def dense(count: int = 900, seed: int = 3) -> str:
    """A retrieved text with no spaces and about a token a character: CJK."""
    rng = random.Random(seed)
    return "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(count))


# Short queries (under three words) pin the last retrieved text's last chunk beside the query.
SHORT_QUERIES = ("value 7", "门", "x")
SMALL_BUDGETS = range(20, 201, 15)
