"""A scripted OpenAI chat upstream on 127.0.0.1 that plays a model driving mini-swe-agent's text-based
loop: each answer is a THOUGHT and exactly one ```` ```mswea_bash_command ```` block, the next of
``commands`` (the step is the number of assistant messages in the request), the way
``minisweagent/config/mini_textbased.yaml`` asks a model to answer. The last command should submit
(``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``); a request past the script gets a block-less answer,
which mini-swe-agent reports as a format error. Every request body is kept in ``requests``.
"""

from __future__ import annotations

from typing import Any

from fake_chat_agent import FakeChatAgent


class FakeBashAgent(FakeChatAgent):
    def __init__(self, commands: list[str]) -> None:
        super().__init__(files=[])
        self.commands = commands

    def answer(self, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        step = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if step >= len(self.commands):
            return {"content": "THOUGHT: the script is over."}, "stop"
        block = f"```mswea_bash_command\n{self.commands[step]}\n```"
        return {"content": f"THOUGHT: step {step} of the script.\n\n{block}"}, "stop"
