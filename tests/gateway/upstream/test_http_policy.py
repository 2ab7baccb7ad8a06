"""How upstreams are reached (``gateway.upstream.http.Policy``), with real processes and sockets:
gateways started as ``python -m gateway`` with ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` and
``SSL_CERT_FILE`` in their environment, a recording forward proxy, and upstreams on TLS with a
certificate from a private CA made here.

- the proxy sees the relayed calls and LiteLLM's alike (CONNECT for https, absolute URLs for http);
  a host ``NO_PROXY`` names is reached directly, on both paths;
- the private-CA upstream answers the same with ``raw_relay`` on and off;
- an upstream 401 with OpenAI's real body (which quotes part of the key) is a 502
  ``upstream_auth_failed`` with no ``sk-`` in the client's answer or in the gateway's log.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from answering_upstream import stop_serving
from conftest import MASTER_KEY, closed_port
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fake_upstream import REPLY_TEXT, FakeUpstream

from tests.zygote import gateway_process

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
HELLO = [{"role": "user", "content": "hello"}]
LITELLM = {"temperature": 0.5}  # a setting in litellm_params: the deployment keeps LiteLLM's path


# -- a private CA ---------------------------------------------------------------------------------


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificate(subject: str, issuer: str, key: Any, signer: Any, *, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(signer, hashes.SHA256())


@pytest.fixture(scope="module")
def private_ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ssl.SSLContext]:
    """The CA's certificate file (for ``SSL_CERT_FILE``) and a server context signed by it."""
    folder = tmp_path_factory.mktemp("ca")
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_cert = _certificate("MixPR test CA", "MixPR test CA", ca_key, ca_key, ca=True)
    server_cert = _certificate("127.0.0.1", "MixPR test CA", server_key, ca_key, ca=False)
    (folder / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    (folder / "server.pem").write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    (folder / "server.key").write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(folder / "server.pem", folder / "server.key")
    return folder / "ca.pem", context


# -- a recording forward proxy --------------------------------------------------------------------


class ForwardProxy:
    """An HTTP forward proxy on 127.0.0.1: ``CONNECT host:port`` tunnels, absolute-URL requests
    forwarded; every target is recorded (``seen``) before any byte goes on."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def stop(self) -> None:
        stop_serving(self.server, self.loop)  # its tunnels ended first

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
            if method == "CONNECT":
                self.seen.append(f"CONNECT {target}")
                host, port = target.rsplit(":", 1)
                upstream = await asyncio.open_connection(host, int(port))
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                self.seen.append(f"{method} {target}")
                authority = target.split("://", 1)[1].split("/", 1)[0]
                host, port = authority.rsplit(":", 1)
                upstream = await asyncio.open_connection(host, int(port))
                upstream[1].write(head)  # origin servers accept the absolute form (RFC 9112 3.2.2)
            await asyncio.gather(_pipe(reader, upstream[1]), _pipe(upstream[0], writer))
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    def targets(self) -> set[str]:
        return {entry.split(" ", 1)[1].split("://")[-1].split("/")[0] for entry in self.seen}


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


# -- the gateways -----------------------------------------------------------------------------------


class Upstreams:
    """Five recording upstreams: TLS ones for the relay and LiteLLM, plain ones for each, and one
    plain one reached as ``localhost`` (which ``NO_PROXY`` names)."""

    def __init__(self, tls: ssl.SSLContext) -> None:
        self.all = {
            name: FakeUpstream(tls=tls if name.startswith("tls") else None).start()
            for name in ("tls", "tls-litellm", "plain", "plain-litellm", "direct")
        }

    def base(self, name: str) -> str:
        base = self.all[name].base_url
        return base.replace("127.0.0.1", "localhost") if name == "direct" else base

    def authority(self, name: str) -> str:
        return f"127.0.0.1:{self.all[name].port}"


def _config(upstreams: Upstreams, *, raw_relay: bool) -> dict[str, Any]:
    def entry(name: str, upstream: str, mode: str, **params: Any) -> dict[str, Any]:
        return {
            "model_name": name,
            "litellm_params": {
                "model": f"openai/{mode}",
                "api_base": upstreams.base(upstream),
                "api_key": "sk-upstream-secret",
                **params,
            },
        }

    models = [
        entry(name, name, "echo", **(LITELLM if name.endswith("litellm") else {})) for name in upstreams.all
    ]
    models += [
        entry("direct-litellm", "direct", "echo", **LITELLM),
        entry("bad-key", "plain", "mode-openai-401"),
        entry("bad-key-litellm", "plain-litellm", "mode-openai-401", **LITELLM),
    ]
    return {
        "model_list": models,
        "mixpr_settings": {"router": "heuristic"},
        "general_settings": {
            "master_key": MASTER_KEY,
            "compression_workers": 1,
            "compression_executor": "thread",
            "raw_relay": raw_relay,
        },
    }


class GatewayProcess:
    def __init__(self, config: dict[str, Any], folder: Path, env: dict[str, str]) -> None:
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        self.port = closed_port()
        self.log = folder / "gateway.log"
        argv = ["--config", str(folder / "config.yaml"), "--port", str(self.port), "--log-level", "info"]
        self.process = gateway_process(argv, {**os.environ, **env}, self.log)
        self.url = f"http://127.0.0.1:{self.port}"

    def wait(self) -> GatewayProcess:
        deadline = time.monotonic() + 180
        while True:
            try:
                # Readiness: it listens before it has loaded (issue 59); these tests time nothing.
                if httpx.get(self.url + "/health/readiness", trust_env=False).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.2)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(20)

    def post(self, model: str, **extra: Any) -> httpx.Response:
        return httpx.post(
            self.url + "/v1/chat/completions",
            json={"model": model, "messages": HELLO, **extra},
            headers=AUTH,
            timeout=60,
            trust_env=False,
        )


@pytest.fixture(scope="module")
def setup(
    private_ca: tuple[Path, ssl.SSLContext], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Upstreams, ForwardProxy, dict[bool, GatewayProcess]]]:
    ca_file, server_context = private_ca
    upstreams, proxy = Upstreams(server_context), ForwardProxy()
    env = {
        "HTTPS_PROXY": proxy.url,
        "HTTP_PROXY": proxy.url,
        "NO_PROXY": "localhost",
        "SSL_CERT_FILE": str(ca_file),
    }
    gateways = {
        flag: GatewayProcess(
            _config(upstreams, raw_relay=flag), tmp_path_factory.mktemp(f"relay-{flag}"), env
        )
        for flag in (True, False)
    }
    try:
        yield upstreams, proxy, {flag: gateway.wait() for flag, gateway in gateways.items()}
    finally:
        for gateway in gateways.values():
            gateway.stop()
        proxy.stop()
        for upstream in upstreams.all.values():
            upstream.stop()


def _via(gateway: GatewayProcess, model: str) -> str:
    line = next(
        line
        for line in httpx.get(gateway.url + "/metrics", trust_env=False).text.splitlines()
        if line.startswith(f'mixpr_upstream_calls_total{{model="{model}"')
    )
    return line.split('via="')[1].split('"')[0]


@pytest.mark.parametrize("stream", [False, True])
def test_the_proxy_sees_relayed_and_litellm_calls_alike(setup: Any, stream: bool) -> None:
    upstreams, proxy, gateways = setup
    relaying = gateways[True]
    for model in ("tls", "tls-litellm", "plain", "plain-litellm"):
        response = relaying.post(model, stream=stream)
        assert response.status_code == 200, response.text
        assert REPLY_TEXT.split(" ")[0] in response.text
    assert (_via(relaying, "tls"), _via(relaying, "tls-litellm")) == ("relay", "litellm")
    seen = proxy.targets()
    for name in ("tls", "tls-litellm", "plain", "plain-litellm"):
        assert upstreams.authority(name) in seen, (name, proxy.seen)
    assert any(entry.startswith(f"CONNECT {upstreams.authority('tls')}") for entry in proxy.seen)


def test_no_proxy_is_honoured_on_both_paths(setup: Any) -> None:
    upstreams, proxy, gateways = setup
    for model in ("direct", "direct-litellm"):
        response = gateways[True].post(model)
        assert response.status_code == 200, response.text
    assert (_via(gateways[True], "direct"), _via(gateways[True], "direct-litellm")) == ("relay", "litellm")
    assert len(upstreams.all["direct"].received("echo")) >= 2
    assert not any(f":{upstreams.all['direct'].port}" in entry for entry in proxy.seen)


def test_a_private_ca_upstream_is_the_same_with_raw_relay_on_and_off(setup: Any) -> None:
    _, _, gateways = setup
    answers = []
    for flag in (True, False):
        response = gateways[flag].post("tls")
        assert response.status_code == 200, response.text
        answer = response.json()
        answers.append(
            (answer["model"], answer["choices"][0]["message"]["content"], _via(gateways[flag], "tls"))
        )
    assert [a[:2] for a in answers] == [("tls", REPLY_TEXT)] * 2
    assert [a[2] for a in answers] == ["relay", "litellm"]


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_401_quoting_the_key_is_a_502_without_it(setup: Any, stream: bool) -> None:
    _, _, gateways = setup
    for gateway in gateways.values():
        for model in ("bad-key", "bad-key-litellm"):
            response = gateway.post(model, stream=stream)
            assert response.status_code == 502, response.text
            assert response.json()["error"]["code"] == "upstream_auth_failed"
            assert response.headers["x-mixpr-upstream-status"] == "401"
            assert "sk-" not in response.text and "wxyz" not in response.text
            assert "sk-" not in str(response.headers)
        time.sleep(0.2)  # the log line is written
        assert "sk-" not in gateway.log.read_text()
        assert "upstream refused the gateway's credentials (status 401)" in gateway.log.read_text()


def test_a_legacy_completion_reaches_a_private_ca_upstream(setup: Any) -> None:
    # /v1/completions goes out through an OpenAI client made for the call (gateway.upstream.forward),
    # with LiteLLM's TLS setting, as the relays: SSL_CERT_FILE names the CA that signed the upstream.
    upstreams, _, gateways = setup
    upstreams.all["tls"].clear()
    for flag in (True, False):
        legacy = {"model": "tls", "prompt": "Once upon a time", "max_tokens": 7}
        response = httpx.post(gateways[flag].url + "/v1/completions", json=legacy, headers=AUTH, timeout=60,
                              trust_env=False)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["text"]
    assert len(upstreams.all["tls"].received("echo")) == 2
