"""Handlers for handler stand-ins in the tests (loaded by mitmdump as 'file.py:function')."""

import json
import time


def npm_registry(request):
    """A registry with one package document, as `npm view` reads it."""
    name = request.path.strip("/").split("?")[0]
    if name != "chaospkg":
        return 404, {"Content-Type": "application/json"}, json.dumps({"error": "Not found"})
    doc = {"name": name, "dist-tags": {"latest": "1.0.0"},
           "versions": {"1.0.0": {"name": name, "version": "1.0.0", "description": f"served for {request.host}",
                                  "dist": {"tarball": f"https://{request.host}/{name}/-/{name}-1.0.0.tgz",
                                           "shasum": "0" * 40}}},
           "time": {"1.0.0": "2026-01-01T00:00:00.000Z"}}
    return 200, {"Content-Type": "application/json"}, json.dumps(doc)


def model_api(request):
    """Just enough of the Anthropic Messages and OpenAI Chat Completions APIs for the SDKs."""
    if request.path.startswith("/v1/messages"):
        body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
                "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1}}
    elif request.path.startswith("/v1/chat/completions"):
        body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-test",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "ok"}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    else:
        return 404, {"Content-Type": "application/json"}, "{}"
    return 200, {"Content-Type": "application/json"}, json.dumps(body)


def echo(request):
    """Method, path, Host and body length, as text."""
    return 200, [("Content-Type", "text/plain"), ("X-Stand-In", "echo")], (
        f"{request.method} {request.path} host={request.host} body={len(request.body)}\n")


def slow_stream(request):
    """Three chunks, 0.2 s apart (a streamed body)."""
    def chunks():
        for i in range(3):
            yield f"chunk {i}\n".encode()
            time.sleep(0.2)
    return 200, {"Content-Type": "text/plain"}, chunks()


def broken(request):
    raise RuntimeError("handler bug")
