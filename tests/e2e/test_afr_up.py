"""`afr up` as a user runs it: collector and replay worker in one process, wired together."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest
from agents import gen_trace_id

import afr_exporter
from afr.cli import main
from afr.incident import build_model, failing_script, fixed_script, run_incident
from afr.scripted_model import ScriptedModelServer
from tests.fakes import afr_up, free_port, stop_process, wait_for_line

STUB = json.dumps({"status": "refunded"})


@pytest.mark.slow
def test_afr_up_runs_collector_and_worker_and_afr_replay_uses_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    grpc_port, http_port, worker_port = free_port(), free_port(), free_port()
    with ScriptedModelServer(fixed_script()) as fixing_model:
        env = {
            **os.environ,
            "AFR_DATA_DIR": str(data_dir),
            "AFR_WORKER_PORT": str(worker_port),
            "AFR_WORKER_MODEL_BASE_URL": fixing_model.base_url,
            "AFR_WORKER_MODEL_API_KEY": "scripted",
        }
        process = afr_up(grpc_port, http_port, env)
        try:
            wait_for_line(process, "  replay hook", 60)
            key = (data_dir / "local-project.key").read_text().strip()
            trace_id = gen_trace_id()
            with ScriptedModelServer(failing_script()) as model:
                processor = afr_exporter.install(
                    endpoint=f"http://127.0.0.1:{grpc_port}",
                    headers={"authorization": f"Bearer {key}"},
                )
                asyncio.run(
                    run_incident(build_model("responses", model.base_url), trace_id=trace_id)
                )
                assert processor.force_flush(10)
            code = main(
                [
                    "replay",
                    trace_id.removeprefix("trace_"),
                    "--worker",
                    f"http://127.0.0.1:{worker_port}",
                    "--data-dir",
                    str(data_dir),
                    "--stub",
                    f"refund_order={STUB}",
                    "--timeout-s",
                    "60",
                ]
            )
            first = capsys.readouterr()
            # As in a container: no data dir of `afr up`, the secret a file of
            # AFR_WORKER_SECRETS_DIR (what `afr secrets init` writes).
            secrets_dir = tmp_path / "secrets"
            secrets_dir.mkdir()
            secret = (data_dir / "webhook.secret").read_text().strip()
            (secrets_dir / "AFR_WORKER_WEBHOOK_SECRET").write_text(secret)
            monkeypatch.setenv("AFR_WORKER_SECRETS_DIR", str(secrets_dir))
            monkeypatch.delenv("AFR_WORKER_WEBHOOK_SECRET", raising=False)
            again = main(
                [
                    "replay",
                    trace_id.removeprefix("trace_"),
                    "--worker",
                    f"http://127.0.0.1:{worker_port}",
                    "--data-dir",
                    str(tmp_path / "elsewhere"),
                    "--stub",
                    f"refund_order={STUB}",
                    "--timeout-s",
                    "60",
                ]
            )
        finally:
            stop_process(process, signal.SIGTERM)
    assert code == 0, first.err
    job = json.loads(first.out)
    assert job["result"]["verdict"] == "FAILURE_FIXED"
    second = capsys.readouterr()
    assert again == 0, second.err
    # Accepted (signed with the secret from the directory) and run: the scripted model's
    # answers are spent by the first replay, so its verdict is not the point here.
    assert json.loads(second.out)["state"] == "succeeded"
    assert process.returncode == 0, "afr up shuts down cleanly on SIGTERM"
    for name in (
        "local-project.key",
        "webhook.secret",
        "redaction.key",
        "keys.sqlite",
        "worker/state.sqlite",
    ):
        assert (data_dir / name).stat().st_mode & 0o777 == 0o600, name
