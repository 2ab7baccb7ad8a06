"""A chat sent as messages: the stream the gateway builds keeps every evidence turn findable."""

from bench import chat_messages

CHAT = (
    "DATE: 1:56 pm on 8 May, 2023\nCaroline: Hey Mel!\nMelanie: Hi! I painted a lake.\n [shares a photo]\n"
    "\nDATE: 2:10 pm on 9 May, 2023\nCaroline: I joined a choir.\nMelanie: Nice!"
)


def test_turns_become_messages_with_roles_by_speaker():
    sent, _ = chat_messages.messages(CHAT, " What did Caroline join? ")
    assert [(m["role"], m["content"].split(":")[0]) for m in sent] == [
        ("user", "DATE"), ("user", "Caroline"), ("assistant", "Melanie"),
        ("user", "DATE"), ("user", "Caroline"), ("assistant", "Melanie"), ("user", "What did Caroline join?"),
    ]  # fmt: skip
    assert sent[2]["content"] == "Melanie: Hi! I painted a lake.\n [shares a photo]"


def test_evidence_spans_move_onto_the_gateway_stream():
    turns = [CHAT.index("Melanie: Hi"), CHAT.index("Caroline: I joined")]
    evidence = [[a, CHAT.index("\n", a)] for a in turns]
    sent = chat_messages.send(CHAT, "What did Caroline join?", evidence)
    assert [sent.text[a:b] for a, b in sent.evidence] == [CHAT[a:b] for a, b in evidence]
    assert sent.text[sent.query_span[0] : sent.query_span[1]] == "What did Caroline join?"
    assert set(sent.boundaries) >= {a for a, _ in sent.evidence}
