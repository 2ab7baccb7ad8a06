import os
import subprocess
import sys

from mixpr.tokens import count_tokens, encoding_for


def test_encodings_load_offline_from_litellm():
    assert "litellm" in os.environ["TIKTOKEN_CACHE_DIR"]
    assert encoding_for("gpt-4o").name == "o200k_base"


def test_provider_prefix_and_unknown_models():
    assert encoding_for("openai/gpt-4o-mini").name == "o200k_base"
    assert encoding_for("gpt-3.5-turbo").name == "cl100k_base"
    assert encoding_for("local").name == "cl100k_base"
    assert encoding_for(None).name == "cl100k_base"


def test_special_token_text_is_counted_as_plain_text():
    assert count_tokens("hello <|endoftext|>") > 2


def test_without_litellm_the_library_counts_offline_from_its_own_files():
    """A library-only install (no LiteLLM): the bundled cl100k_base and o200k_base load with no network
    (the proxy below refuses every download), and tiktoken checks their hashes as it loads them."""
    code = (
        "import sys; sys.modules['litellm'] = None\n"
        "import os, mixpr.tokens as t\n"
        "assert os.environ['TIKTOKEN_CACHE_DIR'] == str(t.BUNDLED), os.environ['TIKTOKEN_CACHE_DIR']\n"
        "print(t.count_tokens('hello world', None), t.count_tokens('hello world', 'gpt-4o'),"
        " t.encoding_for('gpt-4o').name)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")}
    env.update(HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9", NO_PROXY="")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "2", "o200k_base"]
