"""Provider adapters: the model APIs an agent calls, recognised by path on any host.

Matching by path alone lets base-URL setups, gateways and stand-ins work as well as the
real hosts. Each adapter parses its requests and replies (JSON, or SSE incrementally),
trims conversations and builds the provider's own error bodies.
"""

from __future__ import annotations

from functools import lru_cache

from mitmchaos.addons.headers import content
from mitmchaos.addons.providers.anthropic import Anthropic
from mitmchaos.addons.providers.common import CallRequest, Reply, ToolCall, ToolResult, parse_json
from mitmchaos.addons.providers.openai_chat import OpenAIChat
from mitmchaos.addons.providers.openai_responses import OpenAIResponses
from mitmchaos.addons.providers.sse import SSEEvent, SSEParser

PROVIDERS = (Anthropic, OpenAIChat, OpenAIResponses)


def detect(method: str, path: str):
    """The adapter for a model-API call, or None. ``path`` may carry a query string (``?beta=true``)."""
    return _provider_for(path) if method == "POST" else None


@lru_cache(maxsize=1024)  # asked on every request; an agent's paths are few
def _provider_for(path: str):
    path = path.split("?", 1)[0].rstrip("/")
    return next((p for p in PROVIDERS if p.matches(path)), None)


def model_call(request):
    """The adapter and JSON body of a model-API request, or None when it is not one."""
    provider = detect(request.method, request.path)
    if provider is None:
        return None
    try:
        # bytes: JSON is UTF-8, and json reads bytes without get_text's charset lookup
        body = parse_json(content(request) or b"")
    except ValueError:
        return None
    return (provider, body) if isinstance(body, dict) else None


__all__ = [
    "PROVIDERS",
    "detect",
    "model_call",
    "Anthropic",
    "OpenAIChat",
    "OpenAIResponses",
    "CallRequest",
    "Reply",
    "ToolCall",
    "ToolResult",
    "SSEEvent",
    "SSEParser",
    "parse_json",
]
