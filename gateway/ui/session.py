"""The ``/ui`` login cookie: ``<expiry>.<HMAC>``, signed with a key derived from the master key, so
changing the master key logs every session out, and nothing about the key is in the cookie."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

COOKIE = "mixpr_ui"
PURPOSE = b"mixpr-gateway /ui session v1"  # a derived key: the cookie's MAC is no oracle for the master key


def _signing_key(master_key: str) -> bytes:
    return hmac.new(master_key.encode(), PURPOSE, hashlib.sha256).digest()


def _mac(master_key: str, expires: int) -> str:
    return hmac.new(_signing_key(master_key), str(expires).encode(), hashlib.sha256).hexdigest()


def issue(master_key: str, lifetime_s: int, *, now: float | None = None) -> str:
    expires = int((time.time() if now is None else now) + lifetime_s)
    return f"{expires}.{_mac(master_key, expires)}"


def valid(master_key: str, cookie: str | None, *, now: float | None = None) -> bool:
    """True for a cookie this key signed that has not expired."""
    if not cookie or cookie.count(".") != 1:
        return False
    expires, mac = cookie.split(".")
    if not expires.isdigit() or len(expires) > 12:
        return False
    if not secrets.compare_digest(mac.encode(), _mac(master_key, int(expires)).encode()):
        return False
    return int(expires) > (time.time() if now is None else now)


def key_matches(master_key: str, given: str) -> bool:
    return secrets.compare_digest(given.encode(), master_key.encode())
