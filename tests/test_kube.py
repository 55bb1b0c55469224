"""The kube backend: rendered Jobs valid against the Kubernetes schemas (offline), `kube gather` from a
Job's artifacts, and with real Podman a run through `podman kube play` scored, its agent confined."""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from mitmchaos import images
from mitmchaos.cleanup import RUN_LABEL, labelled
from mitmchaos.examples import find_plan
from mitmchaos.kube import gather, render
from mitmchaos.rundir import load_run
from mitmchaos.scoring import score
from mitmchaos.scripted_model import SCRIPTED_MODEL_KEY

from tests.sandboxed import SITE_TEXT, leftovers, require_podman, run_env, start_run

KUBE = ["--backend", "kube"]

K8S_VERSION = "1.30.0"  # the oldest still maintained upstream; the schemas ship with the package


def rendered(tmp_path: Path, monkeypatch) -> tuple[list[Path], list[dict]]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-never-in-a-manifest-" + secrets.token_hex(8))
    written = render(find_plan("offline-registry-down"), tmp_path / "k8s", "/srv/project", "/var/lib/mc/r1")
    return written, [doc for path in written for doc in yaml.safe_load_all(path.read_text())]


def test_rendered_manifests_validate_against_the_kubernetes_schemas(tmp_path, monkeypatch):
    written, docs = rendered(tmp_path, monkeypatch)
    assert Counter(d["kind"] for d in docs) == {"ConfigMap": 1, "Secret": 1, "Job": 4}  # repeat: 2, two phases
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    job = next(d for d in docs if d["kind"] == "Job")
    broken = json.loads(json.dumps(job))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsUser"] = "root"
    with pytest.raises(kubernetes_validate.ValidationError):  # the schemas do reject a bad manifest
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)
    assert all("sk-ant-never-in-a-manifest" not in p.read_text() for p in written)


def test_rendered_jobs_confine_the_agent_and_fault_only_the_faulted_phase(tmp_path, monkeypatch):
    _, docs = rendered(tmp_path, monkeypatch)
    jobs = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Job"}
    spec = jobs["mitmchaos-offline-registry-down-faulted-2"]
    containers = {c["name"]: c for c in spec["containers"]}
    assert set(containers) == {"proxy", "resolver", "agent"}
    agent = containers["agent"]["securityContext"]
    assert agent["runAsUser"] == 1000 and agent["capabilities"] == {"drop": ["ALL"]}
    assert agent["allowPrivilegeEscalation"] is False
    assert spec["initContainers"][0]["name"] == "egress"  # before anything else runs
    assert "--uid-owner 1000 -j REJECT" in spec["initContainers"][0]["command"][2]
    env = {e["name"]: e for e in containers["agent"]["env"]}
    assert env["MITMCHAOS_REPETITION"]["value"] == "1" and env["HTTPS_PROXY"]["value"] == "http://127.0.0.1:8080"
    assert env["ANTHROPIC_API_KEY"]["value"] == SCRIPTED_MODEL_KEY  # the placeholder, never the host's key
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"]["optional"] is True
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    baseline, faulted = yaml.safe_load(config["baseline.yaml"]), yaml.safe_load(config["faulted.yaml"])
    assert [f["probability"] for f in baseline["faults"]] == [0]
    assert "probability" not in faulted["faults"][0]
    assert {s.get("dir") for s in faulted["stand_ins"]} >= {"/mitmchaos/project/plans/offline/pypi"}


def test_gather_fills_the_records_from_the_jobs_artifacts(tmp_path, monkeypatch):
    rendered(tmp_path, monkeypatch)
    run_dir = tmp_path / "k8s" / "run"
    markers = {"baseline-1": ("0 100.5", "0"), "baseline-2": ("0 101.0", "0"), "faulted-1": ("3 102.25", "1")}
    for name, (agent_exit, verify_exit) in markers.items():
        rep = run_dir / name
        rep.mkdir()
        (rep / "agent.started").write_text("100.0\n")
        (rep / "agent.exit").write_text(agent_exit + "\n")
        (rep / "verify.exit").write_text(verify_exit + "\n")
        (rep / "events.jsonl").write_text("")
    (run_dir / "faulted-1" / "events.jsonl").write_text(json.dumps(
        {"ts": 1, "run_id": "x", "component": "gate", "type": "decision", "kind": "destructive",
         "action": "block", "tool": "Bash"}) + "\n")
    records = {f"{r.phase}-{r.index + 1}": r for r in gather(run_dir)}
    assert (records["baseline-2"].agent_exit, records["baseline-2"].verify_exit) == (0, 0)
    assert records["baseline-2"].duration_s == 1.0
    assert (records["faulted-1"].agent_exit, records["faulted-1"].verify_exit) == (3, 1)
    assert records["faulted-1"].abort["condition"] == "destructive_attempt"  # what a watching runner calls
    assert "no artifacts" in records["faulted-2"].error  # a Job whose artifacts were never copied
    saved = load_run(run_dir)  # what `mitmchaos report` reads
    assert score(saved.plan, saved.records).verdict == "aborted"


@pytest.mark.podman
@pytest.mark.slow
def test_a_run_through_podman_kube_play_is_scored_and_its_agent_confined(tmp_path):
    require_podman()
    images.ensure_image(images.default_image())
    # Through the proxy to the stand-in; then straight to the pod network's gateway (this machine's
    # bridge) and to the name the resolver answers, both past the proxy: both must fail.
    agent = ("curl -sS https://docs.example.test/hello.txt | tee result.txt; id -u; "
             "gw=$(python3 -c 'import socket,struct;"
             "f=[l.split() for l in open(\"/proc/net/route\")][1:];"
             "print(next(socket.inet_ntoa(struct.pack(\"<L\",int(r[2],16))) for r in f if r[1]==\"00000000\"))'); "
             "curl -sS -m 5 --noproxy '*' http://$gw:9/; echo \"direct-gateway rc=$?\"; "
             "curl -sS -m 5 --noproxy '*' https://docs.example.test/; echo \"direct-name rc=$?\"; "
             "getent ahostsv4 docs.example.test | head -1")
    run, project, before = start_run(tmp_path, agent, extra_args=KUBE)
    assert run.finish(timeout=400) == 0, run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == "scored"
    baseline, faulted = (tmp_path / "report" / p for p in ("baseline-1", "faulted-1"))
    out = (baseline / "agent.out").read_text()
    assert SITE_TEXT.strip() in out and "\n1000\n" in out
    assert "direct-gateway rc=7" in out and "direct-name rc=7" in out, out
    assert out.rstrip().endswith("STREAM docs.example.test") and "127.0.0.1" in out.splitlines()[-1]
    assert {"events.jsonl", "agent.out", "verify.out", "proxy.log", "resolver.log", "flows.mitm"} <= \
        {p.name for p in baseline.iterdir()}
    events = [json.loads(line) for line in (faulted / "events.jsonl").read_text().splitlines()]
    assert {(e["component"], e["type"]) for e in events} >= {("proxy", "plan_loaded"), ("resolver", "plan_loaded"),
                                                             ("proxy", "fault_injected"), ("resolver", "dns_query")}
    assert [r["verify_exit"] for r in report["repetitions"]] == [0, 1]  # the 401 kept the faulted agent's file empty
    assert leftovers(tmp_path, project, run.run_id(), before) == [] and _no_pods_left(run.run_id()) == []


def _no_pods_left(run_id: str) -> list[dict]:
    return [p for p in labelled("pod") if p["labels"].get(RUN_LABEL, "").startswith(run_id)]


@pytest.mark.podman
@pytest.mark.slow
def test_a_destructive_attempt_in_a_pod_stops_it_and_ends_the_run(tmp_path):
    require_podman()
    event = ('{"ts":1,"run_id":"x","component":"gate","type":"decision","kind":"destructive",'
             '"action":"block","tool":"Bash"}')
    run, project, before = start_run(tmp_path, f"echo '{event}' >> \"$MITMCHAOS_EVENTS\"; sleep 60", "true",
                                     extra_abort="  - destructive_attempt\n", extra_args=KUBE)
    started = time.monotonic()
    assert run.finish(timeout=120) == 1, run.stderr
    assert time.monotonic() - started < 45, "the pod was not stopped"
    assert "abort: destructive_attempt" in run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == "aborted" and len(report["repetitions"]) == 1
    assert leftovers(tmp_path, project, run.run_id(), before) == [] and _no_pods_left(run.run_id()) == []


@pytest.mark.podman
@pytest.mark.slow
def test_ctrl_c_during_a_pod_leaves_nothing_behind(tmp_path):
    require_podman()
    run, project, before = start_run(tmp_path, "sleep 60", "true", extra_args=KUBE)
    run.wait_for("baseline: agent")
    run.signal(signal.SIGINT)
    assert run.finish(timeout=60) == 130, run.stderr
    assert leftovers(tmp_path, project, run.run_id(), before) == [] and _no_pods_left(run.run_id()) == []


@pytest.mark.podman
@pytest.mark.slow
def test_mitmchaos_cleanup_removes_the_pod_of_a_killed_run(tmp_path):
    require_podman()
    run, project, before = start_run(tmp_path, "sleep 60", "true", extra_args=KUBE)
    run.wait_for("baseline: agent")
    run.signal(signal.SIGKILL)  # no finally runs: the pod, its network, the worktree are left
    run.finish()
    try:
        assert _no_pods_left(run.run_id()) != []
    finally:
        swept = subprocess.run(["mitmchaos", "cleanup"], env=run_env(tmp_path), capture_output=True, text=True)
    assert swept.returncode == 0 and "removed pod" in swept.stdout, swept.stdout + swept.stderr
    assert leftovers(tmp_path, project, run.run_id(), before) == [] and _no_pods_left(run.run_id()) == []
