"""The test process's HTTP clients share one TLS context per trust setting (``share``, called by
``tests/conftest.py`` and ``bench/tests/conftest.py``), as httpx advises (pass an
``ssl.SSLContext`` as ``verify`` and reuse it). Left to itself, httpx builds a context for every client
it makes, each ``httpx.get`` or ``httpx.post`` included, and loads certifi's certificates into it: 29 ms
of CPU a client on this machine. The tests make thousands of clients (polling a starting gateway's
health, one request each in the property tests); a py-spy profile of ``make test`` found a sixth of the
run's CPU in ``ssl.create_default_context`` (issue 59).

Only this process, pytest's (every xdist worker loads the conftests): the gateways, proxies and command
lines the tests start run as shipped. Plain HTTP to 127.0.0.1, which is all the tests' own clients
speak, never uses the context; a client given its own ``verify`` or a client certificate (loaded into
the context, so not shared) builds its own as before.
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Callable
from typing import Any

import httpx


@functools.cache
def _shared_context(trust_env: bool, cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    # httpx reads SSL_CERT_FILE and SSL_CERT_DIR when it trusts the environment: a test that sets one
    # gets a context of its own.
    return httpx.create_ssl_context(trust_env=trust_env)


def _sharing(init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(init)
    def __init__(self: Any, *, verify: Any = True, trust_env: bool = True, **options: Any) -> None:
        if verify is True and options.get("cert") is None:
            environment = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
            verify = _shared_context(trust_env, *environment)
        init(self, verify=verify, trust_env=trust_env, **options)

    return __init__


def share() -> None:
    """From now on, in this process; once, however often called."""
    for client in (httpx.Client, httpx.AsyncClient):
        if not hasattr(client.__init__, "__wrapped__"):
            client.__init__ = _sharing(client.__init__)  # type: ignore[method-assign]
