"""``python -m gateway``: a clear one-line failure on a bad config (forked from the tests' zygote), and
a real start-up (a fresh interpreter: it listens before it has imported the gateway, issue 59)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from conftest import closed_port
from processes import run_gateway


def test_bad_config_exits_with_a_clear_message(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("model_list:\n  - model_name: m\n    litellm_params: {}\n")
    code, stderr = run_gateway(["--config", str(config)], dict(os.environ), tmp_path)
    assert code == 2
    assert stderr == (f"mixpr-gateway: {config}: invalid configuration\n"
                      "  model_list.0.litellm_params: Value error, litellm_params.model is required "
                      "(e.g. openai/gpt-4o-mini)\n")


def test_serves_models_on_the_given_port(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("model_list:\n  - model_name: local\n    litellm_params: {model: openai/x}\n"
                      "mixpr_settings: {router: heuristic}\ngeneral_settings: {compression_workers: 1}\n")
    port = closed_port()
    process = subprocess.Popen([sys.executable, "-m", "gateway", "--config", str(config), "--port", str(port),
                                "--log-level", "warning"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240  # imports LiteLLM: minutes on a busy 2-core machine
        while True:
            try:
                # It listens before the gateway is loaded (issue 59): the request waits for it.
                response = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=240)
                break
            except httpx.ConnectError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        assert response.json()["data"][0]["id"] == "local"
        while (ready := httpx.get(f"http://127.0.0.1:{port}/health/readiness")).status_code != 200:
            assert ready.json()["status"] == "starting" and time.monotonic() < deadline
            time.sleep(0.1)
        assert ready.json() == {"status": "ready"}
    finally:
        process.terminate()
        process.wait(60)
        process.stdout.close()


def test_uvicorn_serves_with_uvloop_and_httptools_and_no_access_log() -> None:
    from gateway.__main__ import parse_args, server_options

    options = server_options(parse_args([]))
    assert (options["loop"], options["http"], options["access_log"]) == ("uvloop", "httptools", False)
