"""How long the eval commands take, as a user runs them, against a bare ``import agents``.

``afr eval synthesize`` and ``afr eval run`` are short commands (a CI job runs them, a user
types them), so their start-up is most of their time. Each is run as its own process, from
start to exit, interleaved over several rounds with ``python -c "import agents"`` (the floor
of anything that runs the Agents SDK), and the medians are compared (target: within 1.5x):

- ``afr eval synthesize <replay run id>``: reads the replay and its source from the
  collector, writes the eval file;
- ``afr eval run DIR --list``: the start-up alone (imports, settings, loading the file);
- ``afr eval run DIR``: that eval run once against the scripted model, its run exported to
  the collector.

The worker bench and the eval bench both report it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROUNDS", "TARGET_RATIO", "CollectorAccess", "lines", "measure"]

ROUNDS = int(os.environ.get("AFR_BENCH_CLI_ROUNDS", "5"))
TARGET_RATIO = 1.5
COMMANDS = ("eval_synthesize", "eval_run_list", "eval_run_one_eval")


@dataclass(frozen=True)
class CollectorAccess:
    http_url: str
    grpc_endpoint: str
    key: str


def _timed(command: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}: {done.stderr}")
    return elapsed


def measure(
    collector: CollectorAccess, replay_run_id: str, model_url: str, *, rounds: int = ROUNDS
) -> dict[str, float]:
    """Medians (s) and their ratios to ``import agents``. ``model_url``: a scripted model
    that answers each conversation from the start of the fixing script."""
    evals = Path(tempfile.mkdtemp(prefix="afr-bench-cli-evals-"))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AFR_WORKER_")},
        "AFR_WORKER_COLLECTOR_URL": collector.http_url,
        "AFR_WORKER_COLLECTOR_OTLP_ENDPOINT": collector.grpc_endpoint,
        "AFR_WORKER_COLLECTOR_KEY": collector.key,
        "AFR_WORKER_MODEL_BASE_URL": model_url,
        "AFR_WORKER_MODEL_API_KEY": "scripted",
        "AFR_WORKER_DATA_DIR": tempfile.mkdtemp(prefix="afr-bench-cli-state-"),
    }
    afr = [sys.executable, "-m", "afr.cli"]
    commands = {
        "import_agents": [sys.executable, "-c", "import agents"],
        "eval_synthesize": [*afr, "eval", "synthesize", replay_run_id, "-o", str(evals)],
        "eval_run_list": [*afr, "eval", "run", str(evals), "--list"],
        "eval_run_one_eval": [*afr, "eval", "run", str(evals)],
    }
    _timed(commands["eval_synthesize"], env)  # the eval file the runs below run
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            times[name].append(_timed(command, env))
    medians = {name: statistics.median(values) for name, values in times.items()}
    figures = {"rounds": float(rounds), "import_agents_s": medians["import_agents"]}
    for name in COMMANDS:
        figures[f"{name}_s"] = medians[name]
        figures[f"{name}_vs_import_agents_ratio"] = medians[name] / medians["import_agents"]
    return figures


def lines(figures: dict[str, float]) -> list[str]:
    labels = {
        "eval_synthesize": "afr eval synthesize (2 runs read, 1 file written)",
        "eval_run_list": "afr eval run --list (start-up alone)",
        "eval_run_one_eval": "afr eval run (1 eval, exported)",
    }
    out = [
        f"  eval commands, a process each, against `python -c 'import agents'` "
        f"({figures['import_agents_s']:.2f} s; medians of {figures['rounds']:.0f} interleaved "
        f"rounds; target {TARGET_RATIO}x):"
    ]
    for name, label in labels.items():
        out.append(
            f"    {label:50} {figures[f'{name}_s']:5.2f} s = "
            f"{figures[f'{name}_vs_import_agents_ratio']:4.2f}x"
        )
    return out
