"""bench.conversation's cost with recovery: a turn whose evidence did not arrive re-sends what held it."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest  # noqa: E402

from bench import conversation  # noqa: E402

PARTS = ("Clause one: the licence is perpetual.\n\nClause two: fees are due in 30 days.",
         "Schedule A lists the territory: Norway and Iceland.\nIt renews yearly.")


def test_a_missed_answer_resends_the_part_that_held_it() -> None:
    sent = [{"role": "user", "content": "Clause one: the licence is perpetual. [... cut ...]\n\nWhere?"}]
    needed = ["Norway and Iceland"]
    price = conversation.recovery(sent, needed, PARTS, tokens=2000)
    resent = len(conversation.rendered([{"role": "user", "content": PARTS[1]}]))
    assert price["recovery_openai"] == pytest.approx(resent + 0.1 * 2000)
    assert price["recovery_anthropic"] == pytest.approx(1.25 * resent + 0.1 * 2000)
    arrived = [{"role": "user", "content": "Norway and  Iceland"}]  # whitespace normalised
    assert conversation.recovery(arrived, needed, PARTS, tokens=2000)["recovery_openai"] == 0


def test_a_string_across_parts_resends_each_part_once() -> None:
    across = "fees are due in 30 days.\nSchedule A lists the territory: Norway and Iceland."
    assert conversation.holders([across, "perpetual"], PARTS) == [0, 1]
