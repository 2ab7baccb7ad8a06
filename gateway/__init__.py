"""MixPR Gateway: an OpenAI-compatible proxy that shrinks over-long prompts and forwards through LiteLLM.

Start it with ``mixpr-gateway --config config.yaml`` or build the app in code::

    from gateway import create_app, load_config
    app = create_app(load_config("config.yaml"))
"""

from __future__ import annotations

import importlib.util
import os

# `pip install mixpr-gateway` installs the library alone; the gateway's packages are its extra.
_NEEDS = {"fastapi": "fastapi", "litellm": "litellm", "uvicorn": "uvicorn", "yaml": "PyYAML",
          "pydantic": "pydantic"}
_MISSING = [name for module, name in _NEEDS.items() if importlib.util.find_spec(module) is None]
if _MISSING:
    raise ImportError(f"the gateway needs its extra: pip install 'mixpr-gateway[gateway]' "
                      f"(missing: {', '.join(_MISSING)}); the mixpr library works without it")

# LiteLLM fetches its model cost map from the internet at import time, and tiktoken downloads
# its BPE files on first use; both must be pointed at local copies before either is imported.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# LiteLLM otherwise phones home and prints help banners on every error.
os.environ.setdefault("LITELLM_TELEMETRY", "False")

# The gateway's process is its own: tiktoken reads LiteLLM's bundled encodings (offline, p50k_base
# too), as LiteLLM itself sets once imported. The mixpr library never writes the environment.
_LITELLM = importlib.util.find_spec("litellm")
if _LITELLM is not None and _LITELLM.submodule_search_locations:
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", os.path.join(next(iter(_LITELLM.submodule_search_locations)),
                                                             "litellm_core_utils", "tokenizers"))  # fmt: skip

from gateway.config import ConfigError, GatewayConfig, load_config  # noqa: E402

__all__ = ["ConfigError", "GatewayConfig", "create_app", "load_config"]


def __getattr__(name: str) -> object:
    # The app pulls in LiteLLM (seconds to import): only when asked, so the CLI's config check
    # and tools that only read the config stay fast.
    if name == "create_app":
        from gateway.app import create_app

        return create_app
    raise AttributeError(f"module 'gateway' has no attribute {name!r}")
