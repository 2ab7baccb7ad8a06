"""Who can reach the gateway: no open proxy on a public address, no DNS rebinding on loopback.

Bound to a non-loopback address without a master key, anyone who reaches the port spends the
operator's provider keys, so start-up refuses unless the config opts in explicitly
(``general_settings.allow_unauthenticated``: something in front authenticates). Bound to loopback
without a key, a web page the user visits can still reach the gateway through the browser:
cross-site JSON needs a CORS preflight (which the gateway never grants; the body reader takes only
``application/json``), and a Host check stops DNS rebinding, where the page's own name is made to
resolve to 127.0.0.1 so that the browser lets it read the answers.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable, MutableMapping
from typing import Any

from gateway.config import ConfigError, GatewayConfig
from gateway.errors import MisdirectedRequest


@functools.lru_cache(maxsize=1024)  # asked for every request's Host; the same few names
def is_loopback(host: str) -> bool:
    """``localhost``, 127.0.0.0/8 or ::1 (brackets allowed); anything else, names included, is not."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(config: GatewayConfig, host: str) -> None:
    """Refuse to serve on a non-loopback ``host`` without a master key, unless opted in."""
    general = config.general_settings
    if is_loopback(host) or general.master_key or general.allow_unauthenticated:
        return
    raise ConfigError(
        f"refusing to listen on {host} without general_settings.master_key: anyone who can reach it "
        f"could use the configured models with your provider keys. Set a master key (e.g. "
        f"MIXPR_MASTER_KEY), listen on 127.0.0.1, or, if something in front of the gateway "
        f"authenticates clients, set general_settings.allow_unauthenticated: true."
    )


def host_name(header: str) -> str:
    """The name in a Host header, without its port: ``[::1]:4000`` -> ``::1``."""
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def refused_host(header: str | None, allowed: list[str]) -> MisdirectedRequest | None:
    """Why a loopback-bound gateway refuses this Host header, or None: only loopback (or
    ``allowed``) names are served."""
    if header is None:  # HTTP/1.0 without Host: not a browser
        return None
    name = host_name(header).lower()
    if is_loopback(name) or name in allowed:
        return None
    return MisdirectedRequest(
        f"This gateway listens on loopback and answers only to localhost, 127.0.0.1 or [::1], not "
        f"{name[:100]!r} (a proxy in front can keep its upstream's Host, or add the name to "
        f"general_settings.allowed_hosts)."
    )


class HostCheck:
    """``refused_host`` before every request of a loopback-bound gateway (pure ASGI: as a FastAPI
    dependency on every route it cost a dependency solve per request, issue 23)."""

    def __init__(self, app: Any, allowed: list[str],
                 respond: Callable[[str, MisdirectedRequest], Any]) -> None:
        self.app = app
        self.allowed = allowed
        self.respond = respond

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            header = next((v for k, v in scope["headers"] if k == b"host"), None)
            refused = refused_host(header.decode("latin-1") if header is not None else None, self.allowed)
            if refused is not None:
                await self.respond(scope["path"], refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)
