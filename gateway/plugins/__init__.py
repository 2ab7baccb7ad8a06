"""MixPR inside a LiteLLM proxy."""
