"""Assemble 'head + context + tail' prompts and remember where the compressible context sits."""

from __future__ import annotations

from bench.tasks.sample import Sample


def assemble(head: str, context: str, tail: str, **fields) -> Sample:
    """Sample whose text is head+context+tail; `tail` (question + answer prefix) ends the prompt verbatim."""
    start = len(head)
    return Sample(
        text=head + context + tail,
        context_span=(start, start + len(context)),
        query=tail,
        **fields,
    )
