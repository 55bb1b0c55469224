"""What OpenAI's two APIs share: error bodies, rate-limit headers, usage fields."""

from __future__ import annotations

import secrets
from typing import Any

ERRORS = {  # status -> (type, code), as the API sends them
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    502: ("server_error", None),
    503: ("server_error", "service_unavailable"),
    529: ("server_error", "overloaded"),
}


def error(status: int, message: str) -> tuple[dict, dict[str, str]]:
    kind, code = ERRORS.get(status, ("server_error", None))
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return body, {"x-request-id": f"req_{secrets.token_hex(16)}"}


def rate_limit_headers(retry_after_s: float) -> dict[str, str]:
    reset = f"{retry_after_s:g}s"
    return {
        "x-ratelimit-limit-requests": "500",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": reset,
        "x-ratelimit-limit-tokens": "30000",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": reset,
    }


def describe(error: Any) -> str:
    error = error if isinstance(error, dict) else {}
    return f"{error.get('type') or error.get('code') or 'error'}: {error.get('message', '')}"


def usage(usage: dict | None, input_key: str, output_key: str, details_key: str) -> dict[str, int | None]:
    """Usage in the llm_call shape: OpenAI counts cached tokens inside the input, we count them apart."""
    if not usage:
        return {}
    cached = (usage.get(details_key) or {}).get("cached_tokens") or 0
    total_input = usage.get(input_key)
    return {
        "input_tokens": None if total_input is None else total_input - cached,
        "output_tokens": usage.get(output_key),
        "cache_read_tokens": cached,
        "cache_write_tokens": 0,
    }


class OpenAIFamily:
    """What Chat Completions and Responses share: OpenAI's error bodies and rate-limit headers."""

    family = "openai"
    error = staticmethod(error)
    rate_limit_headers = staticmethod(rate_limit_headers)
