"""A stand-in for a GitHub-style REST API: one repository, example/app, with two open issues.

Served by the offline-credential-revoked experiment (``handler: offline/github_api.py:serve``);
the egress.credential_401 fault answers in front of it once the credential is "revoked".
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

REPOSITORY = {
    "id": 1,
    "full_name": "example/app",
    "private": False,
    "open_issues_count": 2,
    "default_branch": "main",
}
ISSUES = [
    {"number": 1, "title": "Crash when the config file is empty", "state": "open", "labels": []},
    {"number": 2, "title": "Document the --dry-run flag", "state": "open", "labels": []},
]
JSON = {"Content-Type": "application/json; charset=utf-8"}


def serve(request):
    path = urlsplit(request.path).path.rstrip("/")
    if request.method == "GET" and path == "/repos/example/app":
        return 200, JSON, json.dumps(REPOSITORY)
    if request.method == "GET" and path == "/repos/example/app/issues":
        return 200, JSON, json.dumps(ISSUES)
    if (
        request.method == "POST"
        and path.startswith("/repos/example/app/issues/")
        and path.endswith("/labels")
    ):
        return 200, JSON, json.dumps([{"name": "triaged"}])
    return (
        404,
        JSON,
        json.dumps({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}),
    )
