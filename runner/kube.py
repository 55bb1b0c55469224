"""The kube backend: a repetition as a Kubernetes Pod.

The Pod holds the agent (the sandbox image, uid 1000, every capability dropped, no
privilege escalation) and two sidecars from the proxy image (uid 1500): the proxy and the
resolver. All containers of a Pod share one network namespace, so the sidecars listen on
loopback, and an init container (root with NET_ADMIN, and nothing else of note) confines
the agent's uid in that namespace before anything else starts: its packets may go to
loopback only (the sidecars, its own listeners), its DNS queries to any server are
redirected to the resolver, IPv6 is refused. The agent cannot lift that: it is not root,
holds no capability and cannot gain one, so it can neither change the rules nor take the
sidecars' uid.

The agent container waits until both sidecars have announced the plan, then runs the agent
and verify as two steps, writing their output and exit codes to the state volume, and a
``done`` marker that makes the sidecars exit, so the Pod (or Job) completes. The state
volume is the repetition's artifacts directory: events, outputs, logs, flows.

``mitmchaos run --backend kube`` plays each Pod with ``podman kube play`` on a network of
its own, with the runner's abort monitor watching its events, and scores it like any run.
``mitmchaos kube render`` writes the same Pods as Jobs for a cluster (see docs/kube.md).
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import yaml
from podman.errors import APIError
from mitmchaos import images
from mitmchaos.cleanup import resource_labels, signals_deferred
from mitmchaos.decisions import new_canary
from mitmchaos.events import EventWriter
from mitmchaos.gate import gate_plan_json
from mitmchaos.monitor import AbortMonitor
from mitmchaos.network import create_network
from mitmchaos.plan import Plan, load_plan, parse_plan_text
from mitmchaos.podman_driver import SANDBOX_UID
from mitmchaos.proxy import ChaosProxy
from mitmchaos.records import RepetitionRecord
from mitmchaos.run import (CA_BUNDLE, EVENTS_IN_SANDBOX, PLAN_IN_SANDBOX, PROVIDER_KEYS, Repetition,
                           RepetitionFailed, _make_ca, _tail, absolute_stand_in_paths, new_run_id, proxy_options,
                           resolver_command, sandbox_env)
from mitmchaos.rundir import save_run

PROXY_PORT = 8080
RESOLVER_PORT = 5353  # unprivileged; the agent's queries to port 53 anywhere are redirected here
SIDECAR_UID = 1500
STATE = "/mitmchaos/state"  # the artifacts: events.jsonl, agent.out, verify.out, proxy.log, ...
PLAN = "/mitmchaos/plan/plan.yaml"
CA_DIR = "/mitmchaos/ca"  # the proxy's confdir
PROJECT = "/mitmchaos/project"  # rendered Jobs: the project, copied into each Pod's workspace
KEYS_SECRET = "mitmchaos-keys"  # rendered Jobs: provider keys, by variable name, if the plan needs them
SIDECARS_LOADED_S = 60

# The init container: the agent's uid reaches loopback only, and its DNS goes to the resolver.
# By destination, not `-o lo`: a redirected packet still shows its first route's interface.
EGRESS_SCRIPT = """set -e
for proto in udp tcp; do
  iptables -t nat -A OUTPUT -m owner --uid-owner {uid} -p $proto --dport 53 -j REDIRECT --to-ports {dns}
done
iptables -A OUTPUT -m owner --uid-owner {uid} -d 127.0.0.0/8 -j ACCEPT
iptables -A OUTPUT -m owner --uid-owner {uid} -j REJECT
if [ -e /proc/net/if_inet6 ]; then ip6tables -A OUTPUT -m owner --uid-owner {uid} -j REJECT; fi
"""

# A sidecar runs its process until the agent container marks the repetition done.
SIDECAR_SCRIPT = """log=$1; shift
"$@" >> "$log" 2>&1 & child=$!
while [ ! -e {state}/done ]; do
  kill -0 $child 2>/dev/null || {{ wait $child; exit $?; }}
  sleep 0.2
done
kill -TERM $child; wait $child; exit 0
"""

# The agent container: wait for both sidecars' plan, then the agent and verify, as two steps.
STEPS_SCRIPT = """s={state}; n=0
until grep -q '"component":"proxy","type":"plan_loaded"' "$MITMCHAOS_EVENTS" \\
   && grep -q '"component":"resolver","type":"plan_loaded"' "$MITMCHAOS_EVENTS"; do
  n=$((n + 1))
  if [ $n -gt {polls} ]; then echo "mitmchaos: the sidecars never loaded the plan" > $s/agent.err; touch $s/done; exit 1; fi
  sleep 0.1
done
date +%s.%N > $s/agent.started
sh -c "$1" > $s/agent.out 2> $s/agent.err
echo "$? $(date +%s.%N)" > $s/agent.exit
sh -c "$2" > $s/verify.out 2>&1
echo $? > $s/verify.exit
touch $s/done
"""


# ------------------------------------------------------------------ manifests


def _security(uid: int, add: tuple[str, ...] = ()) -> dict:
    context = {"runAsUser": uid, "runAsGroup": uid, "allowPrivilegeEscalation": False,
               "capabilities": {"drop": ["ALL"], **({"add": list(add)} if add else {})}}
    if uid:
        context["runAsNonRoot"] = True
    return context


def proxy_args(record: RepetitionRecord, index: int) -> list[str]:
    """The proxy sidecar's command line: the runner's, with the image's paths."""
    proxy = ChaosProxy(workdir=Path(STATE), plan=Path(PLAN), canary=record.canary, run_id=record.run_id,
                       port=PROXY_PORT, options=proxy_options(index, f"{STATE}/flows.mitm"))
    in_image = {f"confdir={proxy.confdir}": f"confdir={CA_DIR}"}
    return ["mitmchaos", *[in_image.get(arg, arg) for arg in proxy.command()[1:]]]


def pod_spec(plan: Plan, record: RepetitionRecord, index: int, sandbox_image: str, proxy_image: str,
             agent_env: list[dict], agent_mounts: list[dict], sidecar_mounts: list[dict], volumes: list[dict],
             init_containers: list[dict] = ()) -> dict:
    """The Pod of one repetition; the volumes and mounts say where its files come from."""
    sidecar_mounts = [*sidecar_mounts, {"name": "state", "mountPath": STATE}]
    resolver = resolver_command("mitmchaos", PLAN, f"{STATE}/events.jsonl", f"127.0.0.1:{RESOLVER_PORT}",
                                record, index)

    def sidecar(name: str, log: str, args: list[str]) -> dict:
        return {"name": name, "image": proxy_image, "workingDir": "/",
                "command": ["sh", "-c", SIDECAR_SCRIPT.format(state=STATE), name, f"{STATE}/{log}", *args],
                "securityContext": _security(SIDECAR_UID), "volumeMounts": sidecar_mounts}

    steps = STEPS_SCRIPT.format(state=STATE, polls=SIDECARS_LOADED_S * 10)
    return {
        "restartPolicy": "Never",
        "initContainers": [
            {"name": "egress", "image": proxy_image, "workingDir": "/",
             "command": ["sh", "-c", EGRESS_SCRIPT.format(uid=SANDBOX_UID, dns=RESOLVER_PORT)],
             "securityContext": {**_security(0, ("NET_ADMIN", "NET_RAW")), "runAsNonRoot": False}},
            *init_containers,
        ],
        "containers": [
            sidecar("proxy", "proxy.log", proxy_args(record, index)),
            sidecar("resolver", "resolver.log", resolver),
            {"name": "agent", "image": sandbox_image, "workingDir": "/work",
             "command": ["sh", "-c", steps, "steps", plan.agent, plan.verify], "env": agent_env,
             "securityContext": _security(SANDBOX_UID),
             "volumeMounts": [*agent_mounts, {"name": "state", "mountPath": STATE}]},
        ],
        "volumes": volumes,
    }


def _stand_in_files(data: dict) -> list[str]:
    """The files and directories the plan's stand-ins read (absolute paths)."""
    found = []
    for stand_in in data.get("stand_ins") or []:
        target, sep, _func = (stand_in.get("handler") or "").rpartition(":")
        found += [p for p in (stand_in.get("dir"), stand_in.get("flows"), target if sep and target.endswith(".py")
                              else None) if p]
    return found


def _host_path(name: str, source: Path, target: str, read_only: bool) -> tuple[dict, dict]:
    kind = "Directory" if source.is_dir() else "File"
    return ({"name": name, "hostPath": {"path": str(source), "type": kind}},
            {"name": name, "mountPath": target, "readOnly": read_only})


class _Dumper(yaml.SafeDumper):
    """Manifests a person reads: scripts as literal blocks, no anchors for repeated labels."""

    def ignore_aliases(self, data) -> bool:
        return True


_Dumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


def dump_yaml(documents: list[dict]) -> str:
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False)


def _env_list(env: dict[str, str]) -> list[dict]:
    return [{"name": k, "value": v} for k, v in env.items()]


# ------------------------------------------------------------------ local: podman kube play


class KubeRepetition(Repetition):
    """A repetition played as a Pod; setting up, collecting and cleaning up are the runner's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.state = self.scratch / "pod"
        self.events_path = self.state / "events.jsonl"

    def _run(self) -> None:
        s, rec = self.s, self.record
        plan_file, worktree = self._begin()
        self.state.chmod(0o1777)  # the sidecars' uid and the agent's both write here
        self.events_path.chmod(0o666)
        ca = self.scratch / "ca"
        shutil.copytree(s.ca_dir, ca)
        for path in (ca, *ca.iterdir()):
            os.chown(path, SIDECAR_UID, SIDECAR_UID)
        net = create_network(s.client, f"mitmchaos-{rec.run_id}", rec.run_id, self.stack, internal=False)
        manifest = self.scratch / "pod.yaml"
        manifest.write_text(dump_yaml([self._pod(net, worktree, plan_file, ca)]))
        runner_events = EventWriter(self.events_path, rec.run_id, "runner")
        try:
            s.progress.phase("pod")
            self._play(manifest, net.name)
            runner_events.emit("repetition_started", index=self.index, phase=self.phase)
            self._watch(runner_events)
            self._outputs_in_place()
            self._finished(runner_events)
        finally:
            runner_events.close()

    def _pod(self, net, worktree: Path, plan_file: Path, ca: Path) -> dict:
        self.proxy = ChaosProxy(workdir=self.state, plan=None, canary=self.record.canary,  # the sidecar's address
                                run_id=self.record.run_id, port=PROXY_PORT)
        spec = self._container(net, worktree, "agent", self.s.plan.agent)
        volumes, agent_mounts = [], []
        for i, bind in enumerate(spec.mounts):
            volume, mount = _host_path(f"bind-{i}", Path(bind["source"]), bind["target"], bind["read_only"])
            volumes.append(volume)
            agent_mounts.append(mount)
        sidecar_mounts = []
        stand_ins = _stand_in_files(yaml.safe_load(plan_file.read_text()))
        for name, source, target in [("plan", plan_file, PLAN), ("ca", ca, CA_DIR),
                                     *((f"stand-in-{i}", Path(p), p) for i, p in enumerate(stand_ins))]:
            volume, mount = _host_path(name, source, target, read_only=name != "ca")
            volumes.append(volume)
            sidecar_mounts.append(mount)
        volumes.append({"name": "state", "hostPath": {"path": str(self.state), "type": "Directory"}})
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": _dns_name(f"mitmchaos-{self.record.run_id}"),
                             "labels": resource_labels(self.record.run_id)},
                "spec": pod_spec(self.s.plan, self.record, self.index, self.s.image, images.proxy_image(),
                                 _env_list(spec.env), agent_mounts, sidecar_mounts, volumes)}

    def _play(self, manifest: Path, network: str) -> None:
        pod = _dns_name(f"mitmchaos-{self.record.run_id}")
        with signals_deferred():
            self.stack.push("pod", name=pod)
            played = subprocess.run(["podman", "kube", "play", "--network", network, str(manifest)],
                                    capture_output=True, text=True)
        self.pod = pod
        if played.returncode != 0:
            raise RepetitionFailed(f"podman kube play failed ({played.returncode}):\n{played.stderr[-2000:]}")

    def _watch(self, runner_events: EventWriter) -> None:
        """Until the agent container is done: the abort monitor, the run's end, the sidecars' health."""
        rec = self.record
        monitor = AbortMonitor(self.s.plan, self.events_path)
        started = None
        while True:
            done = (self.state / "done").exists()  # before the last look: what the agent's last moments wrote
            if started is None and (self.state / "agent.started").exists():
                started = time.monotonic()
                self.s.progress.phase("agent")
            abort = monitor.check(time.monotonic() - started if started else 0.0)
            self.s.progress.tick(monitor.faults_fired)
            if abort:
                rec.abort = abort
                runner_events.emit("abort", **abort)
                self.s.progress.say(f"abort: {abort['condition']} (observed {abort['observed']})")
            if done or abort or self._run_ended() or self._sidecar_failed():
                break
            time.sleep(0.5)
        subprocess.run(["podman", "pod", "stop", "--time", "2", self.pod], capture_output=True)
        rec.extra["faults_fired"] = monitor.faults_fired
        agent_exit, verify_exit, duration = pod_outcome(self.state)
        rec.agent_exit, rec.duration_s = agent_exit, duration
        if rec.abort is None and rec.error is None:
            if agent_exit is None:  # the agent container gave up waiting for the sidecars
                rec.error = f"the agent never ran:\n{_tail(self.state / 'agent.err')}"
            rec.verify_exit = verify_exit

    def _sidecar_failed(self) -> bool:
        for name, log in (("proxy", "proxy.log"), ("resolver", "resolver.log")):
            try:
                state = self.s.client.containers.get(f"{self.pod}-{name}").attrs["State"]
            except APIError:  # Podman 4.3 answers 500 while a container's process is exiting
                continue
            if state["Status"] == "exited" and not (self.state / "done").exists():
                self.record.error = (f"the {name} exited with {state['ExitCode']} during the repetition:\n"
                                     f"{_tail(self.state / log)}")
                return True
        return False

    def _outputs_in_place(self) -> None:
        """Where the runner collects artifacts from (run.py's layout)."""
        for name in ("agent.out", "agent.err", "verify.out", "resolver.log", "flows.mitm"):
            if (self.state / name).exists():
                shutil.copyfile(self.state / name, self.scratch / name)
        if (self.state / "proxy.log").exists():
            (self.scratch / "proxy").mkdir(exist_ok=True)
            shutil.copyfile(self.state / "proxy.log", self.scratch / "proxy" / "proxy.log")


def pod_outcome(state: Path) -> tuple[int | None, int | None, float]:
    """Agent exit, verify exit and the agent's seconds, from the markers the agent container wrote."""
    def read(name: str) -> list[str]:
        path = state / name
        return path.read_text().split() if path.exists() else []

    agent, verify, started = read("agent.exit"), read("verify.exit"), read("agent.started")
    duration = round(float(agent[1]) - float(started[0]), 3) if agent and started else 0.0
    return (int(agent[0]) if agent else None, int(verify[0]) if verify else None, duration)


def _dns_name(text: str) -> str:
    """A Kubernetes object name: lowercase letters, digits and dashes, at most 63."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].rstrip("-")


# ------------------------------------------------------------------ a cluster: rendered Jobs


def render(plan_path: Path, out: Path, project_path: str, artifacts_path: str, sandbox_image: str | None = None,
           proxy_image: str | None = None) -> list[Path]:
    """Jobs (one per repetition, baseline and faulted in separate files), the plan's ConfigMap, the
    CA's Secret, and run/run.json for `mitmchaos kube gather` and `mitmchaos report`."""
    plan = load_plan(plan_path)
    image = sandbox_image or plan.sandbox_image or images.default_image()
    proxy_image = proxy_image or images.proxy_image()
    run_id = new_run_id()
    name = _dns_name(f"mitmchaos-{plan.name}")
    source = plan_path.resolve()
    # the stand-ins' files, where the Pod mounts the project
    plan_dir_in_pod = Path(PROJECT) / source.parent.relative_to(_project_root(source))
    texts = {}
    for phase in ("baseline", "faulted"):
        data = absolute_stand_in_paths(yaml.safe_load(source.read_text()), plan_dir_in_pod)
        if phase == "baseline":
            for fault in data["faults"]:
                fault["probability"] = 0
        texts[phase] = yaml.safe_dump(data, sort_keys=False)
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
              "data": {**{f"{phase}.yaml": text for phase, text in texts.items()},
                       **{f"{phase}.json": gate_plan_json(parse_plan_text(text, str(plan_path)))
                          for phase, text in texts.items()}}}
    with tempfile.TemporaryDirectory() as tmp:
        ca = _make_ca(Path(tmp) / "ca")
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-ca"},
                  "data": {p.name: base64.b64encode(p.read_bytes()).decode() for p in sorted(ca.iterdir())}}
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "plan.yaml"]
    written[0].write_text(dump_yaml([config, secret]))
    records = []
    for phase in ("baseline", "faulted"):
        jobs = []
        for index in range(plan.repeat):
            record = RepetitionRecord(index, phase, f"{run_id}-{phase[0]}{index}", new_canary(),
                                      Path(f"{phase}-{index + 1}"))
            records.append(record)
            jobs.append(_job(plan, record, index, image, proxy_image, name, Path(project_path),
                             f"{artifacts_path}/{record.artifacts}"))
        path = out / f"{phase}.yaml"
        path.write_text(dump_yaml(jobs))
        written.append(path)
    save_run(out / "run", plan_path, plan_path.read_text(), records)
    return written


def _project_root(path: Path) -> Path:
    found = subprocess.run(["git", "-C", str(path.parent), "rev-parse", "--show-toplevel"], capture_output=True,
                           text=True)
    return Path(found.stdout.strip()).resolve() if found.returncode == 0 else path.parent


def _job(plan: Plan, record: RepetitionRecord, index: int, image: str, proxy_image: str, name: str,
         project: Path, artifacts: str) -> dict:
    env = _env_list(sandbox_env(plan, f"http://127.0.0.1:{PROXY_PORT}", record, index))
    named = {e["name"] for e in env}
    env += [{"name": key, "valueFrom": {"secretKeyRef": {"name": KEYS_SECRET, "key": key, "optional": True}}}
            for key in (*PROVIDER_KEYS, *plan.env) if key not in named]  # never a value in a manifest
    phase = record.phase
    volumes = [
        {"name": "plan", "configMap": {"name": name}},
        # the sidecars' plan under the name they load, without a subPath
        {"name": "phase-plan", "configMap": {"name": name, "items": [{"key": f"{phase}.yaml", "path": "plan.yaml"}]}},
        {"name": "ca", "secret": {"secretName": f"{name}-ca"}},
        {"name": "project", "hostPath": {"path": str(project), "type": "Directory"}},
        {"name": "work", "emptyDir": {}},
        {"name": "state", "hostPath": {"path": artifacts, "type": "DirectoryOrCreate"}},
    ]
    agent_mounts = [
        {"name": "work", "mountPath": "/work"},
        {"name": "state", "mountPath": EVENTS_IN_SANDBOX, "subPath": "events.jsonl"},
        {"name": "plan", "mountPath": PLAN_IN_SANDBOX, "subPath": f"{phase}.json", "readOnly": True},
        {"name": "ca", "mountPath": CA_BUNDLE, "subPath": "mitmproxy-ca-cert.pem", "readOnly": True},
    ]
    sidecar_mounts = [
        {"name": "phase-plan", "mountPath": str(Path(PLAN).parent), "readOnly": True},
        {"name": "ca", "mountPath": CA_DIR, "readOnly": True},
        {"name": "project", "mountPath": PROJECT, "readOnly": True},
    ]
    # Each Pod works on its own copy of the project; the state directory is made writable for
    # the sidecars' and the agent's uids, with the events file they share.
    prepare = {"name": "prepare", "image": proxy_image, "workingDir": "/",
               "command": ["sh", "-c", (f"chmod 1777 {STATE} && touch {STATE}/events.jsonl "
                                        f"&& chmod 666 {STATE}/events.jsonl")],
               "securityContext": {**_security(0, ("FOWNER",)), "runAsNonRoot": False},
               "volumeMounts": [{"name": "state", "mountPath": STATE}]}
    workspace = {"name": "workspace", "image": image, "workingDir": "/",
                 "command": ["sh", "-c", f"cp -a {PROJECT}/. /work/ && mkdir -p /work/.mitmchaos"],
                 "securityContext": _security(SANDBOX_UID),
                 "volumeMounts": [{"name": "project", "mountPath": PROJECT, "readOnly": True},
                                  {"name": "work", "mountPath": "/work"}]}
    spec = pod_spec(plan, record, index, image, proxy_image, env, agent_mounts, sidecar_mounts, volumes,
                    [prepare, workspace])
    labels = {"app.kubernetes.io/name": "mitmchaos", "mitmchaos.run": record.run_id, "mitmchaos.phase": phase}
    deadline = plan.abort_value("wall_clock_s_above")
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": _dns_name(f"{name}-{phase}-{index + 1}"), "labels": labels},
            "spec": {"backoffLimit": 0, **({"activeDeadlineSeconds": int(deadline) + SIDECARS_LOADED_S}
                                            if deadline else {}),
                     "template": {"metadata": {"labels": labels}, "spec": spec}}}


def gather(run_dir: Path) -> list[RepetitionRecord]:
    """Fill run.json's records from the artifacts the Jobs left: exit codes, the agent's time, and the
    abort a watching runner would have called (from the events, afterwards); returns them."""
    from mitmchaos.rundir import load_run

    saved = load_run(run_dir)
    for record in saved.records:
        if not record.artifacts.is_dir():
            record.error = f"no artifacts in {record.artifacts} (the Job did not run, or they were not copied)"
            continue
        agent_exit, verify_exit, duration = pod_outcome(record.artifacts)
        record.agent_exit, record.verify_exit, record.duration_s = agent_exit, verify_exit, duration
        if agent_exit is None:
            record.error = "the agent did not finish (the Job's deadline, or the Pod failed)"
        record.abort = AbortMonitor(saved.plan, record.events_path).check(duration)
    save_run(run_dir, saved.plan_path, saved.plan_text, saved.records)
    return saved.records


def kubectl_steps(out: Path, artifacts_path: str) -> str:
    return "\n".join([
        f"kubectl apply -f {shlex.quote(str(out / 'plan.yaml'))}",
        f"kubectl apply -f {shlex.quote(str(out / 'baseline.yaml'))}   # wait for these Jobs, then:",
        f"kubectl apply -f {shlex.quote(str(out / 'faulted.yaml'))}",
        f"# copy {artifacts_path}/<phase>-<n>/ from the node(s) into {out / 'run'}/, then:",
        f"mitmchaos kube gather {shlex.quote(str(out / 'run'))} && mitmchaos report {shlex.quote(str(out / 'run'))}",
    ])

