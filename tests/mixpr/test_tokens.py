import concurrent.futures
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mixpr import tokens
from mixpr.tokens import BUNDLED, count_tokens, encoding_for, from_bundled_file

# Any download would go through this dead proxy and fail.
OFFLINE = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}


def _child(code: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")}
    return subprocess.run([sys.executable, "-c", code], env={**base, **OFFLINE, **env}, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_provider_prefix_and_unknown_models():
    assert encoding_for("gpt-4o").name == "o200k_base"
    assert encoding_for("openai/gpt-4o-mini").name == "o200k_base"
    assert encoding_for("gpt-3.5-turbo").name == "cl100k_base"
    assert encoding_for("local").name == "cl100k_base"
    assert encoding_for(None).name == "cl100k_base"


def test_special_token_text_is_counted_as_plain_text():
    assert count_tokens("hello <|endoftext|>") > 2


def test_importing_and_counting_leave_the_hosts_environment_alone():
    """``import mixpr`` used to set ``TIKTOKEN_CACHE_DIR`` for the whole process (every other tiktoken
    user in it then read that folder). The bundled encodings load from their files, offline (as in a
    library-only install: the proxy refuses every download), and the environment is as the host left
    it, before and after counting."""
    code = (
        "import os\n"
        "before = dict(os.environ)\n"
        "import mixpr, mixpr.tokens as t\n"
        "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())\n"
        "print(mixpr.count_tokens('hello world', None), mixpr.count_tokens('hello world', 'gpt-4o'),"
        " t.encoding_for('gpt-4o').name)\n"
        "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())\n"
    )
    done = _child(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "2", "o200k_base"]


def test_a_folder_the_host_chose_is_read_by_tiktoken_and_shared():
    """The gateway points ``TIKTOKEN_CACHE_DIR`` at LiteLLM's copy (LiteLLM does too): tiktoken loads
    the encodings from there, once for the whole process, and MixPR counts with the same objects."""
    spec = importlib.util.find_spec("litellm")
    folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    code = (
        "import tiktoken, mixpr.tokens as t\n"
        "assert t.encoding_for('gpt-4o') is tiktoken.get_encoding('o200k_base')\n"
        "assert t.encoding_for(None) is tiktoken.get_encoding('cl100k_base')\n"
        "print(t.count_tokens('hello world', 'gpt-4o'))\n"
    )
    done = _child(code, TIKTOKEN_CACHE_DIR=str(folder))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2"]


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_the_bundled_files_build_tiktokens_own_encodings(name):
    """Built from the wheel's file, an encoding is what tiktoken's own constructor makes of the same file
    (read through tiktoken's cache, pointed at the wheel's folder in a child process)."""
    ours = from_bundled_file(name)
    sample = "Hello, world! 数字 12345 <|endoftext|> déjà vu\n\n  def f(x): return x ** 2"
    code = (
        "import sys, tiktoken\n"
        f"e = tiktoken.get_encoding({name!r})\n"
        "print(repr((e._pat_str, e._special_tokens, e.n_vocab,"
        f" e.encode({sample!r}, allowed_special='all'))))\n"
    )
    done = _child(code, TIKTOKEN_CACHE_DIR=str(BUNDLED))
    assert done.returncode == 0, done.stderr
    mine = (ours._pat_str, ours._special_tokens, ours.n_vocab, ours.encode(sample, allowed_special="all"))
    assert done.stdout.strip() == repr(mine)


@pytest.fixture
def nothing_loaded(monkeypatch):
    """This process as if it had loaded no encoding yet."""
    monkeypatch.setattr(tokens, "_LOADED", {})
    encoding_for.cache_clear()
    yield
    encoding_for.cache_clear()  # what it holds now is this test's


def test_threads_asking_at_once_share_one_load(nothing_loaded, monkeypatch):
    # A load takes half a second of CPU: a request's count and the warm-up's, asking together, made two.
    loads = []
    load = tokens._load

    def slow_load(name):
        loads.append(name)
        time.sleep(0.2)  # long enough for every thread to ask meanwhile
        return load(name)

    monkeypatch.setattr(tokens, "_load", slow_load)
    assert not tokens.is_loaded("gpt-4o")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        counts = list(pool.map(lambda _: count_tokens("hello world", "gpt-4o"), range(4)))
    assert counts == [2, 2, 2, 2]
    assert loads == ["o200k_base"]
    assert tokens.is_loaded("openai/gpt-4o") and not tokens.is_loaded("an-unknown-model")
