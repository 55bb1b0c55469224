"""The official SDK clients, sent through a test's proxy and trusting its CA."""

from __future__ import annotations

import ssl

import anthropic
import openai


def trust(proxy) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(proxy.ca_path))


def claude(proxy, base_url=None, **kw):
    return anthropic.Anthropic(
        base_url=base_url,
        api_key="sk-ant-SECRET",
        max_retries=kw.pop("max_retries", 0),
        http_client=anthropic.DefaultHttpxClient(proxy=proxy.url, verify=trust(proxy)),
        **kw,
    )


def gpt(proxy, base_url, **kw):
    return openai.OpenAI(
        base_url=base_url,
        api_key="sk-SECRET",
        max_retries=kw.pop("max_retries", 0),
        http_client=openai.DefaultHttpxClient(proxy=proxy.url, verify=trust(proxy)),
        **kw,
    )
