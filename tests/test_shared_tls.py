"""The test process's HTTP clients share their TLS context (``tests/tls.py``): httpx
built one for each client, 29 ms of CPU apiece, a sixth of ``make test``'s CPU (issue 59)."""

from __future__ import annotations

import ssl
from typing import Any

import certifi
import httpx
import pytest


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every TLS context built meanwhile (httpx builds them with ``ssl.create_default_context``)."""
    contexts: list[Any] = []
    create = ssl.create_default_context

    def recording(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        contexts.append(kwargs.get("cafile") or kwargs.get("capath"))
        return create(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", recording)
    return contexts


def test_the_clients_of_the_tests_build_one_tls_context_between_them(built: list[Any]) -> None:
    for _ in range(3):
        httpx.Client().close()
    httpx.AsyncClient()
    assert len(built) <= 1  # the first, unless an earlier test built it


def test_a_client_with_its_own_trust_settings_keeps_them(built: list[Any],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())  # a test's own CA file, as test_http_policy's
    httpx.Client().close()
    assert built == [certifi.where()]
    with httpx.Client(verify=False) as unverified:
        assert unverified._transport._pool._ssl_context.verify_mode == ssl.CERT_NONE
