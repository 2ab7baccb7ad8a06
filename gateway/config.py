"""Load and validate ``config.yaml`` (LiteLLM-proxy style) into typed settings.

Every problem is reported at start-up as one :class:`ConfigError` whose message names the
file and the path of each bad field, so a typo never surfaces later as a failed request.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.local.managed import ManagedServer, ManagedServerError

log = logging.getLogger("gateway.config")

ENV_PREFIX = "os.environ/"
DEFAULT_MAX_INPUT_TOKENS = 8192  # when neither the config nor LiteLLM's model map knows the window
Route = Literal["auto", "heuristic", "local", "global"]
# compress: send what the gateway decides; observe: send every request as the client sent it and
# only count what compressing would have sent and saved (gateway.core.shadow).
Mode = Literal["compress", "observe"]
# "auto": keep what the window leaves, up to max_budget_tokens; a number: a cost budget.
Budget = Annotated[int, Field(ge=16)] | Literal["auto"]
# Keys that LiteLLM-proxy configs carry for its router but that acompletion does not accept.
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
FORM_CACHE_SECRET_CHARS = 32  # the shared form cache's deployment_secret, at least
ROUTER_ONLY_PARAMS = frozenset({"rpm", "tpm", "order", "weight", "max_parallel_requests"})
# The anthropic-beta flags relayed by default: what the gateway's features need (context_management
# is relayed to Anthropic models) and what Claude Code 2.1.331 sends (recorded), plus fine-grained
# tool streaming, which earlier Claude Code versions and SDK clients send.
ANTHROPIC_BETAS = (
    "claude-code-20250219",
    "interleaved-thinking-2025-05-14",
    "context-management-2025-06-27",
    "mid-conversation-tool-changes-2026-07-01",
    "thinking-token-count-2026-05-13",
    "advanced-tool-use-2025-11-20",
    "effort-2025-11-24",
    "fine-grained-tool-streaming-2025-05-14",
)


class ConfigError(ValueError):
    """The configuration cannot be used; the message says where and why."""


class _Strict(BaseModel):
    # an infinite share, price or timeout is no setting (it passed every bound): refused by name
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SelfRoute(_Strict):
    """Self-Route: the model may say the compressed prompt cannot answer; then escalate once."""

    enabled: bool = False
    fallback_model: str | None = None  # a model_name with a longer window; None: this model, 4x budget


class SelfRouteOverrides(_Strict):
    enabled: bool | None = None
    fallback_model: str | None = None


class Prefix(_Strict):
    """Multi-turn requests: each long message compressed once, at first sight, then only appended
    (``gateway.conversation.forms``); rare deliberate resets when the forms no longer fit
    (``gateway.conversation.resets``)."""

    enabled: bool = True
    # When first-sight forms start: "after_trigger" (a conversation goes as the client sent it until
    # it first passes the trigger, then one reset switches it to forms), "always", or "auto": after
    # the trigger in window mode, always with a cost budget (cheaper there, as measured).
    first_sight: Literal["auto", "after_trigger", "always"] = "auto"
    # A tool result or user message over this many tokens gets a compressed form at first sight ...
    min_tokens: int = Field(1000, ge=1)
    # ... keeping keep_tokens plus this share of the rest.
    keep_tokens: int = Field(1000, ge=16)
    keep: float = Field(0.02, ge=0, le=1)
    # ... or, for a tool output that reads as code (a file view, a listing), this many times keep_tokens:
    # agents quote the files they read steps later, logs and greps rarely (issue 46's dev split: the
    # 236 outputs over 4,000 characters that read as code held 238 of the 294 facts later used from
    # such outputs, the 128 logs 25). Cost mode there: strict evidence 0.89 to 0.96 for 0.76x to
    # 0.79x of the cost (bench/README.md).
    code_keep: float = Field(2.2, gt=0)
    # The agent's tool-call arguments over twice this many tokens (a file it wrote, a long command)
    # keep this many at first sight, their long strings cut and the JSON valid; 0: kept as written.
    argument_tokens: int = Field(50, ge=0)
    # A reset cuts the older messages' long texts again, together, for the task (MixPR), to this share
    # of the room that what it cannot cut leaves (window mode; cost mode: to budget_tokens in all).
    reset_fill: float = Field(0.6, gt=0, le=1)
    # In a conversation over a pasted document (no tool results), a reset leaves this share instead:
    # each later question brings evidence of its own from the whole document, so the older part
    # needs less of it, and a smaller rewrite leaves room for more questions before the next reset.
    document_fill: float = Field(0.3, gt=0, le=1)
    # A pasted document (a user message over the first-sight cap) keeps keep_tokens plus this share of
    # the rest at first sight, at most the cap; follow-ups bring evidence from what it cut.
    document_keep: float = Field(0.1, ge=0, le=1)
    # Cost mode: past the trigger, a reset is made only when what it saves in cache reads over the
    # turns the conversation can expect (this times the turns it has had) pays for rewriting the
    # cached prefix, priced with the model's own prices (gateway.prices); 0: only one that pays by the
    # next request alone (it cuts nine tenths), or the window.
    reset_horizon: float = Field(0.0, ge=0)
    # Texts under this many tokens are never cut by a reset (never worth a placeholder).
    reset_min_tokens: int = Field(200, ge=1)
    # A follow-up question's evidence (from what earlier forms cut) takes at most this share of the room.
    evidence: float = Field(0.25, ge=0, le=1)
    # ... and, when this is set, this share of the pasted documents' tokens (a larger document, more
    # evidence: what sending it whole would cost grows with it), within that share of the room.
    evidence_document: float = Field(0.05, ge=0, le=1)
    # An Anthropic-style cache_control breakpoint on the last message of the previous request.
    breakpoint: bool = False
    # How long the provider keeps a conversation's prefix cached (gateway.conversation.warmth);
    # null: the provider's (Anthropic 5 min, 1 h when the client's cache_control asks ttl "1h";
    # OpenAI 10 min, 24 h with prompt_cache_retention "24h"; unknown providers: never cold).
    cache_lifetime_s: float | None = Field(None, gt=0)
    # A request that comes after that lifetime finds the cache cold and writes its whole prefix
    # again anyway: cut then what costs no extra write and loses nothing (the older outputs' lines
    # a later message repeats, gateway.conversation.repeats). "auto": in cost mode only (the window's
    # own resets, frequent in window mode, recut what it left: on the dev split that moved them and
    # lost strict evidence, 0.974 to 0.940 on one half, for 1% of cost).
    cold_reset: Literal["auto"] | bool = "auto"


class PrefixOverrides(_Strict):
    enabled: bool | None = None
    first_sight: Literal["auto", "after_trigger", "always"] | None = None
    min_tokens: int | None = Field(None, ge=1)
    keep_tokens: int | None = Field(None, ge=16)
    keep: float | None = Field(None, ge=0, le=1)
    code_keep: float | None = Field(None, gt=0)
    argument_tokens: int | None = Field(None, ge=0)
    reset_fill: float | None = Field(None, gt=0, le=1)
    document_fill: float | None = Field(None, gt=0, le=1)
    document_keep: float | None = Field(None, ge=0, le=1)
    reset_horizon: float | None = Field(None, ge=0)
    reset_min_tokens: int | None = Field(None, ge=1)
    evidence: float | None = Field(None, ge=0, le=1)
    evidence_document: float | None = Field(None, ge=0, le=1)
    breakpoint: bool | None = None
    cache_lifetime_s: float | None = Field(None, gt=0)
    cold_reset: Literal["auto"] | bool | None = None


class PriceTiers(_Strict):
    """A request that would pass its model's long-context price line (``gateway.prices``: GPT-5.4+ 2x
    past 272k, Claude Haiku 5.5 5x past 100k) is cut to just under it when that pays (issue 56)."""

    enabled: bool = True
    # Kept free under the line for the tokenizer's error and the next turn; None: the reply reserve
    # (``completion_reserve_tokens``).
    margin_tokens: int | None = Field(None, ge=0)


class PriceTiersOverrides(_Strict):
    enabled: bool | None = None
    margin_tokens: int | None = Field(None, ge=0)


class MixprSettings(_Strict):
    """How and when prompts are compressed (global defaults; each model may override any key)."""

    mode: Mode = "compress"
    compress_above_tokens: int | None = Field(None, ge=1)
    budget_tokens: Budget = "auto"
    max_budget_tokens: int = Field(32000, ge=16)  # caps "auto": most models read worse past 32-64k
    self_route: SelfRoute = SelfRoute()
    prefix: Prefix = Prefix()
    price_tiers: PriceTiers = PriceTiers()
    router: Route = "auto"
    router_model: str | None = None
    # Kept free for the answer when the client sends no max_tokens and the window decides.
    completion_reserve_tokens: int = Field(1024, ge=0)
    router_timeout_s: float = Field(10.0, gt=0)
    method: str = "mixpr"
    # Counts (tiktoken's) are multiplied by 1 + this for models whose tokenizer the gateway lacks;
    # null: 0 for OpenAI models and managed servers (counted exactly), else 0.25 (gateway.core.model_tokens).
    token_margin: float | None = Field(None, ge=0, le=4)


class MixprOverrides(_Strict):
    """Per-model overrides: every key of :class:`MixprSettings`, all optional."""

    mode: Mode | None = None
    compress_above_tokens: int | None = Field(None, ge=1)
    budget_tokens: Budget | None = None
    max_budget_tokens: int | None = Field(None, ge=16)
    self_route: SelfRouteOverrides | None = None
    prefix: PrefixOverrides | None = None
    price_tiers: PriceTiersOverrides | None = None
    router: Route | None = None
    router_model: str | None = None
    completion_reserve_tokens: int | None = Field(None, ge=0)
    router_timeout_s: float | None = Field(None, gt=0)
    method: str | None = None
    token_margin: float | None = Field(None, ge=0, le=4)


class ModelInfo(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    max_input_tokens: int | None = Field(None, ge=1)
    # The longest reply the model gives: what a max_tokens that leaves the prompt no room is lowered
    # to, at most (gateway.core.reply).
    max_output_tokens: int | None = Field(None, ge=1)
    # The model's prices, in LiteLLM's own keys (its proxy reads the same ones), per token: what
    # gateway.prices reads before LiteLLM's cost map.
    input_cost_per_token: float | None = Field(None, ge=0)
    cache_read_input_token_cost: float | None = Field(None, ge=0)
    cache_creation_input_token_cost: float | None = Field(None, ge=0)
    # A write the cache keeps an hour (the client's ttl "1h"): Anthropic bills it 2x input, not 1.25x.
    cache_creation_input_token_cost_above_1hr: float | None = Field(None, ge=0)
    # Whether the upstream serves the Responses API itself, so /v1/responses is relayed to it as the
    # client sent it (gateway.upstream.responses_relay); unset: OpenAI's own API and Azure do.
    responses_api: bool | None = None


def _has_user_info(url: str) -> bool:
    try:
        parts = urlsplit(url if "//" in url else "//" + url)
    except ValueError:  # not a URL at all: LiteLLM reports it in its own words
        return False
    return parts.username is not None or parts.password is not None


class ModelEntry(_Strict):
    model_name: str = Field(min_length=1)
    litellm_params: dict[str, Any]
    model_info: ModelInfo = ModelInfo()
    mixpr: MixprOverrides = MixprOverrides()
    managed_server: dict[str, Any] | None = None

    @field_validator("litellm_params")
    @classmethod
    def _needs_model(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(value.get("model"), str) or not value["model"]:
            raise ValueError("litellm_params.model is required (e.g. openai/gpt-4o-mini)")
        return value

    @field_validator("litellm_params")
    @classmethod
    def _no_user_info(cls, value: dict[str, Any]) -> dict[str, Any]:
        # aiohttp refuses a URL with user-info beside an Authorization header, so every relayed request
        # would fail as a 500: refused here, naming the field (never the password)
        for key, url in value.items():
            if isinstance(url, str) and key.endswith(("_base", "base_url")) and _has_user_info(url):
                raise ValueError(
                    f"litellm_params.{key} holds a user name or password (user:pass@host), which the "
                    f"gateway does not send in a URL: give the host alone in {key} and the credentials "
                    "as a header (extra_headers: {Authorization: 'Basic <base64 of user:pass>'})")
        return value

    @field_validator("managed_server")
    @classmethod
    def _valid_managed_server(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # Check the settings at load time, so a typo fails with a config error, not at startup.
        if value is not None:
            try:
                ManagedServer(value)
            except ManagedServerError as exc:
                raise ValueError(str(exc)) from None
        return value

    @property
    def upstream_model(self) -> str:
        return self.litellm_params["model"]

    def settings(self, defaults: MixprSettings) -> MixprSettings:
        """The global mixpr settings with this model's overrides applied."""
        overrides = self.mixpr.model_dump(exclude_unset=True)
        # Merged key by key: a model may change one of them.
        for key in ("self_route", "prefix", "price_tiers"):
            if key in overrides:
                overrides[key] = getattr(defaults, key).model_copy(update=overrides[key] or {})
        return defaults.model_copy(update=overrides)


class GeneralSettings(_Strict):
    master_key: str | None = None
    # A secret of the deployment, the same on every replica: keys the prompt_cache_key MAC
    # (gateway.core.cache_key; null: derived from master_key, without one this install's own) and
    # signs the shared form cache's entries (gateway.conversation.shared_forms: required with
    # form_cache_url, at least FORM_CACHE_SECRET_CHARS characters, never derived from master_key).
    deployment_secret: str | None = None
    # Serve without a master key on a non-loopback address (something in front authenticates).
    allow_unauthenticated: bool = False
    # Host names a loopback-bound gateway also answers to (a reverse proxy that passes its own).
    allowed_hosts: list[str] = []
    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1024)  # a 1M-token prompt is about 4 MB
    compression_workers: int = Field(2, ge=1, le=64)
    # process: MixPR cannot freeze other requests (it holds the GIL for long stretches); thread:
    # no worker start-up cost, for tests and tiny deployments.
    compression_executor: Literal["process", "thread"] = "process"
    request_timeout_s: float = Field(600.0, gt=0)  # upstream timeout unless litellm_params sets one
    default_max_input_tokens: int = Field(DEFAULT_MAX_INPUT_TOKENS, ge=1)
    route_cache_size: int = Field(4096, ge=0)
    # A job past this is abandoned (its worker killed and replaced); the request fails open.
    compression_timeout_s: float = Field(30.0, gt=0)
    # Requests that may wait for a compression worker beyond those being compressed; null: 4 x workers.
    max_queued_compressions: int | None = Field(None, ge=0)
    # Request bodies held in memory at once, across requests; past it new requests get a 503.
    max_inflight_body_bytes: int = Field(512 * 1024 * 1024, ge=1024)
    # Message forms remembered per instance (by content hash), in bytes; 0 = recompute each time.
    prefix_cache_bytes: int = Field(64 * 1024 * 1024, ge=0)
    # A body must keep arriving: no byte for this long, or slower than min_body_bytes_per_s on
    # average after it, and the request gets a 408 and its connection is closed.
    body_timeout_s: float = Field(30.0, gt=0)
    min_body_bytes_per_s: int = Field(16 * 1024, ge=1)
    # JSON objects and arrays in one body (messages, content parts, tools ...): bounds per-request work.
    max_body_objects: int = Field(20_000, ge=100)
    # Passthrough chat requests to OpenAI-compatible upstreams go as bytes, not through LiteLLM
    # (gateway.upstream.chat_relay); false: every request through LiteLLM.
    raw_relay: bool = True
    # Connections the raw relays hold open to upstreams at once (gateway.upstream.http); a request
    # past it waits for one, within its timeout's connect phase.
    max_upstream_connections: int = Field(1000, ge=1)
    # The largest server-sent event the raw relays read from an upstream (gateway.upstream.sse); an
    # event past it ends the stream with an in-band 502 upstream_invalid_response error.
    max_event_bytes: int = Field(16 << 20, ge=1024)
    # anthropic-beta flags relayed to Anthropic models; others are dropped (gateway.upstream.betas).
    # "*": every flag as the client sent it.
    anthropic_betas: list[str] = list(ANTHROPIC_BETAS)
    # A prompt_cache_key per conversation for openai/ models when the client sends none
    # (gateway.core.cache_key); false: only the client's own.
    prompt_cache_key: bool = True
    # Replicas share message forms through this Redis (redis://host:6379/0, rediss://, unix://);
    # null: each replica keeps its own (gateway.conversation.shared_forms).
    form_cache_url: str | None = None
    # A build waits at most this long for Redis, then computes what it lacks itself.
    form_cache_timeout_ms: int = Field(100, ge=1, le=10_000)
    form_cache_ttl_s: int = Field(24 * 3600, ge=1)  # each entry expires this long after it was written
    form_cache_max_entry_bytes: int = Field(1024 * 1024, ge=1024)  # larger forms stay local
    # Observe mode: requests whose would-have figures wait to be computed after their response; past
    # it a request is skipped (counted), so the shadow work never grows with the load.
    shadow_queue: int = Field(8, ge=1, le=1024)
    # Observe mode: the largest share of the time the would-have work may take. After a computation of
    # t seconds none starts (and requests are skipped) for t * (1 - share) / share, so the work overlaps
    # at most about this share of requests, and never grows with the load (gateway.core.shadow).
    shadow_share: float = Field(0.05, gt=0, le=1)
    # The operator's page (/ui, /stats; gateway.stats): a SQLite file kept across restarts (in the
    # container, on its data volume); null: kept in this process's memory only. With form_cache_url
    # the stats go to that Redis instead, so the replicas' figures add up.
    stats_path: str | None = None
    stats_retention_days: int = Field(90, ge=1, le=3650)  # the per-hour sums behind the chart
    stats_recent: int = Field(1000, ge=10, le=100_000)  # rows of the per-request record kept
    ui_session_s: int = Field(8 * 3600, ge=60, le=30 * 24 * 3600)  # a /ui login lasts this long

    @field_validator("stats_path")
    @classmethod
    def _path_or_memory(cls, value: str | None) -> str | None:
        return value if value is not None and value.strip() else None  # an unset variable: in memory

    @field_validator("deployment_secret")
    @classmethod
    def _unset_if_empty(cls, value: str | None) -> str | None:
        return value if value is not None and value.strip() else None  # an unset variable: derived

    @field_validator("master_key")
    @classmethod
    def _not_empty(cls, value: str | None) -> str | None:
        # docker-compose's ${MIXPR_MASTER_KEY} is "" when unset: that must not mean "no auth".
        if value is not None and not value.strip():
            raise ValueError("is empty (an environment variable set to an empty string?): set a key, "
                             "or remove master_key to run without auth on 127.0.0.1")
        return value

    @field_validator("form_cache_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None  # an environment variable set to "": no shared cache, as when unset
        if not value.startswith(REDIS_SCHEMES):
            # Never echo the value: a Redis URL may carry a password.
            raise ValueError(f"must start with {', '.join(REDIS_SCHEMES)}")
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _lower(cls, value: list[str]) -> list[str]:
        return [name.lower() for name in value]

    @model_validator(mode="after")
    def _form_cache_signed(self) -> GeneralSettings:
        # Never the master key: every client sends it, and one who can also write to the Redis
        # would sign forms that are spliced into other users' prompts.
        secret = self.deployment_secret or ""
        if self.form_cache_url and len(secret) < FORM_CACHE_SECRET_CHARS:
            given = f"one of {len(secret)} characters" if secret else "none"
            raise ValueError(
                f"form_cache_url needs general_settings.deployment_secret of at least "
                f"{FORM_CACHE_SECRET_CHARS} characters ({given} given): the shared cache's entries are "
                f"signed with it, every replica must have the same, and master_key (which clients send) "
                f"is never used for it; e.g. `openssl rand -hex 32` in an environment variable")
        return self

    @model_validator(mode="after")
    def _one_body_fits(self) -> GeneralSettings:
        if self.max_inflight_body_bytes < self.max_body_bytes:
            raise ValueError("max_inflight_body_bytes must be at least max_body_bytes, or a request "
                             "of the largest allowed size could never be admitted")
        return self

    @property
    def queued_compressions(self) -> int:
        """``max_queued_compressions``, with its default of four per worker resolved."""
        if self.max_queued_compressions is None:
            return 4 * self.compression_workers
        return self.max_queued_compressions


class GatewayConfig(_Strict):
    model_list: list[ModelEntry] = Field(min_length=1)
    mixpr_settings: MixprSettings = MixprSettings()
    general_settings: GeneralSettings = GeneralSettings()

    @model_validator(mode="after")
    def _unique_names(self) -> GatewayConfig:
        names = [m.model_name for m in self.model_list]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"model_name must be unique; repeated: {', '.join(duplicates)}")
        routers = {self.mixpr_settings.router_model} | {m.mixpr.router_model for m in self.model_list}
        unknown = sorted(r for r in routers - {None} if r not in names)
        if unknown:
            raise ValueError(f"router_model must name a model in model_list; unknown: {', '.join(unknown)}")
        fallbacks = {self.mixpr_settings.self_route.fallback_model}
        fallbacks |= {m.mixpr.self_route.fallback_model for m in self.model_list if m.mixpr.self_route}
        unknown = sorted(f for f in fallbacks - {None} if f not in names)
        if unknown:
            raise ValueError("self_route.fallback_model must name a model in model_list; "
                             f"unknown: {', '.join(unknown)}")
        return self

    def model(self, name: str) -> ModelEntry | None:
        return next((m for m in self.model_list if m.model_name == name), None)


def load_config(path: str | os.PathLike[str]) -> GatewayConfig:
    """Read, resolve ``os.environ/NAME`` values in, and validate the YAML file at ``path``."""
    source = Path(path)
    try:
        raw = yaml.safe_load(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read config file ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    return parse_config(raw, source=str(source))


def parse_config(raw: Any, *, source: str = "config") -> GatewayConfig:
    """Validate an already-loaded config mapping (the YAML file's content)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping with model_list, got {type(raw).__name__}")
    try:
        return GatewayConfig.model_validate(resolve_env(raw))
    except ValidationError as exc:
        raise ConfigError(f"{source}: invalid configuration\n{_describe(exc)}") from None


def resolve_env(value: Any, where: str = "") -> Any:
    """Replace every ``os.environ/NAME`` string by the variable's value.

    An unset variable becomes ``null`` (so an optional ``master_key`` simply switches auth off);
    a warning names the variable and the field, never a value.
    """
    if isinstance(value, dict):
        return {k: resolve_env(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_env(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str) and value.startswith(ENV_PREFIX):
        name = value[len(ENV_PREFIX) :]
        if name not in os.environ:
            log.warning("config %s: environment variable %s is not set; using null", where, name)
        return os.environ.get(name)
    return value


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"]) or "(top level)"
        lines.append(f"  {where}: {err['msg']}")
    return "\n".join(lines)


def max_input_tokens(entry: ModelEntry, default: int) -> int:
    """The model's window: the config's ``model_info``, else LiteLLM's model map, else ``default``."""
    if entry.model_info.max_input_tokens:
        return entry.model_info.max_input_tokens
    return int(_model_map(entry).get("max_input_tokens") or default)


def max_output_tokens(entry: ModelEntry) -> int | None:
    """The model's longest reply: the config's ``model_info``, else LiteLLM's model map, else None."""
    if entry.model_info.max_output_tokens:
        return entry.model_info.max_output_tokens
    value = _model_map(entry).get("max_output_tokens")
    return int(value) if isinstance(value, int) and value > 0 else None


def _model_map(entry: ModelEntry) -> dict[str, Any]:
    """LiteLLM's model-map entry for the upstream model ({} for models it does not know)."""
    return model_map(entry.upstream_model)


def model_map(model: str, *, own_entry: bool = False) -> dict[str, Any]:
    """LiteLLM's model-map entry for an upstream model name ({} for models it does not know).

    ``own_entry``: {} too when LiteLLM has no entry of the model's own in its cost map and made the
    answer up from the provider's defaults (it gives ``claude-sonnet-4-20250514``, dropped from the
    map, a 200k window and a price of 0): right for a window, wrong for a price.
    """
    import litellm  # heavy; only needed once per model at start-up

    try:
        info = dict(litellm.get_model_info(model))
    except Exception:  # LiteLLM raises a bare Exception for models it does not know
        return {}
    if own_entry and info.get("key") not in litellm.model_cost:
        return {}
    return info
