"""Without ``../shared/data`` (any clone but the workplace's), the self-checks run on a stand-in built
from the Python standard library (bench/tests/standin.py) instead of skipping."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench import data
from bench.tasks import babilong
from bench.tests import standin
from tests import tls

tls.share()  # the process's HTTP clients share their TLS context, as under tests/


def _clear_caches() -> None:
    for loader in (data.books, data.corpus_words, data.book_vocabulary, babilong.load_babi):
        loader.cache_clear()


@pytest.fixture(scope="session", autouse=True)
def benchmark_data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """"shared" when the real data is there, else "stand-in" (MIXPR_DATA_DIR points to it meanwhile)."""
    if (data.data_dir() / "haystack" / "books").is_dir():
        yield "shared"
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MIXPR_DATA_DIR", str(standin.build(tmp_path_factory.mktemp("standin-data"))))
        _clear_caches()
        yield "stand-in"
    _clear_caches()
