"""A mixed run through a real gateway, for the operator's page tests: passthrough and compressed
single questions, an agent conversation with a reset, observe mode, and two models, one without a
price. Every prompt carries ``CANARY``, which must never reach the page, ``/stats`` or the store.
Also: reading the figures three ways (``/stats``, the page's ``data-stat`` elements, Prometheus)."""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser
from typing import Any

import httpx
from agent_loops import TASK, chat_loop
from corpus import QUESTION, haystack
from prometheus_client.parser import text_string_to_metric_families

KEY = "sk-ui-master-key-test"
UPSTREAM_KEY = "sk-ui-upstream-secret"
CANARY = "CANARY-7f3c9e1d-prompt-text"
AUTH = {"Authorization": f"Bearer {KEY}"}
FORMS = {"min_tokens": 400, "keep_tokens": 150, "keep": 0.1, "reset_min_tokens": 100, "first_sight": "always"}
PRICED = {"input_cost_per_token": 3e-6, "cache_read_input_token_cost": 3e-7,
          "cache_creation_input_token_cost": 3.75e-6}
# routed-big is only escalated to: never prepared itself, so never in the figures.
MODELS = ("agent", "plain", "observed", "routed", "cached")
# A fact the vault question never retrieves: compression drops it, only the whole text has it.
ASIDE = "The miller's grey cat, who slept on the flour sacks, was called Biscuit."


def config(upstream_url: str, *, general: dict[str, Any]) -> dict[str, Any]:
    def entry(name: str, window: int, info: dict[str, Any], upstream: str = "stats-echo",
              **mixpr: Any) -> dict[str, Any]:
        params = {"model": f"openai/{upstream}", "api_base": upstream_url, "api_key": UPSTREAM_KEY}
        return {"model_name": name, "litellm_params": params,
                "model_info": {"max_input_tokens": window, **info}, "mixpr": mixpr}

    return {
        "model_list": [
            entry("agent", 5000, PRICED, prefix=FORMS),  # priced: a conversation that resets
            entry("plain", 3000, {}, budget_tokens=800),  # no price: LiteLLM's map has no stats-echo
            entry("observed", 3000, PRICED, mode="observe", budget_tokens=800),
            # Self-Route: a question the compressed prompt cannot answer goes again, whole, to routed-big.
            entry("routed", 3000, PRICED, "mode-needle-ui", budget_tokens=800,
                  self_route={"enabled": True, "fallback_model": "routed-big"}),
            entry("routed-big", 128_000, PRICED, "mode-needle-ui-big"),
            entry("cached", 3000, PRICED, "mode-cached"),  # its usage reports 8 cached prompt tokens
        ],
        "mixpr_settings": {"router": "heuristic", "token_margin": 0},
        "general_settings": {"master_key": KEY, "compression_workers": 1, "compression_executor": "thread",
                             "shadow_share": 1, **general},
    }


def chat(url: str, model: str, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    response = httpx.post(url + "/v1/chat/completions", headers=AUTH, timeout=120,
                          json={"model": model, "messages": messages, **extra})
    assert response.status_code == 200, response.text
    return response


def single(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"{CANARY} {text}"}]


def run(url: str, *, steps: int = 12) -> dict[str, int]:
    """The mixed run; returns how many requests of each kind it saw (by the gateway's headers)."""
    seen: dict[str, int] = {}

    def count(response: httpx.Response) -> None:
        for name in ("x-mixpr-action", "x-mixpr-reset", "x-mixpr-shadow", "x-mixpr-self-route"):
            value = response.headers.get(name)
            seen[f"{name}={value}"] = seen.get(f"{name}={value}", 0) + 1

    count(chat(url, "plain", single("Say hello.")))
    count(chat(url, "plain", single(haystack(400) + "\n\nWhat is the secret code?")))
    for messages in chat_loop(steps, task=f"{CANARY} {TASK}"):
        count(chat(url, "agent", messages, max_tokens=200))
    document = f"{ASIDE}\n\n{haystack(600, seed=2)}\n\n{QUESTION}"
    count(chat(url, "routed", single(document), needle="Biscuit"))  # the fake upstream's "unanswerable"
    count(chat(url, "cached", single("Say hello.")))
    count(chat(url, "observed", single("Say hello.")))
    count(chat(url, "observed", single(haystack(400) + "\n\nWhat is the secret code?"), max_tokens=200))
    return seen


def prometheus(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(url + "/metrics", headers=AUTH, timeout=10).text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def counted(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, found), v in samples.items() if n == name and wanted <= found)


# /stats figure -> (Prometheus sample, its labels): the counters that count the same thing.
PROMETHEUS = {
    "requests": ("mixpr_chat_requests_total", {}),
    "requests_passthrough": ("mixpr_chat_requests_total", {"action": "passthrough"}),
    "requests_compressed": ("mixpr_chat_requests_total", {"action": "compressed"}),
    "tokens_before": ("mixpr_prompt_tokens_in_total", {}),
    "tokens_after": ("mixpr_prompt_tokens_out_total", {}),
    "tokens_saved": ("mixpr_prompt_tokens_saved_total", {}),
    "resets": ("mixpr_resets_total", {}),
    "warm_turns": ("mixpr_cache_turns_total", {"state": "warm"}),
    "cold_turns": ("mixpr_cache_turns_total", {"state": "cold"}),
    "escalations": ("mixpr_self_route_requests_total", {"outcome": "escalated"}),
    "escalation_tokens": ("mixpr_self_route_escalation_tokens_total", {}),
    "provider_cache_read_tokens": ("mixpr_upstream_cached_tokens_total", {"kind": "read"}),
    "provider_cache_written_tokens": ("mixpr_upstream_cached_tokens_total", {"kind": "written"}),
    "observe_tokens_original": ("mixpr_shadow_tokens_total", {"kind": "original"}),
    "observe_tokens_would_send": ("mixpr_shadow_tokens_total", {"kind": "would_send"}),
}


def prometheus_figures(urls: list[str], model: str | None) -> dict[str, float]:
    """The figures Prometheus counts too, summed over ``urls`` (replicas), for one model or all."""
    samples = [prometheus(url) for url in urls]
    scope = {"model": model} if model else {}
    out = {name: sum(counted(s, metric, **labels, **scope) for s in samples)
           for name, (metric, labels) in PROMETHEUS.items()}
    # Observe mode's requests with figures (unchanged: known up front; computed: after the response).
    out["observe_requests"] = sum(counted(s, "mixpr_shadow_requests_total", result=r, **scope)
                                  for s in samples for r in ("unchanged", "computed"))
    # Its money, for priced models: the two costs' difference.
    cost = "mixpr_shadow_cost_total"
    out["observe_saved"] = sum(counted(s, cost, kind="original", prices="litellm", **scope)
                               - counted(s, cost, kind="would_send", prices="litellm", **scope)
                               for s in samples)
    return out


def stats(url: str, window: str = "all") -> dict[str, Any]:
    response = httpx.get(url + "/stats", params={"window": window}, headers=AUTH, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def wait_for_observe(urls: list[str], computed: int, timeout_s: float = 60) -> None:
    """Observe mode computes a long request's figures after its response: wait for them."""
    deadline = time.monotonic() + timeout_s
    name = "mixpr_shadow_requests_total"
    while sum(counted(prometheus(u), name, result="computed") for u in urls) < computed:
        assert time.monotonic() < deadline, "observe mode's figures were not computed"
        time.sleep(0.1)


class DataStats(HTMLParser):
    """Every ``data-stat`` element of a page: {(name, model or None): raw value}."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[tuple[str, str | None], str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("data-stat"):
            self.found[values["data-stat"], values.get("data-model")] = values.get("data-value") or ""


def page_figures(html: str) -> dict[tuple[str, str | None], str]:
    parser = DataStats()
    parser.feed(html)
    return parser.found


def agrees(shown: dict[tuple[str, str | None], str], data: dict[str, Any]) -> list[str]:
    """Where a page's ``data-stat`` figures differ from ``/stats`` (``data``); [] when all agree,
    and every figure /stats has for the totals is on the page."""
    wrong = []
    for (name, model), value in shown.items():
        expected = (data["models"][model] if model else data["totals"])[name]
        if value != ("" if expected is None else repr(float(expected))):
            wrong.append(f"{name} {model}: page {value!r}, /stats {expected!r}")
    missing = {n for n in data["totals"] if (n, None) not in shown} - HIDDEN
    return wrong + [f"{n}: not on the page" for n in sorted(missing)]


# Sums /stats carries that the page shows through others (their difference, or the priced share).
HIDDEN = {"priced_requests", "priced_tokens_before", "observe_cost_original", "observe_cost_would_send"}


def mismatches(figures: dict[str, Any], counters: dict[str, float]) -> list[str]:
    return [f"{name}: /stats {figures[name]!r}, Prometheus {value!r}" for name, value in counters.items()
            if abs(figures[name] - value) > 1e-9 * max(1.0, abs(value))]


def has_text(blob: str | bytes, *needles: str) -> list[str]:
    text = blob.decode("utf-8", "replace") if isinstance(blob, bytes) else blob
    return [n for n in needles if re.search(re.escape(n), text)]
