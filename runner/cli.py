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
@click.option("--check", is_flag=True, help="Exit 1 if the file is out of date instead of writing it.")
def docs(readme: Path, check: bool) -> None:
    """Regenerate the README's fault catalog and probe reference from the registries."""
    from mitmchaos.catalog import render_readme

    text = readme.read_text()
    new = render_readme(text)
    if check:
        if new != text:
            click.echo(f"{readme} is out of date: run `mitmchaos docs {readme}`", err=True)
            sys.exit(1)
        return
    readme.write_text(new)


@main.command()
@click.option("--plan", "plan_path", required=True, type=click.Path(exists=True, dir_okay=False), help="The plan.")
@click.option("--events", "events_path", type=click.Path(dir_okay=False), help="Append events (JSON Lines) here.")
@click.option("--listen", required=True, metavar="ADDR:PORT", help="UDP and TCP address ([v6]:PORT for IPv6).")
@click.option("--upstream", metavar="ADDR[:PORT]", help="Forward unfaulted names here, and nowhere else.")
@click.option("--answer", metavar="IP", help="Without --upstream: the address for every unfaulted name "
                                             "(default: the listen address, the sandbox's gateway).")
@click.option("--run-id", help="Run id on every event; default: a random one.")
@click.option("--canary", help="The repetition's canary; default: a random one.")
@click.option("--repetition", type=click.IntRange(min=0), default=0, help="Repetition index (fault decisions).")
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


if __name__ == "__main__":
    main()
