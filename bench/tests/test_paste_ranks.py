from bench import paste_ranks
from bench.conversation import Conversation

TEMPLATE = "Highlight the parts of this contract related to {} that a lawyer should review."
CONTRACT = ("The Licensee shall pay royalties of five percent each quarter.\n\n"
            "Either party may terminate this agreement on ninety days notice.")


def _conversation() -> Conversation:
    questions = [TEMPLATE.format(topic) for topic in ("royalties", "termination", "notice periods")]
    requests, messages = [], []
    for i, question in enumerate(questions):
        content = f"{CONTRACT}\n\n{question}" if i == 0 else question
        messages = [*messages, {"role": "user", "content": content}]
        requests.append(messages)
        messages = [*messages, {"role": "assistant", "content": "..."}]
    answers = [["five percent"], ["ninety days"], ["ninety days notice"]]
    return Conversation("contracts-t", requests, answers, parts=(CONTRACT,))


def test_a_later_question_is_searched_without_the_words_every_earlier_one_shares() -> None:
    queries = [query for _, query, _ in paste_ranks.asked(_conversation())]
    assert queries[0] == TEMPLATE.format("royalties")  # the first question as sent
    assert "lawyer" not in queries[2] and "notice" in queries[2]


def test_held_reads_what_mixpr_keeps_for_the_query() -> None:
    paste, query, answer = list(paste_ranks.asked(_conversation()))[0]
    assert paste_ranks.held(paste, query, answer, budgets=(1000,)) == [True]  # it fits whole
    assert paste_ranks.held(paste, query, "absent words", budgets=(1000,)) == [False]
