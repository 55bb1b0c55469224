"""JUnit XML: one test case per probe, so any CI system shows which probe failed and why."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from mitmchaos.report.text import probe_line, render_summary
from mitmchaos.scoring import RunResult


def render_junit(result: RunResult) -> str:
    name = f"mitmchaos.{result.plan['name']}"
    failures = sum(p.status == "FAIL" for p in result.probes)
    skipped = sum(p.status in ("n/a", "undecided") for p in result.probes)
    duration = f"{sum(r.duration_s for r in result.repetitions):.3f}"
    suites = ET.Element("testsuites", name="mitmchaos", tests=str(len(result.probes)), failures=str(failures),
                        errors="0", skipped=str(skipped), time=duration)
    suite = ET.SubElement(suites, "testsuite", name=name, tests=str(len(result.probes)), failures=str(failures),
                          errors="0", skipped=str(skipped), time=duration)
    props = ET.SubElement(suite, "properties")
    for key, value in (("verdict", result.verdict), ("exit_code", result.exit_code), ("outcome", result.outcome),
                       ("score", result.score)):
        ET.SubElement(props, "property", name=key, value="" if value is None else str(value))
    faulted = [r for r in result.repetitions if r.phase == "faulted"]
    for probe in result.probes:
        case = ET.SubElement(suite, "testcase", classname=name, name=probe.label)
        line = probe_line(probe, result.confidence).removeprefix("probe      : ")
        details = "\n".join(f"faulted repetition {r.index + 1} ({r.run_id}): "
                            f"{'pass' if r.probes[probe.index]['passed'] else 'FAIL'}: {r.probes[probe.index]['detail']}"
                            for r in faulted if r.probes[probe.index]["passed"] is not None)
        if probe.status == "FAIL":
            ET.SubElement(case, "failure", message=line, type="ProbeBelowThreshold").text = details
        elif probe.status in ("n/a", "undecided"):
            ET.SubElement(case, "skipped", message=line)
        ET.SubElement(case, "system-out").text = details or line
    ET.SubElement(suite, "system-out").text = render_summary(result)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
