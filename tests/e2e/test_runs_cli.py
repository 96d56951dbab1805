"""``afr runs list|show|tail`` against a real collector on loopback holding the seeded failing
run and its FAILURE_FIXED replay: what a user sees in a plain terminal (80 columns, no
colour: stdout is captured), what a script gets with ``--json``, and each error as one
line on stderr with exit code 2."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from afr.cli import build_parser, main
from afr.local import LOCAL_KEY_FILE
from afr.runs.cli import run_command
from tests.e2e.captured import capture_fixed_incident
from tests.fakes import free_port
from tests.integration.conftest import Running, start_collector


@dataclass
class Seeded:
    running: Running
    source_id: str
    replay_id: str

    @property
    def url(self) -> str:
        return self.running.http_url


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    thread, running = start_collector(tmp_path_factory.mktemp("runs") / "data")
    try:
        source, replayed = capture_fixed_incident(running)
        running.run(replayed.replay_run_id)  # stored before any test lists it
        yield Seeded(running, source["run"]["run_id"], replayed.replay_run_id)
    finally:
        thread.stop()


@pytest.fixture
def keyed(seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> Seeded:
    monkeypatch.setenv("AFR_API_KEY", seeded.running.key)
    return seeded


def afr(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_plain_80(out: str) -> None:
    assert "\x1b" not in out, "no colour when stdout is not a terminal"
    assert all(len(line) <= 80 for line in out.splitlines())


def test_list_shows_the_failing_run_and_its_fixing_replay(
    keyed: Seeded, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = afr(["runs", "list", "--url", keyed.url, "--since", "1h"], capsys)
    assert (code, err) == (0, "")
    assert_plain_80(out)
    lines = out.splitlines()
    replay_row, source_row = (
        next(i for i, line in enumerate(lines) if line.startswith(run_id))
        for run_id in (keyed.replay_id, keyed.source_id)
    )
    assert replay_row < source_row, "newest first"
    assert lines[replay_row].split()[1:3] == ["FAILURE_FIXED", "replay"]
    assert lines[source_row].split()[1:3] == ["error", "capture"]
    assert "refund-desk · Triage Agent +1 · 13 spans" in lines[source_row + 1]
    assert lines[source_row + 2] == (
        "  ✗ execute_tool refund_order: Error running tool (non-fatal)"
    )

    code, out, _ = afr(["runs", "list", "--url", keyed.url, "--status", "error", "--json"], capsys)
    listed = [json.loads(line) for line in out.splitlines()]
    assert [run["run_id"] for run in listed] == [keyed.source_id]
    assert listed[0]["failing_span_name"] == "execute_tool refund_order"

    code, out, _ = afr(
        ["runs", "list", "--url", keyed.url, "--source-run", keyed.source_id, "--json"], capsys
    )
    assert [json.loads(line)["run_id"] for line in out.splitlines()] == [keyed.replay_id]


def test_list_pages_through_every_run_with_all(
    keyed: Seeded, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = afr(["runs", "list", "--url", keyed.url, "--limit", "1", "--json"], capsys)
    assert [json.loads(line)["run_id"] for line in out.splitlines()] == [keyed.replay_id]
    assert err.startswith("more runs: --cursor ")
    code, out, err = afr(
        ["runs", "list", "--url", keyed.url, "--limit", "1", "--json", "--all"], capsys
    )
    assert (code, err) == (0, "")
    assert [json.loads(line)["run_id"] for line in out.splitlines()] == [
        keyed.replay_id,
        keyed.source_id,
    ]


def test_show_names_the_failing_span_and_links_the_fixing_replay(
    keyed: Seeded, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = afr(["runs", "show", keyed.source_id, "--url", keyed.url], capsys)
    assert (code, err) == (0, "")
    assert_plain_80(out)
    lines = out.splitlines()
    assert "  status    error (1 of 13 spans failed)" in lines
    (failing,) = [line for line in lines if line.startswith("✗")]
    assert "execute_tool refund_order [tool]" in failing
    assert "            error: Error running tool (non-fatal)" in lines
    assert "failing span: execute_tool refund_order (tool, call call_refund_1)" in lines
    assert '  input     {"order_id": "A-1001", "amount": "12.OO"}' in lines
    assert "  tokens    740 in / 147 out" in lines
    linked = lines[lines.index("replays and evals (1)") + 1]
    assert linked.split()[:3] == [keyed.replay_id, "FAILURE_FIXED", "replay"]

    code, out, _ = afr(["runs", "show", keyed.replay_id, "--url", keyed.url], capsys)
    assert f"  source    {keyed.source_id}" in out.splitlines()
    assert "  verdict   FAILURE_FIXED" in out.splitlines()

    code, out, _ = afr(["runs", "show", keyed.source_id, "--url", keyed.url, "--json"], capsys)
    body = json.loads(out)
    assert body["run"]["run_id"] == keyed.source_id
    assert len(body["spans"]) == 13


def test_show_in_colour_highlights_the_failing_span_in_red(
    keyed: Seeded, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    code, out, _ = afr(["runs", "show", keyed.source_id, "--url", keyed.url], capsys)
    assert code == 0
    (failing,) = [line for line in out.splitlines() if "execute_tool refund_order [tool]" in line]
    assert failing.startswith("\x1b[1m\x1b[31m✗")


def _failing_run_now(trace_id: str) -> dict[str, Any]:
    """OTLP/JSON of a one-span failing run starting now."""
    start = time.time_ns()
    attributes = [{"key": "afr.span.type", "value": {"stringValue": "workflow"}}]
    root = {
        "traceId": trace_id,
        "spanId": trace_id[:16],
        "name": "invoke_workflow late-desk",
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 5_000_000),
        "attributes": attributes,
        "status": {"code": 2, "message": "the late run failed"},
    }
    scope = {"scope": {"name": "afr.exporter"}, "spans": [root]}
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [scope]}]}


def test_tail_prints_each_run_once_then_the_one_that_arrives(keyed: Seeded) -> None:
    arriving = "d" * 32
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        """First pause: a failing run arrives. Second: the user presses Ctrl-C."""
        sleeps.append(seconds)
        if len(sleeps) == 1:
            answer = httpx.post(
                keyed.url + "/v1/traces",
                json=_failing_run_now(arriving),
                headers=keyed.running.headers(),
            )
            assert answer.status_code == 200
            keyed.running.collector.flush()
        elif len(sleeps) == 3:
            raise KeyboardInterrupt

    out = io.StringIO()
    args = build_parser().parse_args(["runs", "tail", "--url", keyed.url, "--since", "1h"])
    assert run_command(args, stdout=out, sleep=sleep) == 0, "Ctrl-C exits cleanly"
    rows = [line.split()[0] for line in out.getvalue().splitlines() if not line.startswith(" ")]
    assert rows == [keyed.source_id, keyed.replay_id, arriving], "oldest first, each once"
    assert sleeps == [2.0, 2.0, 2.0]
    assert "  ✗ invoke_workflow late-desk" in out.getvalue()
    assert_plain_80(out.getvalue())

    json_out = io.StringIO()
    args = build_parser().parse_args(
        ["runs", "tail", "--url", keyed.url, "--since", "1h", "--json", "--status", "error"]
    )

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    assert run_command(args, stdout=json_out, sleep=interrupt) == 0
    runs = [json.loads(line) for line in json_out.getvalue().splitlines()]
    assert [run["run_id"] for run in runs] == [keyed.source_id, arriving]


def test_the_local_key_file_under_data_dir_is_used(
    seeded: Seeded, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / LOCAL_KEY_FILE).write_text(seeded.running.key + "\n")
    code, out, err = afr(
        ["runs", "show", seeded.source_id, "--url", seeded.url, "--data-dir", str(tmp_path)],
        capsys,
    )
    assert (code, err) == (0, "")
    assert seeded.running.key not in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["runs", "show", "f" * 32], f"no run {'f' * 32} in this key's project (404)"),
        (["runs", "show", "not-a-run"], "bad request: a run id is 32 hex digits"),
        (["runs", "list", "--kind", "nightly"], "bad request: kind must be one of capture, "),
        (["runs", "list", "--limit", "0"], "bad request: limit must be 1.."),
    ],
)
def test_unknown_runs_and_bad_filters_are_one_line_and_exit_2(
    keyed: Seeded, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = afr([*argv, "--url", keyed.url], capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"afr {argv[0]} {argv[1]}: {message}")
    assert err.count("\n") == 1


def test_a_refused_key_and_an_unreachable_collector_are_one_line_and_exit_2(
    seeded: Seeded, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "afr_" + "0" * 40
    monkeypatch.setenv("AFR_API_KEY", wrong)
    code, out, err = afr(["runs", "list", "--url", seeded.url], capsys)
    assert (code, out) == (2, "")
    assert err.startswith("afr runs list: collector answered 401 unauthorized: the key was refused")
    assert wrong not in err
    monkeypatch.setenv("AFR_API_KEY", seeded.running.key)
    dead = f"http://127.0.0.1:{free_port()}"
    for command in (["runs", "list"], ["runs", "show", seeded.source_id], ["runs", "tail"]):
        code, out, err = afr([*command, "--url", dead], capsys)
        assert (code, out) == (2, "")
        assert err.startswith(f"afr {command[0]} {command[1]}: collector unreachable at {dead}")
        assert err.count("\n") == 1
        assert seeded.running.key not in err
