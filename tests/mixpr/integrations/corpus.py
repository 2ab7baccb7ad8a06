"""Retrieved documents for the integrations' tests: filler, one of them holding the answer."""

from tests.mixpr.filler import haystack

FACT = "The vault code is 4417, and only the night porter knows it."
QUERY = "What is the vault code that the night porter knows?"
HOLDER = 5


def texts(count: int = 8, sentences: int = 150) -> list[str]:
    return [haystack(sentences, {sentences // 2: FACT} if i == HOLDER else {}, seed=i) for i in range(count)]
