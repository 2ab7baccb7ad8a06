from mixpr.identifiers import counts_and_words, terms
from mixpr.kinds import split
from mixpr.outputs import block_scores


def test_compound_identifiers_count_their_parts():
    assert terms("StreamReadConstraints") == ["streamreadconstraints", "stream", "read", "constraints"]
    assert terms("get_form") == ["get_form", "get", "form"]
    assert terms("HTTPServer2") == ["httpserver2", "http", "server"]
    assert terms("x") == []


def test_a_path_counts_its_components():
    counts, words, _ = counts_and_words(["/workspace/django/tests/migrations/test_base.py"])
    assert {"migrations", "test_base", "base"} <= set(words)
    assert counts.shape == (1, len(words))


def test_the_query_is_counted_in_the_same_columns():
    counts, words, asked = counts_and_words(["def read_config(path):", "return 1"], "read the config, please")
    assert {"read", "config"} <= {words[i] for i in asked.nonzero()[0]}
    assert counts.shape[1] == len(words) == len(asked)


def test_plain_words_in_a_task_find_a_camel_case_identifier():
    text = "\n".join(
        [f"{n}:    private int counter{n} = {n};" for n in range(1, 40)]
        + ["40:    private final StreamReadConstraints limits;"]
        + [f"{n}:    private int counter{n} = {n};" for n in range(41, 80)]
    )
    blocks = split(text, "code")
    scores = block_scores(blocks, "the stream read constraints are too strict")
    scores[blocks.pinned > 0] = -1  # the view's first and last lines are kept anyway
    best = blocks.texts()[int(scores.argmax())]
    assert "StreamReadConstraints" in best
