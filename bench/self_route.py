"""Self-Route through the real gateway: how often it escalates, and what it costs in prompt tokens.

Protocol (see ``../shared/data/real/README.md``): the real-document dev split, questions whose answer
occurs verbatim in the document, text = document, a blank line, the question, sent as one user
message to the embedded model's settings (config.yaml ``local``: window 8,192, budget 1,000, heuristic
router) with Self-Route on and a 128k-window fallback model.

The recording upstream (tests/gateway/fake_upstream.py, ``mode-needle``) stands in for the LLM: it
answers the gold answer when the whole answer is in what it received, else "unanswerable" when the
Self-Route instruction is there, else a wrong guess. So the figures measure the gateway's policy
(what compression keeps, when it escalates, what that costs), not a model's reading.

Compared, per request: tokens sent upstream with Self-Route (the compressed prompt, plus the full
prompt to the fallback when escalated) against always sending the full prompt to the fallback model.

    .venv/bin/python -m bench.self_route                    # all 164 questions, ~1-2 minutes
    .venv/bin/python -m bench.self_route --limit 20         # smoke run
    .venv/bin/python -m bench.self_route --budget auto      # the window's room instead of 1,000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(ROOT / "tests" / "gateway"))  # the tests' recording upstream and server thread

import httpx  # noqa: E402
from conftest import ServerThread  # noqa: E402
from fake_upstream import FakeUpstream  # noqa: E402

from bench.data import data_dir  # noqa: E402
from bench.provenance import library_version  # noqa: E402
from gateway import create_app  # noqa: E402
from gateway.config import parse_config  # noqa: E402
from mixpr.tokens import count_tokens  # noqa: E402

FILES = ("natural_question", "legal_contract_qa", "scientific_qa")
WINDOW, BUDGET, FALLBACK_WINDOW = 8192, 1000, 128_000
SMALL, LONG = "mode-needle-local", "mode-needle-long"


def questions(limit: int | None) -> list[dict[str, str]]:
    """(file, text, answer) for every question whose answer occurs verbatim in its document."""
    found = []
    for name in FILES:
        for line in (data_dir() / "real" / f"{name}.dev.jsonl").read_text(encoding="utf-8").splitlines():
            doc = json.loads(line)
            for question, answer in zip(doc["instructions"], doc["outputs"], strict=True):
                if answer and answer in doc["input"]:
                    found.append({"file": name, "text": f"{doc['input']}\n\n{question}", "answer": answer})
    return found[:limit] if limit else found


def config(upstream: str, budget: int | str) -> dict[str, Any]:
    def params(name: str) -> dict[str, str]:
        return {"model": f"openai/{name}", "api_base": upstream, "api_key": "none"}

    return {
        "model_list": [
            {"model_name": "local", "litellm_params": params(SMALL),
             "model_info": {"max_input_tokens": WINDOW},
             "mixpr": {"router": "heuristic", "budget_tokens": budget,
                       "self_route": {"enabled": True, "fallback_model": "long"}}},
            {"model_name": "long", "litellm_params": params(LONG),
             "model_info": {"max_input_tokens": FALLBACK_WINDOW}},
        ],
        "general_settings": {"compression_executor": "thread", "compression_workers": 1,
                             "max_body_bytes": 16 * 1024 * 1024},
    }


def prompt_tokens(messages: list[dict[str, Any]], model: str) -> int:
    """OpenAI's accounting: content tokens plus 4 per message plus 3."""
    return sum(count_tokens(str(m.get("content") or ""), model) + 4 for m in messages) + 3


def run_one(http: httpx.Client, upstream: FakeUpstream, q: dict[str, str]) -> dict[str, Any]:
    upstream.clear()
    messages = [{"role": "user", "content": q["text"]}]
    response = http.post("/v1/chat/completions", json={"model": "local", "messages": messages,
                                                       "needle": q["answer"]})
    response.raise_for_status()
    sent = [(r.json["model"], prompt_tokens(r.json["messages"], "openai/" + SMALL))
            for r in upstream.received() if not r.is_router_call]
    return {
        "file": q["file"],
        "action": response.headers["x-mixpr-action"],
        "self_route": response.headers.get("x-mixpr-self-route", "none"),
        "correct": response.json()["choices"][0]["message"]["content"] == q["answer"],
        "sent_tokens": sum(tokens for _, tokens in sent),
        "first_tokens": sent[0][1],
        "full_tokens": prompt_tokens(messages, "openai/" + SMALL),
        "calls": [model for model, _ in sent],
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    compressed = [r for r in rows if r["action"] == "compressed" or r["self_route"] == "escalated"]
    escalated = [r for r in rows if r["self_route"] == "escalated"]
    sent, full = sum(r["sent_tokens"] for r in rows), sum(r["full_tokens"] for r in rows)
    first_right = sum(r["correct"] and r["self_route"] != "escalated" for r in rows)
    return {
        "requests": n, "compressed": len(compressed), "escalated": len(escalated),
        "escalation_rate": len(escalated) / max(len(compressed), 1),
        "answered_self_route": sum(r["correct"] for r in rows) / n,
        "answered_compressed_only": first_right / n,
        "tokens_self_route": sent, "tokens_full_fallback": full, "tokens_ratio": sent / full,
    }


def print_table(by_file: dict[str, dict[str, Any]], budget: int | str) -> None:
    print(f"\nSelf-Route on the real-document dev split: window {WINDOW}, budget {budget}, "
          f"fallback window {FALLBACK_WINDOW}")
    head = (f"{'file':18} {'req':>4} {'compr':>5} {'escal':>5} {'esc rate':>8} {'answered':>8} "
            f"{'no SR':>6} {'tokens SR':>10} {'tokens full':>11} {'SR/full':>7}")
    print(head)
    print("-" * len(head))
    for name, s in by_file.items():
        print(f"{name:18} {s['requests']:4d} {s['compressed']:5d} {s['escalated']:5d} "
              f"{s['escalation_rate']:8.0%} {s['answered_self_route']:8.0%} "
              f"{s['answered_compressed_only']:6.0%} {s['tokens_self_route']:10,d} "
              f"{s['tokens_full_fallback']:11,d} {s['tokens_ratio']:7.0%}")
    print("esc rate: escalated / compressed requests. answered: the final reply is the gold answer, with "
          "Self-Route;\nno SR: what the compressed prompt alone answered. tokens: prompt tokens sent "
          "upstream.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions")
    parser.add_argument("--budget", default=str(BUDGET), help="budget_tokens of the small model: N or auto")
    parser.add_argument("--json", default=None, help="default: bench/out/self_route[_<budget>].json")
    args = parser.parse_args(argv)
    budget = int(args.budget) if args.budget.isdigit() else args.budget
    suffix = "" if budget == BUDGET else f"_{budget}"
    qs = questions(args.limit)
    upstream = FakeUpstream().start()
    server = ServerThread(create_app(parse_config(config(upstream.base_url, budget)))).start()
    started = time.perf_counter()
    try:
        with httpx.Client(base_url=server.url, timeout=300) as http:
            rows = [run_one(http, upstream, q) for q in qs]
    finally:
        server.stop()
        upstream.stop()
    by_file = {name: summarize([r for r in rows if r["file"] == name]) for name in FILES
               if any(r["file"] == name for r in rows)}
    by_file["all"] = summarize(rows)
    print_table(by_file, budget)
    out = Path(args.json or ROOT / "bench" / "out" / f"self_route{suffix}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": {"window": WINDOW, "budget_tokens": budget,
                                            "fallback_window": FALLBACK_WINDOW},
                               "summary": by_file, "rows": rows, "library": library_version(),
                               "seconds": time.perf_counter() - started}, indent=1))
    print(f"\nwrote {out} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
