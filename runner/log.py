"""Structured logging: readable console lines on a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(verbose: bool = False, stream=None) -> None:
    stream = stream or sys.stderr
    renderer = (structlog.dev.ConsoleRenderer(colors=stream.isatty()) if stream.isatty()
                else structlog.processors.JSONRenderer())
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG if verbose else logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "mitmchaos"):
    return structlog.get_logger(name)
