"""The embedded model's server (llama.cpp through the xllamacpp wheel), managed by the gateway."""
