"""The least a window-mode gateway can cost on the agent runs, when below the trigger a conversation
goes out exactly as the client sent it (issue #46).

For a gateway setting replayed beside ``none`` (no gateway), each run's steps up to the first one the
gateway did not pass through (``x-mixpr-action: passthrough``: what it sent is what the client sent)
are *below the trigger*; from that step on the conversation is past it (histories only grow). The
floor prices the steps below the trigger as ``none`` sent them (they are the same requests, read
from the same cache) and everything past it at nothing: no change past the trigger can cost less.
Beside it: the share of ``none``'s cost in runs that never pass the trigger, what the setting spends
past it now, and what it may spend there, relative to ``none``'s cost past it, to reach a target.

    .venv/bin/python -m bench.agent_floor                       # bench/out/agents.json
    .venv/bin/python -m bench.agent_floor /tmp/out/agents.json --target 0.88

Every figure is arithmetic on one replay (``bench.agents`` with ``none`` and the gateway setting);
``bench.agents`` prints the same table after its own whenever both ran.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench import agent_prices

OUT = Path(__file__).resolve().parent / "out"
TARGET = 0.88  # issue #46: the 32k default at most 0.88x of no gateway
RULES = ("openai", "anthropic")


def step_price(step: dict[str, Any], prices: agent_prices.PriceList, rule: str) -> float:
    """One step's price from what the cache read of it (one request: a client-side setting)."""
    cached = agent_prices.Cached(step["tokens"], step["openai_cached"], step["anthropic_cached"])
    return cached.openai(prices) if rule == "openai" else cached.anthropic(prices)


def below(steps: list[dict[str, Any]]) -> int:
    """How many leading steps the gateway passed through as the client sent them."""
    return next((n for n, s in enumerate(steps) if s.get("action") != "passthrough"), len(steps))


DEFAULT = agent_prices.PRICE_LISTS["default"]


def split(reference: dict[str, Any], setting: dict[str, Any], which: str | None = None,
          prices: agent_prices.PriceList = DEFAULT) -> dict[str, dict[str, float]]:
    """Per rule: ``none``'s cost below and past the trigger, the setting's cost past it, and ``none``'s
    cost in runs that never pass it (sums over the runs of ``which`` half, or all)."""
    runs = {r["id"]: r for r in setting["runs"]}
    out = {rule: {"below": 0.0, "past": 0.0, "setting_past": 0.0, "never": 0.0} for rule in RULES}
    for ref in reference["runs"]:
        if which is not None and ref["index"] % 2 != (which == "odd"):
            continue
        mine = runs[ref["id"]]
        n = below(mine["steps"])
        for ref_step, step in zip(ref["steps"][:n], mine["steps"][:n], strict=True):
            if step["tokens"] != ref_step["tokens"]:  # passed through, so the same request
                raise ValueError(f"{ref['id']} step {step['k']}: {step['tokens']} tokens passed "
                                 f"through, {ref_step['tokens']} sent without the gateway")
        for rule in RULES:
            low = sum(step_price(s, prices, rule) for s in ref["steps"][:n])
            out[rule]["below"] += low
            out[rule]["past"] += sum(step_price(s, prices, rule) for s in ref["steps"][n:])
            out[rule]["setting_past"] += sum(step_price(s, prices, rule) for s in mine["steps"][n:])
            if n == len(ref["steps"]):
                out[rule]["never"] += low
    return out


def halves(results: Iterable[dict[str, Any]]) -> list[str]:
    return [w for w in ("even", "odd") if any(r["index"] % 2 == (w == "odd") for r in results)]


def table(results: list[dict[str, Any]], target: float = TARGET) -> str:
    """For each gateway setting beside ``none``: the floor on each half under every price list."""
    by = {r["setting"]: r for r in results}
    reference = by.get("none")
    served = [r for r in results if r.get("config") is not None and r["setting"] != "none"]
    if reference is None or not served:
        return ""
    lines = ["| setting | half | price list | floor, OpenAI / Anthropic | never past the trigger | "
             f"past the trigger now | past it, for {target:g}x |", "|---|---|---|---|---|---|---|"]
    for r in served:
        for which in halves(reference["runs"]):
            for name, prices in agent_prices.PRICE_LISTS.items():
                parts = split(reference, r, which, prices)
                cells = [[], [], [], []]
                for rule in RULES:
                    p = parts[rule]
                    whole = p["below"] + p["past"]
                    cells[0].append(f"{p['below'] / whole:.3f}")
                    cells[1].append(f"{p['never'] / whole:.3f}")
                    cells[2].append(f"{p['setting_past'] / p['past']:.3f}" if p["past"] else "-")
                    room = target * whole - p["below"]
                    cells[3].append(f"{room / p['past']:.3f}" if p["past"] else "-")
                lines.append(f"| {r['setting']} | {which} | {name} | "
                             + " | ".join(" / ".join(c) for c in cells) + " |")
    return "\n".join(lines) + (
        "\n\nFloor: each run's steps before the first one the gateway did not pass through priced as "
        "without the gateway, the rest at nothing, relative to no gateway on the same half and price list; "
        "never past the trigger: the share of no gateway's cost in runs the gateway passed through whole; "
        "past the trigger now: the setting's cost past it over no gateway's there; past it, for the "
        f"target: what that ratio may be for the setting to cost {target:g}x in all (below 0: out of reach).")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, nargs="?", default=OUT / "agents.json",
                        help="a bench.agents result file with none and a gateway setting")
    parser.add_argument("--target", type=float, default=TARGET,
                        help=f"cost relative to no gateway ({TARGET})")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())["results"]
    print(table(results, args.target) or "needs none and a gateway setting in one replay")


if __name__ == "__main__":
    main()
