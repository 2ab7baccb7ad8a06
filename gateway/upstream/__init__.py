"""How a call is forwarded: LiteLLM calls, streams, error mapping and the SDK patches."""
