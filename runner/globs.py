"""The plan's match patterns: exact names, or globs such as a leading ``*`` that matches by suffix."""

from __future__ import annotations

from fnmatch import fnmatchcase
from functools import lru_cache


# Probes match a pattern against every call of a long run, the proxy against every request;
# the distinct (pattern, name) pairs are few.
@lru_cache(maxsize=4096)
def glob_matches(pattern: str, value: str | None) -> bool:
    """``*.npm.test`` matches ``registry.npm.test`` (not ``npm.test``); ``gpt-4o*`` matches ``gpt-4o-mini``.

    Comparison ignores case, because host names do; a trailing dot (DNS form) is ignored.
    """
    if value is None:
        return False
    return fnmatchcase(value.lower().rstrip("."), pattern.lower().rstrip("."))


def first_match(patterns, value: str | None) -> str | None:
    """The first pattern (dict key or list item) that matches ``value``, in order."""
    for pattern in patterns:
        if glob_matches(pattern, value):
            return pattern
    return None
