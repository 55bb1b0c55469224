"""The judge probe's model call: an OpenAI-compatible ``POST /chat/completions``.

Scoring asks the judge before the probes run and stores the answer in the evidence, so the
``judge`` probe itself stays a pure function. The request never goes through a proxy
(the environment's HTTPS_PROXY is ignored), so the faults under test never reach it, and
the key is read from the variable the plan names, never from the plan.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request

from mitmchaos.probes.evidence import JudgeVerdict

PROMPT = (
    "You grade the output of an AI agent against one criterion. Reply with a JSON object only: "
    '{"score": <number from 0 to 1>, "reason": "<one sentence>"}, where 1 means the criterion is fully met.'
)
MAX_OUTPUT_CHARS = 20_000  # the tail of a long output is where agents report the outcome
TIMEOUT_S = 60


def ask_judge(params, output: str) -> JudgeVerdict:
    """The judge's score for ``output``, or a verdict without a score saying what went wrong."""
    url = params.endpoint.rstrip("/") + "/chat/completions"
    headers = {"Content-Type": "application/json"}
    key = os.environ.get(params.api_key_env)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = {
        "model": params.model,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": PROMPT},
            {"role": "user", "content": f"Criterion: {params.criterion}\n\nAgent output:\n"
                                        f"{output[-MAX_OUTPUT_CHARS:]}"},
        ],
    }
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(request, timeout=TIMEOUT_S) as response:
            answer = json.load(response)
        content = answer["choices"][0]["message"]["content"]
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        return JudgeVerdict(None, f"{url}: {exc}")
    return parse_judgement(content)


def parse_judgement(content: str) -> JudgeVerdict:
    """Read ``{"score": x, "reason": ...}``, tolerating prose around it or a bare number."""
    match = re.search(r"\{.*\}", content, re.DOTALL)
    if match:
        try:
            data = json.loads(match.group(0))
            score = float(data["score"])
            return JudgeVerdict(min(1.0, max(0.0, score)), str(data.get("reason", "")))
        except (ValueError, KeyError, TypeError):
            pass
    number = re.search(r"\b(0(\.\d+)?|1(\.0+)?)\b", content)
    if number:
        return JudgeVerdict(float(number.group(0)), content.strip())
    return JudgeVerdict(None, f"unreadable judge answer: {content[:120]!r}")
