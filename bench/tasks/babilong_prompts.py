"""Per-task BABILong prompt parts. Instructions and examples are our own wording of what the upstream prompts
say (see TASKS.md, section C); the post-prompts are the verbatim strings TASKS.md quotes."""

from __future__ import annotations

_INTRO = (
    "You will read a long passage of unrelated book text in which short facts about people, objects and "
    "places have been hidden. Answer the question at the end using only those facts."
)

PROMPTS: dict[str, dict[str, str]] = {
    "qa1": {
        "instruction": _INTRO + " A person may move several times: use the latest location you read about.",
        "examples": (
            "<example>\nAnna walked to the study. Tom ran to the porch. "
            "Anna drove to the attic. Where is Anna?\n"
            "Answer: The most recent location of Anna is attic.\n</example>\n"
            "<example>\nTom went to the cellar. Tom hurried to the yard. Where is Tom?\n"
            "Answer: The most recent location of Tom is yard.\n</example>"
        ),
        "post_prompt": (
            "Always return your answer in the following format: The most recent location of ’person’ is "
            "’location’. Do not write anything else after that."
        ),
    },
    "qa2": {
        "instruction": _INTRO + " An object someone picks up travels with them until they drop it; a dropped "
        "object stays where it was left.",
        "examples": (
            "<example>\nAnna picked up the cup. Anna walked to the study. Where is the cup?\n"
            "Answer: The cup is in study.\n</example>\n"
            "<example>\nTom took the lamp. Tom went to the porch. Tom put down the lamp. "
            "Tom ran to the attic. "
            "Where is the lamp?\nAnswer: The lamp is in porch.\n</example>"
        ),
        "post_prompt": (
            "Always return your answer in the following format: The ’item’ is in ’location’. "
            "Do not write anything else after that."
        ),
    },
    "qa3": {
        "instruction": _INTRO + " An object someone picks up travels with them until they drop it; a dropped "
        "object stays where it was left. The question asks where an object was just before a given place.",
        "examples": (
            "<example>\nAnna took the cup. Anna went to the study. Anna walked to the attic. "
            "Where was the cup before the attic?\n"
            "Answer: Before the attic the cup was in the study.\n</example>\n"
            "<example>\nTom went to the porch. Tom got the lamp. Tom ran to the yard. "
            "Where was the lamp before the yard?\n"
            "Answer: Before the yard the lamp was in the porch.\n</example>"
        ),
        "post_prompt": (
            "Always return your answer in the following format: Before the $location_1$ the $item$ was in "
            "the $location_2$. Do not write anything else after that."
        ),
    },
    "qa4": {
        "instruction": _INTRO + " The facts say how rooms lie relative to each other.",
        "examples": (
            "<example>\nThe study is west of the attic. The porch is north of the study. "
            "What is west of the attic?\nAnswer: study\n</example>\n"
            "<example>\nThe yard is south of the cellar. What is the cellar north of?\n"
            "Answer: yard\n</example>"
        ),
        "post_prompt": (
            "Your answer should contain only one word - location. Do not write anything else after that."
        ),
    },
    "qa5": {
        "instruction": _INTRO + " The facts say who moves where and who hands which object to whom.",
        "examples": (
            "<example>\nAnna took the cup. Anna gave the cup to Tom. Who received the cup?\nAnswer: Tom\n"
            "</example>\n"
            "<example>\nTom grabbed the lamp. Tom passed the lamp to Anna. What did Tom give to Anna?\n"
            "Answer: lamp\n</example>"
        ),
        "post_prompt": (
            "Your answer should contain only one word. Do not write anything else after that. "
            "Do not explain your answer."
        ),
    },
}
