import pytest

from mixpr import compress
from mixpr.routing import (
    GLOBAL,
    LOCAL,
    ROUTER_PROMPT,
    choose_route,
    heuristic_route,
    parse_route,
    router_prompt,
    router_query,
)

PAPER_PROMPT = (
    "If the query asks for summarization, most frequent words, or descriptions of an entire document, "
    "answer 'y' with no other text. If the query does not and only asks a specific question, answer 'n' "
    "with no other text.\n\nQUERY: [query]\n\nIf the query asks for summarization, most frequent words, "
    "or descriptions of an entire document, answer 'y' with no other text. If the query does not and only "
    "asks a specific question, answer 'n' with no other text.\n\nAnswer:"
)


def test_prompt_is_the_papers_verbatim():
    assert ROUTER_PROMPT == PAPER_PROMPT


def test_router_sees_first_two_and_last_two_chunks():
    chunks = ["one. ", "two. ", "three. ", "four. ", "five?"]
    assert router_query(chunks) == "one. two. four. five?"
    assert router_prompt(chunks) == PAPER_PROMPT.replace("[query]", "one. two. four. five?")
    assert router_query(["only?"]) == "only?"


@pytest.mark.parametrize(
    ("answer", "route"),
    [
        ("y", GLOBAL),
        ("Y", GLOBAL),
        (" 'y'", GLOBAL),
        ("yes.", GLOBAL),
        ("n", LOCAL),
        ("No", LOCAL),
        ("maybe", None),
        ("", None),
        ("yn", None),
    ],
)
def test_parse_route(answer, route):
    assert parse_route(answer) == route


@pytest.mark.parametrize(
    "query",
    [
        "Please summarize the book above.",
        "What are the 10 most common words in the above list?",
        "Find the three most frequently appeared coded words.",
        "Give me an overview of the entire document.",
        "What is this story about?",
    ],
)
def test_heuristic_sends_whole_document_tasks_global(query):
    assert heuristic_route(query) == GLOBAL


@pytest.mark.parametrize(
    "query",
    [
        "What is the special magic number for gentle-harbor mentioned in the provided text?",
        "Find all variables that are assigned the value 12345 in the text above.",
        "Question: Where is Mary? The most recent location of Mary is",
        "Follow the chain starting at AbCdEf for 3 steps and output the final hash.",
    ],
)
def test_heuristic_keeps_specific_questions_local(query):
    assert heuristic_route(query) == LOCAL


def test_llm_answer_decides_when_it_parses():
    assert choose_route(["What is x?"], lambda prompt: "y") == (GLOBAL, "llm")
    assert choose_route(["Summarize it."], lambda prompt: "n") == (LOCAL, "llm")


def test_unparseable_or_failing_llm_falls_back_to_heuristic():
    def broken(prompt):
        raise TimeoutError

    assert choose_route(["Summarize it."], lambda prompt: "I think so") == (GLOBAL, "heuristic")
    assert choose_route(["Summarize it."], broken) == (GLOBAL, "heuristic")
    assert choose_route(["What is x?"], None) == (LOCAL, "heuristic")


def test_a_negated_cue_is_not_a_global_request():
    assert heuristic_route("What is the second topic we discussed? Do not summarize yourself.") == LOCAL
    assert heuristic_route("Please don't summarize, just list the dates.") == LOCAL
    assert heuristic_route("Summarize the meeting; do not list the speakers.") == GLOBAL


@pytest.mark.parametrize(
    "query",
    [
        "Summarize the discussion about the efficacy of the law.",
        "Summarize the project manager's opinions towards product appearance.",
        "Summarize the conclusion of the discussion about the remote control's price.",
    ],
)
def test_a_summary_scoped_to_a_topic_is_local(query):
    assert heuristic_route(query) == LOCAL


@pytest.mark.parametrize(
    "query",
    [
        "Summarize the whole meeting.",
        "Summarize what the text is about.",
        "Summarize the following article about climate change.",
        "Summarize the discussion about the whole project.",
    ],
)
def test_a_summary_of_a_whole_thing_stays_global(query):
    assert heuristic_route(query) == GLOBAL


def test_a_scoped_summary_keeps_the_passages_on_its_topic():
    # A meeting where the remote's price is discussed in a few turns among many on other things.
    filler = [f"Speaker {i % 3}: We should look at item {i} on the agenda, then move on." for i in range(200)]
    filler[120:123] = [
        "Speaker 1: The price of the remote should stay under twenty-five euros.",
        "Speaker 2: At that price the margin on each remote is thin.",
        "Speaker 0: Then the price decides which chips we can afford.",
    ]
    text = "\n".join(filler) + "\n\nSummarize the discussion about the price of the remote."
    kept = compress(text, budget_tokens=120, route="heuristic")
    assert kept.stats["route"] == LOCAL
    assert all(turn in kept.text for turn in filler[120:123])
