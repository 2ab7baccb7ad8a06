"""OpenAI ``POST /v1/responses``, served by any upstream that speaks chat completions.

The request's ``input`` becomes chat messages (LiteLLM's own Responses -> chat translation:
``instructions`` becomes a system message, developer items stay developer messages, function
calls and their outputs become tool calls and tool messages, images stay image parts), so it is
compressed exactly as a chat conversation would be. The chat completion, or its chunks, comes
back as a Responses object, or as the Responses SSE events the openai SDK parses. A request that
passes through uncompressed to a deployment the raw relay serves goes to the upstream's chat
completions as bytes (``gateway.upstream.chat_relay``), without LiteLLM's call (which added about
20 ms here, issue 30); the answer is read back from its JSON or its events.

To an upstream that serves the Responses API itself (``gateway.upstream.responses_relay``:
OpenAI, Azure, a server the operator declares) nothing is translated: a view of the items is
compressed (``gateway.api.responses_items``), the kept texts are written back into the client's own
request, and that request goes out with every other item and field as sent (``compaction`` items,
encrypted reasoning, types and fields newer than LiteLLM); the answer, or its events, come back as
the upstream sent them. To any other upstream, an item the translation would drop is refused with a
400 naming it.

The gateway keeps no state: ``previous_response_id``, ``conversation``, ``store: true`` and
``background`` are refused rather than silently ignored.
"""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import APIRouter, Request
from litellm.responses.litellm_completion_transformation.transformation import (
    LiteLLMCompletionResponsesConfig,
)
from starlette.responses import JSONResponse, Response

from gateway.api import responses_items as items
from gateway.api.common import (
    authorized_body,
    event_stream,
    is_int_at_least,
    parse_control,
    parsed,
    relayed_events,
)
from gateway.core import cache_key
from gateway.core.chat import ChatCall, report_headers
from gateway.core.reply import forwarded
from gateway.edge.remote_files import RESPONSES, refuse_urls
from gateway.errors import BadRequest, GatewayError
from gateway.run import offload
from gateway.upstream import chat_relay, responses_relay
from gateway.upstream import forward as upstream

log = logging.getLogger("gateway.api.openai_responses")

router = APIRouter()

# Server-side state this gateway does not keep: refused, so a client never silently loses context.
STATEFUL = {
    "previous_response_id": "'previous_response_id' needs responses stored on the server, and this "
                            "gateway stores none: send the whole conversation in 'input' instead.",
    "conversation": "'conversation' needs conversations stored on the server, and this gateway stores "
                    "none: send the whole conversation in 'input' instead.",
    "background": "'background' responses need server-side storage, which this gateway does not have.",
}
# Chat parameters of LiteLLM's translation that are its own, not the upstream's.
NOT_FORWARDED = ("model", "messages", "stream", "custom_llm_provider", "extra_headers")


@router.post("/v1/responses")
@router.post("/responses", include_in_schema=False)
async def responses(request: Request) -> Response:
    gateway, body = await authorized_body(request)
    _check_model(body)
    entry = gateway.chat.entry(body["model"])
    to = responses_relay.target(entry, timeout=gateway.config.general_settings.request_timeout_s)
    if to is not None:
        return await _relayed(gateway, body, entry, to, request)
    call = await parsed(parse_request, body, request.headers)
    downloads = upstream.downloads_image_urls(gateway.chat.entry(call.model).upstream_model)
    if downloads and isinstance(body["input"], list):
        refuse_urls(body["input"], RESPONSES, images=True)
    reply = await gateway.chat.run(call)
    if reply.events is not None:  # relayed as bytes (gateway.upstream.chat_relay): its chunks, read here
        events = ResponseStream(body).events(chat_relay.chunks(reply.events))
        return event_stream(sse(events), reply.headers, upstream=reply.events)
    if reply.chunks is not None:
        events = ResponseStream(body).events(reply.chunks)
        return event_stream(sse(events), reply.headers)
    completion = reply.response if reply.body is None else orjson.loads(reply.body)
    return JSONResponse(response_object(completion, body), headers=reply.headers)


async def _relayed(gateway: Any, body: dict[str, Any], entry: Any, to: responses_relay.Target,
                   request: Request) -> Response:
    """Compress the view, put what was kept back into the client's own request, and relay it."""
    call = await parsed(parse_relayed, body, request.headers)
    outcome = await gateway.chat.prepare(call)
    big = offload.many(outcome.messages)  # the write-back walks every part
    sent = await offload.inline_or_run(big, items.write_back, body, outcome.messages)
    payload = forwarded({k: v for k, v in sent.items() if k != "mixpr"}, outcome.max_tokens,
                        ("max_output_tokens",))
    gateway.metrics.upstream_calls.labels(entry.model_name, "relay").inc()

    def on_usage(usage: dict[str, Any] | None) -> None:
        gateway.metrics.record_usage(entry.model_name, usage)

    reply = await responses_relay.send(gateway.chat.http, to, payload, model=body["model"], on_usage=on_usage)
    headers = {**reply.headers, **report_headers(outcome)}
    if reply.stream is not None:
        events = relayed_events(reply.stream, functools.partial(_error_event, reply.stream))
        return event_stream(events, headers, upstream=reply.stream)
    return Response(reply.content, media_type="application/json", headers=headers)


def _error_event(events: responses_relay.ResponseEvents, error: GatewayError) -> bytes:
    """The Responses API's ``error`` event, numbered after the upstream's last."""
    return responses_relay.error_event(error, events.count)


def _check_model(body: Any) -> None:
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("You must provide a model parameter.", param="model")


def parse_request(body: Any, headers: Any) -> ChatCall:
    """The Responses request as a chat call; refuses what a stateless gateway cannot honour and what
    the translation to chat would drop."""
    _check(body)
    items.refuse_untranslatable(body["input"])
    chat = _translated(body, body["input"])
    return _chat_call(body, chat["messages"], chat, headers)


def parse_relayed(body: Any, headers: Any) -> ChatCall:
    """The Responses request as a chat call over its view (``responses_items.view``), for the relay:
    the translation reads only its parameters (tools, limits), for counting."""
    _check(body)
    chat = _translated(body, ".")
    return _chat_call(body, items.view(body), chat, headers)


def _check(body: Any) -> None:
    _check_model(body)
    _refuse_state(body)
    _validate(body)
    if isinstance(body["input"], list):
        refuse_urls(body["input"], RESPONSES)


def _translated(body: dict[str, Any], given: Any) -> dict[str, Any]:
    """LiteLLM's chat form of ``body`` with ``given`` as its input (the relay gives a placeholder: only
    the parameters are read, so a failure there is theirs, not the input's)."""
    options = {k: v for k, v in body.items() if k not in ("model", "input", "mixpr", "stream")}
    try:
        return LiteLLMCompletionResponsesConfig.transform_responses_api_request_to_chat_completion_request(
            model=body["model"], input=given, responses_api_request=options, stream=bool(body.get("stream")))
    except Exception as exc:  # LiteLLM's translation rejects malformed items in its own ways
        if given is body["input"]:
            raise BadRequest(f"'input' could not be read as Responses input items ({type(exc).__name__}).",
                             param="input") from None
        raise BadRequest(f"The request's parameters ({', '.join(sorted(options))}) could not be read as "
                         f"Responses parameters ({type(exc).__name__}).") from None


def _chat_call(body: dict[str, Any], messages: list[dict[str, Any]], chat: dict[str, Any],
               headers: Any) -> ChatCall:
    model, stream = body["model"], bool(body.get("stream"))
    control = parse_control(body.get("mixpr"), headers)
    params = {k: v for k, v in chat.items() if k not in NOT_FORWARDED}
    for key in ("prompt_cache_key", "prompt_cache_retention"):  # LiteLLM's translation has no field
        if key in body:  # for them: forwarded, and the warmth check reads the retention the client asked
            params[key] = body[key]
    if stream:  # response.completed reports the usage: ask the upstream for it, not an estimate
        params.setdefault("stream_options", {"include_usage": True})
    return ChatCall(model=model, messages=messages, params=params, control=control, stream=stream,
                    raw_reply=True, session=cache_key.session(headers))


def _refuse_state(body: dict[str, Any]) -> None:
    for key, message in STATEFUL.items():
        if body.get(key):
            raise BadRequest(message, param=key)
    if body.get("store") is True:
        raise BadRequest("'store: true' asks the server to keep the response for later retrieval, and "
                         "this gateway keeps none: send 'store: false' or leave it out.", param="store")


def _validate(body: dict[str, Any]) -> None:
    items = body.get("input")
    if not (isinstance(items, str) and items) and not (isinstance(items, list) and items):
        raise BadRequest("'input' must be a non-empty string or array of input items.", param="input")
    if isinstance(items, list) and not all(isinstance(item, dict) for item in items):
        raise BadRequest("Every item of 'input' must be an object.", param="input")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be a boolean.", param="stream")
    value = body.get("max_output_tokens")
    if value is not None and not is_int_at_least(value, 1):
        raise BadRequest("'max_output_tokens' must be a positive integer.", param="max_output_tokens")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest("'instructions' must be a string.", param="instructions")


# -- chat completion -> Responses object --------------------------------------------------------


def response_object(
    completion: dict[str, Any], body: dict[str, Any], *, output: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A Responses ``response`` for a chat completion (``output`` given when streamed)."""
    choice = (completion.get("choices") or [{}])[0]
    finish = choice.get("finish_reason")
    if output is None:
        output = output_items(choice.get("message") or {})
    status = "incomplete" if finish == "length" else "completed"
    return {
        **_echoed(body),
        "id": _response_id(completion.get("id")),
        "object": "response",
        "created_at": completion.get("created") or int(time.time()),
        "model": completion.get("model") or body.get("model"),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "output": output,
        "usage": _usage(completion.get("usage")),
    }


def _echoed(body: dict[str, Any]) -> dict[str, Any]:
    """The request settings a Responses object repeats back."""
    return {
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": body.get("reasoning"),
        "store": False,
        "temperature": body.get("temperature"),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p"),
        "truncation": body.get("truncation", "disabled"),
        "user": body.get("user"),
    }


def output_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    items = []
    if message.get("reasoning_content"):  # thinking models behind llama.cpp, vLLM, Ollama, ...
        items.append(reasoning_item(_new_id("rs"), message["reasoning_content"], "completed"))
    if message.get("content"):
        items.append(message_item(_new_id("msg"), message["content"], "completed"))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        items.append(function_call_item(call.get("id") or _new_id("call"), function.get("name", ""),
                                        function.get("arguments") or "", "completed"))
    return items


def reasoning_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [_text_part(text)]
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def function_call_item(call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {"type": "function_call", "id": "fc_" + call_id, "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if not usage:
        return None
    prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": usage.get("total_tokens") or prompt + completion}


def _response_id(chat_id: Any) -> str:
    return f"resp_{chat_id}" if isinstance(chat_id, str) and chat_id else _new_id("resp")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


# -- chat chunks -> Responses events ------------------------------------------------------------


class ResponseStream:
    """Turns chat.completion.chunk dicts into the Responses event sequence, item by item."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.sequence = 0
        self.output: list[dict[str, Any]] = []  # items in output_index order, as streamed so far
        self.message: dict[str, Any] | None = None
        self.reasoning: dict[str, Any] | None = None
        self.calls: dict[int, dict[str, Any]] = {}  # by the chunk's tool_call index
        self.completion: dict[str, Any] = {"id": None, "created": int(time.time()), "model": body["model"]}
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None

    async def events(self, chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        started = False
        try:
            async for chunk in chunks:
                if not started:
                    self.completion.update({k: chunk[k] for k in ("id", "created", "model") if chunk.get(k)})
                    for event in self._start():
                        yield event
                    started = True
                for event in self._chunk(chunk):
                    yield event
        except GatewayError as error:  # the status line is long gone: report it in-band
            log.warning("upstream stream failed after start: %s %s", error.status_code, error.code)
            yield self._event("error", code=error.code or error.error_type, message=error.message,
                              param=error.param)
            return
        for event in ([] if started else self._start()) + self._finish():
            yield event

    def _start(self) -> list[dict[str, Any]]:
        snapshot = self._snapshot("in_progress")
        return [self._event("response.created", response=snapshot),
                self._event("response.in_progress", response=snapshot)]

    def _chunk(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        self.usage = chunk.get("usage") or self.usage
        events: list[dict[str, Any]] = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue  # n > 1 has no Responses equivalent; the first choice is the answer
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                events += self._reasoning(delta["reasoning_content"])
            if delta.get("content"):
                events += self._text(delta["content"])
            for call in delta.get("tool_calls") or []:
                events += self._tool_call(call)
            self.finish = choice.get("finish_reason") or self.finish
        return events

    def _text(self, text: str) -> list[dict[str, Any]]:
        events = []
        if self.message is None:
            self.message = message_item(_new_id("msg"), None, "in_progress")
            events += self._add(self.message)
            events.append(self._event("response.content_part.added", item_id=self.message["id"],
                                      output_index=self._index(self.message), content_index=0,
                                      part=_text_part("")))
            self.message["content"].append(_text_part(""))
        self.message["content"][0]["text"] += text
        events.append(self._event("response.output_text.delta", item_id=self.message["id"],
                                  output_index=self._index(self.message), content_index=0, delta=text,
                                  logprobs=[]))
        return events

    def _reasoning(self, text: str) -> list[dict[str, Any]]:
        events = []
        if self.reasoning is None:
            self.reasoning = reasoning_item(_new_id("rs"), None, "in_progress")
            events += self._add(self.reasoning)
            self.reasoning["content"].append({"type": "reasoning_text", "text": ""})
        self.reasoning["content"][0]["text"] += text
        events.append(self._event("response.reasoning_text.delta", item_id=self.reasoning["id"],
                                  output_index=self._index(self.reasoning), content_index=0, delta=text))
        return events

    def _tool_call(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        events = []
        function = call.get("function") or {}
        item = self.calls.get(call.get("index", 0))
        if item is None:
            item = function_call_item(call.get("id") or _new_id("call"), function.get("name") or "", "",
                                      "in_progress")
            self.calls[call.get("index", 0)] = item
            events += self._add(item)
        if function.get("arguments"):
            item["arguments"] += function["arguments"]
            events.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                      output_index=self._index(item), delta=function["arguments"]))
        return events

    def _add(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        self.output.append(item)
        return [self._event("response.output_item.added", output_index=len(self.output) - 1,
                            item=json.loads(json.dumps(item)))]

    def _finish(self) -> list[dict[str, Any]]:
        events = []
        for index, item in enumerate(self.output):
            item["status"] = "completed"
            if item["type"] == "message":
                part = item["content"][0]
                events.append(self._event("response.output_text.done", item_id=item["id"], output_index=index,
                                          content_index=0, text=part["text"], logprobs=[]))
                events.append(self._event("response.content_part.done", item_id=item["id"],
                                          output_index=index, content_index=0, part=part))
            elif item["type"] == "reasoning":
                events.append(self._event("response.reasoning_text.done", item_id=item["id"],
                                          output_index=index, content_index=0,
                                          text=item["content"][0]["text"]))
            else:
                events.append(self._event("response.function_call_arguments.done", item_id=item["id"],
                                          output_index=index, name=item["name"],
                                          arguments=item["arguments"]))
            events.append(self._event("response.output_item.done", output_index=index, item=item))
        final = response_object(self._completion(), self.body, output=self.output)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        events.append(self._event(kind, response=final))
        return events

    def _completion(self) -> dict[str, Any]:
        return {**self.completion, "usage": self.usage, "choices": [{"finish_reason": self.finish}]}

    def _snapshot(self, status: str) -> dict[str, Any]:
        snapshot = response_object(self._completion(), self.body, output=[])
        return {**snapshot, "status": status, "usage": None}

    def _index(self, item: dict[str, Any]) -> int:
        return next(i for i, candidate in enumerate(self.output) if candidate is item)

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.sequence += 1
        return {"type": kind, "sequence_number": self.sequence - 1, **fields}


async def sse(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Responses events as named SSE events (the Responses API sends no ``[DONE]``)."""
    async for event in events:
        yield f"event: {event['type']}\ndata: ".encode() + json.dumps(event).encode() + b"\n\n"
