"""A term the question quotes is found where the text quotes it: the term's definition."""

import numpy as np

from mixpr import compress
from mixpr.chunking import chunk_text
from mixpr.quoted import quoting, terms

from .filler import sentences

DEFINITION = 'Acme and Birch are referred to individually as a "Party" and collectively as the "Parties."'
QUESTION = 'Highlight the parts of this contract related to "Parties": the two or more parties who signed it.'


def _contract() -> str:
    """A contract whose every clause names the parties (so "parties" is a stop word to the lexical
    expert), with the definition far from the question."""
    filler = sentences(120, seed=11)
    clauses = [f"Each of the Parties shall {s[0].lower()}{s[1:]}" for s in filler[:80]]
    return "\n\n".join([*clauses[:10], DEFINITION, *clauses[10:], QUESTION])


def test_the_definition_of_a_quoted_term_is_kept_though_its_word_is_everywhere() -> None:
    kept = compress(_contract(), budget_tokens=300, route="local").text
    assert DEFINITION in kept


def test_a_question_quoting_many_phrases_is_quoting_text_not_naming_terms() -> None:
    asked = 'related to "Non-Transferable License" or "Parties?" or "Joint\nOwnership"'
    assert terms(asked) == ["Non-Transferable License", "Parties", "Joint Ownership"]
    assert terms(" ".join(f'"term {n}"' for n in range(5))) == []
    assert terms('a "" and "!!" mark nothing') == []


def test_a_term_is_found_in_curly_quotes_in_any_case_and_spacing_but_not_where_everyone_quotes_it() -> None:
    lines = [f"Clause {n} says nothing of note here." for n in range(30)]
    lines[3] = "The “licensed   product” means the device."
    lines[7] = 'The "U.S." means the United States.'
    lines[12:24] = [f'He said "yes" to clause {n}.' for n in range(12)]  # quoted in 12 of 30 lines
    chunks = chunk_text("\n\n".join(lines))
    found = [chunks.text[chunks.starts[i]:chunks.ends[i]].strip()
             for i in quoting(chunks, ["Licensed Product", "U.S"])]
    assert found == [lines[3], lines[7]]
    assert len(quoting(chunks, ["yes"])) == 0  # a word many lines quote is not a defined term
    assert quoting(chunks, []).dtype == np.int64 and not len(quoting(chunks, []))


def test_a_term_only_the_question_quotes_adds_nothing() -> None:
    text = " ".join(sentences(60, seed=12)) + '\n\nWhat does "Escrow Agent" mean here?'
    plain = compress(text.replace('"', ""), budget_tokens=200, route="local").text
    quoted = compress(text, budget_tokens=200, route="local").text
    assert quoted == plain.replace("Escrow Agent", '"Escrow Agent"')
