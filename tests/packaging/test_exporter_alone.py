"""What an agent app gets from `pip install afr-exporter`: the exporter wheel alone in a
fresh virtual environment (its dependencies from the package index), a real Agents SDK
Runner against a scripted model, and the run arriving in a real collector."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from agents.tracing import gen_trace_id

from afr.scripted_model import ScriptedModelServer, ScriptedToolCall, ScriptedTurn
from tests.integration.conftest import start_collector
from tests.packaging.wheels import Wheels

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

INSTALL_TIMEOUT_S = 600
AGENT_TIMEOUT_S = 120
MUST_IMPORT = ("afr_exporter", "agents", "opentelemetry.sdk")
MUST_NOT_IMPORT = (
    "chdb",
    "pyarrow",
    "clickhouse_connect",
    "afr",
    "collector",
    "replay_worker",
    "exporter",
)

# Runs in the fresh environment (python -I: no PYTHONPATH, no script-relative checkout).
_AGENT_APP = """\
import asyncio
import importlib.metadata
import importlib.util
import json
import sys

base_url, endpoint, key, trace_id = sys.argv[1:5]
probe = json.loads(sys.argv[5])
importable = {name: importlib.util.find_spec(name) is not None for name in probe}
distributions = sorted(d.metadata["Name"] for d in importlib.metadata.distributions())

import afr_exporter
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, trace
from openai import AsyncOpenAI


@function_tool
def lookup_order(order_id: str) -> str:
    \"\"\"Where an order is.\"\"\"
    return json.dumps({"order_id": order_id, "status": "shipped"})


processor = afr_exporter.install(
    endpoint=endpoint, headers={"authorization": f"Bearer {key}"}
)
client = AsyncOpenAI(base_url=base_url, api_key="scripted-no-key", max_retries=0)
agent = Agent(
    name="Order Desk",
    instructions="You answer questions about orders.",
    model=OpenAIChatCompletionsModel(model="gpt-4.1-mini", openai_client=client),
    tools=[lookup_order],
)


async def run():
    with trace("order-desk", trace_id=trace_id):
        return await Runner.run(agent, "Where is order A-7?")


result = asyncio.run(run())
flushed = processor.force_flush(10)
stats = afr_exporter.stats()
processor.shutdown()
print("RESULT " + json.dumps({
    "final_output": str(result.final_output),
    "flushed": flushed,
    "exported": stats.exported,
    "dropped": stats.dropped,
    "importable": importable,
    "distributions": distributions,
    "exporter_file": afr_exporter.__file__,
}))
"""

SCRIPT = [
    ScriptedTurn(
        tool_calls=(
            ScriptedToolCall(
                name="lookup_order", arguments='{"order_id": "A-7"}', call_id="call_lookup_1"
            ),
        )
    ),
    ScriptedTurn(text="Order A-7 has shipped."),
]


def _index_unreachable() -> str | None:
    """Why the package index cannot be reached, or None when it can."""
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    try:
        with urllib.request.urlopen(f"{index}/openai-agents/", timeout=15) as response:  # noqa: S310
            response.read(1)
    except (urllib.error.URLError, OSError) as exc:
        return f"the package index {index} is unreachable ({exc}): the exporter's dependencies come from it"
    return None


def _clean_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AFR_", "OTEL_", "OPENAI_", "PYTHON", "VIRTUAL_ENV"))
    }


def _fresh_venv_with(wheel: Path, directory: Path) -> Path:
    """A new virtual environment holding the wheel and what it requires; its python.
    The venv gets no pip of its own: this environment's pip installs into it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True)
    python = directory / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", str(wheel)],
        check=True,
        env=_clean_env(),
        timeout=INSTALL_TIMEOUT_S,
    )
    return python


def test_exporter_wheel_alone_exports_a_real_run_to_a_real_collector(
    wheels: Wheels, tmp_path: Path
) -> None:
    reason = _index_unreachable()
    if reason is not None:
        pytest.skip(reason)
    python = _fresh_venv_with(wheels.exporter.path, tmp_path / "fresh")
    app = tmp_path / "app"
    app.mkdir()
    (app / "agent.py").write_text(_AGENT_APP)
    trace_id = gen_trace_id()

    thread, running = start_collector(tmp_path / "data")
    try:
        with ScriptedModelServer(SCRIPT) as model:
            done = subprocess.run(
                [
                    str(python),
                    "-I",
                    str(app / "agent.py"),
                    model.base_url,
                    running.grpc_endpoint,
                    running.key,
                    trace_id,
                    json.dumps([*MUST_IMPORT, *MUST_NOT_IMPORT]),
                ],
                cwd=app,
                env=_clean_env(),
                capture_output=True,
                text=True,
                timeout=AGENT_TIMEOUT_S,
            )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
        result: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
        stored = running.run(trace_id.removeprefix("trace_"))
    finally:
        thread.stop()

    assert result["final_output"] == "Order A-7 has shipped."
    assert result["exporter_file"].startswith(str(tmp_path / "fresh"))
    importable: dict[str, bool] = result["importable"]
    assert {n for n in MUST_IMPORT if not importable[n]} == set()
    assert {n for n in MUST_NOT_IMPORT if importable[n]} == set()
    assert "afr-server" not in result["distributions"]
    assert result["flushed"] is True
    assert result["dropped"] == 0

    spans = stored["spans"]
    assert result["exported"] == len(spans)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_type.setdefault(span["span_type"], []).append(span)
    (agent,) = by_type["agent"]
    assert agent["agent_name"] == "Order Desk"
    assert len(by_type["llm"]) == 2
    assert {s["model"] for s in by_type["llm"]} == {"gpt-4.1-mini"}
    (tool,) = by_type["tool"]
    assert tool["tool_name"] == "lookup_order"
    assert tool["tool_call_id"] == "call_lookup_1"
    assert json.loads(tool["input"]) == {"order_id": "A-7"}
    summary = stored["run"]
    assert summary["workflow"] == "order-desk"
    assert summary["status"] == "ok"
