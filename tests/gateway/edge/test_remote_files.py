"""Client-controlled downloads (issue #16, scenario 8): a URL in a file part is refused, never fetched.

A real HTTP server on 127.0.0.1 serves the "file" and records every request for it. LiteLLM refuses
loopback addresses by default (its SSRF check), which would hide the download a public URL gets,
so each test allows this server's host and port in LiteLLM the way an operator's allow-list would:
the file server then stands for any public host.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from http import server as http_server
from typing import Any

import httpx
import litellm
import pytest
from conftest import MASTER_KEY, ServerThread, gateway_config, model

from gateway import create_app
from gateway.config import parse_config
from gateway.core.model_tokens import DEFAULT_MARGIN
from mixpr.tokens import count_tokens

# The smallest file a PDF reader accepts is irrelevant here: nothing may read it at all.
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000")


class FileServer:
    """Serves ``/doc.pdf`` and ``/img.png`` on 127.0.0.1 and records every path asked for."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(http_server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802  (http.server's name)
                hits.append(self.path)
                body, kind = (PNG, "image/png") if self.path.endswith(".png") else (PDF, "application/pdf")
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http_server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        # shutdown() waits for serve_forever's next poll: 0.5 s by default, for each of these tests.
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"


@pytest.fixture
def files(monkeypatch: pytest.MonkeyPatch) -> Iterator[FileServer]:
    server = FileServer()
    server.thread.start()
    monkeypatch.setattr(litellm, "user_url_allowed_hosts", [f"127.0.0.1:{server.port}"])
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.fixture(scope="module")
def gw(upstream: Any) -> Iterator[httpx.Client]:
    """The test gateway plus a model behind LiteLLM's Anthropic provider (which downloads http:// media
    itself); MixPR in threads, as nothing here is compressed."""
    raw = gateway_config(upstream.base_url)
    raw["model_list"].append(model("claude", "x", upstream.base_url.removesuffix("/v1"),
                                   litellm_params={"model": "anthropic/claude-3-5-sonnet-20241022"}))
    raw["general_settings"]["compression_executor"] = "thread"
    server = ServerThread(create_app(parse_config(raw))).start()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client
    server.stop()


def post(http: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    return http.post(path, json=body, headers={"x-api-key": MASTER_KEY})


def chat_with(part: dict[str, Any]) -> dict[str, Any]:
    content = [{"type": "text", "text": "Summarise the attached file."}, part]
    return {"model": "gpt-test", "max_tokens": 8, "messages": [{"role": "user", "content": content}]}


@pytest.mark.parametrize("field", ["file_id", "file_data", "file_url"])
def test_a_chat_file_part_with_a_url_is_refused_and_never_fetched(gw, upstream, files, field):
    upstream.clear()
    part = {"type": "file", "file": {field: files.url("doc.pdf")}}
    response = post(gw, "/v1/chat/completions", chat_with(part))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "remote_file_not_supported"
    assert error["param"] == f"messages[0].content[1].file.{field}"
    assert "file_data" in error["message"] and "file id" in error["message"]
    assert files.hits == [] and upstream.received() == []


def test_a_responses_input_file_with_a_url_is_refused_and_never_fetched(gw, upstream, files):
    upstream.clear()
    content = [{"type": "input_text", "text": "Summarise the attached file."},
               {"type": "input_file", "file_url": files.url("doc.pdf")}]
    body = {"model": "gpt-test", "store": False, "input": [{"role": "user", "content": content}]}
    response = post(gw, "/v1/responses", body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "remote_file_not_supported" and error["param"] == "input[0].content[1].file_url"
    assert files.hits == [] and upstream.received() == []


def test_an_anthropic_document_with_a_url_source_is_refused_in_anthropics_shape(gw, upstream, files):
    upstream.clear()
    content = [{"type": "text", "text": "Summarise the attached file."},
               {"type": "document", "source": {"type": "url", "url": files.url("doc.pdf")}}]
    body = {"model": "claude", "max_tokens": 8, "messages": [{"role": "user", "content": content}]}
    response = post(gw, "/v1/messages", body)
    assert response.status_code == 400, response.text
    payload = response.json()
    assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error"
    assert "messages.0.content.1" in payload["error"]["message"]
    assert files.hits == [] and upstream.received() == []


def test_file_parts_sent_inline_or_by_id_still_pass(gw, upstream, files):
    for file in ({"file_data": "data:application/pdf;base64,JVBERi0xLjQK", "filename": "a.pdf"},
                 {"file_id": "file-abc123"}):
        upstream.clear()
        response = post(gw, "/v1/chat/completions", chat_with({"type": "file", "file": file}))
        assert response.status_code == 200, response.text
        (sent,) = upstream.received("echo")
        assert sent.json["messages"][0]["content"][1]["file"]["file_id" if "file_id" in file else "file_data"]


@pytest.mark.parametrize("stream", [False, True])
def test_an_image_url_goes_to_the_provider_unfetched_at_a_fixed_cost(gw, upstream, files, stream):
    upstream.clear()
    url = files.url("img.png")
    body = {**chat_with({"type": "image_url", "image_url": {"url": url}}), "stream": stream}
    response = post(gw, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    (sent,) = upstream.received("echo")
    assert sent.json["messages"][0]["content"][1]["image_url"]["url"] == url
    # 765 for the image (a high-detail 1024x1024 image's cost), the text (with the margin of a model
    # tiktoken does not know), 4 + 3 tokens of framing.
    text = math.ceil(count_tokens(body["messages"][0]["content"][0]["text"], "echo") * (1 + DEFAULT_MARGIN))
    assert int(response.headers["x-mixpr-original-tokens"]) == 765 + text + 7
    assert files.hits == []


def _tool_result_with(part: dict[str, Any], model_name: str) -> dict[str, Any]:
    messages = [{"role": "user", "content": "Fetch the report."},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "fetch",
                                                   "input": {}}]},
                {"role": "user", "content": "Here it is."},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                              "content": [{"type": "text", "text": "The report:"}, part]}]}]
    return {"model": model_name, "max_tokens": 8, "messages": messages}


@pytest.mark.parametrize("model_name", ["claude", "gpt-test"])
@pytest.mark.parametrize(("kind", "name"), [("document", "doc.pdf"), ("image", "img.png")])
def test_a_url_nested_in_a_tool_result_is_refused_and_never_fetched(gw, upstream, files, model_name, kind,
                                                                   name):
    upstream.clear()
    part = {"type": kind, "source": {"type": "url", "url": files.url(name)}}
    response = post(gw, "/v1/messages", _tool_result_with(part, model_name))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "'messages.3.content.0.content.1.source.url' is a URL" in error["message"]
    assert files.hits == [] and upstream.received() == []


def test_a_url_deeper_in_a_tool_result_is_refused_too(gw, upstream, files):
    upstream.clear()
    image = {"type": "image", "source": {"type": "url", "url": files.url("img.png")}}
    document = {"type": "document", "source": {"type": "content", "content": [image]}}
    response = post(gw, "/v1/messages", _tool_result_with(document, "claude"))
    assert response.status_code == 400, response.text
    assert "messages.3.content.0.content.1.source.content.0.source.url" in response.json()["error"]["message"]
    assert files.hits == [] and upstream.received() == []


def test_a_responses_function_output_with_a_file_url_is_refused(gw, upstream, files):
    upstream.clear()
    output = [{"type": "input_file", "file_url": files.url("doc.pdf")}]
    items = [{"type": "function_call", "call_id": "c1", "name": "fetch", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": output}]
    response = post(gw, "/v1/responses", {"model": "gpt-test", "store": False, "input": items})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "input[1].output[0].file_url"
    assert files.hits == [] and upstream.received() == []


def test_an_image_url_is_refused_where_litellm_would_download_it(gw, upstream, files):
    """LiteLLM's Anthropic transform downloads an http image for a chat request: refused, unfetched."""
    upstream.clear()
    body = {**chat_with({"type": "image_url", "image_url": {"url": files.url("img.png")}}), "model": "claude"}
    response = post(gw, "/v1/chat/completions", body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "messages[0].content[1].image_url.url"
    content = [{"type": "input_text", "text": "Describe it."},
               {"type": "input_image", "image_url": files.url("img.png")}]
    body = {"model": "claude", "store": False, "input": [{"role": "user", "content": content}]}
    response = post(gw, "/v1/responses", body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "input[0].content[1].image_url"
    assert files.hits == [] and upstream.received() == []


def test_an_anthropic_image_url_reaches_an_anthropic_model_as_sent(gw, upstream, files):
    """On /v1/messages an Anthropic model gets the request as sent: Anthropic fetches, the gateway never."""
    upstream.clear()
    image = {"type": "image", "source": {"type": "url", "url": files.url("img.png")}}
    body = {"model": "claude", "max_tokens": 8,
            "messages": [{"role": "user", "content": [image, {"type": "text", "text": "Describe it."}]}]}
    response = post(gw, "/v1/messages", body)
    assert response.status_code == 200, response.text
    (sent,) = upstream.received()
    assert sent.path == "/v1/messages" and sent.json["messages"] == body["messages"]
    assert files.hits == []
