"""`make demo` walks the sacred path as far as it is built; it must keep working."""

from __future__ import annotations

from pathlib import Path

import pytest

from afr.cli import main
from tests.fakes import OtlpGrpcSink


def test_demo_walks_the_seeded_failing_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["demo", "--data-dir", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    assert "refunds actually made: 0" in out
    assert "13 spans, dropped 0" in out
    assert "stored in ClickHouse" in out
    assert "status error, 13 spans, 1 error, workflow 'refund-desk'" in out
    assert "execute_tool refund_order [tool" in out
    assert "<-- ERROR Error running tool (non-fatal)" in out
    assert "{'order_id': 'A-1001', 'amount': '12.OO'}" in out
    assert "verdict FAILURE_FIXED" in out
    assert "'amount': {'source': '12.OO', 'replay': 12.0}" in out
    assert "refunds actually made, still: 0" in out
    assert "kind replay, status ok, linked to source" in out
    assert "fork verdict FAILURE_FIXED: 2 model calls answered from the capture ($0), 1 live" in out
    assert (tmp_path / "demo" / "local-project.key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "demo" / "webhook.secret").stat().st_mode & 0o777 == 0o600


def test_afr_seed_exports_the_incident_to_a_collector(capsys: pytest.CaptureFixture[str]) -> None:
    with OtlpGrpcSink() as sink:
        assert main(["seed", "--endpoint", sink.endpoint]) == 0
        spans = sink.spans()
    out = capsys.readouterr().out
    run_id = out.split("run id: ")[1].split()[0]
    assert {s.trace_id for s in spans} == {run_id}
    assert any(s.span.name == "execute_tool refund_order" for s in spans)
    assert "dropped 0" in out


def test_afr_keys_create_list_revoke(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path)]
    assert main(["keys", "create", "--project", "shop", *data]) == 0
    key = capsys.readouterr().out.strip()
    assert key.startswith("afr_")
    assert main(["keys", "list", *data]) == 0
    listing = capsys.readouterr().out
    assert "shop" in listing
    assert key[-4:] in listing
    assert key not in listing
    key_id = listing.splitlines()[1].split()[0]
    assert main(["keys", "revoke", key_id, *data]) == 0
    assert main(["keys", "revoke", key_id, *data]) == 1
    assert main(["keys", "create", "--project", "bad name", *data]) == 2
