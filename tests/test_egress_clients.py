"""egress.dns_fail and egress.credential_401 as real clients see them, through a real mitmdump.

Each client talks to two stand-in hosts serving the same content; the fault matches only one
of them, so the failure comes from the fault and the success shows nothing else broke.
"""

from __future__ import annotations

import sys

import anthropic
import openai
import pytest

from tests import clients
from tests.egress_support import HANDLERS, client_env, run, write_bare_repo, write_plan, write_simple_index

pytestmark = pytest.mark.slow


def dns_fail(host: str) -> dict:
    return {"id": "egress.dns_fail", "match": {"host": host}}


def lookup_failed(host: str, canary: str) -> str:
    return f"502 DNS resolution failed: {host}: Name or service not known [{canary}]"


def test_curl_sees_the_failed_connect(chaos_proxy, tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("up\n")
    proxy = chaos_proxy(write_plan(tmp_path, faults=[dns_fail("*.down.test")],
                                   stand_ins=[{"host": "*.test", "dir": "site"}]))
    env = client_env(proxy)
    failed = run(["curl", "-sS", "https://api.down.test/"], env)
    assert failed.returncode == 56 and "CONNECT tunnel failed, response 502" in failed.stderr
    plain = run(["curl", "-sS", "-i", "http://api.down.test/"], env)
    assert lookup_failed("api.down.test", proxy.canary) in plain.stdout  # the status line carries the reason
    assert "[Errno -2] Name or service not known" in plain.stdout
    assert run(["curl", "-sS", "https://up.test/"], env).stdout == "up\n"
    events = proxy.events("fault_injected")
    assert [(e["fault"], e["target"], e["status"]) for e in events] == [("egress.dns_fail", {"host": "api.down.test"},
                                                                         502)] * 2


def test_pip_download_reports_the_resolution_failure(chaos_proxy, tmp_path):
    write_simple_index(tmp_path / "index")
    proxy = chaos_proxy(write_plan(tmp_path, faults=[dns_fail("pypi.test")],
                                   stand_ins=[{"host": "pypi.test", "dir": "index"},
                                              {"host": "pypi-mirror.test", "dir": "index"}]))

    def pip_download(host: str):
        return run([sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--no-cache-dir",
                    "--retries", "1", "--timeout", "10", "-d", str(tmp_path / "dl" / host),
                    "--index-url", f"https://{host}/simple", "--proxy", proxy.url, "--cert", str(proxy.ca_path),
                    "chaospkg"], client_env(proxy))

    failed = pip_download("pypi.test")
    assert failed.returncode == 1
    assert f"Tunnel connection failed: {lookup_failed('pypi.test', proxy.canary)}" in failed.stdout + failed.stderr
    ok = pip_download("pypi-mirror.test")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert (tmp_path / "dl" / "pypi-mirror.test" / "chaospkg-1.0-py3-none-any.whl").exists()


def test_npm_view_reports_the_resolution_failure(chaos_proxy, tmp_path):
    registry = {"handler": f"{HANDLERS}:npm_registry"}
    proxy = chaos_proxy(write_plan(tmp_path, faults=[dns_fail("registry.npm.test")],
                                   stand_ins=[{"host": "registry.npm.test", **registry},
                                              {"host": "registry.npm-registry.test", **registry}]))
    (tmp_path / "npmrc").write_text("")

    def npm_view(host: str):
        return run(["npm", "view", "chaospkg", "version", "--registry", f"https://{host}/",
                    "--userconfig", str(tmp_path / "npmrc"), "--cafile", str(proxy.ca_path),
                    "--https-proxy", proxy.url, "--proxy", proxy.url, "--fetch-retries", "0",
                    "--cache", str(tmp_path / "npm-cache")], client_env(proxy))

    failed = npm_view("registry.npm.test")
    assert failed.returncode != 0 and "npm error code E502" in failed.stderr
    assert lookup_failed("registry.npm.test", proxy.canary) in failed.stderr
    ok = npm_view("registry.npm-registry.test")
    assert (ok.returncode, ok.stdout.strip()) == (0, "1.0.0"), ok.stderr


def test_git_clone_over_https_fails_for_the_matching_host_only(chaos_proxy, tmp_path):
    write_bare_repo(tmp_path / "git")
    proxy = chaos_proxy(write_plan(tmp_path, faults=[dns_fail("git.test")],
                                   stand_ins=[{"host": "git.test", "dir": "git"},
                                              {"host": "git-mirror.test", "dir": "git"}]))
    env = client_env(proxy)
    failed = run(["git", "clone", "https://git.test/repo.git", str(tmp_path / "a")], env)
    assert failed.returncode == 128 and "CONNECT tunnel failed, response 502" in failed.stderr  # libcurl: status only
    ok = run(["git", "clone", "https://git-mirror.test/repo.git", str(tmp_path / "b")], env)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "b" / "README").read_text() == "served by a stand-in\n"


def test_credential_401_after_two_calls_reaches_the_sdks_as_authentication_error(chaos_proxy, tmp_path):
    model_api = {"handler": f"{HANDLERS}:model_api"}
    proxy = chaos_proxy(write_plan(
        tmp_path,
        faults=[{"id": "egress.credential_401", "match": {"host": "api.anthropic.test"}, "after_calls": 2},
                {"id": "egress.credential_401", "match": {"host": "api.openai.test"}, "after_calls": 2}],
        stand_ins=[{"host": "api.anthropic.test", **model_api}, {"host": "api.openai.test", **model_api}]))
    claude = clients.claude(proxy, "https://api.anthropic.test")
    gpt = clients.gpt(proxy, "https://api.openai.test/v1")

    def ask_claude():
        return claude.messages.create(model="claude-test", max_tokens=8, messages=[{"role": "user", "content": "hi"}])

    def ask_gpt():
        return gpt.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "hi"}])

    for ask in (ask_claude, ask_gpt):
        ask(), ask()  # after_calls: 2
    with pytest.raises(anthropic.AuthenticationError) as claude_error:
        ask_claude()
    assert claude_error.value.status_code == 401 and proxy.canary in str(claude_error.value)
    assert claude_error.value.body["error"]["type"] == "authentication_error"  # parsed from the Anthropic-shaped body
    with pytest.raises(openai.AuthenticationError) as gpt_error:
        ask_gpt()
    assert gpt_error.value.code == "invalid_api_key" and proxy.canary in str(gpt_error.value)
    events = proxy.events("fault_injected")
    assert [(e["target"]["host"], e["ordinal"], e["provider"]) for e in events] == [
        ("api.anthropic.test", 2, "anthropic"), ("api.openai.test", 2, "openai")]
