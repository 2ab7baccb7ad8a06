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
import json
import os
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
CONTRACTS = (0, 1, 2, 4)  # four contracts of the dev split, ~65k tokens together
TURNS = 10
MODES = {"cost": {"model_info": {"max_input_tokens": 1_000_000},
                  "mixpr": {"compress_above_tokens": 16_000, "budget_tokens": 8_000}},
         "window": {"model_info": {"max_input_tokens": 32_000}, "mixpr": {}}}
POLICIES = ("none", "today", "prefix")
MIN_CACHED, STEP, READ, WRITE = 1024, 128, 0.1, 1.25


@dataclass(frozen=True)
class Conversation:
    name: str
    requests: list[list[dict[str, Any]]]  # the client's messages, turn by turn
    evidence: list[list[str]]  # per turn: every string that must reach the upstream
    parts: tuple[str, ...] = ()  # what a client re-sends when a turn's evidence did not arrive (recovery)


def _rows(name: str) -> list[dict[str, Any]]:
    path = data_dir() / "real" / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def contracts() -> Conversation:
    rows = [_rows("legal_contract_qa.dev.jsonl")[i] for i in CONTRACTS]
    asked = [[(q, a) for q, a in zip(r["instructions"], r["outputs"], strict=True) if a and a in r["input"]]
             for r in rows]
    picked = [asked[i % len(rows)][i // len(rows)] for i in range(TURNS)]  # round robin over contracts
    document = "\n\n".join(r["input"] for r in rows)
    conv = _with_questions("contracts", [], picked, [[a] for _, a in picked], document)
    return replace(conv, parts=tuple(r["input"] for r in rows))  # a missed answer: its contract again


def locomo(index: int = 0) -> Conversation:
    row = _rows("locomo.dev.jsonl")[index]
    eligible = [i for i, spans in enumerate(row["evidence_spans"]) if spans and row["category"][i] != 5]
    chosen = eligible[:: max(1, len(eligible) // TURNS)][:TURNS]
    picked = [(row["instructions"][i], row["outputs"][i]) for i in chosen]
    evidence = [[row["input"][s:e] for s, e in row["evidence_spans"][i]] for i in chosen]
    history = chat_turns(row["input"])
    conv = _with_questions("locomo", history, picked, evidence, None)
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


def config(upstream: str, headroom: float | None, evidence: float | None) -> dict[str, Any]:
    # --headroom: the share of the room left free after a reset (prefix.reset_fill = 1 - headroom).
    fill = None if headroom is None else 1 - headroom
    prefix = {k: v for k, v in (("reset_fill", fill), ("evidence", evidence)) if v is not None}
    models = []
    for mode, settings in MODES.items():
        for policy in ("today", "prefix"):
            name = f"{mode}-{policy}"
            mixpr = {**settings["mixpr"], "prefix": {"enabled": policy == "prefix", **prefix}}
            models.append({"model_name": name, "model_info": settings["model_info"], "mixpr": mixpr,
                           "litellm_params": {"model": f"openai/{name}", "api_base": upstream,
                                              "api_key": "x"}})
    # token_margin 0: the simulated provider is priced in tiktoken's tokens, like OpenAI's models.
    return {"model_list": models, "mixpr_settings": {"router": "heuristic", "token_margin": 0},
            "general_settings": {"compression_workers": 2, "compression_executor": "thread",
                                 "compression_timeout_s": 300}}


Sent = list[tuple[list[dict[str, Any]], dict[str, str]]]


def through_gateway(http: httpx.Client, upstream: FakeUpstream, model: str,
                    requests: list[list[dict[str, Any]]]) -> Sent:
    """Each request through the gateway: what the upstream received, and the gateway's headers."""
    sent = []
    for messages in requests:
        upstream.clear()
        response = http.post("/v1/chat/completions", json={"model": model, "messages": messages,
                                                            "max_tokens": 256})
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


def priced(requests: list[np.ndarray]) -> list[dict[str, float]]:
    """Per request: tokens, OpenAI-style and Anthropic-style cached tokens and effective cost."""
    out = []
    for i, tokens in enumerate(requests):
        n = len(tokens)
        longest = max((shared_prefix(tokens, earlier) for earlier in requests[:i]), default=0)
        openai_read = (longest // STEP) * STEP if longest >= MIN_CACHED else 0
        whole = [len(e) for e in requests[:i] if len(e) >= MIN_CACHED and shared_prefix(tokens, e) == len(e)]
        read = max(whole, default=0)
        written = n - read if n >= MIN_CACHED else 0
        anthropic = READ * read + WRITE * written + (n if n < MIN_CACHED else 0)
        out.append({"tokens": n, "openai_cached": openai_read, "openai": n - openai_read + READ * openai_read,
                    "anthropic_cached": read, "anthropic": anthropic})
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
        evidence: float | None) -> list[dict[str, Any]]:
    upstream = FakeUpstream().start()
    server = ServerThread(create_app(parse_config(config(upstream.base_url, headroom, evidence)))).start()
    results = []
    try:
        with httpx.Client(base_url=server.url, timeout=600) as http:
            for conv in conversations:
                for mode in modes:
                    for policy in POLICIES:
                        results.append(one(http, upstream, conv, mode, policy))
    finally:
        server.stop()
        upstream.stop()
    return results


def one(http: httpx.Client, upstream: FakeUpstream, conv: Conversation, mode: str, policy: str) -> dict:
    started = time.perf_counter()
    if policy == "none":
        sent = [(messages, {}) for messages in conv.requests]
    else:
        sent = through_gateway(http, upstream, f"{mode}-{policy}", conv.requests)
    turns = priced([rendered(messages) for messages, _ in sent])
    for turn, (messages, headers), needed in zip(turns, sent, conv.evidence, strict=True):
        turn["evidence"] = reached(messages, needed)
        turn.update(recovery(messages, needed, conv.parts, turn["tokens"]))
        turn["reset"] = headers.get("x-mixpr-reset") == "true"
        turn["reused"] = int(headers.get("x-mixpr-prefix-reused-tokens", 0))
    seconds = time.perf_counter() - started
    print(f"{conv.name} {mode} {policy}: {seconds:.1f} s", file=sys.stderr, flush=True)
    return {"conversation": conv.name, "mode": mode, "policy": policy, "turns": turns, "seconds": seconds}


def totals(result: dict) -> dict[str, float]:
    turns = result["turns"]
    return {"tokens": sum(t["tokens"] for t in turns), "openai": sum(t["openai"] for t in turns),
            "anthropic": sum(t["anthropic"] for t in turns), "evidence": sum(t["evidence"] for t in turns),
            "openai_recovered": sum(t["openai"] + t["recovery_openai"] for t in turns),
            "anthropic_recovered": sum(t["anthropic"] + t["recovery_anthropic"] for t in turns),
            "resets": sum(t["reset"] for t in turns), "turns": len(turns)}


def table(results: list[dict]) -> str:
    lines = ["| conversation | mode | policy | tokens sent | OpenAI-style cost (x none, x today) | "
             "Anthropic-style (x none, x today) | evidence | with recovery, OpenAI / Anthropic (x none) | "
             "resets |",
             "|---|---|---|---|---|---|---|---|---|"]
    by = {(r["conversation"], r["mode"], r["policy"]): totals(r) for r in results}
    for (conv, mode, policy), t in by.items():
        none, today = by[(conv, mode, "none")], by[(conv, mode, "today")]
        cells = [f"{t[k] / 1000:.0f}k ({t[k] / none[k]:.2f}, {t[k] / today[k]:.2f})"
                 for k in ("openai", "anthropic")]
        recovered = " / ".join(f"{t[f'{k}_recovered'] / none[f'{k}_recovered']:.2f}"
                               for k in ("openai", "anthropic"))
        lines.append(f"| {conv} | {mode} | {policy} | {t['tokens'] / 1000:.0f}k | {cells[0]} | {cells[1]} | "
                     f"{t['evidence']}/{t['turns']} | {recovered} | {t['resets']} |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["conversation"], r["mode"]) for r in results})
    fig, axes = plt.subplots(2, len(panels), figsize=(4.2 * len(panels), 7), squeeze=False)
    for col, (conv, mode) in enumerate(panels):
        for row, rule in enumerate(("openai", "anthropic")):
            ax = axes[row][col]
            for r in results:
                if (r["conversation"], r["mode"]) == (conv, mode):
                    costs = np.cumsum([t[rule] for t in r["turns"]]) / 1000
                    ax.plot(range(1, len(costs) + 1), costs, marker="o", label=r["policy"])
            ax.set_title(f"{conv}, {mode} mode, {rule}-style", fontsize=9)
            ax.set_xlabel("turn")
            ax.grid(alpha=0.3)
        axes[0][col].legend(fontsize=8)
    axes[0][0].set_ylabel("cumulative effective cost (k tokens)")
    axes[1][0].set_ylabel("cumulative effective cost (k tokens)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sweep(headrooms: list[float], evidences: list[float]) -> None:
    conv = contracts()
    print("| headroom | evidence | OpenAI-style x none | Anthropic-style x none | evidence | resets |")
    print("|---|---|---|---|---|---|")
    for h in headrooms:
        for e in evidences:
            results = run([conv], ["cost"], h, e)
            none, new = (totals(r) for r in results if r["policy"] in ("none", "prefix"))
            ratios = [new[k] / none[k] for k in ("openai", "anthropic")]
            print(f"| {h} | {e} | {ratios[0]:.2f} | {ratios[1]:.2f} | {new['evidence']}/{TURNS} | "
                  f"{new['resets']} |", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--headroom", type=float, default=None,
                        help="room left after a reset: reset_fill = 1 - this")
    parser.add_argument("--evidence", type=float, default=None, help="prefix.evidence (default: the default)")
    parser.add_argument("--conversations", default="contracts,locomo")
    parser.add_argument("--modes", default="cost,window")
    parser.add_argument("--sweep", action="store_true", help="headroom x evidence, contracts, cost mode")
    parser.add_argument("--publish", action="store_true", help="also copy the PNG to bench/plots/")
    args = parser.parse_args(argv)
    if args.sweep:
        sweep([0.3, 0.5, 0.7], [0.05, 0.1, 0.2])
        return
    builders = {"contracts": contracts, "locomo": locomo}
    conversations = [builders[name]() for name in args.conversations.split(",")]
    started = time.perf_counter()
    results = run(conversations, args.modes.split(","), args.headroom, args.evidence)
    print(table(results))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "conversation.json").write_text(json.dumps({"results": results, "library": library_version(),
                                                       "seconds": time.perf_counter() - started}, indent=1))
    plot(results, OUT / "conversation.png")
    if args.publish:
        shutil.copy(OUT / "conversation.png", PLOTS / "conversation.png")
    print(f"\nwrote {OUT / 'conversation.json'} and conversation.png ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
