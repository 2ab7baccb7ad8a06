"""The pure parts: config validation, the message <-> stream mapping, the LiteLLM call."""

from __future__ import annotations

import pytest

import gateway
from gateway.compress import conversation
from gateway.config import ConfigError, load_config, parse_config
from gateway.upstream import forward as upstream

BASE = {"model_list": [{"model_name": "m", "litellm_params": {"model": "openai/x"}}]}


def test_public_names() -> None:
    assert gateway.__all__ == ["ConfigError", "GatewayConfig", "create_app", "load_config"]


def test_env_values_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UP_KEY", "sk-from-env")
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    params = {"model": "openai/x", "api_key": "os.environ/UP_KEY"}
    raw = {"model_list": [{"model_name": "m", "litellm_params": params}],
           "general_settings": {"master_key": "os.environ/NOT_SET_ANYWHERE"}}
    config = parse_config(raw)
    assert config.model("m").litellm_params["api_key"] == "sk-from-env"
    assert config.general_settings.master_key is None  # unset: auth off, with a warning


def test_per_model_overrides_merge_with_defaults() -> None:
    raw = {**BASE, "mixpr_settings": {"budget_tokens": 2000, "router": "local"}}
    raw["model_list"] = [{**BASE["model_list"][0], "mixpr": {"compress_above_tokens": 16000}}]
    settings = parse_config(raw).model("m").settings(parse_config(raw).mixpr_settings)
    assert (settings.compress_above_tokens, settings.budget_tokens, settings.router) == (16000, 2000, "local")


@pytest.mark.parametrize(("raw", "message"), [
    ({}, "model_list: Field required"),
    ({"model_list": []}, "model_list: List should have at least 1 item"),
    ({"model_list": [{"model_name": "m", "litellm_params": {}}]},
     "model_list.0.litellm_params: Value error, litellm_params.model is required"),
    ({**BASE, "mixpr_settings": {"router": "sometimes"}},
     "mixpr_settings.router: Input should be 'auto', 'heuristic', 'local' or 'global'"),
    ({**BASE, "mixpr_settings": {"budget_tokenz": 5}},
     "mixpr_settings.budget_tokenz: Extra inputs are not permitted"),
    ({"model_list": BASE["model_list"] * 2}, "model_name must be unique; repeated: m"),
    ({"model_list": [{**BASE["model_list"][0], "managed_server": {"model_path": "m.gguf", "port": "x"}}]},
     "model_list.0.managed_server: Value error, managed_server.port must be an integer 1-65535, got 'x'"),
])
def test_config_errors_name_the_field(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, source="config.yaml")
    assert str(caught.value).startswith("config.yaml: invalid configuration\n")
    assert message in str(caught.value)


def test_form_cache_url_is_a_redis_url_and_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "http://cache:hunter2@example.com:6379"
    with pytest.raises(ConfigError) as caught:
        parse_config({**BASE, "general_settings": {"form_cache_url": secret}})
    assert "general_settings.form_cache_url" in str(caught.value) and "redis://" in str(caught.value)
    assert "hunter2" not in str(caught.value)
    monkeypatch.setenv("FORM_CACHE", "rediss://:pw@cache:6380/1")
    raw = {**BASE, "general_settings": {"form_cache_url": "os.environ/FORM_CACHE",
                                        "deployment_secret": "s" * 32}}
    assert parse_config(raw).general_settings.form_cache_url == "rediss://:pw@cache:6380/1"
    monkeypatch.setenv("FORM_CACHE", "")  # a variable set to "" (the Kubernetes base): no shared cache
    assert parse_config(raw).general_settings.form_cache_url is None


def test_unreadable_and_invalid_files(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model_list: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_split_and_rebuild_round_trip() -> None:
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": [{"type": "text", "text": "alpha beta"}, {"type": "image_url"}]},
        {"role": "assistant", "content": "gamma"},
        {"role": "user", "content": "delta?"},
        {"role": "tool", "tool_call_id": "t", "content": "epsilon"},
    ]
    conv = conversation.split(messages)
    # Chronological, but the last user message goes last: MixPR reads the end as the query.
    assert conv.text == "alpha beta\n\ngamma\n\nepsilon\n\ndelta?"
    assert conv.boundaries == (0, 10, 12, 17, 19, 26, 28, 34)
    assert conv.media_parts == 1 and conv.verbatim_text == "rules\nt"
    everything = [(p.start, p.end) for p in conv.pieces]
    assert conversation.rebuild(conv, everything) == messages
    rebuilt = conversation.rebuild(conv, [(0, 5), (28, 34)])
    assert rebuilt[1]["content"][0] == {"type": "text", "text": "alpha"}
    assert rebuilt[1]["content"][1] is messages[1]["content"][1]
    assert rebuilt[2]["content"] == conversation.DROPPED
    assert rebuilt[3]["content"] == "delta?"
    assert rebuilt[0] is messages[0]
    assert messages[1]["content"][0]["text"] == "alpha beta"  # the client's objects are not mutated


def test_query_span_is_the_last_user_messages_last_paragraph() -> None:
    document = "Clause one. Clause two.\n\nClause three."
    conv = conversation.split([
        {"role": "user", "content": "earlier question"},
        {"role": "user", "content": f"{document}\n\n  What does clause two say?  \n"},
        {"role": "tool", "tool_call_id": "t", "content": "a tool result"},
    ])  # fmt: skip
    start, end = conv.query_span
    assert conv.text[start:end] == "What does clause two say?"
    assert conv.text.index("a tool result") < start  # the user message went last
    # One paragraph: the whole message. A long one: its tail only.
    conv = conversation.split([{"role": "user", "content": "Summarise this."}])
    assert conv.query_span == (0, len("Summarise this."))
    long = "word " * 1000 + "and the question?"
    start, end = conversation.split([{"role": "user", "content": long}]).query_span
    assert end == len(long) and end - start <= conversation.QUERY_MAX_CHARS
    # Nothing from a user at the end (or no text at all): no span, MixPR finds the question itself.
    assert conversation.split([{"role": "assistant", "content": "hi"}]).query_span is None
    assert conversation.split([{"role": "user", "content": "   "}]).query_span is None


def test_rebuild_joins_cut_runs_with_a_space() -> None:
    conv = conversation.split([{"role": "user", "content": "One. Two. Three."}])
    assert conversation.rebuild(conv, [(0, 4), (10, 16)])[0]["content"] == "One. Three."
    assert conversation.rebuild(conv, [(0, 5), (10, 16)])[0]["content"] == "One. Three."


def test_build_call_passes_known_params_and_puts_the_rest_in_extra_body() -> None:
    config = parse_config({"model_list": [{"model_name": "m", "litellm_params": {
        "model": "openai/x", "api_base": "http://127.0.0.1:9/v1", "api_key": "sk-up", "rpm": 10}}]})
    body = {"model": "m", "messages": [], "mixpr": {"enabled": False}, "temperature": 0.2, "user": "u",
            "api_base": "http://evil.example", "metadata": {"a": 1}}
    kwargs = upstream.build_call(config.model("m"), body, [{"role": "user", "content": "hi"}], timeout=5)
    assert kwargs["model"] == "openai/x" and kwargs["api_base"] == "http://127.0.0.1:9/v1"
    assert kwargs["temperature"] == 0.2 and kwargs["timeout"] == 5 and kwargs["max_retries"] == 0
    assert kwargs["extra_body"] == {"user": "u", "api_base": "http://evil.example", "metadata": {"a": 1}}
    assert "rpm" not in kwargs and "mixpr" not in kwargs and "mixpr" not in kwargs["extra_body"]
