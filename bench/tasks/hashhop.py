"""Hash-Hop (magicproduct/hash-hop): shuffled 'H_a = H_b' lines; follow the chain from H1 for `hops` steps."""

from __future__ import annotations

import random
import string

from bench.tasks.prompt import assemble
from bench.tasks.sample import Sample, fit_to_length
from bench.tasks.words import random_letters

HASH_LEN = 16
INSTRUCTION = (
    "Each line assigns a hash to another hash. Follow the chain starting at {head} for {hops} steps "
    "and output the final hash."
)
COMPLETION = "COMPLETION:\nHops={hops}\n\nCoT=False\n\n{head} = '"


def _hash(rng: random.Random) -> str:
    return random_letters(rng, HASH_LEN, string.ascii_letters)


def chains(n_chains: int, hops: int, rng: random.Random) -> list[list[str]]:
    """n_chains chains H1 -> ... -> H(hops+1), built level by level like upstream."""
    out = [[_hash(rng)] for _ in range(n_chains)]
    for _ in range(hops):
        for chain in out:
            chain.append(_hash(rng))
    return out


def chain_lines(chain: list[str]) -> list[str]:
    """One line per hop; the last value is quoted, which marks the end of the chain."""
    lines = [f"{a} = {b}" for a, b in zip(chain, chain[1:-1], strict=False)]
    return lines + [f"{chain[-2]} = '{chain[-1]}'"]


def generate(task: str, length: int, seed: int) -> Sample:
    hops = int(task.removeprefix("hashhop_"))

    def build(n: int) -> Sample:
        rng = random.Random(f"{task}/{seed}")
        all_chains = chains(n, hops, rng)
        lines = [line for chain in all_chains for line in chain_lines(chain)]
        rng.shuffle(lines)  # global shuffle: hop order is not preserved
        head = all_chains[0][0]  # the first level-0 key is the queried head (num_queries=1)
        tail = (
            "\n" + INSTRUCTION.format(head=head, hops=hops) + "\n" + COMPLETION.format(hops=hops, head=head)
        )
        family = "single" if hops == 1 else "multi"
        return assemble(
            "",
            "\n".join(lines),
            tail,
            needles=chain_lines(all_chains[0]),
            family=family,
            task=task,
            length=length,
            seed=seed,
        )

    # Each line is two 16-letter mixed-case hashes: roughly 20 cl100k tokens.
    return fit_to_length(build, length, max(1, length // (20 * hops)))
