"""Views of the fault and probe registries: the `mitmchaos list` table, JSON, and the README sections."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from mitmchaos.addons.faults import REGISTRY as FAULTS
from mitmchaos.probes import REGISTRY as PROBES


def shipped_plans_dir() -> Path:
    return Path(str(resources.files("mitmchaos.plans")))


def shipped_plans() -> list[Path]:
    return sorted(shipped_plans_dir().glob("*.yaml"))


def faults_json() -> list[dict]:
    return [
        {
            "id": ft.id,
            "family": ft.family,
            "injected_by": list(ft.injected_by),
            "safety": ft.safety,
            "effect": ft.effect,
            "requires": [r for r, on in (("match.host", ft.requires_host), ("match.tool", ft.requires_tool)) if on],
            "options": ft.options.model_json_schema().get("properties", {}),
        }
        for ft in FAULTS.values()
    ]


def probes_json() -> list[dict]:
    return [
        {"id": p.id, "kind": p.kind, "passes_when": p.passes_when,
         "params": p.params.model_json_schema().get("properties", {})}
        for p in PROBES.values()
    ]


def fault_rows() -> list[tuple[str, str, str, str, str]]:
    return [(ft.id, ", ".join(ft.injected_by), ft.safety, ft.effect, "; ".join(ft.option_summary()))
            for ft in FAULTS.values()]


def text_table(rows: list[tuple[str, ...]], header: tuple[str, ...], wrap: dict[int, int]) -> str:
    """A plain table; the columns named in ``wrap`` (index -> width) wrap onto more lines."""
    import textwrap

    cells = [[textwrap.wrap(str(c), wrap[i]) if i in wrap else [str(c)] for i, c in enumerate(row)]
             for row in [header, *rows]]
    widths = [max(len(line) for row in cells for line in (row[i] or [""])) for i in range(len(header))]
    out = []
    for row in cells:
        for n in range(max(len(c) for c in row)):
            parts = [(c[n] if n < len(c) else "").ljust(w) for c, w in zip(row, widths)]
            out.append("  ".join(parts).rstrip())
    return "\n".join(out)


def faults_markdown() -> str:
    lines = ["| Fault | Injected by | Safety | Effect | Options |", "|---|---|---|---|---|"]
    for ft in FAULTS.values():
        opts = "<br>".join(f"`{o.split(' (')[0]}` ({o.split(' (', 1)[1]}" for o in ft.option_summary())
        lines.append(f"| `{ft.id}` | {', '.join(ft.injected_by)} | {ft.safety} | {ft.effect} | {opts} |")
    lines.append("")
    lines.append("Every fault also takes `match` (`host`, `model`, `tool`), `after_calls`, `times` and `probability`.")
    return "\n".join(lines)


def probes_markdown() -> str:
    lines = ["| Probe | Kind | Parameters | Passes when |", "|---|---|---|---|"]
    for p in PROBES.values():
        params = ", ".join(f"`{n}`" for n in p.params.model_fields) or "—"
        lines.append(f"| `{p.id}` | {p.kind} | {params} | {p.passes_when} |")
    return "\n".join(lines)


SECTIONS = {"faults": faults_markdown, "probes": probes_markdown}


def render_readme(text: str) -> str:
    """Replace each generated section (between its begin/end markers) with the registry's view."""
    for name, render in SECTIONS.items():
        begin, end = f"<!-- generated:{name}:begin -->", f"<!-- generated:{name}:end -->"
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
        text = pattern.sub(lambda _m: f"{begin}\n{render()}\n{end}", text)
    return text
