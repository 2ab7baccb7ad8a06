"""What an upstream's error text may say of the operator's setup never reaches a client.

Two nets. First, by exact value and in any case (an upstream may lowercase a model name, and a host
is matched as the config spells it and as ``urlsplit`` lowercases it; only a value that is a plain
word, a model named ``slow``, is matched as spelled), everything of the operator's
the gateway holds in its config or reads from the environment (:meth:`Redactor.from_config`): every
key and secret, every base URL's host and user-info, every managed model file, and every upstream
model name, which becomes the client's own alias for it (a 404 then still says which model: the one
the client asked for). Second, text shaped like a credential the config does not hold
(``KEY_LIKE``: a key another server quoted, AWS keys, any URL's user-info, an ``Authorization``
header of any scheme, a private network's address). A bare hex run is a request id as often as a
key: only a labelled one, or one the exact net knows, is redacted.

One redactor per process, the union of every config an app was made from (``install``): a value
redacted too often costs a word of an error message, one redacted too rarely leaks it.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from gateway.config import GatewayConfig

REDACTED = "[redacted]"
HOST = "[upstream-host]"
PATH = "[model-file]"
MIN_SECRET_CHARS = 6  # shorter "keys" (placeholders such as "none", "x") are words, not secrets
SECRET_WORDS = ("key", "secret", "token", "password", "credential")

KEY_LIKE = re.compile(
    r"(?P<sk>\bsk-)[\w\-*]{4,}"  # OpenAI's sk-..., sk-proj-...; Anthropic's sk-ant-...
    # xAI, Hugging Face, Groq, Perplexity, Replicate, GitHub, GitLab, Slack
    r"|(?P<prefix>\b(?:xai-|hf_|gsk_|pplx-|r8_|gh[pousr]_|github_pat_|glpat-|xox[abpr]-))[\w\-]{16,}"
    r"|\bAIza[\w\-]{35}"  # Google's API keys
    r"|(?-i:\b(?:AKIA|ASIA)[0-9A-Z]{16}\b)"  # AWS access key ids (upper case: a word is never one)
    # an Authorization header of any scheme (Token, Digest, ...), or none
    r"|(?P<auth>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:[a-z][\w\-]*\s+)?)[^\s\"',;]{4,}"
    r"|(?P<bearer>\b(?:Bearer|Basic)\s+)[\w\-.~+/]{8,}=*"  # Bearer <token>, Basic <b64>, unlabelled
    # Azure's api-key: 32 hex, and any 32+ hex run labelled as a key, token or secret
    r"|(?P<azure>\b(?:api[-_ ]?key|key|token|secret)[\"']?\s*[:=]?\s*[\"']?)[0-9a-fA-F]{32,}\b"
    # an AWS secret key: 40 base64 characters, labelled
    r"|(?P<aws>\b(?:aws[-_ ]?)?secret[-_ ]?(?:access[-_ ]?)?key[\"']?\s*[:=]?\s*[\"']?)"
    r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
    # a URL's user-info: user:pass@, :pass@ (a password alone), token@ (a token as the user)
    r"|(?P<scheme>\b[a-z][a-z0-9+.\-]*://)[^\s/?#@\"'<>]+@"
    # a private network's address (RFC 1918), with its port: the operator's, whether configured or not
    r"|(?P<private>(?<![\w.])(?:10(?:\.\d{1,3}){3}|192\.168(?:\.\d{1,3}){2}|172\.(?:1[6-9]|2\d|3[01])"
    r"(?:\.\d{1,3}){2})(?::\d{1,5})?(?![\w.]))"
    # a model file's path
    r"|(?P<file>(?:~|\b[A-Za-z]:)?(?:[/\\][\w.\-]+)+\.(?:gguf|ggml|safetensors|onnx|pth?|bin))\b",
    re.IGNORECASE,
)
LABELS = ("sk", "prefix", "auth", "bearer", "azure", "aws", "scheme")
# An escape as repr and JSON write them. Text that quotes a body escaped (LiteLLM's "Empty or invalid
# response ... '<body>'", a repr, a proxy's page quoting JSON, an event's plain-text data) has no
# decoded form to redact: each piece between two escapes is redacted as if the escape were a line
# break. A run of backslashes takes its letter with it: escaped twice (a repr of JSON), ``\\\\n`` is one.
ESCAPE = re.compile(r"(\\+(?:u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|[nrtbf'\"/])?)")
# Environment variables LiteLLM and the relays read: their values are the operator's as much as the
# config's (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``AWS_SECRET_ACCESS_KEY``, ...).
# A forward proxy's URL (``HTTPS_PROXY``, which both paths read) names a host of the operator's too.
ENV_URL = re.compile(r"_(?:API_BASE|BASE_URL|API_URL|ENDPOINT)$|^(?:HTTPS?|ALL)_PROXY$")
# A secret's word anywhere between underscores: LiteLLM's ``AWS_BEARER_TOKEN_BEDROCK`` as much as
# ``OPENAI_API_KEY`` (but not ``TOKENIZERS_PARALLELISM``).
ENV_SECRET = re.compile(r"(?:KEY|SECRET|TOKEN|PASSWORD|CREDENTIALS?)(?:_ID)?$"
                        r"|(?:^|_)(?:KEY|SECRET|TOKEN|PASSWORD|CREDENTIALS?)_")
# Headers whose values are the protocol's, not the operator's (a config may still set them).
PUBLIC_HEADERS = frozenset({"content-type", "accept", "user-agent", "anthropic-version", "anthropic-beta",
                            "openai-beta"})
HEADER_PARAMS = frozenset({"extra_headers", "headers", "default_headers"})


def _labelled(match: re.Match[str]) -> str:
    if match.group("file"):
        return PATH
    if match.group("private"):
        return HOST
    label = next((match.group(g) for g in LABELS if match.group(g)), "")
    return label + REDACTED + ("@" if match.group("scheme") else "")


class Redactor:
    """Replaces each known value by what the client may see, then anything ``KEY_LIKE``."""

    def __init__(self, replacements: Mapping[str, str] | None = None) -> None:
        self.replacements = dict(replacements or {})
        # a value is looked up as the pattern matched it: lowered, but a plain word as it is spelled
        self._lookup = {_folded(k): v for k, v in self.replacements.items()}
        self._pattern = _alternation(self.replacements)

    @classmethod
    def from_config(cls, config: GatewayConfig, environ: Mapping[str, str] | None = None) -> Redactor:
        """Everything of the operator's in ``config`` and in ``environ`` (the process's by default)."""
        found = [*_environment(os.environ if environ is None else environ), *_known(config)]
        return cls(_one_name_each(found))

    def merged(self, other: Redactor) -> Redactor:
        return Redactor(_one_name_each([*self.replacements.items(), *other.replacements.items()]))

    def __call__(self, text: str) -> str:
        """``text`` redacted whole (a value that spans a backslash, a Windows path), then, when it holds
        an escape (a text quoting JSON, a repr), each piece between escapes on its own: the ``n`` of a
        ``\\n`` or the ``c`` of Go's ``\\u003c`` would otherwise stand glued to the value after it."""
        text = self._whole(text)
        if "\\" not in text:
            return text
        return "".join(piece if i % 2 else self._whole(piece) for i, piece in enumerate(ESCAPE.split(text)))

    def _whole(self, text: str) -> str:
        if self._pattern is not None:
            text = self._pattern.sub(lambda m: self._lookup.get(_folded(m.group(0)), REDACTED), text)
        return KEY_LIKE.sub(_labelled, text)


MODEL = "[model]"
OWN_MARKS = (REDACTED, HOST, PATH)


def _one_name_each(found: list[tuple[str, str]]) -> dict[str, str]:
    """``found`` as one replacement a value, a secret's mark winning; an upstream model two aliases
    share names neither (each alias's client would read the other's name): ``[model]``."""
    out: dict[str, str] = {}
    for value, replacement in found:
        before = out.get(value)
        if before is None or replacement in OWN_MARKS:
            out[value] = replacement
        elif before not in OWN_MARKS and before != replacement:
            out[value] = MODEL
    return out


def _is_word(value: str) -> bool:
    """A plain word (a model named ``slow``, ``echo``) is matched as it is spelled: in any case it
    would take "Slow down." from every message. Keys, hosts and names like ``Qwen3-8B`` match in
    any case."""
    return value.isalpha()


def _folded(value: str) -> str:
    return value if _is_word(value) else value.lower()


def _alternation(replacements: Mapping[str, str]) -> re.Pattern[str] | None:
    """One pattern for every value, the longest first (a URL before its host). A name or a host is a
    whole token of ASCII (a model named ``echo`` is not replaced inside ``echoes``); a secret is matched
    wherever it stands, a letter glued to it (``...c2e41é``) hides nothing."""
    if not replacements:
        return None
    values = sorted(replacements, key=len, reverse=True)
    each = [_one(v, whole=replacements[v] != REDACTED or _is_word(v)) for v in values]
    return re.compile("|".join(each))


def _one(value: str, *, whole: bool) -> str:
    spelled = re.escape(value) if _is_word(value) else f"(?i:{re.escape(value)})"
    # a token of ASCII: a name glued to a letter of another script (a decoded ``\\u00e9``) is still named
    return rf"(?<![A-Za-z0-9_.\-]){spelled}(?![A-Za-z0-9_\-])" if whole else spelled


def _known(config: GatewayConfig) -> Iterator[tuple[str, str]]:
    """(value, what replaces it) for everything of the operator's in ``config``."""
    general = config.general_settings
    for secret in (general.master_key, general.deployment_secret):
        yield from _secret(secret)
    if general.form_cache_url:
        yield from _url(general.form_cache_url)
    for entry in config.model_list:
        for key, value in entry.litellm_params.items():
            yield from _param(key, value)
        model = entry.upstream_model
        for name in {model, model.split("/", 1)[-1]}:  # the provider's own name of it, and LiteLLM's
            if name != entry.model_name:
                yield name, entry.model_name
        yield from _managed(entry.managed_server or {})


def _environment(environ: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    for name, value in environ.items():
        upper = name.upper()
        if ENV_URL.search(upper):
            yield from _url(value)
        elif ENV_SECRET.search(upper):
            yield from _secret(value)


def _param(key: str, value: Any) -> Iterator[tuple[str, str]]:
    """A ``litellm_params`` value: a URL's host and user-info, a secret, or (nested: headers,
    ``extra_body``) every string it holds, walked to the bottom."""
    if key == "model":
        return
    if isinstance(value, dict):
        yield from _nested(value, headers=key.lower() in HEADER_PARAMS)
    elif isinstance(value, list):
        for item in value:
            yield from _nested({key: item}, headers=False)
    elif isinstance(value, str) and key.endswith(("_base", "_url", "base_url", "endpoint")):
        yield from _url(value)
    elif isinstance(value, str) and any(word in key.lower() for word in SECRET_WORDS):
        yield from _secret(value)


def _nested(values: Mapping[str, Any], *, headers: bool) -> Iterator[tuple[str, str]]:
    """Every string of a nested setting: a header's value is a credential as often as not
    (``x-tenant-token``), and so is any string the operator buried in ``extra_body``; a plain word
    (``auto``, ``medium``) is matched only as spelled, and only a header's is taken at all."""
    for key, value in values.items():
        name = str(key).lower()
        if headers and name in PUBLIC_HEADERS:
            continue
        if isinstance(value, str) and name.endswith(("_base", "_url", "endpoint")):
            yield from _url(value)
        elif isinstance(value, str) and (headers or not _is_word(value)):
            yield from _secret(value)
        elif isinstance(value, str):
            yield from _param(name, value)
        elif isinstance(value, dict | list):
            yield from _param(name, value)


def _secret(value: str | None) -> Iterator[tuple[str, str]]:
    if value and len(value) >= MIN_SECRET_CHARS:
        yield value, REDACTED


def _url(value: str) -> Iterator[tuple[str, str]]:
    """A base URL's host (with its port, and alone) and user-info; the rest of it (``/v1``) is public."""
    try:
        parts = urlsplit(value if "//" in value else "//" + value)
        host, port = parts.hostname, parts.port
    except ValueError:
        return
    if parts.username or parts.password:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        yield userinfo, REDACTED
        yield from _secret(parts.password)
    if host:  # as urlsplit lowercases it, and as the config spells it (the pattern ignores case)
        yield host, HOST
        if port is not None:
            yield f"{host}:{port}", HOST


def _managed(settings: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    path = settings.get("model_path")
    if not isinstance(path, str) or not path:
        return
    yield path, PATH
    if not path.startswith("pkg:"):
        return
    try:  # the file it resolves to, as the server's own errors name it
        from gateway.local.managed import resolve_model_path
        yield str(resolve_model_path(path)), PATH
    except Exception:  # not installed (yet): the configured name is what is known
        return


_current = Redactor()
_lock = threading.Lock()


def install(config: GatewayConfig) -> None:
    """Add ``config``'s values to what this process redacts (an app is made per config)."""
    global _current
    with _lock:
        _current = _current.merged(Redactor.from_config(config))


def redact_body(raw: bytes) -> bytes:
    """An upstream's error body with every string in it redacted: a JSON body keeps its shape (each
    string redacted once decoded, so no escape is cut in two), any other is redacted as text."""
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError):
        return redact_text(raw.decode("utf-8", errors="replace")).encode()
    return json.dumps(redacted(payload), ensure_ascii=False).encode()


def redacted(value: Any) -> Any:
    """A decoded JSON value with every string in it (keys too) redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(k): redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v) for v in value]
    return value


def decoded(text: str) -> Any:
    """An error body's JSON with every string redacted once decoded (an escape such as ``\\n`` or
    Go's ``\\u003c`` no longer sits in front of a key); a body that is not JSON, :func:`redact_text`."""
    try:
        return redacted(json.loads(text))
    except (ValueError, RecursionError):
        return redact_text(text)


def redact_text(text: str) -> str:
    """Text that is not JSON redacted, but for its ``data:`` lines whose value is (an event stream sent
    where an error body was expected): those redacted once decoded, as every JSON value is."""
    if "data:" not in text:
        return redact(text)
    return "".join(_data_line(line) if line.startswith("data:") else redact(line)
                   for line in text.splitlines(keepends=True))


def _data_line(line: str) -> str:
    value = line[5:].strip()
    try:
        payload = json.loads(value)
    except (ValueError, RecursionError):
        return redact(line)
    ending = line[len(line.rstrip("\r\n")):]
    return "data: " + json.dumps(redacted(payload), ensure_ascii=False) + ending


def said(payload: Any) -> str:
    """What an error body says, as its decoded strings (never a repr, whose escapes would hide what
    follows them): its ``message``, ``error`` (TGI's is a string), ``errors`` (a list) or ``detail``."""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, list):
        return "; ".join(said(item) for item in payload[:5])
    if isinstance(payload, dict):
        for key in ("message", "error", "errors", "detail"):
            if payload.get(key):
                return said(payload[key])
    return json.dumps(payload, ensure_ascii=False, default=str)


def redact(text: str) -> str:
    """``text`` with the operator's values replaced and anything credential-shaped ``[redacted]``
    (its label, ``sk-``, ``Bearer``, ``api-key:``, kept so the message still says what was wrong)."""
    return _current(text)
