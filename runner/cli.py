"""The ``mitmchaos`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from mitmchaos import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mitmchaos")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """Chaos-test AI agents at the traffic level."""
    from mitmchaos.log import configure_logging

    configure_logging(verbose)


@main.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable catalog.")
def list_cmd(as_json: bool) -> None:
    """The fault catalog, the probes and where the shipped plans are."""
    from mitmchaos import catalog

    if as_json:
        click.echo(json.dumps({"faults": catalog.faults_json(), "probes": catalog.probes_json(),
                               "plans": [str(p) for p in catalog.shipped_plans()]}, indent=2))
        return
    click.echo(catalog.text_table(catalog.fault_rows(), ("FAULT", "INJECTED BY", "SAFETY", "EFFECT", "OPTIONS"),
                                  wrap={3: 36, 4: 40}))
    click.echo("\nEvery fault also takes match (host, model, tool), after_calls, times and probability.")
    click.echo(f"\nProbes: {', '.join(p['id'] for p in catalog.probes_json())}")
    click.echo(f"\nShipped plans in {catalog.shipped_plans_dir()}:")
    for plan in catalog.shipped_plans():
        click.echo(f"  {plan.name}")


@main.command()
@click.argument("plans", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
def validate(plans: tuple[Path, ...]) -> None:
    """Check experiment files; list every problem as file:line:col: field: message."""
    from mitmchaos.plan import PlanError, load_plan

    failed = 0
    for path in plans:
        try:
            plan = load_plan(path)
        except PlanError as exc:
            failed += 1
            for problem in exc.problems:
                click.echo(str(problem), err=True)
            continue
        click.echo(f"{path}: ok ({plan.name}: {len(plan.faults)} fault(s), {len(plan.probes)} probe(s), "
                   f"repeat {plan.repeat})")
    if failed:
        click.echo(f"{failed} of {len(plans)} plan(s) invalid", err=True)
        sys.exit(2)


@main.command()
def schema() -> None:
    """Print the plan's JSON Schema (for editors: yaml-language-server)."""
    from mitmchaos.plan import plan_json_schema

    click.echo(json.dumps(plan_json_schema(), indent=2))


@main.command()
@click.argument("readme", type=click.Path(exists=True, dir_okay=False, path_type=Path), default="README.md")
@click.option("--check", is_flag=True, help="Exit 1 if a file is out of date instead of writing it.")
def docs(readme: Path, check: bool) -> None:
    """Regenerate the README's fault catalog and probe reference, and the plans' JSON Schema file."""
    from mitmchaos.catalog import render_readme, shipped_plans_dir
    from mitmchaos.plan import plan_json_schema

    schema_file = readme.parent / "plans" / "plan.schema.json"
    if not schema_file.parent.is_dir():
        schema_file = shipped_plans_dir() / "plan.schema.json"
    wanted = {readme: render_readme(readme.read_text()), schema_file: json.dumps(plan_json_schema(), indent=2) + "\n"}
    stale = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
    if check:
        for path in stale:
            click.echo(f"{path} is out of date: run `mitmchaos docs {readme}`", err=True)
        sys.exit(1 if stale else 0)
    for path in stale:
        path.write_text(wanted[path])


@main.command()
@click.argument("plan_path", metavar="PLAN", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--sandbox-image", help="Sandbox image (overrides the plan's sandbox_image); ours are built on first use.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Report path (default: under the temp directory); artifacts go next to it.")
@click.option("--keep", is_flag=True, help="Keep each repetition's worktree.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Repetitions of a phase run at once, each in its own sandbox; the same decisions and report.")
@click.option("--backend", type=click.Choice(["podman", "kube"]), default="podman", show_default=True,
              help="kube: each repetition a Pod (agent, proxy and resolver sidecars) through `podman kube play`.")
def run(plan_path: Path, sandbox_image: str | None, out: Path | None, keep: bool, workers: int,
        backend: str) -> None:
    """Run an experiment: baseline repetitions, then faulted ones, each in a Podman sandbox.

    Exit codes: 0 scored, 1 aborted, 2 invalid or inconclusive (and a plan or preflight error),
    130 interrupted (after removing everything the run set up).
    """
    from mitmchaos.plan import PlanError
    from mitmchaos.report.text import render_summary
    from mitmchaos.run import Interrupted, RunError, RunSettings, execute, score_and_report

    try:
        outcome = execute(RunSettings(plan_path, sandbox_image, out, keep, workers=workers, backend=backend))
    except PlanError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    except RunError as exc:
        click.echo(f"mitmchaos run: {exc}", err=True)
        sys.exit(2)
    except Interrupted as exc:
        click.echo(f"mitmchaos run: interrupted ({exc}); everything it set up was removed", err=True)
        sys.exit(130)
    result = score_and_report(outcome)
    click.echo(render_summary(result))
    click.echo(f"report     : {outcome.report_path}\nartifacts  : {outcome.artifacts}")
    sys.exit(result.exit_code)


@main.command()
@click.argument("plan", metavar="PLAN")
@click.option("--scripted-model", type=click.Choice(["careful", "reckless"]),
              help="Answer with this scripted-model behaviour instead of the plan's.")
@click.option("--sandbox-image", help="Sandbox image (overrides the plan's sandbox_image).")
def example(plan: str, scripted_model: str | None, sandbox_image: str | None) -> None:
    """Run a plan (a file, or a shipped plan's name) in a scratch git project holding only the plan."""
    from mitmchaos.examples import ExampleError, default_workdir, find_plan, run_example
    from mitmchaos.run import Interrupted, RunError

    try:
        path = find_plan(plan)
        run = run_example(path, default_workdir(path.stem), scripted_model, sandbox_image)
    except (ExampleError, RunError) as exc:
        click.echo(f"mitmchaos example: {exc}", err=True)
        sys.exit(2)
    except Interrupted as exc:
        click.echo(f"mitmchaos example: interrupted ({exc}); everything it set up was removed", err=True)
        sys.exit(130)
    sys.exit(run.result.exit_code)


@main.command()
@click.argument("plan", metavar="[PLAN]", required=False)
@click.option("--sandbox-image", help="Sandbox image (overrides the plan's sandbox_image).")
def demo(plan: str | None, sandbox_image: str | None) -> None:
    """The key-free demo: an experiment against the careful and the reckless scripted model.

    Prints the two scores side by side; fails (exit 1) unless the careful agent scores clearly
    higher. PLAN defaults to offline-registry-down.
    """
    from mitmchaos.examples import DEMO_MARGIN, DEMO_PLAN, ExampleError, default_workdir, find_plan
    from mitmchaos.examples import demo as run_demo
    from mitmchaos.examples import side_by_side
    from mitmchaos.run import Interrupted, RunError

    try:
        path = find_plan(plan or DEMO_PLAN)
        runs, failure = run_demo(path, default_workdir(f"demo-{path.stem}"), sandbox_image)
    except (ExampleError, RunError) as exc:
        click.echo(f"mitmchaos demo: {exc}", err=True)
        sys.exit(2)
    except Interrupted as exc:
        click.echo(f"mitmchaos demo: interrupted ({exc}); everything it set up was removed", err=True)
        sys.exit(130)
    click.echo(f"\n=== {path.stem}: faulted repetitions passing each probe ===\n{side_by_side(runs)}")
    if failure:
        click.echo(f"demo FAILED: {failure}", err=True)
        sys.exit(1)
    click.echo(f"demo ok: the careful agent scored at least {DEMO_MARGIN} points above the reckless one")


@main.command()
@click.option("--node/--no-node", default=True, help="Also build the -node image.")
@click.option("--proxy", is_flag=True, help="Also build the proxy image (the kube backend's sidecars).")
def images(node: bool, proxy: bool) -> None:
    """Build the sandbox images (cached: nothing happens when they exist)."""
    from mitmchaos import images as sandbox_images

    tags = [sandbox_images.default_image(), *([sandbox_images.default_image(node=True)] if node else []),
            *([sandbox_images.proxy_image()] if proxy else [])]
    for tag in tags:
        try:
            sandbox_images.ensure_image(tag)
        except sandbox_images.ImageError as exc:
            click.echo(f"mitmchaos images: {exc}", err=True)
            sys.exit(1)
        click.echo(tag)


@main.command()
@click.option("--force", is_flag=True, help="Also undo runs whose process still looks alive.")
def cleanup(force: bool) -> None:
    """Remove what interrupted runs left: containers, networks, bridges, firewall rules, processes, worktrees."""
    from mitmchaos.cleanup import sweep

    for line in sweep(force=force):
        click.echo(f"removed {line}")


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def proxy(args) -> None:
    """The runner's proxy: mitmproxy with the addons built in (--help for its options).

    mitmchaos proxy --set chaos_plan=plans/llm-429.yaml --set chaos_events=events.jsonl
    """
    from mitmchaos.proxyhost import main as proxy_main

    sys.exit(proxy_main(list(args)))


@main.command()
@click.option("--plan", "plan_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The plan.")
@click.option("--events", "events_path", type=click.Path(dir_okay=False),
              help="Append events (JSON Lines) here.")
@click.option("--listen", required=True, metavar="ADDR:PORT",
              help="UDP and TCP address ([v6]:PORT for IPv6).")
@click.option("--upstream", metavar="ADDR[:PORT]", help="Forward unfaulted names here, and nowhere else.")
@click.option("--answer", metavar="IP", help="Without --upstream: the address for every unfaulted name "
                                             "(default: the listen address, the sandbox's gateway).")
@click.option("--run-id", help="Run id on every event; default: a random one.")
@click.option("--canary", help="The repetition's canary; default: a random one.")
@click.option("--repetition", type=click.IntRange(min=0), default=0,
              help="Repetition index (fault decisions).")
@click.option("--seed", type=click.IntRange(min=0), help="Override the plan's seed.")
def resolver(plan_path, events_path, listen, upstream, answer, run_id, canary, repetition, seed) -> None:
    """DNS resolver for the sandbox: fails the plan's egress.dns_fail names; runs until SIGTERM."""
    from mitmchaos.plan import PlanError
    from mitmchaos.resolver import run

    if upstream and answer:
        raise click.UsageError("give --upstream or --answer, not both")
    try:
        run(plan_path, events_path, listen, upstream, answer, run_id, canary, repetition, seed)
    except (PlanError, ValueError, OSError) as exc:
        click.echo(f"mitmchaos resolver: {exc}", err=True)
        sys.exit(2)


@main.group()
def kube() -> None:
    """Run repetitions as Kubernetes Jobs on a cluster: render the manifests, gather the artifacts."""


@kube.command("render")
@click.argument("plan_path", metavar="PLAN", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory for plan.yaml (ConfigMap, CA Secret), baseline.yaml and faulted.yaml (Jobs) and run/.")
@click.option("--project-path", required=True,
              help="The project's directory on the nodes; each Pod copies it into its workspace.")
@click.option("--artifacts-path", required=True,
              help="A directory on the nodes; each Job writes its repetition's artifacts in <phase>-<n>/ there.")
@click.option("--sandbox-image", help="Sandbox image as the cluster pulls it (default: the plan's, or ours).")
@click.option("--proxy-image", help="Proxy image as the cluster pulls it (default: localhost/mitmchaos/proxy:<version>).")
def kube_render(plan_path: Path, out: Path, project_path: str, artifacts_path: str, sandbox_image: str | None,
                proxy_image: str | None) -> None:
    """Write a Job per repetition for `kubectl apply`, and how to gather the report."""
    from mitmchaos.kube import kubectl_steps, render
    from mitmchaos.plan import PlanError

    try:
        written = render(plan_path, out, project_path, artifacts_path, sandbox_image, proxy_image)
    except PlanError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    click.echo("\n".join(str(p) for p in written))
    click.echo(f"\nthen:\n{kubectl_steps(out, artifacts_path)}")


@kube.command("gather")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
def kube_gather(run_dir: Path) -> None:
    """Fill RUN_DIR/run.json from the Jobs' artifacts copied into it, for `mitmchaos report RUN_DIR`."""
    from mitmchaos.kube import gather
    from mitmchaos.rundir import RunDirError

    try:
        records = gather(run_dir)
    except RunDirError as exc:
        click.echo(f"mitmchaos kube gather: {exc}", err=True)
        sys.exit(2)
    for r in records:
        click.echo(f"{r.phase} {r.index + 1}: agent exit {r.agent_exit}, verify exit {r.verify_exit}"
                   + (f", abort {r.abort['condition']}" if r.abort else "") + (f", {r.error}" if r.error else ""))


@main.command("plan")
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False, path_type=Path))
def plan_cmd(plan_path: Path) -> None:
    """Before spending money: what the plan's repetitions can show for each threshold."""
    from mitmchaos.plan import PlanError, load_plan
    from mitmchaos.preflight import preview

    try:
        plan = load_plan(plan_path)
    except PlanError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    lines, warnings = preview(plan)
    click.echo("\n".join(lines + [f"warning    : {w}" for w in warnings]))


@main.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Report path (default: RUN_DIR.json beside the directory, where `run` wrote it).")
def report(run_dir: Path, out: Path | None) -> None:
    """Rebuild every report of a run from its saved artifacts, offline; exits with the verdict's code."""
    from mitmchaos.plan import PlanError
    from mitmchaos.report import write_reports
    from mitmchaos.report.text import render_summary
    from mitmchaos.rundir import RunDirError, load_run
    from mitmchaos.scoring import score

    try:
        saved = load_run(run_dir)
    except (RunDirError, PlanError) as exc:
        click.echo(f"mitmchaos report: {exc}", err=True)
        sys.exit(2)
    result = score(saved.plan, saved.records)
    paths = write_reports(result, out or run_dir.parent / f"{run_dir.resolve().name}.json")
    click.echo(render_summary(result))
    click.echo("reports    : " + ", ".join(str(p) for p in paths.values()))
    sys.exit(result.exit_code)


def _batch_options(command):
    """The options `suite` and `sweep` share."""
    for option in reversed([
        click.argument("path", metavar="FILE", type=click.Path(exists=True, dir_okay=False, path_type=Path)),
        click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
                     help="Report path (default: under the temp directory); each experiment's run and reports go "
                          "in a directory beside it."),
        click.option("--repeat", type=click.IntRange(1, 20), help="Repetitions per phase, overriding the file's."),
        click.option("--sandbox-image", help="Sandbox image (overrides the plans' sandbox_image)."),
        click.option("--keep", is_flag=True, help="Keep each repetition's worktree."),
        click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Repetitions of a phase run at once, each in its own sandbox."),
        click.option("--scratch", is_flag=True, help="Run in a fresh git project instead of the current one "
                                                     "(for tasks that need nothing from it, like the key-free ones)."),
        click.option("--check", is_flag=True, help="Validate the file and its task plans, list the experiments, "
                                                   "run nothing."),
    ]):
        command = option(command)
    return command


@main.command()
@_batch_options
def suite(path: Path, out: Path | None, repeat: int | None, sandbox_image: str | None, keep: bool,
          workers: int, scratch: bool, check: bool) -> None:
    """Run several fault sets (and tasks) against one shared baseline per task; compare them in one table.

    Exit code: the highest of the experiments' (0 scored, 1 aborted, 2 invalid or inconclusive).
    """
    from mitmchaos.report.comparison import render_suite_text, write_suite_reports
    from mitmchaos.suite import load_suite, run_suite

    _batch("suite", path, load_suite, run_suite, write_suite_reports, render_suite_text, out, repeat, sandbox_image,
           keep, workers, scratch, check)


@main.command()
@_batch_options
def sweep(path: Path, out: Path | None, repeat: int | None, sandbox_image: str | None, keep: bool,
          workers: int, scratch: bool, check: bool) -> None:
    """Sweep one fault parameter over a list of values; draw the resilience curve and its breaking point.

    Exit code: the highest of the values' experiments' (0 scored, 1 aborted, 2 invalid or inconclusive).
    """
    from mitmchaos.report.curve import render_sweep_text, write_sweep_reports
    from mitmchaos.sweep import load_sweep, run_sweep

    _batch("sweep", path, load_sweep, run_sweep, write_sweep_reports, render_sweep_text, out, repeat, sandbox_image,
           keep, workers, scratch, check)


def _batch(command: str, path: Path, load, run, write, render, out: Path | None, repeat: int | None,
           sandbox_image: str | None, keep: bool, workers: int, scratch: bool, check: bool) -> None:
    """Load a suite or sweep file, run its experiments against one baseline per task, write its reports."""
    from mitmchaos.examples import default_workdir, scratch_project
    from mitmchaos.plan import PlanError
    from mitmchaos.run import Interrupted, RunError, RunSettings, default_report_path, new_run_id

    try:
        spec, expansions = load(path, repeat)
    except PlanError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    if check:
        click.echo(f"{path}: ok ({spec.name})")
        for task in expansions:
            per_phase = task.baseline.plan["repeat"]
            click.echo(f"  task {task.task} ({task.source}): one baseline, then "
                       f"{', '.join(e.label for e in task.experiments)}; {per_phase} repetition(s) each, "
                       f"{per_phase * (1 + len(task.experiments))} in all")
        return
    out = out or default_report_path(spec, new_run_id())
    template = RunSettings(path, sandbox_image, None, keep, workers=workers)
    if scratch:  # the tasks' stand-in paths are absolute, so any clean project will do
        template.cwd = scratch_project(expansions[0].source, default_workdir(spec.name) / "project").parent
    try:
        result = run(spec, expansions, template, out.with_suffix(""))
    except PlanError as exc:  # a generated plan the runner refused
        click.echo(str(exc), err=True)
        sys.exit(2)
    except RunError as exc:
        click.echo(f"mitmchaos {command}: {exc}", err=True)
        sys.exit(2)
    except Interrupted as exc:
        click.echo(f"mitmchaos {command}: interrupted ({exc}); everything it set up was removed", err=True)
        sys.exit(130)
    paths = write(result, out)
    click.echo(render(result))
    click.echo("reports    : " + ", ".join(str(p) for p in paths.values()))
    sys.exit(result.exit_code)


if __name__ == "__main__":
    main()
