"""The room of a conversation in one unit (counted tokens): where a reset happens, what it leaves."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from loop_lag import worst_lag

from gateway.compress.compressor import Compressor, Outcome
from gateway.compress.policy import Control, Target
from gateway.config import MixprSettings, Prefix
from gateway.conversation import forms, recut
from gateway.conversation.history import History, Request
from gateway.conversation.room import room
from gateway.run.workers import Workers
from mixpr.tokens import count_tokens


def test_a_cost_budget_at_the_trigger_is_converted_once() -> None:
    """Scale 1.25: a budget equal to the trigger leaves 0.8x of it in counted tokens, not 0.64x
    (the model's tokens were converted twice). ``reset_fill: 1``: a reset may fill the room."""
    target = Target("gpt-4o", 100_000, 1_000, scale=1.25)
    settings = MixprSettings(budget_tokens=10_000, compress_above_tokens=10_000, prefix=Prefix(reset_fill=1))
    space = room(target, settings, Control(enabled=True))
    assert space.at == 8_000
    assert space.share(0) <= space.at
    assert space.share(0) == 8_000  # what the budget allows, not 0.64x of it (6,400)
    assert space.cap == 8_000  # one first-sight form: what the budget keeps


def test_window_mode_leaves_reset_fill_of_what_the_fixed_parts_leave() -> None:
    target = Target("gpt-4o", 32_000, 1_000)
    space = room(target, MixprSettings(), Control())
    assert space.at == 31_000
    assert space.share(1_000) == int(0.6 * 30_000)
    assert space.cap == int(31_000 * 0.6)


# -- a conversation in this process -----------------------------------------------------------

TASK = "Make the parser accept trailing commas."


def _listing(step: int, lines: int = 150) -> str:
    return "\n".join(f"{i:6}\tdef handler_{step}_{i}(value):  return parse(value, {i})" for i in range(lines))


def _loop(steps: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Agent."},
                                      {"role": "user", "content": TASK}]
    for step in range(steps):
        call = {"id": f"c{step}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"path": f"f{step}.py"})}}
        messages += [{"role": "assistant", "content": f"Reading f{step}.py", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{step}", "content": _listing(step)}]
    return messages


def _requests(conversations: list[list[dict[str, Any]]], settings: MixprSettings, control: Control,
              window: int = 32_000, model: str = "gpt-4o-mini") -> list[Outcome]:
    """Each request of a conversation prepared in turn by one History, in this process."""

    async def main() -> list[Outcome]:
        workers = Workers(workers=1, executor="thread", timeout_s=60)
        compressor = Compressor(workers, route_cache_size=16)
        await compressor.start(with_router=False)
        history = History(compressor, cache_bytes=64 * 1024 * 1024)
        target = Target(model, window, 1024)
        try:
            return [await history.prepare(Request(messages, None, target, settings, control, None))
                    for messages in conversations]
        finally:
            compressor.close()

    return asyncio.run(main())


def test_a_budget_that_is_the_trigger_does_not_reset_every_request() -> None:
    """``enabled: true`` with a number: the trigger is the budget. A reset that brought the total
    to the trigger itself left no room for the next step: an 8-step loop reset at every request
    from its 3rd on."""
    loop = _loop(8)
    requests = [loop[: 2 + 2 * step] for step in range(1, 9)]
    control = Control(enabled=True, budget_tokens=3000)
    outcomes = _requests(requests, MixprSettings(router="heuristic"), control)
    resets = [o.reset for o in outcomes]
    assert all(o.final_tokens <= 3000 for o in outcomes)
    assert not any(a and b for a, b in zip(resets, resets[1:], strict=False)), resets  # was F F T T T ...


def test_a_megabyte_of_unclosed_tags_through_a_reset_leaves_the_loop_free() -> None:
    """The task's query strips a client's ``<system-reminder>`` blocks from every user message at a
    reset; a regular expression rescanned to the end for every opening never closed (72 kB: 2 s
    holding the GIL, the loop stalled 2.5 s; 1 MB: minutes). 1 MB of them: the request answers, and
    no tick of the loop comes 20 ms late (``loop_lag`` says how the scheduler's noise is kept out)."""
    messages = _loop(12)
    messages[1] = {"role": "user", "content": "<system-reminder>x" * (1_000_000 // 18) + "\n\n" + TASK}
    worst, outcome = worst_lag(messages, 32_000, MixprSettings(router="heuristic"), 0.020)
    assert outcome.route == "forms" and outcome.resets >= 1
    assert outcome.final_tokens <= 32_000 - 1024
    assert worst < 0.020, f"the loop was stalled {worst * 1000:.1f} ms at a stretch"


def test_the_last_resort_reset_never_replaces_the_users_task_with_a_placeholder() -> None:
    """Cost mode (budget 1,000, trigger 3,000) and a system prompt over the trigger: the resets
    could not reach the budget and cut the only user message, one paragraph of 5.5k tokens, to
    ``[… message of 1 lines omitted …]``, though the request fit the window whole."""
    task = " ".join(f"Step {n}: rename handler_{n} to parse_{n}, keep its tests passing." for n in range(400))
    messages = [{"role": "system", "content": _listing(0, lines=250)},
                {"role": "user", "content": task},
                *_loop(2)[2:]]
    settings = MixprSettings(router="heuristic", budget_tokens=1000, compress_above_tokens=3000)
    [outcome] = _requests([messages], settings, Control())
    sent = next(m["content"] for m in outcome.messages if m["role"] == "user")
    assert "omitted" not in sent  # its first-sight form at most (cost mode cuts at first sight)
    # Its last sentences at least (MixPR keeps sentences: a one-paragraph message's "question", its
    # last 2,000 characters, starts mid-sentence, and its first-sight form keeps what ends it).
    assert sent.endswith(task[-200:])


def test_a_reset_with_nothing_to_keep_keeps_every_users_question() -> None:
    """A budget below the placeholders' own cost made every piece a placeholder, user questions too;
    a one-paragraph user message (all question) was cut whole."""
    document = "Clause one of the lease. " * 400 + "\n\nWhen does the lease end?"
    short = "Rename parse to parse_all and keep every test passing, please. " * 3
    pieces = [forms.Piece(1, None, None, "user", document, "", None, True, True),
              forms.Piece(3, None, None, "tool", _listing(1), "", None, False, True),
              forms.Piece(5, None, None, "user", short, "", None, True, True)]
    for budget in (0, 2_000):
        texts = [text for text, _ in recut.recut_job(pieces, TASK, budget, "gpt-4o-mini")]
        assert texts[0].endswith("When does the lease end?") and len(texts[0]) < len(document)
        assert texts[2] == short, budget


def test_a_deeply_nested_argument_does_not_fail_a_reset() -> None:
    """``recut._parts`` caught ValueError, not RecursionError: one deeply nested tool-call argument
    failed the whole cut, so no reset happened for the rest of the conversation."""
    deep = '{"a": ' * 100_000 + "1" + "}" * 100_000
    pieces = [forms.Piece(2, None, 0, "assistant", deep, "", None, False, True),
              forms.Piece(3, None, None, "tool", _listing(1), "", None, False, True)]
    [argument, output] = recut.recut_job(pieces, TASK, 500, "gpt-4o-mini")
    assert argument[0] == deep  # kept as written
    assert output[1] < 500 < count_tokens(_listing(1), "gpt-4o-mini")  # the rest is cut


def test_a_reset_pays_for_the_questions_it_keeps() -> None:
    """The questions a reset keeps whole came on top of its budget: ~500 tokens over per user message."""
    question = " ".join(f"Does clause {n} of the lease still hold after the renewal?" for n in range(30))
    document = "Clause one of the lease. " * 400 + "\n\n" + question
    pieces = [forms.Piece(2 * n + 1, None, None, "user", document, "", None, True, True) for n in range(3)]
    pieces.append(forms.Piece(8, None, None, "tool", _listing(1), "", None, False, True))
    for budget in (1_500, 3_000):
        cut = recut.recut_job(pieces, TASK, budget, "gpt-4o-mini")
        assert all(text.endswith(question) for text, _ in cut[:3])
        assert sum(tokens for _, tokens in cut) <= budget + 50, budget


def test_cost_mode_resets_only_where_they_pay_and_reports_the_saving() -> None:
    """Past the trigger a cost-mode reset is made when its saving over the turns to come pays for
    the cache write: with no future counted (reset_horizon 0) fewer resets than with five times
    the turns so far, and every reset reports what it is expected to save; later requests report
    the cache reads the resets save them (x-mixpr-reset-saving)."""
    loop = _loop(10)
    requests = [loop[: 2 + 2 * step] for step in range(1, 11)]

    def run(horizon: float) -> list[Outcome]:
        settings = MixprSettings(router="heuristic", compress_above_tokens=3000, budget_tokens=1500,
                                 prefix={"reset_horizon": horizon, "first_sight": "always"})
        # Anthropic's prices: a cache write costs 1.25x, a read 0.1x (gateway.prices).
        return _requests(requests, settings, Control(), window=200_000, model="anthropic/claude-3-5-haiku")

    eager, patient = run(5.0), run(0.0)
    assert sum(o.reset for o in patient) < sum(o.reset for o in eager)
    made = [o for o in eager if o.reset]
    assert made and all(o.reset_saving is not None and o.reset_saving[0] > 0 for o in made)
    later = [o for o in eager[eager.index(made[0]) + 1:] if not o.reset]
    assert later and all(o.reset_saving is not None and o.reset_saving[1] > 0 for o in later)
    assert all(o.final_tokens < 200_000 for o in patient)


def _tiered(times: float) -> Target:
    """A 1M-window model billed ``times`` on every token past 100k (cache reads 0.1x, writes 1.25x)."""
    from gateway.prices import prices_for

    info = {"input_cost_per_token": 1.0, "input_cost_per_token_above_100k_tokens": times,
            "cache_read_input_token_cost": 0.1, "cache_creation_input_token_cost": 1.25}
    return Target("gpt-4o", 1_000_000, 1_000, prices=prices_for("openai/tiered", info), line=100_000,
                  line_margin=1_000)


def test_under_a_price_line_the_room_is_the_line_and_the_window_is_the_limit() -> None:
    space = room(_tiered(5), MixprSettings(), Control())
    assert space.at == 99_000 and space.limit == 999_000 and space.gated


def test_past_a_5x_line_a_reset_pays_and_past_a_2x_line_staying_pays_for_the_last_turns() -> None:
    """A conversation of two turns past the line (105k), a reset to 60k: at 5x staying above costs
    more than the rewrite; at 2x, so early, the rewrite costs more than two turns above; after ten
    turns it pays at 2x too."""
    five, two = room(_tiered(5), MixprSettings(), Control()), room(_tiered(2), MixprSettings(), Control())
    assert five.worth(2, 105_000, 60_000) > 0
    assert two.worth(2, 105_000, 60_000) < 0
    assert two.worth(10, 105_000, 60_000) > 0
    under = room(Target("gpt-4o", 1_000_000, 1_000), MixprSettings(), Control())
    assert under.line is None and under.at == 999_000  # no tier: the window's room
