"""What a multi-turn conversation costs with provider prompt caching (issue #14).

    /work/venv/bin/python -m bench.conversation            # both conversations, both modes, table + PNG
    /work/venv/bin/python -m bench.conversation --sweep    # headroom x evidence on the contracts, cost mode

Two conversations from the dev split (``../shared/data/real/``): (a) four CUAD contracts pasted in the
first message, then ten questions, one a turn; (b) a LoCoMo chat sent as real chat turns (the last
speaker is the assistant), then ten of its questions as later user turns. Each reply appended to the
conversation is the gold answer (what a good model would say). Every request goes through the real
gateway over HTTP to the tests' recording upstream; three policies:

* no gateway: the client's messages as they are, to a model whose window holds them;
* today: the gateway compressing each turn for its newest question (``prefix.enabled: false``);
* prefix: the gateway sending each message's form once, then appending (``gateway.conversation.history``).

Two settings: cost mode (trigger 16k, budget 8k, 1M window) and window mode (32k window, defaults).
Provider caching is simulated on what the upstream received, in cl100k tokens of the messages laid out
one after the other (role markers, then text): OpenAI-style, the longest prefix shared with any earlier
request is read at 0.1x once it is 1,024 tokens, in 128-token steps; Anthropic-style, a breakpoint at
the end of every request: the longest earlier request that is a prefix of this one is read at 0.1x, the
rest written at 1.25x (nothing is cached under 1,024 tokens). Evidence: every gold string (the contract
clause, LoCoMo's evidence turns) occurs in the upstream request, whitespace normalised. With recovery:
a turn whose evidence did not arrive re-sends the original part that held it (the contract; the chat
turn), uncached, beside one more cached read of the turn (``recovery``).
Writes bench/out/conversation.json and conversation.png (``--publish``: also bench/plots/).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(ROOT / "tests" / "gateway"))  # the tests' recording upstream and server thread

import httpx  # noqa: E402
import numpy as np  # noqa: E402
from conftest import ServerThread  # noqa: E402
from fake_upstream import FakeUpstream  # noqa: E402

from bench.data import data_dir  # noqa: E402
from bench.provenance import library_version  # noqa: E402
from gateway import create_app  # noqa: E402
from gateway.config import parse_config  # noqa: E402
from mixpr.tokens import encoding_for  # noqa: E402

OUT = ROOT / "bench" / "out"
PLOTS = ROOT / "bench" / "plots"
CONTRACTS = (0, 1, 2, 4)  # the old single conversation (``--conversations contracts``): ~65k tokens
TURNS = 10  # the old single conversations' turns
# The protocol (issue 39): conversations over pasted documents built as the held-out ones are. The
# even-indexed documents of each file; three contract conversations of 2, 3 and 4 documents, two of
# five Natural Questions pages; every answerable question of its documents, round robin over them,
# one a turn; 12 turns; seed 7 shuffles (documents, then each document's questions).
PROTOCOL_TURNS = 12
SEED = 7
PROTOCOL = (("contracts", "legal_contract_qa.dev.jsonl", (2, 3, 4)),
            ("pages", "natural_question.dev.jsonl", (5, 5)))
# Issue 45: the protocol at the size users paste. Every conversation 64k-150k tokens: each starts from
# the next documents of one seeded order of the whole dev file (round robin, so the conversations
# share as few documents as they can) and takes documents until it reaches REAL_MIN tokens, skipping
# one that would take it past REAL_MAX. Four conversations of contracts, four of pages (the dev split's
# papers, 2k-5k tokens each, are too few to reach 64k more than once).
REAL_MIN, REAL_MAX = 64_000, 150_000
REAL = (("contracts", "legal_contract_qa.dev.jsonl", 4), ("pages", "natural_question.dev.jsonl", 4))
# The upper end of what users paste (the held-out conversations reach 145k): two of each kind of
# 120k-150k (``--conversations large``), from another seeded order of the same files.
LARGE_MIN, LARGE_COUNT = 120_000, 2
CHATS = 5  # LoCoMo chats of the dev split, each with PROTOCOL_TURNS questions as later user turns
MODES = {"cost": {"model_info": {"max_input_tokens": 1_000_000},
                  "mixpr": {"compress_above_tokens": 16_000, "budget_tokens": 8_000}},
         "window": {"model_info": {"max_input_tokens": 32_000}, "mixpr": {}},
         # A long-window model with the defaults: what it compresses is what ``--tier`` prices (issue 56).
         "long": {"model_info": {"max_input_tokens": 1_000_000}, "mixpr": {}},
         "w100": {"model_info": {"max_input_tokens": 100_000}, "mixpr": {"max_budget_tokens": 100_000}}}
# ``window@8k``: the 32k window, every request past it cut to a budget of 8k tokens. With the
# per-question policy, what compressing each request for its own question buys at a given spend
# (issue 45 compares the default with it at 31k, which costs 2.2-2.5x no gateway).
_AT = re.compile(r"(?P<mode>[a-z]+)@(?P<k>[1-9]\d*)k")
POLICIES = ("none", "today", "prefix")  # today: each request compressed for its own question
MIN_CACHED, STEP, READ, WRITE = 1024, 128, 0.1, 1.25
# ``--tier 5x@100k`` (issue 56): every input token of a request past the line is billed at that multiple
# (fresh, cached and written alike, as LiteLLM's ``*_above_<N>k_tokens`` prices do), in every policy,
# no gateway included; the gateway's models are told the same prices in their ``model_info``.
_TIER = re.compile(r"(?P<times>\d+(?:\.\d+)?)x@(?P<k>[1-9]\d*)k")


@dataclass(frozen=True)
class Tier:
    times: float  # the multiple on every input token of a request past the line
    above: int  # tokens

    @property
    def label(self) -> str:
        return f"{self.times:g}x@{self.above // 1000}k"

    def model_info(self) -> dict[str, float]:
        """The prices a model with this tier carries (relative units: input 1e-6 a token)."""
        base = {"input_cost_per_token": 1e-6, "cache_read_input_token_cost": READ * 1e-6,
                "cache_creation_input_token_cost": WRITE * 1e-6}
        line = f"_above_{self.above // 1000}k_tokens"
        return {**base, **{key + line: price * self.times for key, price in base.items()}}

    def of(self, tokens: int) -> float:
        return self.times if tokens > self.above else 1.0


def parse_tier(text: str) -> Tier:
    """``5x@100k``: ValueError for anything else."""
    found = _TIER.fullmatch(text)
    if found is None:
        raise ValueError(f"unknown tier {text!r}: a multiple and a line, e.g. 5x@100k")
    return Tier(float(found["times"]), int(found["k"]) * 1000)


@dataclass(frozen=True)
class Conversation:
    name: str
    requests: list[list[dict[str, Any]]]  # the client's messages, turn by turn
    evidence: list[list[str]]  # per turn: every string that must reach the upstream
    parts: tuple[str, ...] = ()  # what a client re-sends when a turn's evidence did not arrive (recovery)


def _rows(name: str) -> list[dict[str, Any]]:
    path = data_dir() / "real" / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def protocol() -> list[Conversation]:
    """The five document conversations of issue 39's protocol, on the dev split."""
    rng = random.Random(SEED)
    out = []
    for kind, name, sizes in PROTOCOL:
        rows = _rows(name)[::2]  # the even-indexed documents
        unique = list({r["input"]: r for r in rows}.values())  # a document listed twice counts once
        for number, size in enumerate(sizes):
            picked = rng.sample(unique, size)
            out.append(documents(f"{kind}-{number}", picked, rng))
    return out


def real_size(minimum: int = REAL_MIN, count: int | None = None, label: str = "",
              seed: int | None = None) -> list[Conversation]:
    """Issue 45's protocol: eight document conversations of 64k-150k tokens (four of contracts, four of
    pages), every answerable question of their documents round robin, 12 turns, seed 7. ``minimum``
    and ``count`` (per kind) for ``large``: the seed then follows the minimum. ``seed``: another draw
    of the same protocol (``--conversations real@8``), more dev conversations to check a change on."""
    rng = random.Random(seed if seed is not None else SEED if minimum == REAL_MIN else minimum)
    encoding = encoding_for(None)
    out = []
    for kind, name, default in REAL:
        unique = list({r["input"]: r for r in _rows(name)}.values())
        rng.shuffle(unique)
        sizes = [len(encoding.encode_ordinary(r["input"])) for r in unique]
        cursor = 0
        for number in range(count or default):
            picked, total, start = [], 0, cursor
            while total < minimum and cursor < start + len(unique):
                i = cursor % len(unique)
                cursor += 1
                if total + sizes[i] <= REAL_MAX:
                    picked.append(unique[i])
                    total += sizes[i]
            out.append(documents(f"{kind}-{label}{number}-{total // 1000}k", picked, rng))
    return out


def documents(name: str, rows: list[dict[str, Any]], rng: random.Random) -> Conversation:
    """``rows``' documents pasted at once with the first question, then one question a turn: every
    answerable question of each document (shuffled), round robin over the documents."""
    asked = []
    for r in rows:
        pairs = [(q, a) for q, a in zip(r["instructions"], r["outputs"], strict=True)
                 if a and a in r["input"]]
        rng.shuffle(pairs)
        asked.append(pairs)
    picked = [pair for row in itertools.zip_longest(*asked) for pair in row if pair][:PROTOCOL_TURNS]
    document = "\n\n".join(r["input"] for r in rows)
    conv = _with_questions(name, [], picked, [[a] for _, a in picked], document)
    return replace(conv, parts=tuple(r["input"] for r in rows))  # a missed answer: its document again


def chats(count: int = CHATS) -> list[Conversation]:
    """The dev split's LoCoMo chats sent as real turns, each followed by ``PROTOCOL_TURNS`` questions."""
    return [locomo(i, PROTOCOL_TURNS) for i in range(count)]


def contracts() -> Conversation:
    rows = [_rows("legal_contract_qa.dev.jsonl")[i] for i in CONTRACTS]
    asked = [[(q, a) for q, a in zip(r["instructions"], r["outputs"], strict=True) if a and a in r["input"]]
             for r in rows]
    picked = [asked[i % len(rows)][i // len(rows)] for i in range(TURNS)]  # round robin over contracts
    document = "\n\n".join(r["input"] for r in rows)
    conv = _with_questions("contracts", [], picked, [[a] for _, a in picked], document)
    return replace(conv, parts=tuple(r["input"] for r in rows))  # a missed answer: its contract again


def locomo(index: int = 0, turns: int = TURNS) -> Conversation:
    row = _rows("locomo.dev.jsonl")[index]
    eligible = [i for i, spans in enumerate(row["evidence_spans"]) if spans and row["category"][i] != 5]
    chosen = eligible[:: max(1, len(eligible) // turns)][:turns]
    picked = [(row["instructions"][i], row["outputs"][i]) for i in chosen]
    evidence = [[row["input"][s:e] for s, e in row["evidence_spans"][i]] for i in chosen]
    history = chat_turns(row["input"])
    conv = _with_questions(f"locomo-{index}", history, picked, evidence, None)
    return replace(conv, parts=tuple(m["content"] for m in history))  # a missed turn: that turn again


def chat_turns(text: str) -> list[dict[str, Any]]:
    """A LoCoMo chat as chat messages: the last speaker is the assistant, date lines open the next turn."""
    lines = [line for line in text.split("\n") if line.strip()]
    speakers = [line.split(":", 1)[0] for line in lines if not line.startswith("DATE:")]
    assistant = speakers[-1]
    messages: list[dict[str, Any]] = []
    pending = ""
    for line in lines:
        if line.startswith("DATE:"):
            pending += line + "\n"
            continue
        role = "assistant" if line.split(":", 1)[0] == assistant else "user"
        if messages and messages[-1]["role"] == role and not pending:
            messages[-1]["content"] += "\n" + line
        else:
            messages.append({"role": role, "content": pending + line})
        pending = ""
    return messages


def _with_questions(name: str, history: list[dict[str, Any]], picked: list[tuple[str, str]],
                    evidence: list[list[str]], document: str | None) -> Conversation:
    messages = [{"role": "system", "content": "Answer from the conversation, quoting it where you can."},
                *history]
    requests = []
    for i, (question, answer) in enumerate(picked):
        content = f"{document}\n\n{question}" if document and i == 0 else question
        messages = [*messages, {"role": "user", "content": content}]
        requests.append(messages)
        messages = [*messages, {"role": "assistant", "content": answer}]
    return Conversation(name, requests, evidence)


# -- the gateway ------------------------------------------------------------------------------


def mode_settings(mode: str) -> dict[str, Any]:
    """A mode's model settings: one of ``MODES``, or ``window@8k`` (that mode with a budget in
    thousands of tokens); ValueError for any other name."""
    if mode in MODES:
        return MODES[mode]
    found = _AT.fullmatch(mode)
    if found is None or found["mode"] not in MODES:
        raise ValueError(f"unknown mode {mode!r}: {', '.join(MODES)}, or one of them @Nk (window@8k)")
    settings = MODES[found["mode"]]
    return {**settings, "mixpr": {**settings["mixpr"], "budget_tokens": int(found["k"]) * 1000}}


def config(upstream: str, headroom: float | None, evidence: float | None,
           overrides: dict[str, Any] | None = None, modes: tuple[str, ...] = tuple(MODES),
           tier: Tier | None = None) -> dict[str, Any]:
    # --headroom: the share of the room left free after a reset (prefix.reset_fill = 1 - headroom).
    fill = None if headroom is None else 1 - headroom
    prefix = {k: v for k, v in (("reset_fill", fill), ("evidence", evidence)) if v is not None}
    prefix |= overrides or {}
    models = []
    for mode, settings in ((m, mode_settings(m)) for m in modes):
        for policy in ("today", "prefix"):
            name = f"{mode}-{policy}"
            mixpr = {**settings["mixpr"], "prefix": {"enabled": policy == "prefix", **prefix}}
            info = {**settings["model_info"], **(tier.model_info() if tier else {})}
            models.append({"model_name": name, "model_info": info, "mixpr": mixpr,
                           "litellm_params": {"model": f"openai/{name}", "api_base": upstream,
                                              "api_key": "x"}})
    # token_margin 0: the simulated provider is priced in tiktoken's tokens, like OpenAI's models.
    return {"model_list": models, "mixpr_settings": {"router": "heuristic", "token_margin": 0},
            "general_settings": {"compression_workers": 2, "compression_executor": "thread",
                                 "compression_timeout_s": 300}}


Sent = list[tuple[list[dict[str, Any]], dict[str, str]]]


def through_gateway(http: httpx.Client, upstream: FakeUpstream, model: str,
                    requests: list[list[dict[str, Any]]]) -> Sent:
    """Each request through the gateway: what the upstream received, and the gateway's headers. A
    request the gateway refused (a 4xx) reached nothing: its messages are [] and its headers carry
    ``refused`` (the status and the gateway's message)."""
    sent: Sent = []
    for messages in requests:
        upstream.clear()
        response = http.post("/v1/chat/completions", json={"model": model, "messages": messages,
                                                            "max_tokens": 256})
        if 400 <= response.status_code < 500:
            sent.append(([], {"refused": f"{response.status_code} {response.text[:300]}"}))
            continue
        response.raise_for_status()
        [seen] = [r.json["messages"] for r in upstream.received() if r.path.endswith("/chat/completions")]
        sent.append((seen, dict(response.headers)))
    return sent


# -- pricing ----------------------------------------------------------------------------------


def rendered(messages: list[dict[str, Any]]) -> np.ndarray:
    """The request's tokens: each message as a role marker, then its text."""
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<|{m['role']}|>\n{content or ''}\n")
    return np.array(encoding_for(None).encode_ordinary("".join(parts)), dtype=np.int64)


def shared_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def priced(requests: list[np.ndarray], tier: Tier | None = None) -> list[dict[str, float]]:
    """Per request: tokens, OpenAI-style and Anthropic-style cached tokens and effective cost (at the
    ``tier``'s multiple for a request past its line)."""
    out = []
    for i, tokens in enumerate(requests):
        n = len(tokens)
        longest = max((shared_prefix(tokens, earlier) for earlier in requests[:i]), default=0)
        openai_read = (longest // STEP) * STEP if longest >= MIN_CACHED else 0
        whole = [len(e) for e in requests[:i] if len(e) >= MIN_CACHED and shared_prefix(tokens, e) == len(e)]
        read = max(whole, default=0)
        written = n - read if n >= MIN_CACHED else 0
        anthropic = READ * read + WRITE * written + (n if n < MIN_CACHED else 0)
        times = tier.of(n) if tier else 1.0
        out.append({"tokens": n, "openai_cached": openai_read,
                    "openai": times * (n - openai_read + READ * openai_read),
                    "anthropic_cached": read, "anthropic": times * anthropic, "above_tier": times > 1})
    return out


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def reached(messages: list[dict[str, Any]], needed: list[str]) -> bool:
    return not missing(messages, needed)


def missing(messages: list[dict[str, Any]], needed: list[str]) -> list[str]:
    """The strings of ``needed`` that did not reach the upstream in ``messages``."""
    text = _normal(json.dumps([m.get("content") for m in messages], ensure_ascii=False))
    text = _normal(json.loads(json.dumps(text)))  # escaped newlines and quotes as in the JSON body
    return [s for s in needed if _normal(json.dumps(s, ensure_ascii=False)[1:-1]) not in text]


def holders(strings: list[str], parts: tuple[str, ...]) -> list[int]:
    """The original parts a client re-sends for ``strings`` (each part once): the first part that holds
    each string, or, for a string spanning parts (LoCoMo's evidence turns), the first holding each of its
    lines."""
    normal = [_normal(p) for p in parts]
    found: set[int] = set()
    for s in strings:
        whole = any(_normal(s) in p for p in normal)
        pieces = [s] if whole else [line for line in s.split("\n") if line.strip()]
        for piece in pieces:
            found.update(next(([i] for i, p in enumerate(normal) if _normal(piece) in p), []))
    return sorted(found)


def recovery(messages: list[dict[str, Any]], needed: list[str], parts: tuple[str, ...],
             tokens: int) -> dict[str, float]:
    """A turn whose evidence did not arrive: the parts that held it sent again, uncached (1.0 a token
    OpenAI-style, 1.25 Anthropic-style: a cache write), plus one more cached read of the turn (0.1 x its
    tokens), as ``bench.agent_losses`` prices an agent's re-run tools."""
    lost = missing(messages, needed)
    if not lost:
        return {"recovery_openai": 0.0, "recovery_anthropic": 0.0}
    resent = sum(len(rendered([{"role": "user", "content": parts[i]}])) for i in holders(lost, parts))
    return {"recovery_openai": resent + READ * tokens, "recovery_anthropic": WRITE * resent + READ * tokens}


# -- running ------------------------------------------------------------------------------------


def run(conversations: list[Conversation], modes: list[str], headroom: float | None,
        evidence: float | None, policies: tuple[str, ...] = POLICIES,
        overrides: dict[str, Any] | None = None, tier: Tier | None = None) -> list[dict[str, Any]]:
    upstream = FakeUpstream().start()
    settings = config(upstream.base_url, headroom, evidence, overrides, tuple(modes), tier)
    server = ServerThread(create_app(parse_config(settings))).start()
    results = []
    try:
        with httpx.Client(base_url=server.url, timeout=600) as http:
            for conv in conversations:
                for mode in modes:
                    for policy in policies:
                        results.append(one(http, upstream, conv, mode, policy, tier))
    finally:
        server.stop()
        upstream.stop()
    return results


def one(http: httpx.Client, upstream: FakeUpstream, conv: Conversation, mode: str, policy: str,
        tier: Tier | None = None) -> dict:
    started = time.perf_counter()
    if policy == "none":
        sent = [(messages, {}) for messages in conv.requests]
    else:
        sent = through_gateway(http, upstream, f"{mode}-{policy}", conv.requests)
    turns = priced([rendered(messages) for messages, _ in sent], tier)
    for turn, (messages, headers), needed, request in zip(turns, sent, conv.evidence, conv.requests,
                                                          strict=True):
        turn["evidence"] = bool(messages) and reached(messages, needed)
        turn["refused"] = headers.get("refused", "")
        turn.update(recovery(messages, needed, conv.parts, turn["tokens"]))
        turn["reset"] = headers.get("x-mixpr-reset") == "true"
        turn["reused"] = int(headers.get("x-mixpr-prefix-reused-tokens", 0))
        turn["unchanged"] = messages == request
    seconds = time.perf_counter() - started
    print(f"{conv.name} {mode} {policy}: {seconds:.1f} s {row(turns)}", file=sys.stderr, flush=True)
    return {"conversation": conv.name, "mode": mode, "policy": policy, "turns": turns, "seconds": seconds}


def row(turns: list[dict]) -> str:
    """Which turns kept their evidence: ``x`` kept, ``.`` missed, ``R`` refused."""
    return "".join("R" if t.get("refused") else "x" if t["evidence"] else "." for t in turns)


def totals(result: dict | list[dict], half: int | None = None) -> dict[str, float]:
    """Sums over one result's turns, or over several results' (a set of conversations); ``half``: only
    the turns of that parity (1: turns 1, 3, 5, ...; 0: turns 2, 4, ...), for the evidence."""
    results = result if isinstance(result, list) else [result]
    turns = [t for r in results for t in r["turns"]]
    asked = [t for r in results for n, t in enumerate(r["turns"], 1) if half is None or n % 2 == half]
    return {"tokens": sum(t["tokens"] for t in turns), "openai": sum(t["openai"] for t in turns),
            "anthropic": sum(t["anthropic"] for t in turns), "evidence": sum(t["evidence"] for t in asked),
            "openai_recovered": sum(t["openai"] + t["recovery_openai"] for t in turns),
            "anthropic_recovered": sum(t["anthropic"] + t["recovery_anthropic"] for t in turns),
            "resets": sum(t["reset"] for t in turns), "refused": sum(bool(t.get("refused")) for t in turns),
            "above_tier": sum(t.get("above_tier", False) for t in turns),
            "unchanged": sum(t.get("unchanged", True) for t in turns), "requests": len(turns),
            "turns": len(asked)}


def group(name: str) -> str:
    """The set a conversation belongs to: ``contracts-1`` -> documents, ``contracts-0-81k`` ->
    real-size contracts, ``contracts-s8-0-67k`` (``real@8``) -> reseeded contracts, ``locomo-3`` ->
    chats."""
    if name.startswith("locomo"):
        return "chats"
    parts = name.split("-")
    if len(parts) == 4 and re.fullmatch(r"s\d+", parts[1]):
        return f"reseeded {parts[0]}"
    if len(parts) != 3:
        return "documents"
    return f"large {parts[0]}" if parts[1].startswith("large") else f"real-size {parts[0]}"


def groups(name: str) -> list[str]:
    """Every set a conversation is summed in: its kind, and all real-size (large, reseeded)
    documents together."""
    kind = group(name)
    size = kind.split(" ")[0]
    return [kind, f"{size} documents"] if size in ("real-size", "large", "reseeded") else [kind]


def table(results: list[dict]) -> str:
    """Per conversation, then per set (documents, chats): cost with and without recovery as a share
    of no gateway, evidence on all turns and on each half (odd, even turns), refusals, resets."""
    lines = ["| conversation | mode | policy | tokens sent | OpenAI-style (x none) | "
             "Anthropic-style (x none) | with recovery, OpenAI / Anthropic | evidence | odd / even turns | "
             "refused | resets | above tier | as sent | turns |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keyed: dict[tuple[str, str, str], list[dict]] = {}
    for r in results:
        keyed.setdefault((r["conversation"], r["mode"], r["policy"]), []).append(r)
    for r in results:
        for kind in groups(r["conversation"]):
            keyed.setdefault((f"all {kind}", r["mode"], r["policy"]), []).append(r)
    for (conv, mode, policy), rs in keyed.items():
        t, none = totals(rs), totals(keyed[(conv, mode, "none")])
        odd, even = totals(rs, 1), totals(rs, 0)
        cells = [f"{t[k] / none[k]:.2f}" for k in ("openai", "anthropic")]
        recovered = " / ".join(f"{t[f'{k}_recovered'] / none[f'{k}_recovered']:.2f}"
                               for k in ("openai", "anthropic"))
        turns = row(rs[0]["turns"]) if len(rs) == 1 else ""
        lines.append(f"| {conv} | {mode} | {policy} | {t['tokens'] / 1000:.0f}k | {cells[0]} | {cells[1]} | "
                     f"{recovered} | {t['evidence'] / t['turns']:.2f} ({t['evidence']}/{t['turns']}) | "
                     f"{odd['evidence'] / odd['turns']:.2f} / {even['evidence'] / even['turns']:.2f} | "
                     f"{t['refused']} | {t['resets']} | {t['above_tier']} | "
                     f"{t['unchanged']}/{t['requests']} | `{turns}` |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    """Cumulative effective cost by turn, summed over each set's conversations: one panel per set,
    mode and pricing rule, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(group(r["conversation"]), r["mode"]) for r in results})
    fig, axes = plt.subplots(2, len(panels), figsize=(4.2 * len(panels), 7), squeeze=False)
    for col, (kind, mode) in enumerate(panels):
        for row_number, rule in enumerate(("openai", "anthropic")):
            ax = axes[row_number][col]
            for policy in POLICIES:
                chosen = [r for r in results if (group(r["conversation"]), r["mode"], r["policy"])
                          == (kind, mode, policy)]
                if not chosen:
                    continue
                costs = np.cumsum(np.sum([[t[rule] for t in r["turns"]] for r in chosen], axis=0)) / 1000
                hit = totals(chosen)
                ax.plot(range(1, len(costs) + 1), costs, marker="o",
                        label=f"{policy} (evidence {hit['evidence'] / hit['turns']:.2f})")
            ax.set_title(f"{kind}, {mode} mode, {rule}-style", fontsize=9)
            ax.set_xlabel("turn")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("cumulative effective cost (k tokens)")
    axes[1][0].set_ylabel("cumulative effective cost (k tokens)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sweep(evidences: list[float], modes: list[str]) -> None:
    """``prefix.evidence`` on the protocol's document conversations: cost and evidence per setting."""
    conversations = protocol()
    print("| evidence share | mode | OpenAI-style x none | Anthropic-style x none | evidence | odd / even |")
    print("|---|---|---|---|---|---|")
    for e in evidences:
        results = run(conversations, modes, None, e, policies=("none", "prefix"))
        for mode in modes:
            none = totals([r for r in results if r["mode"] == mode and r["policy"] == "none"])
            new = [r for r in results if r["mode"] == mode and r["policy"] == "prefix"]
            t, odd, even = totals(new), totals(new, 1), totals(new, 0)
            ratios = [t[k] / none[k] for k in ("openai", "anthropic")]
            print(f"| {e} | {mode} | {ratios[0]:.2f} | {ratios[1]:.2f} | {t['evidence'] / t['turns']:.2f} | "
                  f"{odd['evidence'] / odd['turns']:.2f} / {even['evidence'] / even['turns']:.2f} |",
                  flush=True)


def conversations_named(names: str) -> list[Conversation]:
    """``real`` (issue 45's eight real-size ones), ``real@N`` (eight more, drawn with seed N),
    ``large`` (four of 120k-150k), ``documents`` (issue 39's five), ``chats`` (the LoCoMo five),
    ``contracts`` and ``locomo`` (the old single conversations), or single ones by name
    (``contracts-1``, ``locomo-3``)."""
    out: list[Conversation] = []
    for name in names.split(","):
        if name == "documents":
            out += protocol()
        elif name == "real":
            out += real_size()
        elif name == "large":
            out += real_size(LARGE_MIN, LARGE_COUNT, "large")
        elif name.startswith("real@"):
            seed = int(name.removeprefix("real@"))
            out += real_size(label=f"s{seed}-", seed=seed)
        elif name == "chats":
            out += chats()
        elif name == "contracts":
            out.append(contracts())
        elif name == "locomo":
            out.append(locomo())
        else:
            everything = [*real_size(), *real_size(LARGE_MIN, LARGE_COUNT, "large"), *protocol(), *chats()]
            out += [c for c in everything if c.name == name]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--headroom", type=float, default=None,
                        help="room left after a reset: reset_fill = 1 - this")
    parser.add_argument("--evidence", type=float, default=None, help="prefix.evidence (default: the default)")
    parser.add_argument("--conversations", default="real,documents,chats",
                        help="real, real@SEED, large, documents, chats, contracts, locomo, or names such as "
                             "contracts-1")
    parser.add_argument("--modes", default="cost,window",
                        help="cost, window, or either with a budget: window@8k (per-question spend curves)")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any mixpr.prefix setting, e.g. --set document_keep=0.1 (JSON values)")
    parser.add_argument("--sweep", action="store_true", help="prefix.evidence on the documents, both modes")
    parser.add_argument("--tier", type=parse_tier, default=None, metavar="TIMESx@LINEk",
                        help="price every input token of a request past LINE at TIMES, in every policy, and "
                             "give the gateway's models that price (e.g. 5x@100k)")
    parser.add_argument("--out", default="conversation", help="name of the JSON and PNG under bench/out/")
    parser.add_argument("--publish", action="store_true", help="also copy the PNG to bench/plots/")
    args = parser.parse_args(argv)
    for mode in args.modes.split(","):
        try:
            mode_settings(mode)
        except ValueError as exc:
            parser.error(str(exc))
    if args.sweep:
        sweep([0.05, 0.1, 0.2, 0.4], args.modes.split(","))
        return
    conversations = conversations_named(args.conversations)
    started = time.perf_counter()
    overrides = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)}
    results = run(conversations, args.modes.split(","), args.headroom, args.evidence,
                  policies=tuple(args.policies.split(",")), overrides=overrides, tier=args.tier)
    print(table(results))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{args.out}.json").write_text(json.dumps({"results": results, "library": library_version(),
                                                      "seconds": time.perf_counter() - started}, indent=1))
    plot(results, OUT / f"{args.out}.png")
    if args.publish:
        shutil.copy(OUT / f"{args.out}.png", PLOTS / "conversation.png")
    print(f"\nwrote {OUT / args.out}.json and .png ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
