"""Deprecated: the LiteLLM plug-in's previous import path, kept for one release.

Configs of the previous release name ``guardrail: gateway.litellm_guardrail.MixPRGuardrail``; the
class now lives in :mod:`gateway.plugins.litellm_guardrail`. This module re-exports it, so those
configs still start, and says so once, as a ``DeprecationWarning`` and, since Python hides those
outside ``__main__`` by default, a warning in the proxy's log. Rename the path in your config.
"""

from __future__ import annotations

import logging
import warnings

from gateway.plugins.litellm_guardrail import MixPRGuardrail

__all__ = ["MixPRGuardrail"]

MESSAGE = ("guardrail: gateway.litellm_guardrail.MixPRGuardrail is deprecated and will be removed in the "
           "next release: use gateway.plugins.litellm_guardrail.MixPRGuardrail")
warnings.warn(MESSAGE, DeprecationWarning, stacklevel=2)
logging.getLogger("gateway.litellm_guardrail").warning(MESSAGE)
