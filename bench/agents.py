"""Coding-agent loops through the gateway and through client-side baselines (issue #22, item 8).

    .venv/bin/python -m bench.agents                      # the whole dev split, every setting, table + PNG
    .venv/bin/python -m bench.agents --quick              # three short runs (one per framework)
    .venv/bin/python -m bench.agents --settings none,mask --limit 5
    .venv/bin/python -m bench.agents --settings none,defaults,cost,head-tail --runs 0-9   # a quick look
    .venv/bin/python -m bench.agents --settings none,cost,cost-warm,head-tail --pauses 20   # cold turns
    .venv/bin/python -m bench.agents --set 'wide={"model_info": {"max_input_tokens": 128000}}'

Replays ``../shared/data/real/agent_traj.dev.jsonl`` as its README says: for every assistant message at
index ``k`` that follows a ``tool`` or ``user`` message, the client sends ``messages[:k]`` (with the run's
``tools``), then the trajectory goes on with its own message ``k`` whatever came back. Settings:

* ``none``: no gateway, a long-window model with its prompt cache on: the reference (1.00);
* gateway settings (:data:`GATEWAY`, plus any ``--set name=json``): the real gateway (``gateway.create_app``
  under uvicorn) over HTTP in front of the tests' recording upstream, one fresh gateway per setting;
  what the upstream received is what is priced and scored;
* client-side baselines (:data:`CLIENT`), applied to the messages and then sent with no gateway:
  head+tail (each tool output over 4,000 chars keeps its first and last 2,000), masking (tool outputs
  older than the newest five become a one-line placeholder, SWE-agent's LastNObservations) and
  ``litellm.compress()`` before each request (trigger 16k, target 8k);
* oracles (``bench.agent_oracle``): client-side cuts that read the future, keeping first the lines a
  later step uses, then head and tail, at head+tail's 4,000 characters (``oracle``) and at 2,000.

Settings run ``--jobs`` at a time (default 2), each in a process of its own. Cost: ``bench.agent_prices``
(``bench.conversation``'s ``priced`` rules, linear in a run's length) on each request's cl100k tokens
(``rendered`` per message: role marker, then its text, then its tool calls' names and arguments), per
trajectory, summed, relative to
``none`` (``--content-only``: contents only, as ``bench.conversation`` prices a chat; tool definitions are
never priced, and a step the gateway refused prices nothing: it is counted under errors). Evidence: an
entry's ``text`` occurs (whitespace normalised) in what the upstream received for request ``k`` (contents
and tool-call arguments); strict evidence: only entries with ``origin == "tool"``, not
``in_prior_assistant`` and ``msg < k - 1``. Invalid: requests whose tool calls and results do not
pair up (``gateway.compress.messages.pairing``, the gateway's own check). Every price list of
``agent_prices.PRICE_LISTS`` (cache reads 0.1x, 0.05x, 0.025x; 1-hour writes at 2x) is arithmetic on the
one replay: a table per half. ``--pauses N``: the client pauses past the provider's cache lifetime
(``--lifetime``, seconds, which the gateway is told) before about one step in N, drawn with a seed per
run; the replay really waits in front of a gateway, and every setting is priced with the cache empty
after each pause (``cost-warm``: cost mode without the gateway's cold-turn cut, to compare with).
Errors: answers other than 200. Cost with recovery and where each missed strict entry was lost
(first sight, a reset, the last resort): ``bench.agent_losses``. A second table gives strict evidence
and cost on each half of the split (runs at even and odd line indices of the file; ``--half`` runs one
alone). The least a gateway setting could cost when the steps it passed through go as sent and the
rest cost nothing, per half and price list: ``bench.agent_floor``. Writes
``bench/out/agents.json`` and ``agents.png`` (cost against strict evidence; ``--publish`` also copies the
PNG to ``bench/plots/``).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import multiprocessing
import random
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench import agent_floor, agent_losses, agent_oracle, agent_prices
from bench.conversation import FakeUpstream, ServerThread, Tier, parse_tier, rendered
from bench.data import data_dir
from bench.provenance import library_version
from gateway import create_app
from gateway.compress import messages as shape
from gateway.config import parse_config

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
PLOTS = ROOT / "bench" / "plots"
DATA = "agent_traj.dev.jsonl"
MODEL = "agent"

Message = dict[str, Any]

# -- settings ---------------------------------------------------------------------------------

# A gateway setting is an overlay on :func:`gateway_config`'s config: the keys of a model entry
# (``model_info``, ``mixpr``, ``litellm_params``) go to the one model, any other key (``mixpr_settings``,
# ``general_settings``) to the top level; dicts are merged key by key. A new setting is one line.
GATEWAY: dict[str, dict[str, Any]] = {
    "defaults": {"model_info": {"max_input_tokens": 32_000}},
    "cost": {"model_info": {"max_input_tokens": 1_000_000},
             "mixpr": {"compress_above_tokens": 16_000, "budget_tokens": 8_000}},
}
# Gateway settings run by name only (not in the default list): cost mode without the cold-turn reset,
# what --pauses compares cost mode with (issue #46).
MORE: dict[str, dict[str, Any]] = {
    # The defaults on a 1M-window model: what it compresses is what ``--tier`` prices (issue 56).
    "long": {"model_info": {"max_input_tokens": 1_000_000}},
    "cost-warm": {"model_info": {"max_input_tokens": 1_000_000},
                  "mixpr": {"compress_above_tokens": 16_000, "budget_tokens": 8_000,
                            "prefix": {"cold_reset": False}}},
}
LABELS = {
    "none": "no gateway, 1M-window model, cache on",
    "defaults": "gateway, 32k-window model, defaults",
    "cost": "gateway, cost mode (compress above 16k to 8k)",
    "cost-warm": "gateway, cost mode without the cold-turn reset",
    "long": "gateway, 1M-window model, defaults",
    "head-tail": "client: tool outputs over 4,000 chars cut to head + tail",
    "mask": "client: outputs older than the last 5 masked",
    "litellm": "client: litellm.compress() before each request (16k -> 8k)",
}
HEAD_TAIL_ABOVE, HEAD_TAIL_KEEP = 4000, 2000
MASK_KEEP = 5
LITELLM_TRIGGER, LITELLM_TARGET = 16_000, 8_000
QUICK_PER_FRAMEWORK = 1  # --quick: the shortest run of each framework


def gateway_config(upstream: str, overlay: dict[str, Any]) -> dict[str, Any]:
    """A config.yaml-shaped dict: one model named ``agent`` in front of ``upstream``, with ``overlay``."""
    model = {"model_name": MODEL, "litellm_params": {"model": f"openai/{MODEL}", "api_base": upstream,
                                                     "api_key": "x"}}
    # token_margin 0: the simulated provider is priced in tiktoken's tokens, like OpenAI's models.
    config: dict[str, Any] = {
        "mixpr_settings": {"router": "heuristic", "token_margin": 0},
        "general_settings": {"compression_workers": 2, "compression_executor": "thread",
                             "compression_timeout_s": 300},
    }
    for key, value in overlay.items():
        if key in ("model_info", "mixpr", "litellm_params", "managed_server"):
            model[key] = _merged(model.get(key, {}), value)
        else:
            config[key] = _merged(config.get(key, {}), value)
    config["model_list"] = [model]
    return config


def _merged(base: Any, overlay: Any) -> Any:
    if not isinstance(base, dict) or not isinstance(overlay, dict):
        return copy.deepcopy(overlay)
    out = dict(base)
    for key, value in overlay.items():
        out[key] = _merged(base.get(key), value)
    return out


# -- the data ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trajectory:
    id: str
    framework: str
    messages: list[Message]
    tools: list[dict[str, Any]]
    evidence: dict[int, list[dict[str, Any]]]  # msg_index k -> the evidence entries of step k
    index: int = 0  # its line in the file, from 0 (the halves of the split: even and odd)

    @property
    def steps(self) -> list[int]:
        """Every assistant message index that follows a tool or user message: one request each."""
        ms = self.messages
        return [k for k in range(1, len(ms))
                if ms[k]["role"] == "assistant" and ms[k - 1]["role"] in ("tool", "user")]


def trajectories(path: Path | None = None) -> list[Trajectory]:
    path = path or data_dir() / "real" / DATA
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            evidence = {s["msg_index"]: s["evidence"] for s in row["steps"]}
            out.append(Trajectory(row["id"], row["framework"].split()[0], row["messages"],
                                  row.get("tools") or [], evidence, len(out)))
    return out


def half(runs: list[Trajectory], which: str) -> list[Trajectory]:
    """The runs of one half of the split: ``even`` or ``odd`` line index in the file (from 0)."""
    return [t for t in runs if t.index % 2 == (which == "odd")]


def quick(runs: list[Trajectory]) -> list[Trajectory]:
    """The shortest run of each framework (in file order): a fast run that still has every shape."""
    chosen: list[Trajectory] = []
    for framework in dict.fromkeys(t.framework for t in runs):
        ours = sorted((t for t in runs if t.framework == framework), key=lambda t: len(t.steps))
        chosen += ours[:QUICK_PER_FRAMEWORK]
    return chosen


# -- client-side baselines --------------------------------------------------------------------


def head_tail(messages: list[Message], above: int = HEAD_TAIL_ABOVE,
              keep: int = HEAD_TAIL_KEEP) -> list[Message]:
    """Each tool output over ``above`` chars keeps its first and last ``keep`` (cut once, when it arrives)."""
    out = []
    for m in messages:
        text = m.get("content")
        if m["role"] == "tool" and isinstance(text, str) and len(text) > above:
            cut = len(text) - 2 * keep
            m = {**m, "content": f"{text[:keep]}\n[... {cut} characters omitted ...]\n{text[-keep:]}"}
        out.append(m)
    return out


def mask(messages: list[Message], keep: int = MASK_KEEP) -> list[Message]:
    """Tool outputs older than the newest ``keep`` become one line (SWE-agent's LastNObservations)."""
    tools = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    old = set(tools[:-keep] if keep else tools)
    out = []
    for i, m in enumerate(messages):
        if i in old:
            lines = len(str(m.get("content") or "").splitlines())
            m = {**m, "content": f"Old environment output: ({lines} lines omitted)"}
        out.append(m)
    return out


def litellm_compressed(messages: list[Message],
                       tools: list[dict[str, Any]]) -> tuple[list[Message], list[dict]]:
    """``litellm.compress()`` on the request (trigger 16k, target 8k); its retrieval tool is added."""
    from bench.litellm_compress import compress_chat

    return compress_chat(messages, tools, LITELLM_TRIGGER, LITELLM_TARGET)


Client = Callable[[list[Message], list[dict[str, Any]]], tuple[list[Message], list[dict[str, Any]]]]
CLIENT: dict[str, Client] = {
    "none": lambda ms, tools: (ms, tools),
    "head-tail": lambda ms, tools: (head_tail(ms), tools),
    "mask": lambda ms, tools: (mask(ms), tools),
    "litellm": litellm_compressed,
}

# -- evidence -----------------------------------------------------------------------------------


_SPACE = re.compile(r"\s+")
_SEPARATOR = "\n\x00\n"  # between messages: no evidence string spans two of them


def _normal(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def message_text(m: Message) -> str:
    """A message's text as a model reads it: its content, then each tool call's name and arguments."""
    content = m.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    parts = [content if isinstance(content, str) else ""]
    for call in m.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments") or ""
        parts.append(f"{function.get('name', '')}({arguments})")
        try:  # arguments are JSON: their strings unescaped, as the agent wrote them
            decoded = json.loads(arguments)
        except (TypeError, ValueError):
            continue
        parts += [v for v in _strings(decoded)]
    return "\n".join(parts)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


class Tokens:
    """cl100k tokens of rendered messages, each message tokenised once (histories are append-only).

    A message is known by a digest of its JSON; one equal to the message at the same place of the
    previous request (most of a history, every step) takes that one's digest without encoding it again.
    The same content gives the same array object, which ``bench.agent_prices`` compares by identity."""

    def __init__(self, calls: bool = True) -> None:
        self.calls = calls  # False: contents only, as bench.conversation.rendered reads a message
        self._cache: dict[bytes, np.ndarray] = {}
        self._text: dict[bytes, str] = {}
        self._last: tuple[list[Message], list[bytes]] = ([], [])

    def clear(self) -> None:
        self._cache.clear()
        self._text.clear()
        self._last = ([], [])

    @staticmethod
    def _key(m: Message) -> bytes:
        text = json.dumps(m, sort_keys=True, ensure_ascii=False)
        return hashlib.blake2b(text.encode(), digest_size=16).digest()

    def _keys(self, messages: list[Message]) -> list[bytes]:
        before, keys = self._last
        if messages is before:
            return keys
        out = [keys[i] if i < len(before) and (m is before[i] or m == before[i]) else self._key(m)
               for i, m in enumerate(messages)]
        self._last = (messages, out)
        return out

    def parts(self, messages: list[Message]) -> list[np.ndarray]:
        """Each message's tokens (the same array for the same content)."""
        parts = []
        for m, key in zip(messages, self._keys(messages), strict=True):
            if key not in self._cache:
                view = {"role": m.get("role", ""), "content": message_text(m)} if self.calls else m
                self._cache[key] = rendered([view]).astype(np.int32)
            parts.append(self._cache[key])
        return parts

    def request(self, messages: list[Message]) -> np.ndarray:
        parts = self.parts(messages)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)

    def texts(self, messages: list[Message]) -> list[str]:
        """Each message's text, whitespace normalised (the same string objects across requests)."""
        texts = []
        for m, key in zip(messages, self._keys(messages), strict=True):
            if key not in self._text:
                self._text[key] = _normal(message_text(m))
            texts.append(self._text[key])
        return texts

    def haystack(self, messages: list[Message]) -> str:
        return _SEPARATOR.join(self.texts(messages))


def is_strict(entry: dict[str, Any], k: int) -> bool:
    return entry["origin"] == "tool" and not entry["in_prior_assistant"] and entry["msg"] < k - 1


# -- replay -----------------------------------------------------------------------------------


@dataclass
class Sent:
    """What reached the upstream for one step (several requests if the gateway made more than one)."""

    requests: list[list[Message]]
    status: int = 200
    error: str = ""
    headers: dict[str, str] | None = None


@contextmanager
def gateway(overlay: dict[str, Any]) -> Iterator[tuple[httpx.Client, FakeUpstream]]:
    upstream = FakeUpstream().start()
    server = ServerThread(create_app(parse_config(gateway_config(upstream.base_url, overlay)))).start()
    try:
        with httpx.Client(base_url=server.url, timeout=900) as http:
            yield http, upstream
    finally:
        server.stop()
        upstream.stop()


def through_gateway(http: httpx.Client, upstream: FakeUpstream, messages: list[Message],
                    tools: list[dict[str, Any]], max_tokens: int | None) -> Sent:
    upstream.clear()
    body: dict[str, Any] = {"model": MODEL, "messages": messages}
    if tools:
        body["tools"] = tools
    if max_tokens:
        body["max_tokens"] = max_tokens
    try:
        response = http.post("/v1/chat/completions", json=body)
    except httpx.HTTPError as exc:
        return Sent([], 0, f"{type(exc).__name__}: {exc}")
    seen = [r.json["messages"] for r in upstream.received()
            if r.path.endswith("/chat/completions") and not r.is_router_call]
    headers = {k: v for k, v in response.headers.items() if k.startswith("x-mixpr-")}
    if response.status_code != 200:
        return Sent(seen, response.status_code, response.text[:500], headers)
    return Sent(seen, 200, "", headers)


def replay(run: Trajectory, send: Callable[[list[Message], list[dict]], Sent], tokens: Tokens,
           pauses: Pauses | None = None, tier: Tier | None = None) -> dict[str, Any]:
    """Every step of one run: what was sent, priced per request, evidence per step. ``pauses``: the
    steps before which the client pauses past the cache's lifetime (the replay waits there only when
    ``pauses.wait``: a gateway must see the time pass; a client-side cut does not care)."""
    tokens.clear()  # messages never recur across runs; this bounds the cache
    sent: list[agent_prices.Request] = []
    fresh: list[bool] = []  # per request: the provider's cache was empty before it (after a pause)
    steps = []
    founds: dict[int, list[bool]] = {}
    views: dict[int, list[str] | None] = {}  # each message's text as sent at step k (the last request)
    for k in run.steps:
        paused = pauses is not None and k in pauses.steps
        if paused and pauses.wait:
            time.sleep(pauses.seconds)
        step = send(run.messages[:k], run.tools)
        entries = run.evidence.get(k, [])
        found = [False] * len(entries)
        invalid = []
        views[k] = None
        for number, request in enumerate(step.requests):
            parts = tokens.parts(request)
            whole = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
            sent.append(agent_prices.Request(whole, parts))
            fresh.append(paused and number == 0)
            invalid += shape.pairing(request)
            views[k] = tokens.texts(request)
            haystack = _SEPARATOR.join(views[k])
            found = [f or _normal(e["text"]) in haystack for f, e in zip(found, entries, strict=True)]
        founds[k] = found
        strict = [f for f, e in zip(found, entries, strict=True) if is_strict(e, k)]
        headers = step.headers or {}
        steps.append({"k": k, "requests": len(step.requests), "evidence": [sum(found), len(found)],
                      "strict": [sum(strict), len(strict)], "invalid": invalid[:3], "status": step.status,
                      "error": step.error, "action": headers.get("x-mixpr-action"),
                      "reset": headers.get("x-mixpr-reset") == "true", "paused": paused,
                      "cache": headers.get("x-mixpr-cache"),
                      "last_tokens": len(sent[-1].tokens) if step.requests else 0})
    costs = agent_prices.cached(sent, fresh)
    at = 0
    for step in steps:  # each step's own requests' prices (what the provider read from its cache)
        mine, at = costs[at : at + step["requests"]], at + step["requests"]
        step["tokens"] = sum(c.tokens for c in mine)
        step["openai_cached"] = sum(c.openai_read for c in mine)
        step["anthropic_cached"] = sum(c.anthropic_read for c in mine)
    _recovered(run, steps, founds, views, tokens)
    times = [tier.of(c.tokens) if tier else 1.0 for c in costs]  # a request past the tier's line
    lists = {name: {"openai": sum(t * c.openai(prices) for t, c in zip(times, costs, strict=True)),
                    "anthropic": sum(t * c.anthropic(prices) for t, c in zip(times, costs, strict=True))}
             for name, prices in agent_prices.PRICE_LISTS.items()}
    return {"id": run.id, "index": run.index, "framework": run.framework, "steps": steps,
            "tokens": sum(c.tokens for c in costs), **lists["default"], "prices": lists,
            "above_tier": sum(t > 1 for t in times), "requests": len(costs),
            **{key: sum(s[key] for s in steps) for key in RECOVERY}}


@dataclass(frozen=True)
class Pauses:
    """The steps of one run before which the client pauses past the provider's cache lifetime."""

    steps: frozenset[int]
    seconds: float
    wait: bool


def pauses(run: Trajectory, every: int, seconds: float, wait: bool, seed: int = 0) -> Pauses:
    """About one step in ``every`` (never the first, whose cache is empty anyway), drawn with a seed
    of the run's own, so every setting pauses before the same steps."""
    rng = random.Random(f"{seed}:{run.id}")
    chosen = frozenset(k for k in run.steps[1:] if rng.random() < 1 / every) if every else frozenset()
    return Pauses(chosen, seconds, wait)


RECOVERY = ("recovered_tokens", "recovery_openai", "recovery_anthropic")


def _recovered(run: Trajectory, steps: list[dict[str, Any]], founds: dict[int, list[bool]],
               views: dict[int, list[str] | None], tokens: Tokens) -> None:
    """Each step's cost of recovery and where its missed strict entries were lost (``bench.agent_losses``)."""
    resets = {s["k"]: s["reset"] for s in steps}
    where = agent_losses.losses(run.steps, run.evidence, founds, views, resets, _normal, is_strict)
    for step in steps:
        k = step["k"]
        missing = [e for e, f in zip(run.evidence.get(k, []), founds[k], strict=True)
                   if is_strict(e, k) and not f]
        step.update(agent_losses.recovery(missing, lambda i: len(tokens.request([run.messages[i]])),
                                          step["last_tokens"]))
        step["lost"] = where[k]


@dataclass(frozen=True)
class Options:
    """How every setting is replayed: ``max_tokens`` sent to the gateway, whether tool calls are
    priced (``--content-only``: not), and the client's pauses (one step in ``pause_every``, none at 0)
    past a cache lifetime of ``lifetime_s`` (the gateway is told that lifetime)."""

    max_tokens: int | None = None
    price_calls: bool = True
    pause_every: int = 0
    lifetime_s: float = 0.5
    seed: int = 0
    tier: Tier | None = None  # --tier: every setting priced with it, the gateway's model told its prices

    @property
    def pause_s(self) -> float:
        return PAUSE_PAST * self.lifetime_s


PAUSE_PAST = 1.5  # a pause lasts this times the lifetime: past it, whatever the scheduler's jitter


def run_setting(name: str, runs: list[Trajectory], overlays: dict[str, dict[str, Any]],
                options: Options) -> dict[str, Any]:
    started = time.perf_counter()
    tokens = Tokens(options.price_calls)
    results = []
    client_side = name in CLIENT or name in agent_oracle.SIZES
    if client_side:
        for run in runs:
            # an oracle reads the run's future (its evidence), so it is made per run
            client = CLIENT.get(name) or agent_oracle.oracle(run.messages, run.evidence,
                                                             agent_oracle.SIZES[name])

            def send(messages: list[Message], tools: list[dict], client: Client = client) -> Sent:
                return Sent([client(messages, tools)[0]])

            results.append(replay(run, send, tokens, _pauses(run, options, wait=False), options.tier))
            _progress(name, run, results[-1], started)
    else:
        with gateway(_overlay(overlays[name], options)) as (http, upstream):

            def post(messages: list[Message], tools: list[dict]) -> Sent:
                return through_gateway(http, upstream, messages, tools, options.max_tokens)

            for run in runs:
                results.append(replay(run, post, tokens, _pauses(run, options, wait=True), options.tier))
                _progress(name, run, results[-1], started)
    label = LABELS.get(name) or agent_oracle.LABELS.get(name, f"gateway, {name}")
    return {"setting": name, "label": label, "config": None if client_side else overlays.get(name),
            "runs": results, "seconds": time.perf_counter() - started}


def _pauses(run: Trajectory, options: Options, wait: bool) -> Pauses | None:
    if not options.pause_every:
        return None
    return pauses(run, options.pause_every, options.pause_s, wait, options.seed)


def _overlay(overlay: dict[str, Any], options: Options) -> dict[str, Any]:
    """A gateway setting's overlay; with pauses, the model's cache lifetime set to the replay's; with
    a tier, the model's prices carry it."""
    if options.tier is not None:
        overlay = _merged({"model_info": options.tier.model_info()}, overlay)
    if not options.pause_every:
        return overlay
    return _merged({"mixpr": {"prefix": {"cache_lifetime_s": options.lifetime_s}}}, overlay)


def run_settings(names: list[str], runs: list[Trajectory], overlays: dict[str, dict[str, Any]],
                 options: Options, jobs: int, data: Path | None) -> list[dict[str, Any]]:
    """Every setting: the gateway settings ``jobs`` at a time in processes of their own (each its own
    gateway and GIL), the client-side ones here meanwhile (a few seconds each, and whatever this
    process's ``CLIENT`` holds); results in ``names``' order."""
    served = [n for n in names if n not in CLIENT and n not in agent_oracle.SIZES]
    if jobs <= 1 or not served:
        return [run_setting(name, runs, overlays, options) for name in names]
    indices = [run.index for run in runs]
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no threads forked mid-lock
    with ProcessPoolExecutor(max_workers=min(jobs, len(served)), mp_context=context) as pool:
        futures = {name: pool.submit(_setting_job, name, data, indices, overlays, options) for name in served}
        here = {name: run_setting(name, runs, overlays, options) for name in names if name not in futures}
        return [futures[name].result() if name in futures else here[name] for name in names]


def _setting_job(name: str, data: Path | None, indices: list[int], overlays: dict[str, dict[str, Any]],
                 options: Options) -> dict[str, Any]:
    """One setting in a worker process: the runs read again from the file (cheaper than pickled)."""
    chosen = set(indices)
    runs = [run for run in trajectories(data) if run.index in chosen]
    return run_setting(name, runs, overlays, options)


def _progress(name: str, run: Trajectory, result: dict, started: float) -> None:
    print(f"  {name}: {run.id} ({len(result['steps'])} steps) {time.perf_counter() - started:.0f} s",
          file=sys.stderr, flush=True)


# -- the table --------------------------------------------------------------------------------


def totals(result: dict[str, Any], which: str | None = None) -> dict[str, Any]:
    """The sums of one setting's runs (``which``: only the ``even`` or ``odd`` half of the split)."""
    runs = [r for r in result["runs"] if which is None or r["index"] % 2 == (which == "odd")]
    steps = [s for r in runs for s in r["steps"]]
    errors = [s for s in steps if s["status"] != 200]
    lost = {where: sum(s["lost"][where] for s in steps) for where in agent_losses.WHERE}
    return {
        "steps": len(steps),
        "tokens": sum(r["tokens"] for r in runs),
        "openai": sum(r["openai"] for r in runs),
        "anthropic": sum(r["anthropic"] for r in runs),
        "openai_recovered": sum(r["openai"] + r["recovery_openai"] for r in runs),
        "anthropic_recovered": sum(r["anthropic"] + r["recovery_anthropic"] for r in runs),
        "recovered_tokens": sum(r["recovered_tokens"] for r in runs),
        "recovery_steps": sum(s["recovered_tokens"] > 0 for s in steps),
        "lost": lost,
        "evidence": _share(s["evidence"] for s in steps),
        "strict": _share(s["strict"] for s in steps),
        "evidence_n": sum(s["evidence"][1] for s in steps),
        "strict_n": sum(s["strict"][1] for s in steps),
        "invalid": sum(bool(s["invalid"]) for s in steps),
        "first_invalid": next((s["invalid"][0] for s in steps if s["invalid"]), ""),
        "errors": len(errors),
        "first_error": f"{errors[0]['status']}: {errors[0]['error']}" if errors else "",
        "compressed": sum(s["action"] not in (None, "passthrough", "none") for s in steps),
        "resets": sum(s["reset"] for s in steps),
        "above_tier": sum(r.get("above_tier", 0) for r in runs),
        "requests": sum(r.get("requests", 0) for r in runs),
        "paused": sum(s.get("paused", False) for s in steps),
        "cold": sum(s.get("cache") == "cold" for s in steps),
        "cold_unpaused": sum(s.get("cache") == "cold" and not s.get("paused") for s in steps),
        "prices": {name: {rule: sum(r["prices"][name][rule] for r in runs) for rule in RULES}
                   for name in agent_prices.PRICE_LISTS},
    }


RULES = ("openai", "anthropic")  # the two caching rules (bench.agent_prices)


def _share(pairs: Iterator[list[int]]) -> float:
    found = total = 0
    for got, of in pairs:
        found, total = found + got, total + of
    return found / total if total else float("nan")


COSTS = ("tokens", "openai", "anthropic", "openai_recovered", "anthropic_recovered")


def _relative(by: dict[str, dict[str, Any]]) -> bool:
    """Each setting's costs as a share of ``none``'s (``<key>_x``), when ``none`` ran."""
    ref = by.get("none")
    for t in by.values():
        for key in COSTS:
            t[f"{key}_x"] = (t[key] / ref[key] if ref[key] else float("nan")) if ref else t[key] / 1e6
    return ref is not None


def table(results: list[dict[str, Any]]) -> tuple[str, dict[str, dict[str, Any]]]:
    by = {r["setting"]: totals(r) for r in results}
    ref = _relative(by)
    unit = "" if ref else "M"
    lines = ["| setting | tokens sent | cost, OpenAI-style | Anthropic-style | evidence | strict evidence | "
             "with recovery, OpenAI / Anthropic | invalid | errors |", "|---" * 9 + "|"]
    for r in results:
        t = by[r["setting"]]
        cells = [f"{t[f'{key}_x']:.2f}{unit}" for key in COSTS]
        lines.append(f"| {r['label']} | {cells[0]} | {cells[1]} | {cells[2]} | {t['evidence']:.2f} | "
                     f"{t['strict']:.2f} | {cells[3]} / {cells[4]} | {t['invalid']} | {t['errors']} |")
    n = next(iter(by.values()))
    notes = [f"\n{n['steps']} requests, {n['evidence_n']} evidence entries, {n['strict_n']} strict; "
             + ("costs relative to no gateway" if ref else "costs in millions of tokens (no reference row)")
             + "; with recovery: a step missing strict evidence re-sends the outputs that held it "
             "(1.0 a token OpenAI-style, 1.25 Anthropic-style) and reads its prefix once more (0.1)"]
    for r in results:
        t = by[r["setting"]]
        if t["paused"]:
            notes.append(f"{r['setting']}: {t['paused']} pauses past the cache lifetime; the gateway saw "
                         f"{t['cold']} cold turns ({t['cold_unpaused']} without a pause), "
                         f"{t['resets']} resets")
        if t["above_tier"]:
            notes.append(f"{r['setting']}: {t['above_tier']} of {t['requests']} requests past the tier's "
                         "line")
        if t["errors"]:
            notes.append(f"{r['setting']}: first error {t['first_error'][:300]}")
        if t["invalid"]:
            notes.append(f"{r['setting']}: first invalid request: {t['first_invalid']}")
    floor = agent_floor.table(results)  # with none and a gateway setting: the least it could cost
    return "\n".join(lines + notes + ["", losses_table(results, by), "", halves_table(results), "",
                                      prices_table(results)] + (["", floor] if floor else [])), by


def losses_table(results: list[dict[str, Any]], by: dict[str, dict[str, Any]]) -> str:
    """Where the missed strict entries were lost (``bench.agent_losses``): counts, shares of all strict."""
    lines = ["| setting | strict missed | " + " | ".join(agent_losses.WHERE) + " |",
             "|---|---|" + "---|" * len(agent_losses.WHERE)]
    for r in results:
        t = by[r["setting"]]
        n = t["strict_n"] or 1
        missed = sum(t["lost"].values())
        cells = [f"{t['lost'][w]} ({t['lost'][w] / n:.3f})" for w in agent_losses.WHERE]
        lines.append(f"| {r['setting']} | {missed} ({missed / n:.3f}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + ("\n\nShares of all strict entries. first sight: the first request holding "
                               "the message already lacked it; reset: present then, gone by the step; last "
                               "resort: lost at first sight in a request the gateway reported a reset for "
                               "(x-mixpr-reset), so its newest turn was cut (an upper bound).")


def halves_table(results: list[dict[str, Any]]) -> str:
    """Strict evidence and cost (with recovery) on each half of the split (even and odd runs)."""
    halves = {which: {r["setting"]: totals(r, which) for r in results} for which in ("even", "odd")
              if any(run["index"] % 2 == (which == "odd") for run in results[0]["runs"])}
    ref = all([_relative(by) for by in halves.values()])  # every half: all() of a generator stops early
    lines = ["| setting | " + " | ".join(f"{w}: strict | {w}: OpenAI / Anthropic | {w}: with recovery"
                                         for w in halves) + " |", "|---|" + "---|---|---|" * len(halves)]
    for r in results:
        cells = []
        for by in halves.values():
            t = by[r["setting"]]
            cells += [f"{t['strict']:.2f}", f"{t['openai_x']:.2f} / {t['anthropic_x']:.2f}",
                      f"{t['openai_recovered_x']:.2f} / {t['anthropic_recovered_x']:.2f}"]
        lines.append(f"| {r['setting']} | " + " | ".join(cells) + " |")
    runs = " and ".join(f"{w} ({sum(1 for r in results[0]['runs'] if r['index'] % 2 == (w == 'odd'))})"
                        for w in halves)
    return "\n".join(lines) + (f"\n\nHalves: runs at {runs} line indices of the file (from 0); "
                               + ("costs relative to no gateway on the same half" if ref
                                  else "costs in millions of tokens"))


def prices_table(results: list[dict[str, Any]]) -> str:
    """Each setting's cost on each half under every price list (``bench.agent_prices``), relative to
    no gateway under the same list, from the same replay; strict evidence beside it."""
    halves = {which: {r["setting"]: totals(r, which) for r in results} for which in ("even", "odd")
              if any(run["index"] % 2 == (which == "odd") for run in results[0]["runs"])}
    lists = list(agent_prices.PRICE_LISTS)
    lines = ["| setting | half | strict | " + " | ".join(f"{name}: OpenAI / Anthropic" for name in lists)
             + " |", "|---|---|---|" + "---|" * len(lists)]
    for r in results:
        for which, by in halves.items():
            t, ref = by[r["setting"]], by.get("none")
            cells = [" / ".join(_ratio(t, ref, name, rule) for rule in RULES) for name in lists]
            lines.append(f"| {r['setting']} | {which} | {t['strict']:.3f} | " + " | ".join(cells) + " |")
    described = "; ".join(f"{name}: reads {p.read:g}x, writes {p.write:g}x" for name, p
                          in agent_prices.PRICE_LISTS.items())
    return "\n".join(lines) + (f"\n\nPrice lists ({described}; OpenAI-style caching has no write premium), "
                               "relative to no gateway on the same half under the same list.")


def _ratio(t: dict[str, Any], ref: dict[str, Any] | None, name: str, rule: str) -> str:
    if ref is None:
        return f"{t['prices'][name][rule] / 1e6:.2f}M"
    return f"{t['prices'][name][rule] / ref['prices'][name][rule]:.3f}"


def plot(results: list[dict[str, Any]], by: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = by.get("none")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, rule in zip(axes, ("openai", "anthropic"), strict=True):
        for i, r in enumerate(results):
            t = by[r["setting"]]
            x = t[rule] / ref[rule] if ref else t[rule] / 1e6
            ax.scatter([x], [t["strict"]], s=60, color=f"C{i}", label=r["label"])
            ax.annotate(r["setting"], (x, t["strict"]), textcoords="offset points", xytext=(6, 4), fontsize=8)
        ax.set_xlabel(f"cost, {rule}-style" + (" (x no gateway)" if ref else " (M tokens)"))
        ax.set_title(f"{'OpenAI' if rule == 'openai' else 'Anthropic'}-style prompt caching", fontsize=10)
        ax.grid(alpha=0.3)
        ax.set_ylim(-0.02, 1.05)
    axes[0].set_ylabel("strict evidence kept")
    axes[1].legend(fontsize=7, loc="lower right")
    fig.suptitle("Coding-agent runs (dev split): cost against strict evidence", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- the command ------------------------------------------------------------------------------


def pick(text: str) -> set[int]:
    """``--runs``: line indices and ranges (``0-9,12``), inclusive."""
    chosen: set[int] = set()
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            first, _, last = part.partition("-")
            chosen.update(range(int(first), int(last or first) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"want indices and ranges like 0-9,12, got {text!r}") from None
    return chosen


def parse_set(items: list[str]) -> dict[str, dict[str, Any]]:
    """``--set name=json``: a gateway setting (an overlay, see :data:`GATEWAY`)."""
    out = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"--set wants name=json-overlay, got {item!r}")
        try:
            overlay = json.loads(text)
        except ValueError as exc:
            raise SystemExit(f"--set {name}: not JSON: {exc}") from None
        if not isinstance(overlay, dict):
            raise SystemExit(f"--set {name}: the overlay must be a JSON object")
        out[name.strip()] = overlay
    return out


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default = ["none", *GATEWAY, *(n for n in CLIENT if n != "none"), *agent_oracle.DEFAULT]
    parser.add_argument("--settings", help=f"comma-separated, in order (default: {','.join(default)}; "
                        "with --set: those too)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=JSON",
                        help="an extra gateway setting: a config overlay, e.g. "
                        "'wide={\"model_info\": {\"max_input_tokens\": 128000}}'")
    parser.add_argument("--limit", type=int, help="only the first N runs of the file")
    parser.add_argument("--runs", type=pick, help="only these runs (line indices of the file, from 0): "
                        "e.g. 0-9 or 3,7 or 0-4,60")
    parser.add_argument("--half", choices=("even", "odd"), help="only one half of the split: the runs at "
                        "even or odd line indices of the file (from 0)")
    parser.add_argument("--quick", action="store_true", help="the shortest run of each framework")
    parser.add_argument("--max-tokens", type=int, default=None, help="max_tokens sent to the gateway (none)")
    parser.add_argument("--jobs", type=int, default=2, help="settings replayed at once, each in a process "
                        "of its own (default 2: this machine's cores; 1: all in this process)")
    parser.add_argument("--pauses", type=int, default=0, metavar="EVERY",
                        help="the client pauses past the cache lifetime before about one step in EVERY "
                        "(seeded per run; the provider's cache is empty after it): gateway settings really "
                        "wait, and are told the lifetime; every setting is priced with it (default 0: none)")
    parser.add_argument("--lifetime", type=float, default=Options.lifetime_s, metavar="S",
                        help=f"the cache lifetime with --pauses, in seconds; a pause lasts {PAUSE_PAST} "
                        f"times it (default {Options.lifetime_s})")
    parser.add_argument("--content-only", action="store_true",
                        help="price message contents only, not the tool calls' names and arguments")
    parser.add_argument("--tier", type=parse_tier, default=None, metavar="TIMESx@LINEk",
                        help="price every input token of a request past LINE at TIMES, in every setting, and "
                        "give the gateway's model that price (e.g. 2x@32k)")
    parser.add_argument("--data", type=Path, default=None, help=f"a trajectory file (default: real/{DATA})")
    parser.add_argument("--out", type=Path, default=OUT, help="where agents.json and agents.png go")
    parser.add_argument("--publish", action="store_true", help="also copy the PNG to bench/plots/")
    parser.add_argument("--signals", action="store_true", help="instead of the settings: which signals "
                        "predict that a line of a long output is used later (bench.agent_signals)")
    args = parser.parse_args(argv)

    overlays = {**GATEWAY, **MORE, **parse_set(args.set)}
    names = args.settings.split(",") if args.settings else default + [n for n in overlays if n not in default]
    known = [*CLIENT, *agent_oracle.SIZES, *overlays]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(known)}")
    runs = trajectories(args.data)
    if args.half:
        runs = half(runs, args.half)
    if args.quick:
        runs = quick(runs)
    if args.runs is not None:
        runs = [t for t in runs if t.index in args.runs]
    if args.limit:
        runs = runs[: args.limit]
    if args.signals:
        from bench import agent_signals  # it imports this module

        print(agent_signals.report(runs))
        return {}
    started = time.perf_counter()
    print(f"{len(runs)} runs, {sum(len(t.steps) for t in runs)} steps; settings {', '.join(names)}",
          file=sys.stderr, flush=True)
    options = Options(args.max_tokens, not args.content_only, args.pauses, args.lifetime, tier=args.tier)
    results = run_settings(names, runs, overlays, options, args.jobs, args.data)
    text, by = table(results)
    seconds = time.perf_counter() - started
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "agents.json").write_text(json.dumps(
        {"totals": by, "results": results, "library": library_version(), "seconds": seconds,
         "argv": sys.argv[1:] if argv is None else argv}, indent=1))
    plot(results, by, args.out / "agents.png")
    if args.publish:
        shutil.copy(args.out / "agents.png", PLOTS / "agents.png")
    print(f"\nwrote {args.out / 'agents.json'} and agents.png ({seconds:.0f} s)")
    return by


if __name__ == "__main__":
    main()
