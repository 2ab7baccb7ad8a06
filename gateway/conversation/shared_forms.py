"""Message forms shared by every replica through Redis (``general_settings.form_cache_url``).

A form is a pure function of its message, what it answers and the settings, and is already named by a
content hash of all of them (``forms.key``: the settings that shape a form and the model are its
salt). So replicas can share what they computed: a replica that never saw a conversation fetches its
forms (and evidence blocks, and token counts) instead of recomputing them. This instance's memory
(:class:`~gateway.conversation.forms.FormCache`) stays in front; Redis is asked only for what it lacks,
in one ``MGET`` per step of a build (a 300-step conversation is one round trip, not 300), and what
was computed is written back in one pipeline of ``SET … EX``, without waiting for it.

What is read is this code's and this deployment's only. Names start with a digest of the code that
shapes a form (:data:`CODE_DIGEST`: MixPR's source, the form-shaping modules here, the versions of the
libraries MixPR calls), so replicas of two releases sharing a Redis during a rolling deploy never read
each other's forms; the settings that shape a form and the model are in every name already
(``forms.key``'s salt). Every value is signed (HMAC-SHA256 over its name and bytes, under a key derived
from ``deployment_secret``, which the config requires, of at least 32 characters, and never from
``master_key``, which every client sends): one that fails the check (written by whoever can write to
the Redis, changed, or moved to another name) is dropped and counted in
``mixpr_form_cache_rejected_total``, and the form computed here. Names also carry a short hash of
that signing key, so two deployments sharing one Redis each keep their own entries instead of
rejecting and overwriting each other's.

Redis is optional and never decides an answer: down, slow (past ``form_cache_timeout_ms``) or full,
a build goes on with local work, which computes the very same bytes. Each outage is logged once (the
cause, never a key, a value or the URL, which may hold a password) and counted in
``mixpr_form_cache_errors_total``; after a failure Redis is left alone for ``RETRY_AFTER_S`` so a
stopped server costs one timeout, not one per request.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import importlib.metadata
import logging
import time
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import OutOfMemoryError, RedisError, ResponseError

import mixpr
from gateway.config import FORM_CACHE_SECRET_CHARS, GeneralSettings
from gateway.conversation.failures import FAILED_TTL_S, Failures
from gateway.conversation.forms import FormCache

log = logging.getLogger("gateway.conversation.shared_forms")

Form = tuple[str, int]  # a form's text and its tokens (a token count: "" and the count)
FORMAT = 2  # of the stored values and names; a change here must not read older entries
RETRY_AFTER_S = 2.0  # after a failure, builds do not ask Redis for this long
WRITE_TIMEOUT_S = 2.0  # a write-back waits for no request; it only holds a slot this long at most
MAX_PENDING_WRITES = 32  # write-backs in flight; past it new ones are dropped (and counted)
CONNECTIONS = 16  # to Redis, per replica; a request waits for one at most the read timeout


# The code a form is a function of: MixPR, and the modules here that cut messages into pieces, ask
# MixPR for their forms, cut them again in resets and gather evidence; and the libraries MixPR calls.
# (``messages`` is one prompt's, in ``gateway/compress/``.)
SHAPING_ROOTS = (Path(mixpr.__file__).parent,
                 *(Path(__file__).parent / f"{name}.py" for name in ("forms", "recut", "evidence", "task")),
                 Path(__file__).parents[1] / "compress" / "messages.py")
SHAPING_LIBRARIES = ("numpy", "scipy", "scikit-learn", "tiktoken")
MAC = hashlib.sha256
MAC_BYTES = MAC().digest_size


def code_digest(roots: Sequence[Path] = SHAPING_ROOTS, libraries: Sequence[str] = SHAPING_LIBRARIES) -> str:
    """A digest of the source files under ``roots`` (a folder's ``.py`` files, or a file) and the
    versions of ``libraries``: what a form is a function of besides its inputs and settings."""
    digest = hashlib.blake2b(digest_size=12)
    for root in roots:
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for path in files:
            name = path.relative_to(root.parent).as_posix()
            digest.update(b"%d:%s\0" % (len(name), name.encode()))
            data = path.read_bytes()
            digest.update(b"%d\0" % len(data) + data)
    for library in libraries:
        try:
            version = importlib.metadata.version(library)
        except importlib.metadata.PackageNotFoundError:
            version = "none"
        digest.update(f"{library}=={version}\0".encode())
    return digest.hexdigest()


CODE_DIGEST = code_digest()  # once, at import: a few hundred kB of source


def from_settings(settings: GeneralSettings, metrics: Any = None) -> SharedForms | None:
    """The shared cache ``settings`` ask for (``form_cache_url``), or None."""
    if not settings.form_cache_url:
        return None
    return SharedForms(settings.form_cache_url, timeout_s=settings.form_cache_timeout_ms / 1000,
                       ttl_s=settings.form_cache_ttl_s, max_entry_bytes=settings.form_cache_max_entry_bytes,
                       secret=signing_secret(settings), metrics=metrics)


def signing_secret(settings: GeneralSettings) -> bytes:
    """The key entries are signed under: from ``deployment_secret`` alone (the config refuses a
    ``form_cache_url`` without one of at least 32 characters), so every replica of one config has
    the same, and no client can derive it."""
    secret = settings.deployment_secret
    if not secret or len(secret) < FORM_CACHE_SECRET_CHARS:
        raise ValueError(f"the shared form cache needs general_settings.deployment_secret of at least "
                         f"{FORM_CACHE_SECRET_CHARS} characters")
    return hashlib.blake2b(b"mixpr form cache\0" + secret.encode(), digest_size=32).digest()


def namespace(secret: bytes, digest: str = CODE_DIGEST) -> str:
    """The prefix of every name: the format, the digest of the code that shapes a form (replicas of
    other code, whose forms may differ, never read this one's) and a short hash of the signing key
    ``secret`` (another deployment on the same Redis has its own names: neither rejects nor
    overwrites the other's entries; the hash tells nothing of the key)."""
    deployment = hashlib.blake2b(b"mixpr form cache namespace\0" + secret, digest_size=6).hexdigest()
    return f"mixpr:forms:{FORMAT}:{digest}:{deployment}:"


class SharedForms:
    """Forms in Redis by name, with a TTL, a per-entry size cap, a read timeout and a circuit breaker.
    The async methods run on the event loop; a build's thread reaches them through :class:`FormStore`."""

    def __init__(self, url: str, *, timeout_s: float, ttl_s: int, max_entry_bytes: int, secret: bytes,
                 prefix: str | None = None, metrics: Any = None) -> None:
        self.timeout_s = timeout_s
        self.ttl_s = ttl_s
        self.max_entry_bytes = max_entry_bytes
        self.metrics = metrics
        self.prefix = prefix or namespace(secret)  # another only in tests: another code's entries
        self._secret = secret
        # One retry, at once: a connection left over from before a Redis restart fails on first use,
        # and a fresh one answers. The timeout bounds the retry too. One pool, bounded.
        pool = BlockingConnectionPool.from_url(
            url, max_connections=CONNECTIONS, timeout=timeout_s, socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 1))
        self._client = Redis(connection_pool=pool)
        self._writes: set[asyncio.Task[None]] = set()
        self._resting_until = 0.0
        self._down = False

    async def fetch(self, names: Sequence[str]) -> dict[str, bytes]:
        """The stored values Redis holds of ``names``, in one ``MGET``; {} when it fails or is resting.
        Decoding them is left to the build's thread (:class:`FormStore`), off the loop."""
        if not names or self._resting():
            return {}
        try:
            async with asyncio.timeout(self.timeout_s):
                values = await self._client.mget([self.prefix + name for name in names])
        except (RedisError, OSError, TimeoutError) as exc:
            self._failed(_cause(exc))
            return {}
        self._answered()
        return {name: value for name, value in zip(names, values, strict=True) if value is not None}

    def store(self, values: dict[str, bytes], ttl_s: int | None = None) -> None:
        """Write ``values`` (:func:`encoded` forms by name) in the background, in one pipeline, but
        for those over ``max_entry_bytes``; nothing while ``MAX_PENDING_WRITES`` writes are pending.
        Each expires after ``ttl_s`` (default: ``form_cache_ttl_s``)."""
        payload = {self.prefix + name: value for name, value in values.items()
                   if len(value) <= self.max_entry_bytes}
        if not payload or self._resting():
            return
        if len(self._writes) >= MAX_PENDING_WRITES:
            self.count_error("dropped")
            return
        task = asyncio.get_running_loop().create_task(self._write(payload, ttl_s or self.ttl_s))
        self._writes.add(task)
        task.add_done_callback(self._written)
        if self.metrics is not None:
            self.metrics.form_cache_pending_writes.inc()

    def _written(self, task: asyncio.Task[None]) -> None:
        self._writes.discard(task)
        if self.metrics is not None:
            self.metrics.form_cache_pending_writes.dec()

    def signed(self, name: str, value: bytes) -> bytes:
        """``value`` as stored under ``name``: its MAC, then it. Done in a build's thread (a form may
        be a megabyte), never on the loop."""
        return self._mac(name, value) + value

    def verified(self, name: str, stored: bytes) -> bytes | None:
        """The value ``stored`` under ``name`` holds, if signed by this deployment for this name; else
        None, counted (``mixpr_form_cache_rejected_total``)."""
        value = stored[MAC_BYTES:]
        if len(stored) >= MAC_BYTES and hmac.compare_digest(stored[:MAC_BYTES], self._mac(name, value)):
            return value
        if self.metrics is not None:
            self.metrics.form_cache_rejected.inc()
        return None

    def _mac(self, name: str, value: bytes) -> bytes:
        mac = hmac.new(self._secret, digestmod=MAC)
        key = (self.prefix + name).encode()
        mac.update(b"%d\0" % len(key) + key)
        mac.update(value)
        return mac.digest()

    async def flush(self) -> None:
        """Wait for the write-backs pending now (each bounded by ``WRITE_TIMEOUT_S``)."""
        while self._writes:
            await asyncio.wait(set(self._writes))

    async def aclose(self) -> None:
        """Let pending write-backs finish (briefly), then close the connections."""
        if self._writes:
            await asyncio.wait(set(self._writes), timeout=WRITE_TIMEOUT_S)
        await self._client.aclose()
        await self._client.connection_pool.disconnect()

    async def _write(self, payload: dict[str, bytes], ttl_s: int) -> None:
        try:
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                async with self._client.pipeline(transaction=False) as pipe:
                    for name, value in payload.items():
                        pipe.set(name, value, ex=ttl_s)
                    await pipe.execute()
        except OutOfMemoryError:  # maxmemory reached under a noeviction policy: reads still work
            self._failed("full", rest=False)
        except ResponseError:  # a command refused (a read-only replica, an ACL): reads may still work
            self._failed("error", rest=False)
        except (RedisError, OSError, TimeoutError) as exc:
            self._failed(_cause(exc))

    def _resting(self) -> bool:
        return time.monotonic() < self._resting_until

    def _failed(self, cause: str, *, rest: bool = True) -> None:
        self.count_error(cause)
        if rest:
            self._resting_until = time.monotonic() + RETRY_AFTER_S
        if not self._down:
            self._down = True
            log.warning("shared form cache (Redis) failed (%s): forms come from this replica's memory "
                        "and workers until it answers again", cause)

    def _answered(self) -> None:
        if self._down:
            self._down = False
            log.warning("shared form cache (Redis) answers again")

    def count_error(self, cause: str) -> None:
        if self.metrics is not None:
            self.metrics.form_cache_errors.labels(cause).inc()


class FormStore:
    """Where a build finds forms: this instance's memory first, then (when configured) Redis.
    Its methods run in a build's thread and reach Redis through ``loop``, never blocking the loop."""

    def __init__(self, local: FormCache, shared: SharedForms | None = None, metrics: Any = None) -> None:
        self.local = local
        self.shared = shared
        self.metrics = metrics
        self.failures = Failures()

    def found(self, names: Sequence[str], loop: asyncio.AbstractEventLoop | None) -> dict[str, Form]:
        """The forms known of ``names``: from memory, then one round trip to Redis for the rest
        (which memory then keeps). Names whose job failed (:meth:`failed`) are not among them."""
        known = {name: form for name in names if (form := self.local.get(name)) is not None}
        failed = self.failures.known(name for name in names if name not in known)
        missing = [name for name in dict.fromkeys(names) if name not in known and name not in failed]
        fetched: dict[str, Form] = {}
        for name, stored in self._fetched(missing, loop).items():
            value = self.shared.verified(name, stored) if self.shared is not None else None
            if value is None:
                continue
            if value == FAILED:
                self.failures.add([name])
            elif (form := decoded(value)) is not None:
                fetched[name] = form
                self.local.put(name, form)
        self._count("local", len(known))
        self._count("redis", len(fetched))
        return {**known, **fetched}

    def keep(self, entries: dict[str, Form], loop: asyncio.AbstractEventLoop | None) -> None:
        """Remember what a build computed, here and (without waiting) in Redis."""
        for name, form in entries.items():
            self.local.put(name, form)
        self._count("computed", len(entries))
        if self.shared is not None and loop is not None and entries:
            shared = self.shared  # signed here, not on the loop: a form may be a megabyte
            values = {name: shared.signed(name, encoded(form)) for name, form in entries.items()}
            loop.call_soon_threadsafe(shared.store, values)

    def failed(self, names: Sequence[str]) -> set[str]:
        """Those of ``names`` whose job failed on its own, here or (as :meth:`found` saw) on another
        replica, less than ``FAILED_TTL_S`` ago: not to be run again."""
        return self.failures.known(names)

    def keep_failed(self, names: Sequence[str], loop: asyncio.AbstractEventLoop | None) -> None:
        """Remember that the jobs of ``names`` failed, here and (without waiting) in Redis."""
        self.failures.add(names)
        if self.shared is not None and loop is not None and names:
            values = {name: self.shared.signed(name, FAILED) for name in names}
            loop.call_soon_threadsafe(self.shared.store, values, FAILED_TTL_S)

    def values(self, names: Sequence[str], loop: asyncio.AbstractEventLoop | None) -> dict[str, bytes]:
        """Values other than forms (``gateway.conversation.warmth``'s) that Redis holds of ``names``,
        signed by this deployment; this memory keeps none of them (their owner does)."""
        if self.shared is None:
            return {}
        shared = self.shared
        fetched = self._fetched(list(dict.fromkeys(names)), loop)
        checked = {name: shared.verified(name, stored) for name, stored in fetched.items()}
        return {name: value for name, value in checked.items() if value is not None}

    def keep_values(self, values: dict[str, bytes], loop: asyncio.AbstractEventLoop | None) -> None:
        """Write ``values`` (not forms) to Redis, signed, without waiting; nothing without Redis."""
        if self.shared is not None and loop is not None and values:
            signed = {name: self.shared.signed(name, value) for name, value in values.items()}
            loop.call_soon_threadsafe(self.shared.store, signed)

    async def aclose(self) -> None:
        if self.shared is not None:
            shared, self.shared = self.shared, None  # several preparers may share one store
            await shared.aclose()

    def _fetched(self, names: list[str], loop: asyncio.AbstractEventLoop | None) -> dict[str, bytes]:
        if not names or self.shared is None or loop is None:
            return {}
        future = asyncio.run_coroutine_threadsafe(self.shared.fetch(names), loop)
        try:  # fetch times itself out; this bounds a loop too busy to run it at all
            return future.result(timeout=2 * self.shared.timeout_s + 0.05)
        except FutureTimeout:
            future.cancel()
            self.shared.count_error("timeout")
            return {}

    def _count(self, source: str, entries: int) -> None:
        if self.metrics is not None and entries:
            self.metrics.form_cache.labels(source).inc(entries)


FAILED = b"failed\n"  # the value of a form whose job failed (never a form: those start with digits)


def encoded(form: Form) -> bytes:
    """A form as stored: its tokens, a newline, its text (lone surrogates of JSON escapes kept)."""
    return b"%d\n" % form[1] + form[0].encode("utf-8", "surrogatepass")


def decoded(value: bytes) -> Form | None:
    """A stored value as a form; None for anything else (then it is recomputed)."""
    tokens, sep, text = value.partition(b"\n")
    if not sep or not tokens.isdigit():
        return None
    try:
        return text.decode("utf-8", "surrogatepass"), int(tokens)
    except UnicodeDecodeError:
        return None


def _cause(exc: BaseException) -> str:
    """A short, value-free name for why Redis failed (a metric label and the warning)."""
    if isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__:
        return "timeout"
    return "unavailable"
