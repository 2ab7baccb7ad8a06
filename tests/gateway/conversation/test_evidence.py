"""A follow-up's evidence block: what MixPR retrieves for the new question from the earlier document."""

from __future__ import annotations

from corpus import filler

from gateway.conversation import evidence

# A clause of two sentences: a lawyer's answer is the whole clause, as written.
CLAUSE = ("The licensee shall pay the harbour authority a mooring royalty of four percent of gross "
          "receipts. The mooring royalty is due within thirty days after each calendar quarter ends.")
QUESTION = "What mooring royalty does the licensee pay the harbour authority, and when is it due?"


def test_an_answer_of_adjacent_sentences_arrives_whole() -> None:
    """Sentences kept next to each other are one passage: a gap marker between them would tell the
    model that text is missing where none is (and break the clause a reader quotes)."""
    document = "\n\n".join([filler(400, seed=1), CLAUSE, filler(400, seed=2)])
    block, tokens = evidence.evidence_job(QUESTION, [document], 300, None)
    assert CLAUSE in block
    assert 0 < tokens <= 300 + 60  # the cap, and the block's own tags


def test_what_the_documents_form_already_holds_is_not_repeated() -> None:
    """The document's first-sight form is sent before every follow-up: a passage it holds is not
    sent again in the block, and the room goes to a passage the form cut."""
    late = ("Late mooring royalty payments to the harbour authority bear interest at two percent per "
            "month until the licensee pays them in full.")
    document = "\n\n".join([filler(300, seed=1), CLAUSE, filler(300, seed=2), late, filler(300, seed=3)])
    question = "What mooring royalty does the licensee pay the harbour authority, and what if it is late?"
    alone, _ = evidence.evidence_job(question, [document], 120, None)
    assert CLAUSE in alone  # without a form to leave out: the best match
    block, _ = evidence.evidence_job(question, [document], 120, None, present=f"Intro. {CLAUSE} More.")
    assert CLAUSE not in block and late in block


def test_a_follow_up_over_a_larger_document_gets_more_evidence_within_the_room() -> None:
    """Sized by the document (what sending it whole costs grows with it): twice the document, twice
    the evidence; a small document still gets a tenth of the room; never over the room's share."""
    wanted, room = evidence.wanted, 32_000
    assert wanted(room, 140_000, 0.25, 0.05) == 2 * wanted(room, 70_000, 0.25, 0.05) == 7_000
    assert wanted(room, 20_000, 0.25, 0.05) == 3_200
    assert wanted(room, 400_000, 0.25, 0.05) == 8_000
    assert wanted(room, 400_000, 0.1, 0) == 3_200


def test_the_words_every_earlier_question_shares_are_left_out_of_the_query() -> None:
    """A checklist's template ranks the same passages first for every question: the second question
    leaves out the runs of four words or more it shares with the first, and from the third on, the
    words all earlier ones share are left out (a question with under two words of its own keeps its
    words). The terms the question quotes stay quoted, so MixPR finds where the text quotes them."""
    template = evidence.Template()
    first = 'Highlight the parts related to "Governing Law". Details: which state?'
    assert evidence.distinctive(first, template.shared(first)) == first
    template.add(first)
    second = 'Highlight the parts related to "Exclusivity". Details: is there any?'
    found = evidence.distinctive(second, template.shared(second))
    assert found == 'Exclusivity Details there any "Exclusivity"'
    template.add(second)
    asked = 'Highlight the parts related to "Audit Rights". Details: may a party audit the books?'
    found = evidence.distinctive(asked, template.shared(asked))
    assert found == 'Audit Rights may party audit books "Audit Rights"'
    own = "Highlight the parts related to it?"
    assert evidence.distinctive(own, template.shared(own)) == own


def test_a_second_question_on_the_same_topic_keeps_the_topic_in_its_query() -> None:
    """Two questions that share their topic's words, not a form's sentence: the second keeps them (a
    follow-up on the same topic searches for it)."""
    template = evidence.Template()
    template.add("who wrote the harry potter books")
    second = "when was the first harry potter book released in the uk"
    assert evidence.distinctive(second, template.shared(second)) == second


def test_a_passage_that_writes_the_question_s_compound_closed_is_kept() -> None:
    """"Non-Transferable License" asked, "nontransferable" written: the passage matches the question
    (a block keeps only passages that do), though it shares no other word with it."""
    answer = "Vendor grants Reseller a nontransferable right to resell the Products in the Territory."
    decoys = [f"The party may transfer the license fee {n} days after notice, within the limit set."
              for n in ("ten", "twenty", "thirty")]
    document = "\n\n".join([filler(300, seed=1), decoys[0], filler(300, seed=2), answer,
                            filler(300, seed=3), decoys[1], decoys[2], filler(300, seed=4)])
    question = "Does this agreement limit a party's ability to transfer its Non-Transferable License?"
    block, _ = evidence.evidence_job(question, [document], 150, None, present="Intro.")
    assert answer in block


def test_a_clause_s_short_last_sentence_stays_with_it_though_the_form_has_those_words_elsewhere() -> None:
    """A redaction mark ("[***].") or a "Yes." ends many passages: that the form holds those few
    characters somewhere says nothing about this clause, so the clause arrives whole, not cut short
    by the mark it ends with."""
    clause = f"{CLAUSE} [***]."
    document = "\n\n".join([filler(300, seed=1), clause, filler(300, seed=2)])
    form = f"Intro. The fee is [***]. {filler(40, seed=3)}"
    block, _ = evidence.evidence_job(QUESTION, [document], 200, None, present=form)
    assert clause in block
