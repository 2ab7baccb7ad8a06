"""Jobs that look inside a compression worker. Run there by name, so this module imports nothing that
the worker has not loaded already (a test module's own imports would add their objects)."""

from __future__ import annotations

import gc


def tracked_objects() -> int:
    """Objects a full collection would walk in this process (the frozen ones are not)."""
    return sum(len(gc.get_objects(generation)) for generation in range(3))


def page_faults_of_a_job(text: str) -> int:
    """This process's page faults (a page copied from the fork server, or first mapped) during one MixPR
    job over ``text``, cut to a third as a long prompt would be."""
    import resource  # the standard library's, tiny: imported before the job is measured

    import mixpr.engine

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    mixpr.engine.compress(text, budget_tokens=len(text) // 12, route="auto", ask_llm=lambda question: "",
                          model="openai/w")
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
