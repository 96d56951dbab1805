"""afr's five Grafana dashboards, built as Grafana's JSON model, one module each.

``dashboards/*.json`` are these, written by ``python -m afr.grafana.dashboards`` (a test
fails when they are stale); ``afr grafana push`` sends the same JSON.

- ``runs``          ``afr-runs`` Agent runs: runs, failures, error rate, tokens and cost over
  time; recent runs.
- ``run_timeline``  ``afr-run`` Run timeline: one run in the trace view, its spans, the
  selected span's input and output, its failure's cluster, its source, replays and evals, a
  replay's or eval's tool calls against its source's.
- ``tools``         ``afr-tools`` Tools and failures: per tool and model calls, errors and
  latency; error types; guardrail trips; handoff paths; the failing spans behind the numbers.
- ``replays_evals`` ``afr-evals`` Replays and evals: verdicts over time, sweeps' pass rates,
  failing evals.
- ``failures``      ``afr-failures`` Failures: failing runs clustered by signature with their
  status (recurring first), clusters by status, new this week, the trend per signature.
- ``common``        what they share: uids, variables, links to a run and to a cluster,
  colours, panel kinds.
- ``__main__``      writes the files.
"""

from __future__ import annotations

import json
from typing import Any

from afr.grafana.dashboards.common import EVALS_UID, FAILURES_UID, RUN_UID, RUNS_UID, TOOLS_UID
from afr.grafana.dashboards.failures import failures
from afr.grafana.dashboards.replays_evals import replays_and_evals
from afr.grafana.dashboards.run_timeline import run_timeline
from afr.grafana.dashboards.runs import agent_runs
from afr.grafana.dashboards.tools import tools_and_failures

__all__ = [
    "EVALS_UID",
    "FAILURES_UID",
    "FILE_NAMES",
    "RUNS_UID",
    "RUN_UID",
    "TOOLS_UID",
    "build_all",
    "render",
]


def build_all() -> dict[str, dict[str, Any]]:
    """The dashboards by uid."""
    built = [agent_runs(), run_timeline(), tools_and_failures(), replays_and_evals(), failures()]
    return {d["uid"]: d for d in built}


def render(dashboard_json: dict[str, Any]) -> str:
    return json.dumps(dashboard_json, indent=2, ensure_ascii=False) + "\n"


FILE_NAMES = {
    RUNS_UID: "agent-runs.json",
    RUN_UID: "run-timeline.json",
    TOOLS_UID: "tools-and-failures.json",
    EVALS_UID: "replays-and-evals.json",
    FAILURES_UID: "failures.json",
}
