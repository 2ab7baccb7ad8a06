"""Run by `make package` with a clean venv's Python, where only the wheel (no extra) is installed:
the library works (from Python and as `python -m mixpr`), counts tokens with no network, and
neither the gateway's packages nor the integrations' are there."""

import importlib
import importlib.util
import os
import subprocess
import sys
import tempfile

# Any download would go through this dead proxy and fail: counting must use the wheel's own files.
os.environ.update(HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")

for absent in ("fastapi", "litellm", "uvicorn", "langchain_core", "llama_index"):
    assert importlib.util.find_spec(absent) is None, f"{absent} is installed without its extra"

import mixpr  # noqa: E402
import mixpr.tokens  # noqa: E402

# The wheel's own encodings, built from its files: the library leaves the host's environment alone.
assert "TIKTOKEN_CACHE_DIR" not in os.environ, os.environ["TIKTOKEN_CACHE_DIR"]
assert (mixpr.tokens.BUNDLED / "fb374d419588a4632f3f557e76b4b70aebbca790").is_file()
FACT = "The vault code is 4417, and only the night porter knows it."
COLOURS = ["red", "blue", "green"]
filler = " ".join(f"Room {i} of the old hotel has a {COLOURS[i % 3]} door." for i in range(3000))
text = filler[: len(filler) // 2] + " " + FACT + " " + filler[len(filler) // 2 :]

result = mixpr.compress(text, budget_tokens=300, query="What is the vault code?")
assert FACT in result.text, result.text
assert result.stats["kept_tokens"] <= 300 < result.stats["original_tokens"], result.stats
assert mixpr.count_tokens("hello world", "gpt-4o") == 2
assert "TIKTOKEN_CACHE_DIR" not in os.environ

with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as out:
    out.write(text)
done = subprocess.run([sys.executable, "-m", "mixpr", "compress", "--budget-tokens", "200", "--query",
                       "What is the vault code?", out.name], capture_output=True, text=True, timeout=120)
os.unlink(out.name)
assert done.returncode == 0 and FACT in done.stdout, done.stderr

for needs_extra in ("gateway", "mixpr.integrations.langchain", "mixpr.integrations.llama_index"):
    try:
        importlib.import_module(needs_extra)
    except ImportError as exc:
        assert "pip install 'mixpr-gateway[" in str(exc), exc
    else:
        raise AssertionError(f"{needs_extra} imported without its extra")
print(f"package smoke: ok ({result.stats['original_tokens']} -> {result.stats['kept_tokens']} tokens)")
