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

import ipaddress

from starlette.requests import Request  # FastAPI resolves the dependency's parameter by this type

from gateway.config import ConfigError, GatewayConfig
from gateway.errors import MisdirectedRequest


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


async def check_host(request: Request) -> None:
    """Every route's first step: on a loopback-bound gateway, only loopback (or allowed) Host names."""
    gateway = request.app.state.gateway
    header = request.headers.get("host")
    if not gateway.loopback_only or header is None:  # HTTP/1.0 without Host: not a browser
        return
    name = host_name(header).lower()
    if is_loopback(name) or name in gateway.config.general_settings.allowed_hosts:
        return
    raise MisdirectedRequest(
        f"This gateway listens on loopback and answers only to localhost, 127.0.0.1 or [::1], not "
        f"{name[:100]!r} (a proxy in front can keep its upstream's Host, or add the name to "
        f"general_settings.allowed_hosts)."
    )
