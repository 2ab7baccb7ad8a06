"""Who can reach the gateway (``gateway.edge.exposure``): no open proxy, no DNS rebinding.

Start-up is tested with real ``python -m gateway`` processes (forked from the tests' zygote,
``tests/zygote.py``); they refuse before binding, so no
test listens beyond 127.0.0.1. The Host check is tested over real HTTP on the shared gateway,
which listens on 127.0.0.1.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest
from conftest import MASTER_KEY, closed_port
from processes import run_gateway

from gateway.config import ConfigError, parse_config
from gateway.edge.exposure import check_bind

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
CONFIG = ("model_list:\n  - model_name: local\n    litellm_params: {model: openai/x}\n"
          "mixpr_settings: {router: heuristic}\n"
          "general_settings: {compression_workers: 1, master_key: os.environ/MIXPR_MASTER_KEY}\n")


def _start(tmp_path: Path, host: str, key: str | None) -> tuple[subprocess.CompletedProcess, int]:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if k != "MIXPR_MASTER_KEY"}
    if key is not None:
        env["MIXPR_MASTER_KEY"] = key
    port = closed_port()
    argv = ["--config", str(config), "--host", host, "--port", str(port)]
    code, stderr = run_gateway(argv, env, tmp_path)
    return subprocess.CompletedProcess(argv, code, "", stderr), port


@pytest.mark.parametrize("key", [None, ""])
def test_a_public_address_without_a_key_is_refused_at_start(tmp_path: Path, key: str | None) -> None:
    done, port = _start(tmp_path, "0.0.0.0", key)
    assert done.returncode == 2
    assert "allow_unauthenticated" in done.stderr if key is None else "master_key" in done.stderr
    with pytest.raises(httpx.ConnectError):  # it never listened
        httpx.get(f"http://127.0.0.1:{port}/health/liveliness")


def test_an_empty_key_is_a_config_error_even_on_loopback(tmp_path: Path) -> None:
    done, _ = _start(tmp_path, "127.0.0.1", "")
    assert done.returncode == 2
    assert "general_settings.master_key: Value error, is empty" in done.stderr


def _config(**general: object) -> object:
    return parse_config({"model_list": [{"model_name": "m", "litellm_params": {"model": "openai/x"}}],
                         "general_settings": general})


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1", "gateway.example"])
def test_a_public_address_needs_a_key_or_the_explicit_opt_in(host: str) -> None:
    with pytest.raises(ConfigError, match="allow_unauthenticated: true"):
        check_bind(_config(), host)
    check_bind(_config(master_key="k"), host)
    check_bind(_config(allow_unauthenticated=True), host)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_loopback_needs_no_key(host: str) -> None:
    check_bind(_config(), host)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]", "LOCALHOST"])
@pytest.mark.parametrize("with_port", [True, False])
def test_loopback_host_names_are_served(gateway_url: str, host: str, with_port: bool) -> None:
    port = gateway_url.rsplit(":", 1)[1]
    name = f"{host}:{port}" if with_port else host
    response = httpx.get(gateway_url + "/v1/models", headers={**AUTH, "Host": name})
    assert response.status_code == 200


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:4000", "127.0.0.1.attacker.example",
                                  "localhost.attacker.example", "10.0.0.1"])
@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/models"), ("POST", "/v1/chat/completions"),
                                              ("POST", "/v1/messages"), ("GET", "/metrics")])
def test_other_host_names_are_refused_on_a_loopback_gateway(gateway_url: str, host: str, method: str,
                                                            path: str) -> None:
    # DNS rebinding: the attacker's name resolves to 127.0.0.1, and the browser sends it as Host.
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    response = httpx.request(method, gateway_url + path, headers={**AUTH, "Host": host},
                             json=body if method == "POST" else None)
    assert response.status_code == 421
    if path == "/v1/messages":
        assert response.json()["error"]["type"] == "invalid_request_error"
    else:
        assert response.json()["error"]["code"] == "invalid_host"
