"""Resets: the causal scan, and what a reset may touch."""

from __future__ import annotations

from gateway.compress import resets


def test_the_scan_is_causal() -> None:
    """The reset points of a conversation's first k messages are those of every longer one."""
    sizes = [50, 400, 30, 900, 30, 800, 30, 700, 30, 900, 30, 600]

    def harder(js: list[int], levels: list[int]) -> list[int]:
        return [sizes[j] // (2**level) for j, level in zip(js, levels, strict=True)]

    def run(k: int) -> resets.Scan:
        return resets.scan(
            sizes[:k],
            10,
            room=2000,
            after=1200,
            older_end=lambda i: max(0, i - 1),
            last_end=lambda i: i,
            harder=harder,
            max_level=4,
        )

    full = run(len(sizes))
    assert full.points and full.total <= 2000
    for k in range(1, len(sizes)):
        assert run(k).points == [p for p in full.points if p < k]
