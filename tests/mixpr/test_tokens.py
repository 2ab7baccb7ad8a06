import os

from mixpr.tokens import count_tokens, encoding_for


def test_encodings_load_offline_from_litellm():
    assert "litellm" in os.environ["TIKTOKEN_CACHE_DIR"]
    assert encoding_for("gpt-4o").name == "o200k_base"


def test_provider_prefix_and_unknown_models():
    assert encoding_for("openai/gpt-4o-mini").name == "o200k_base"
    assert encoding_for("gpt-3.5-turbo").name == "cl100k_base"
    assert encoding_for("local").name == "cl100k_base"
    assert encoding_for(None).name == "cl100k_base"


def test_special_token_text_is_counted_as_plain_text():
    assert count_tokens("hello <|endoftext|>") > 2
