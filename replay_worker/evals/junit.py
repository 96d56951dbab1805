"""Eval outcomes as JUnit XML, the report format every CI system reads.

One ``<testsuite name="afr.eval">`` with one ``<testcase>`` per eval (``classname``
``afr.eval``, ``name`` the eval's id and name, ``file`` its path):

- ``passed``: no child element;
- ``failed``: ``<failure type="assertion">`` with the failed assertions;
- ``errored``: ``<error>`` with the reason the eval could not run;
- ``inconclusive``: ``<failure type="inconclusive">``, or ``<skipped>`` when inconclusive
  evals are allowed (``--allow-inconclusive``) — the report agrees with the exit code.

Every testcase's ``<system-out>`` starts with ``eval run <run id>`` (to find the run in the
read API), the verdict and the cost, then one line per assertion; the same facts are
``<properties>`` of the testcase for the reporters that read them.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from afr_exporter.semconv import METADATA_EVAL_ID
from replay_worker.evals.runner import EvalOutcome

__all__ = ["SUITE_NAME", "junit_xml", "write_junit"]

SUITE_NAME = "afr.eval"


def _assertion_lines(outcome: EvalOutcome, only_failed: bool) -> str:
    return "\n".join(
        f"{'ok  ' if a.passed else 'FAIL'} {a.kind}: expected {a.expected}; actual {a.actual}"
        for a in outcome.assertions
        if not (only_failed and a.passed)
    )


def _testcase(outcome: EvalOutcome, allow_inconclusive: bool) -> ET.Element:
    case = ET.Element(
        "testcase",
        {
            "classname": SUITE_NAME,
            "name": f"{outcome.eval_id} {outcome.name}",
            "time": f"{outcome.duration_s:.3f}",
        },
    )
    if outcome.path is not None:
        case.set("file", outcome.path)
    properties = ET.SubElement(case, "properties")
    for name, value in (
        (METADATA_EVAL_ID, outcome.eval_id),
        ("afr.eval.run_id", outcome.eval_run_id),
        ("afr.eval.verdict", outcome.verdict),
        ("afr.eval.cost_usd", f"{outcome.cost_usd:.6f}"),
    ):
        if value is not None:
            ET.SubElement(properties, "property", {"name": name, "value": value})
    if outcome.status == "failed":
        failed = outcome.failed_assertions
        element = ET.SubElement(
            case,
            "failure",
            {
                "type": "assertion",
                "message": f"{len(failed)} of {len(outcome.assertions)} assertions failed: "
                + ", ".join(a.kind for a in failed),
            },
        )
        element.text = _assertion_lines(outcome, only_failed=True)
    elif outcome.status == "errored":
        element = ET.SubElement(
            case, "error", {"type": "errored", "message": outcome.error or "the eval did not run"}
        )
        element.text = outcome.error
    elif outcome.status == "inconclusive":
        message = "INCONCLUSIVE: the replay depended on a tool output that was not captured"
        if allow_inconclusive:
            ET.SubElement(case, "skipped", {"message": message})
        else:
            ET.SubElement(case, "failure", {"type": "inconclusive", "message": message})
    header = (
        f"eval run {outcome.eval_run_id or '(none)'}; verdict {outcome.verdict or '(none)'}; "
        f"model cost ${outcome.cost_usd:.6f}"
    )
    lines = _assertion_lines(outcome, only_failed=False)
    ET.SubElement(case, "system-out").text = header + ("\n" + lines if lines else "")
    return case


def junit_xml(
    outcomes: list[EvalOutcome], *, allow_inconclusive: bool = False, duration_s: float = 0.0
) -> bytes:
    cases = [_testcase(o, allow_inconclusive) for o in outcomes]
    counts = {
        "tests": len(cases),
        "failures": sum(1 for c in cases if c.find("failure") is not None),
        "errors": sum(1 for c in cases if c.find("error") is not None),
        "skipped": sum(1 for c in cases if c.find("skipped") is not None),
    }
    attributes = {k: str(v) for k, v in counts.items()} | {"time": f"{duration_s:.3f}"}
    root = ET.Element("testsuites", attributes)
    suite = ET.SubElement(root, "testsuite", {"name": SUITE_NAME, **attributes})
    suite.extend(cases)
    ET.indent(root)
    xml: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return xml


def write_junit(
    path: Path,
    outcomes: list[EvalOutcome],
    *,
    allow_inconclusive: bool = False,
    duration_s: float = 0.0,
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        junit_xml(outcomes, allow_inconclusive=allow_inconclusive, duration_s=duration_s)
    )
