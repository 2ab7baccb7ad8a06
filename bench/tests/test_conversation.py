"""bench.conversation's cost with recovery: a turn whose evidence did not arrive re-sends what held it."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import numpy as np  # noqa: E402
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


def test_another_seed_draws_other_real_size_conversations_of_the_same_protocol() -> None:
    if not (conversation.data_dir() / "real" / "legal_contract_qa.dev.jsonl").is_file():
        pytest.skip("the dev split (../shared/data/real) is not beside this clone")
    seven, eight = conversation.real_size(), conversation.conversations_named("real@8")
    assert [c.name.split("-")[1] for c in eight] == ["s8"] * 8
    assert len({c.name.split("-")[0] for c in eight}) == 2  # contracts and pages, four of each
    for conv in eight:
        pasted = conv.requests[0][-1]["content"]
        assert 64_000 <= len(conversation.encoding_for(None).encode_ordinary(pasted)) <= 151_000
        assert len(conv.requests) == conversation.PROTOCOL_TURNS
    assert [c.requests[0][-1]["content"] for c in seven] != [c.requests[0][-1]["content"] for c in eight]


def test_reseeded_conversations_are_summed_apart_from_issue_39_s_five() -> None:
    assert conversation.groups("contracts-s8-0-67k") == ["reseeded contracts", "reseeded documents"]
    assert conversation.groups("pages-s10-2-102k") == ["reseeded pages", "reseeded documents"]
    assert conversation.groups("contracts-1") == ["documents"]
    assert conversation.groups("pages-large1-131k") == ["large pages", "large documents"]
    assert conversation.groups("contracts-0-108k") == ["real-size contracts", "real-size documents"]


def test_a_mode_with_a_budget_cuts_each_request_to_it_and_an_unknown_mode_is_named() -> None:
    from pydoc_data.topics import topics  # every Python ships the reference's topics: real prose

    document = "\n\n".join(topics[name] for name in sorted(topics))[:160_000]  # ~40k tokens
    questions = ("What does the with statement do?", "What does a for loop's else clause do?",
                 "When is __del__ called?")
    asked = [(q, "It depends.") for q in questions]
    conv = conversation._with_questions("pydoc", [], asked, [["with"]] * len(asked), document)
    results = conversation.run([conv], ["window", "window@4k"], None, None, policies=("none", "today"))
    sent = {r["mode"]: [t["tokens"] for t in r["turns"]] for r in results if r["policy"] == "today"}
    assert all(tokens <= 4_000 * 1.1 for tokens in sent["window@4k"])  # cut to the budget, tags aside
    assert all(tokens > 20_000 for tokens in sent["window"])  # the window's own budget: what it leaves
    with pytest.raises(ValueError, match="window@8k"):
        conversation.mode_settings("window@8kb")


def test_a_request_past_the_tiers_line_is_billed_at_its_multiple_in_every_policy() -> None:
    """``--tier 5x@100k``: every token of a request past 100k, fresh or cached, at 5x; one under it
    at 1x; and the gateway's models are told that price in LiteLLM's keys."""
    tier = conversation.parse_tier("5x@100k")
    short, long = np.arange(2000), np.arange(100_001)
    plain, tiered = conversation.priced([short, long]), conversation.priced([short, long], tier)
    assert tiered[0]["openai"] == plain[0]["openai"] and not tiered[0]["above_tier"]
    assert tiered[1]["openai"] == pytest.approx(5 * plain[1]["openai"])
    assert tiered[1]["anthropic"] == pytest.approx(5 * plain[1]["anthropic"]) and tiered[1]["above_tier"]
    assert tier.model_info()["input_cost_per_token_above_100k_tokens"] == pytest.approx(5e-6)
    with pytest.raises(ValueError, match="5x@100k"):
        conversation.parse_tier("5x100k")
