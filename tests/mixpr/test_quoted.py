"""A term the question quotes is found where the text quotes it: the term's definition."""

from mixpr import compress
from mixpr.quoted import terms

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
    asked = 'related to "Non-Transferable License" or "Parties."'
    assert terms(asked) == ["Non-Transferable License", "Parties"]
    assert terms(" ".join(f'"term {n}"' for n in range(5))) == []
    assert terms('a "" and "!!" mark nothing') == []
