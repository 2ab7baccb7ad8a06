"""Only an answer's own ``model`` field is renamed to the name the client asked for (issue 35): a
tool's arguments that hold a ``"model"`` key reach the client byte for byte, on every path that
renames: chat relayed (JSON and events), Responses over the chat relay (JSON and events), Anthropic
Messages relayed (JSON, and ``message_start``'s ``message.model`` in events).

The upstream answers canned bytes (odd spacing included), so the expected answer is exactly the
upstream's bytes with its one model name replaced.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http import server as http_server
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY, ServerThread

from gateway import create_app
from gateway.config import parse_config

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
ARGUMENTS = '{"model": "haiku"}'
TOOL = {"type": "function", "function": {"name": "pick", "parameters": {"type": "object"}}}

CHAT_JSON = (
    b'{"id":"c1","object":"chat.completion","created":1,"model":  "upstream-name","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",'
    b'"function":{"name":"pick","arguments":' + json.dumps(ARGUMENTS).encode() + b'}}]},'
    b'"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8},'
    b'"provider_metadata":{"model": "haiku", "route": {"model":"opus"}}}'
)
CHAT_EVENTS = [
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"upstream-name","choices":'
    b'[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function",'
    b'"function":{"name":"pick","arguments":""}}]}}]}\n\n',
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"upstream-name","choices":'
    b'[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":'
    + json.dumps(ARGUMENTS).encode() + b'}}]}}],"provider_metadata":{"model": "haiku"}}\n\n',
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"upstream-name","choices":'
    b'[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n',
    b"data: [DONE]\n\n",
]
MESSAGE_JSON = (
    b'{"id":"msg_1","type":"message","role":"assistant","model":"claude-upstream","content":[{"type":'
    b'"tool_use","id":"toolu_1","name":"pick","input":{"model": "haiku", "then": {"model":"opus"}}}],'
    b'"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":5}}'
)
MESSAGE_EVENTS = [
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
    b'"role":"assistant","model":"claude-upstream","content":[],"stop_reason":null,"stop_sequence":null,'
    b'"usage":{"input_tokens":3,"output_tokens":1}}}\n\n',
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":'
    b'{"type":"tool_use","id":"toolu_1","name":"pick","input":{"model": "haiku"}}}\n\n',
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":'
    b'{"type":"input_json_delta","partial_json":' + json.dumps(ARGUMENTS).encode() + b"}}\n\n",
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"tool_use",'
    b'"stop_sequence":null},"usage":{"output_tokens":5}}\n\n',
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
]


class Canned(http_server.ThreadingHTTPServer):
    """Answers every chat or Messages request with the canned bytes above."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http_server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802  (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        anthropic = self.path.split("?")[0].endswith("/messages")
        if body.get("stream"):
            data = b"".join(MESSAGE_EVENTS if anthropic else CHAT_EVENTS)
            kind = "text/event-stream"
        else:
            data, kind = (MESSAGE_JSON if anthropic else CHAT_JSON), "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    canned = Canned()
    threading.Thread(target=canned.serve_forever, daemon=True).start()
    config = {
        "model_list": [
            {"model_name": "alias-chat",
             "litellm_params": {"model": "openai/echo", "api_base": canned.url + "/v1", "api_key": "sk-o"}},
            {"model_name": "alias-claude",
             "litellm_params": {"model": "anthropic/claude-3-5-haiku-20241022", "api_base": canned.url,
                                "api_key": "sk-a"}},
        ],
        "mixpr_settings": {"router": "heuristic"},
        "general_settings": {"master_key": MASTER_KEY, "compression_executor": "thread",
                             "compression_workers": 1},
    }
    server = ServerThread(create_app(parse_config(config))).start()
    yield server.url
    server.stop()
    canned.shutdown()
    canned.server_close()


def _post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    response = httpx.post(url + path, json=body, headers=AUTH, timeout=60)
    assert response.status_code == 200, response.text
    return response


def test_a_chat_answer_keeps_every_model_but_its_own(url: str) -> None:
    body = {"model": "alias-chat", "messages": [{"role": "user", "content": "pick"}], "tools": [TOOL]}
    response = _post(url, "/v1/chat/completions", body)
    assert response.content == CHAT_JSON.replace(b'"upstream-name"', b'"alias-chat"')


def test_chat_events_keep_every_model_but_their_own(url: str) -> None:
    body = {"model": "alias-chat", "messages": [{"role": "user", "content": "pick"}], "tools": [TOOL],
            "stream": True}
    response = _post(url, "/v1/chat/completions", body)
    assert response.content == b"".join(CHAT_EVENTS).replace(b'"upstream-name"', b'"alias-chat"')


def test_a_messages_answer_keeps_the_tool_input_byte_for_byte(url: str) -> None:
    body = {"model": "alias-claude", "max_tokens": 20, "messages": [{"role": "user", "content": "pick"}]}
    response = _post(url, "/v1/messages", body)
    assert response.content == MESSAGE_JSON.replace(b'"claude-upstream"', b'"alias-claude"')


def test_messages_events_rename_only_message_start(url: str) -> None:
    body = {"model": "alias-claude", "max_tokens": 20, "stream": True,
            "messages": [{"role": "user", "content": "pick"}]}
    response = _post(url, "/v1/messages", body)
    assert response.content == b"".join(MESSAGE_EVENTS).replace(b'"claude-upstream"', b'"alias-claude"')


@pytest.mark.parametrize("stream", [False, True])
def test_responses_over_the_chat_relay_keep_the_arguments(url: str, stream: bool) -> None:
    body = {"model": "alias-chat", "input": "pick", "stream": stream,
            "tools": [{"type": "function", "name": "pick", "parameters": {"type": "object"}}]}
    response = _post(url, "/v1/responses", body)
    if stream:
        events = [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]
        final = [e["response"] for e in events if e.get("type") == "response.completed"][-1]
    else:
        final = response.json()
    [call] = [item for item in final["output"] if item["type"] == "function_call"]
    assert call["arguments"] == ARGUMENTS
    assert final["model"] == "alias-chat"
