"""The plan's match patterns: exact names, or globs such as a leading ``*`` that matches by suffix."""

from __future__ import annotations

from fnmatch import fnmatchcase


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
