"""What needs no model runs without the Agents SDK (docs/architecture.md, decision 13): the worker's own
process serves its hooks and synthesizes evals from two stored runs without loading it, and
so does ``afr eval synthesize``, which would otherwise spend seconds importing it."""

from __future__ import annotations

import subprocess
import sys

import pytest

LOADS = "import sys\nimport {module}\nprint('agents' in sys.modules, 'openai' in sys.modules)\n"


@pytest.mark.parametrize(
    "module",
    [
        "replay_worker.app",  # the worker's own process: hooks, jobs, sweeps scheduling
        "replay_worker.evals.synthesis",  # POST /hooks/evals and `afr eval synthesize`
        "replay_worker.evals.contract",  # loading eval files
    ],
)
def test_the_module_loads_without_the_agents_sdk(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", LOADS.format(module=module)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split() == ["False", "False"], done.stdout + done.stderr
