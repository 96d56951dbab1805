"""``afr runs``: the renderers over summaries and spans shaped exactly as the read API
returns them (collector/api/runs.py ``span_json``, collector/store/reader.py ``_summary``),
the tail loop on a manual clock, and the command against an in-memory HTTP transport."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator, Mapping
from datetime import UTC
from pathlib import Path
from typing import Any

import httpx
import pytest
import wcwidth

from afr.cli import build_parser
from afr.runs.cli import run_command
from afr.runs.client import CollectorUnreachable, RunsApiError
from afr.runs.render import BODY_PREVIEW_LINES, render_run, render_run_row
from afr.runs.tail import tail_runs
from afr.runs.terminal import Terminal, colour_enabled
from afr.runs.times import parse_time
from afr.runs.widths import display_width, truncate
from tests.fakes import ManualClock

SOURCE = "ea86dcb5d15c43b68d017c310dc164e7"
REPLAY = "f6e6144baae64b41ada0ade7dfd114e7"
START_NS = 1_764_460_800_000_000_000  # 2025-11-30T00:00:00Z
PLAIN = Terminal(width=80, colour=False, tz=UTC)
COLOUR = Terminal(width=80, colour=True, tz=UTC)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
KEY = "afr_test_key_never_printed_0123456789"


def summary(run_id: str = SOURCE, **fields: Any) -> dict[str, Any]:
    """A run summary as ``GET /api/v1/runs`` lists it (the seeded failing run)."""
    base: dict[str, Any] = {
        "run_id": run_id,
        "start_ns": START_NS,
        "end_ns": START_NS + 654_000_928,
        "duration_ns": 654_000_928,
        "status": "error",
        "error_count": 1,
        "span_count": 13,
        "failing_span_id": "9c8f20b77c4e4660",
        "failing_span_name": "execute_tool refund_order",
        "failing_error_type": "Error running tool (non-fatal)",
        "workflow": "refund-desk",
        "root_agent": "Triage Agent",
        "agents": ["Refund Agent", "Triage Agent"],
        "input_tokens": 740,
        "output_tokens": 147,
        "cost_usd": 0.000531,
        "kind": "capture",
        "source_run_id": None,
        "verdict": None,
        "eval_name": None,
        "sweep_id": None,
    }
    base.update(fields)
    return base


def replay_summary(**fields: Any) -> dict[str, Any]:
    return summary(
        REPLAY,
        **{
            "start_ns": START_NS + 8_000_000_000,
            "status": "ok",
            "error_count": 0,
            "span_count": 15,
            "failing_span_id": None,
            "failing_span_name": None,
            "failing_error_type": None,
            "kind": "replay",
            "source_run_id": SOURCE,
            "verdict": "FAILURE_FIXED",
            **fields,
        },
    )


def span(
    span_id: str,
    parent: str,
    name: str,
    span_type: str,
    *,
    offset_ms: float = 0,
    duration_ms: float = 1,
    error: str = "",
    **fields: Any,
) -> dict[str, Any]:
    """A span as ``GET /api/v1/runs/{id}`` returns it."""
    start = START_NS + int(offset_ms * 1e6)
    duration = int(duration_ms * 1e6)
    base: dict[str, Any] = {
        "trace_id": SOURCE,
        "span_id": span_id,
        "parent_span_id": parent,
        "name": name,
        "kind": "Internal",
        "start_time_unix_nano": start,
        "end_time_unix_nano": start + duration,
        "duration_ns": duration,
        "status": {"code": "Error" if error else "Unset", "message": error},
        "service_name": "afr-agent",
        "resource_attributes": {"service.name": "afr-agent"},
        "scope": {"name": "afr.exporter", "version": "0.1.0"},
        "trace_state": "",
        "attributes": {"afr.span.type": span_type},
        "events": [],
        "links": [],
        "span_type": span_type,
        "dialect": "afr",
        "agent_name": "",
        "tool_name": "",
        "tool_call_id": "",
        "model": "",
        "error_type": error,
        "input": "",
        "output": "",
        "input_tokens": 0,
        "output_tokens": 0,
        "run_kind": "capture",
        "source_run_id": "",
        "redactions": [],
        "truncated": False,
    }
    base.update(fields)
    return base


def incident_spans(**tool_fields: Any) -> list[dict[str, Any]]:
    failing_tool = {
        "tool_name": "refund_order",
        "tool_call_id": "call_refund_1",
        "input": '{"order_id": "A-1001", "amount": "12.OO"}',
        "output": "An error occurred while running the tool. Please try again.",
        "events": [
            {
                "time_unix_nano": START_NS + 602_000_000,
                "name": "exception",
                "attributes": {
                    "exception.type": "Error running tool (non-fatal)",
                    "exception.message": "Error running tool (non-fatal): Tool execution "
                    "failed. Error details are redacted.",
                },
            }
        ],
        **tool_fields,
    }
    # Out of order, as a page of spans may come: the tree is rebuilt from parent ids.
    return [
        span(
            "9c8f20b77c4e4660",
            "6e979e1857744cd7",
            "execute_tool refund_order",
            "tool",
            offset_ms=600,
            duration_ms=1.846,
            error="Error running tool (non-fatal)",
            **failing_tool,
        ),
        span("75d83a8cfde213e5", "", "invoke_workflow refund-desk", "workflow", duration_ms=654),
        span("4891b703a90a4071", "75d83a8cfde213e5", "task refund-desk", "task", duration_ms=653),
        span(
            "1358c948455e448b",
            "4891b703a90a4071",
            "invoke_agent Triage Agent",
            "agent",
            offset_ms=1,
            duration_ms=602,
            agent_name="Triage Agent",
        ),
        span(
            "284ca46a64d64b4d",
            "1358c948455e448b",
            "chat gpt-4.1-mini",
            "llm",
            offset_ms=2,
            duration_ms=596,
            model="gpt-4.1-mini",
            input_tokens=130,
            output_tokens=39,
        ),
        span(
            "5769218203e14fff",
            "4891b703a90a4071",
            "invoke_agent Refund Agent",
            "agent",
            offset_ms=590,
            duration_ms=49,
            agent_name="Refund Agent",
        ),
        span(
            "6e979e1857744cd7",
            "5769218203e14fff",
            "turn 2 Refund Agent",
            "turn",
            offset_ms=591,
            duration_ms=23,
            agent_name="Refund Agent",
        ),
        span(
            "6faf006553474a07",
            "6e979e1857744cd7",
            "ChatCompletion",
            "llm",
            offset_ms=592,
            duration_ms=16.8,
            model="gpt-4.1-mini",
            input_tokens=264,
            output_tokens=48,
        ),
    ]


def plain(lines: list[str]) -> str:
    return "\n".join(lines)


def assert_fits(lines: list[str], width: int = 80) -> None:
    for line in lines:
        assert display_width(ANSI.sub("", line)) <= width, line


# --- rows (list, tail) ---------------------------------------------------------------------


def test_a_failing_run_row_names_its_failing_span_within_80_columns() -> None:
    lines = render_run_row(summary(), PLAIN)
    assert_fits(lines)
    assert lines[0].split() == [SOURCE, "error", "capture", "11-30", "00:00:00", "654ms"]
    assert "refund-desk · Triage Agent +1 · 13 spans · 740/147 tokens · $0.000531" in lines[1]
    assert lines[2] == "  ✗ execute_tool refund_order: Error running tool (non-fatal)"
    assert len(render_run_row(summary(), PLAIN)[0]) == 80, "the widest row fills 80 exactly"


def test_a_replay_row_shows_its_verdict_and_an_ok_run_has_no_failure_line() -> None:
    lines = render_run_row(replay_summary(), PLAIN)
    assert len(lines) == 2
    assert lines[0].split()[:3] == [REPLAY, "FAILURE_FIXED", "replay"]


def test_fields_the_summary_may_lack_are_tolerated() -> None:
    older = summary()
    for field in ("verdict", "cost_usd", "eval_name", "sweep_id", "agents", "root_agent"):
        del older[field]
    lines = render_run_row(older, PLAIN)
    assert lines[0].split()[1] == "error"
    assert "$" not in lines[1]
    body = {"run": older, "spans": incident_spans()}
    assert "verdict" not in plain(render_run(body, PLAIN, linked=None))


def test_cached_and_reasoning_tokens_and_an_unpriced_model_are_shown_never_as_zero() -> None:
    wide = Terminal(width=120, colour=False, tz=UTC)
    cached = summary(cache_read_tokens=600, cache_creation_tokens=0, reasoning_tokens=40)
    assert "740/147 tokens, 600 cached · $0.000531" in render_run_row(cached, wide)[1]
    shown = plain(render_run({"run": cached, "spans": []}, PLAIN, linked=None))
    assert "740 in / 147 out (600 cached, 40 reasoning)" in shown
    unpriced = summary(cost_usd=None, priced_cost_usd=0.0, unpriced_models=["acme-llm-7"])
    row = render_run_row(unpriced, wide)[1]
    assert row.endswith("· unpriced (acme-llm-7)") and "$" not in row
    mixed = summary(cost_usd=None, priced_cost_usd=0.0024, unpriced_models=["acme\x1b[2J"])
    shown = plain(render_run({"run": mixed, "spans": []}, PLAIN, linked=None))
    assert "cost" in shown and "$0.002400 + unpriced (acme" in shown
    assert "\x1b" not in shown, "a model name is the sender's text: no escape reaches the terminal"
    colour = plain(render_run({"run": mixed, "spans": []}, COLOUR, linked=None))
    assert "\x1b[33m" in colour, "an unknown cost stands out"


def test_long_names_are_cut_with_an_ellipsis_and_wide_characters_counted_twice() -> None:
    long = summary(
        workflow="退款服务台" * 10,
        root_agent="A very long agent name that goes on and on " * 3,
        failing_span_name="execute_tool " + "x" * 200,
        failing_error_type="😀" * 50,
        kind="a-future-kind-with-a-long-name",
        verdict="SOME_FUTURE_VERDICT_NAME",
    )
    for width in (80, 60, 40):
        term = Terminal(width=width, tz=UTC)
        lines = render_run_row(long, term)
        assert_fits(lines, width)
        assert all(line.endswith("…") for line in lines[1:]), lines
    assert "SOME_FUTURE_…  " in render_run_row(long, PLAIN)[0]


def test_a_narrower_terminal_keeps_the_duration_in_view() -> None:
    line = render_run_row(summary(), Terminal(width=77, tz=UTC))[0]
    assert line.endswith("654ms")
    assert display_width(line) <= 77


def test_colour_marks_failures_red_and_fixes_green_and_changes_nothing_else() -> None:
    failing = render_run_row(summary(), COLOUR)
    fixed = render_run_row(replay_summary(), COLOUR)
    assert "\x1b[1m\x1b[31merror" in failing[0]
    assert failing[2].startswith("\x1b[1m\x1b[31m") and failing[2].endswith("\x1b[0m")
    assert "\x1b[32mFAILURE_FIXED" in fixed[0]
    assert (
        "\x1b[33mINCONCLUSIVE" in render_run_row(replay_summary(verdict="INCONCLUSIVE"), COLOUR)[0]
    )
    for coloured, uncoloured in (
        (failing, render_run_row(summary(), PLAIN)),
        (fixed, render_run_row(replay_summary(), PLAIN)),
    ):
        assert [ANSI.sub("", line) for line in coloured] == uncoloured
    assert not any("\x1b" in line for line in render_run_row(summary(), PLAIN))


def test_control_characters_from_the_agent_never_reach_the_terminal() -> None:
    evil = summary(
        workflow="refund\x1b[2J\x1b]0;pwned\x07desk",
        failing_span_name="tool\u202eevil\nname",
        run_id="abc\x1b[31m",
    )
    text = plain(render_run_row(evil, PLAIN))
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "refund?[2J?]0;pwned?desk" in text
    spans = incident_spans(output="line1\x1b[2Jline2", error_type="bad\x1b[2J")
    spans[1]["name"] = "invoke_workflow \x1b]0;title\x07"
    shown = plain(render_run({"run": summary(), "spans": spans}, PLAIN, linked=[]))
    assert "\x1b" not in shown


def test_ascii_terminals_get_ascii_marks() -> None:
    term = Terminal(width=80, unicode=False, tz=UTC)
    lines = render_run_row(summary(workflow="w" * 100), term)
    assert all(line.isascii() for line in lines)
    assert lines[2].startswith("  x execute_tool")


def test_colour_follows_the_tty_no_color_and_force_color() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert colour_enabled(Tty(), {})
    assert not colour_enabled(io.StringIO(), {})
    assert not colour_enabled(Tty(), {"NO_COLOR": "1"})
    assert not colour_enabled(Tty(), {"TERM": "dumb"})
    assert colour_enabled(io.StringIO(), {"FORCE_COLOR": "1"})
    assert colour_enabled(io.StringIO(), {"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert not colour_enabled(io.StringIO(), {"FORCE_COLOR": "0"})
    assert colour_enabled(Tty(), {"NO_COLOR": ""}), "an empty NO_COLOR does not count"


# --- one run (show) ------------------------------------------------------------------------


def test_show_draws_the_tree_and_highlights_the_failing_span() -> None:
    body = {"run": summary(), "spans": incident_spans()}
    lines = render_run(body, PLAIN, linked=[replay_summary()])
    assert_fits(lines)
    text = plain(lines)
    assert lines[0] == f"run {SOURCE}"
    assert "  status    error (1 of 13 spans failed)" in lines
    assert "  cost      $0.000531" in lines
    assert "  agents    Triage Agent (root), Refund Agent" in lines
    assert "  started   2025-11-30 00:00:00 UTC, took 654ms" in lines
    tree = [line for line in lines if line.rstrip().endswith(("ms", "s")) and "[" in line]
    assert [line.split("[")[0].rstrip() for line in tree] == [
        "  invoke_workflow refund-desk",
        "    task refund-desk",
        "      invoke_agent Triage Agent",
        "        chat gpt-4.1-mini",
        "      invoke_agent Refund Agent",
        "        turn 2 Refund Agent",
        "          ChatCompletion",
        "✗         execute_tool refund_order",
    ]
    assert tree[-1].endswith("1.85ms")
    assert "ChatCompletion [llm] gpt-4.1-mini 264/48 tokens" in text, "the model, not in the name"
    assert "chat gpt-4.1-mini [llm] 130/39 tokens" in text, "a name already in the span name"
    assert "            error: Error running tool (non-fatal)" in lines
    assert "failing span: execute_tool refund_order (tool, call call_refund_1)" in lines
    assert '  input     {"order_id": "A-1001", "amount": "12.OO"}' in lines
    assert "  output    An error occurred while running the tool. Please try again." in lines
    assert "  exception Error running tool (non-fatal): Tool execution failed. Error" in lines
    assert "            details are redacted." in lines, "wrapped at a space"
    assert "replays and evals (1)" in lines
    linked = lines[lines.index("replays and evals (1)") + 1]
    assert linked.split() == [REPLAY, "FAILURE_FIXED", "replay", "11-30", "00:00:08"]


def test_show_colours_the_failing_span_red() -> None:
    lines = render_run({"run": summary(), "spans": incident_spans()}, COLOUR, linked=[])
    (red,) = [line for line in lines if "execute_tool refund_order [tool]" in line]
    assert red.startswith("\x1b[1m\x1b[31m✗")
    assert any(line.startswith("\x1b[1m\x1b[31mfailing span:") for line in lines)
    assert [ANSI.sub("", line) for line in lines] == render_run(
        {"run": summary(), "spans": incident_spans()}, PLAIN, linked=[]
    )


def test_show_of_a_replay_names_its_source_and_verdict() -> None:
    body = {"run": replay_summary(), "spans": [span("a" * 16, "", "invoke_workflow w", "workflow")]}
    lines = render_run(body, PLAIN, linked=[])
    assert f"  source    {SOURCE}" in lines
    assert "  verdict   FAILURE_FIXED" in lines
    assert "replays and evals (0)" not in lines, "only a capture lists its (missing) replays"
    capture = render_run({"run": summary(), "spans": incident_spans()}, PLAIN, linked=[])
    assert f"  none yet: afr replay {SOURCE} makes one" in capture


def test_a_long_body_is_previewed_and_full_shows_all_of_it() -> None:
    arguments = json.dumps({"note": "word " * 400, "amount": "12.OO"})
    body = {"run": summary(), "spans": incident_spans(input=arguments)}
    preview = render_run(body, PLAIN, linked=None)
    assert_fits(preview)
    start = next(i for i, line in enumerate(preview) if line.startswith("  input "))
    end = next(i for i, line in enumerate(preview) if line.startswith("  output "))
    assert end - start == BODY_PREVIEW_LINES + 1
    assert preview[end - 2].endswith("…")
    assert re.fullmatch(r" {12}\(\d+ more characters: --full shows them\)", preview[end - 1])
    full = render_run(body, PLAIN, linked=None, full=True)
    assert_fits(full)
    shown = "".join(line[12:] for line in full if line.startswith(("  input ", " " * 12)))
    assert shown.count("word") == 400, "nothing left out"
    assert '"amount": "12.OO"' in plain(full), "pretty-printed JSON"


def test_spans_whose_parent_is_missing_are_shown_as_roots() -> None:
    spans = [
        span("b" * 16, "f" * 16, "orphan", "custom", offset_ms=5),
        span("a" * 16, "", "root", "workflow"),
    ]
    body = {"run": summary(status="ok", error_count=0), "spans": spans}
    lines = render_run(body, PLAIN, linked=None)
    assert [line.split("[")[0].strip() for line in lines if "[" in line] == ["root", "orphan"]


def test_deep_trees_stay_within_the_width() -> None:
    spans = [span(f"{1:016x}", "", "root", "workflow")]
    for depth in range(2, 3000):  # deeper than the recursion limit
        spans.append(span(f"{depth:016x}", f"{depth - 1:016x}", f"level {depth} " * 5, "agent"))
    assert_fits(render_run({"run": summary(), "spans": spans}, PLAIN, linked=None))


def test_truncate_counts_columns() -> None:
    assert truncate("hello", 5) == "hello"
    assert truncate("hello world", 6) == "hello…"
    assert truncate("日本語テキスト", 7) == "日本語…"
    assert display_width(truncate("日本語テキスト", 6)) <= 6


# What a terminal draws, not code points: the old east_asian_width count failed each of the
# cases below except the single accent (a family as 8 cells, a flag cut in half, a keycap,
# a heart with its emoji selector and decomposed Hangul as one too many or too few).
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # 👨‍👩‍👧‍👦, joined by ZWJ
FLAGS = "\U0001f1eb\U0001f1f7\U0001f1e9\U0001f1ea"  # 🇫🇷🇩🇪: two pairs of regional indicators
HEART = "\u2764\ufe0f"  # ❤️: a narrow heart made an emoji by its selector (VS16)
THUMB = "\U0001f44d\U0001f3fd"  # 👍🏽: with a skin-tone modifier


def test_a_zwj_sequence_is_one_wide_character() -> None:
    assert display_width(FAMILY) == 2
    assert truncate(f"{FAMILY} family", 4) == f"{FAMILY} …"
    assert truncate(f"ab{FAMILY}", 3) == "ab…", "never a family cut at a joiner"


def test_a_flag_is_two_cells_and_never_cut_in_half() -> None:
    assert display_width(FLAGS) == 4
    assert truncate(FLAGS, 3) == "\U0001f1eb\U0001f1f7…"
    assert truncate(FLAGS, 2) == "…"


def test_combining_marks_take_no_cell_of_their_own() -> None:
    accent = "cafe\u0301"  # café with a combining acute accent
    assert display_width(accent) == 4
    assert truncate(accent + " noir", 5) == accent + "…"
    assert display_width("1\ufe0f\u20e3") == 2, "a keycap: enclosing combining mark, emoji"


def test_cjk_is_two_cells_a_character_also_when_decomposed() -> None:
    assert display_width("日本語") == 6
    assert display_width("\u1112\u1161\u11ab") == 2, "한 as three conjoining jamo"
    assert truncate("한국어 텍스트", 7) == "한국어…"


def test_a_wide_emoji_in_a_cut_cell_does_not_overflow_it() -> None:
    assert display_width(HEART) == 2
    assert display_width(THUMB) == 2
    assert truncate(f"ab{HEART}cd", 4) == "ab…"
    assert truncate(f"ok {THUMB}{THUMB} done", 7) == f"ok {THUMB}…"
    emoji = summary(workflow=f"{HEART}{THUMB}" * 20, failing_span_name=FAMILY * 50)
    for width in (80, 41):
        for line in render_run_row(emoji, Terminal(width=width, tz=UTC)):
            # wcwidth measures independently of the renderer's own display_width.
            assert wcwidth.width(line) <= width, line
            assert wcwidth.width(line) >= width - 2, "cut where the room ended"


# --- times ---------------------------------------------------------------------------------


def test_times_relative_iso_and_unix() -> None:
    now = 1_764_460_800.0
    assert parse_time("1h", now) == now - 3600
    assert parse_time("2d", now) == now - 2 * 86_400
    assert parse_time("1h30m", now) == now - 5400
    assert parse_time("90S", now) == now - 90
    assert parse_time("now", now) == now
    assert parse_time("2025-11-29T00:00:00Z", now) == now - 86_400
    assert parse_time("2025-11-29T01:00:00+01:00", now) == now - 86_400
    assert parse_time("1764374400", now) == now - 86_400
    assert parse_time("1764374400000000000", now) == now - 86_400
    for bad in ("yesterday", "1y", "-1h", ""):
        with pytest.raises(ValueError, match="like 1h"):
            parse_time(bad, now)


# --- the live view -------------------------------------------------------------------------


class FakeApi:
    """The runs the list endpoint would return at each poll, newest first; records queries."""

    def __init__(self, polls: list[list[dict[str, Any]] | Exception]) -> None:
        self.polls = polls
        self.queries: list[dict[str, str]] = []

    def pages(self, params: Mapping[str, str]) -> Iterator[list[dict[str, Any]]]:
        self.queries.append(dict(params))
        answer = self.polls[min(len(self.queries), len(self.polls)) - 1]
        if isinstance(answer, Exception):
            raise answer
        since_ns = float(params["since"]) * 1e9
        yield [run for run in answer if run["start_ns"] >= since_ns]


def run_tail(
    api: FakeApi, clock: ManualClock, polls: int, **options: Any
) -> list[tuple[str, str, bool]]:
    emitted: list[tuple[str, str, bool]] = []
    tail_runs(
        api.pages,
        lambda run, changed: emitted.append((run["run_id"], run["status"], changed)),
        filters={"status": "error"} if options.pop("errors_only", False) else {},
        since_s=clock() - 300,
        clock=clock,
        sleep=clock.advance,
        stop=lambda: len(api.queries) >= polls,
        **options,
    )
    return emitted


def at(seconds: float, run_id: str, status: str = "ok") -> dict[str, Any]:
    return summary(run_id, start_ns=int((1_764_460_800 + seconds) * 1e9), status=status)


def test_tail_prints_each_run_once_in_start_order_and_again_when_it_turns_out_to_fail() -> None:
    first = [at(-10, "b" * 32), at(-20, "a" * 32, "error")]
    second = [at(1, "c" * 32), *first]
    third = [at(1, "c" * 32, "error"), *first]  # c's failing span arrived late
    api = FakeApi([first, second, third, third])
    clock = ManualClock()
    emitted = run_tail(api, clock, polls=4)
    assert emitted == [
        ("a" * 32, "error", False),
        ("b" * 32, "ok", False),
        ("c" * 32, "ok", False),
        ("c" * 32, "error", True),
    ]
    assert clock() == 1_764_460_800.0 + 3 * 2.0, "slept the interval between polls"
    sinces = [float(q["since"]) for q in api.queries]
    assert sinces[0] == 1_764_460_800.0 - 300
    assert sinces[1:] == [max(sinces[0], 1_764_460_800.0 + 2 * i - 300) for i in range(3)]


def test_tail_forgets_runs_once_they_leave_the_window() -> None:
    old = at(-290, "a" * 32)
    api = FakeApi([[old], [old], [old], [old]])
    emitted = run_tail(api, ManualClock(), polls=4, interval_s=100, lag_s=200)
    assert emitted == [("a" * 32, "ok", False)], "printed once, then out of every window"


def test_tail_retries_a_collector_that_goes_away_and_says_so_once() -> None:
    down = CollectorUnreachable("collector unreachable at http://127.0.0.1:4318")
    run = at(-1, "a" * 32)
    api = FakeApi([[run], down, down, [run, at(5, "b" * 32)]])
    warnings: list[str] = []
    emitted = run_tail(api, ManualClock(), polls=4, warn=warnings.append)
    assert [e[0] for e in emitted] == ["a" * 32, "b" * 32]
    assert warnings == [f"{down}; retrying every 2s", "collector answering again"]


def test_tail_fails_at_once_when_the_first_poll_fails_or_a_filter_is_refused() -> None:
    for error in (CollectorUnreachable("down"), RunsApiError("bad request: x")):
        with pytest.raises(RunsApiError):
            run_tail(FakeApi([error]), ManualClock(), polls=3)
    refused = FakeApi([[at(0, "a" * 32)], RunsApiError("401")])
    with pytest.raises(RunsApiError, match="401"):
        run_tail(refused, ManualClock(), polls=3)


# --- the command, over an in-memory transport ----------------------------------------------


class Api:
    """The read API answering from fixed data, recording each request's query and key."""

    def __init__(self, runs: list[dict[str, Any]], *, status: int = 200, error: str = "") -> None:
        self.runs = runs
        self.status = status
        self.error = error
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.status != 200:
            return httpx.Response(self.status, json={"error": self.error})
        if request.url.path == "/api/v1/runs":
            params = request.url.params
            runs = [r for r in self.runs if r["source_run_id"] == params.get("source_run_id")]
            if "source_run_id" not in params:
                runs = [r for r in self.runs if params.get("kind") in (None, r["kind"])]
            limit = int(params.get("limit", "50"))
            offset = int(params.get("cursor", "0"))
            page = runs[offset : offset + limit]
            more = offset + limit < len(runs)
            return httpx.Response(
                200, json={"runs": page, "next_cursor": str(offset + limit) if more else None}
            )
        run_id = request.url.path.rsplit("/", 1)[1]
        run = next((r for r in self.runs if r["run_id"] == run_id), None)
        if run is None:
            return httpx.Response(404, json={"error": "no such run"})
        return httpx.Response(200, json={"run": run, "spans": incident_spans()})


def command(
    argv: list[str], api: Api | httpx.MockTransport, env: dict[str, str] | None = None, **kw: Any
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    transport = api if isinstance(api, httpx.MockTransport) else httpx.MockTransport(api)
    code = run_command(
        build_parser().parse_args(["runs", *argv]),
        stdout=out,
        stderr=err,
        environ={"AFR_API_KEY": KEY} if env is None else env,
        transport=transport,
        **kw,
    )
    return code, out.getvalue(), err.getvalue()


def test_list_prints_rows_and_json_lines_with_the_filters_sent() -> None:
    api = Api([replay_summary(), summary()])
    code, out, err = command(
        [
            "list",
            "--status",
            "error",
            "--kind",
            "replay",
            "--since",
            "1h",
            "--workflow",
            "refund-desk",
            "--agent",
            "Refund Agent",
            "--source-run",
            SOURCE,
        ],
        api,
    )
    assert (code, err) == (0, "")
    sent = api.requests[0]
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert {k: sent.url.params[k] for k in ("status", "kind", "workflow", "agent")} == {
        "status": "error",
        "kind": "replay",
        "workflow": "refund-desk",
        "agent": "Refund Agent",
    }
    assert sent.url.params["source_run_id"] == SOURCE
    assert float(sent.url.params["since"]) > 1.7e9
    code, out, _ = command(["list"], Api([replay_summary(), summary()]))
    assert out.splitlines()[0].startswith(f"{REPLAY}  FAILURE_FIXED")
    assert "✗ execute_tool refund_order" in out
    assert_fits(out.splitlines())
    code, out, _ = command(["list", "--json"], Api([replay_summary(), summary()]))
    assert [json.loads(line)["run_id"] for line in out.splitlines()] == [REPLAY, SOURCE]


def test_list_pages_with_all_and_says_when_there_are_more() -> None:
    runs = [summary(f"{i:032x}", status="ok", error_count=0) for i in range(5)]
    _, out, err = command(["list", "--limit", "2", "--json"], Api(runs))
    assert len(out.splitlines()) == 2
    assert err == "more runs: --cursor 2 (or --all)\n"
    _, out, err = command(["list", "--limit", "2", "--json", "--all"], Api(runs))
    assert [json.loads(line)["run_id"] for line in out.splitlines()] == [r["run_id"] for r in runs]
    assert err == ""


def test_show_prints_the_run_with_its_replays_and_json_is_the_apis() -> None:
    api = Api([summary(), replay_summary()])
    code, out, err = command(["show", SOURCE], api)
    assert (code, err) == (0, "")
    assert "✗         execute_tool refund_order [tool]" in out
    assert f"{REPLAY}  FAILURE_FIXED  replay" in out
    assert api.requests[1].url.params["source_run_id"] == SOURCE
    code, out, _ = command(["show", SOURCE, "--json"], Api([summary()]))
    assert json.loads(out) == {"run": summary(), "spans": incident_spans()}


@pytest.mark.parametrize(
    ("api", "message"),
    [
        (
            Api([], status=401, error="unauthenticated"),
            "collector answered 401 unauthorized: the key was refused",
        ),
        (
            Api([], status=400, error="kind must be one of capture, replay"),
            "bad request: kind must be one of capture, replay",
        ),
        (Api([], status=503, error="store behind"), "collector answered HTTP 503: store behind"),
        (Api([]), f"no run {SOURCE} in this key's project (404)"),
    ],
)
def test_errors_are_one_line_on_stderr_with_exit_2(api: Api, message: str) -> None:
    code, out, err = command(["show", SOURCE], api)
    assert (code, out) == (2, "")
    assert err.startswith(f"afr runs show: {message}")
    assert err.count("\n") == 1 and err.endswith("\n")
    assert KEY not in err


def test_an_unreachable_collector_is_named_without_the_key() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    code, out, err = command(
        ["list", "--url", f"http://user:{KEY}@127.0.0.1:9"], httpx.MockTransport(refuse)
    )
    assert (code, out) == (2, "")
    assert err.startswith("afr runs list: collector unreachable at http://127.0.0.1:9 ")
    assert len(err.splitlines()) == 1
    assert KEY not in err


def test_a_bad_time_is_refused_before_any_request() -> None:
    api = Api([])
    code, _, err = command(["list", "--since", "last tuesday"], api)
    assert code == 2
    assert err.startswith("afr runs list: --since: expected a time like 1h")
    assert api.requests == []


def test_the_key_comes_from_the_data_dir_when_the_environment_has_none(tmp_path: Path) -> None:
    (tmp_path / "local-project.key").write_text("afr_from_the_file\n")
    api = Api([summary()])
    code, _, _ = command(["list", "--data-dir", str(tmp_path)], api, env={})
    assert code == 0
    assert api.requests[0].headers["authorization"] == "Bearer afr_from_the_file"
    missing = Api([], status=401)
    code, _, err = command(["list", "--data-dir", str(tmp_path / "none")], missing, env={})
    assert "authorization" not in missing.requests[0].headers
    assert "no key was found" in err


def test_the_url_comes_from_the_environment() -> None:
    api = Api([])
    command(["list"], api, env={"AFR_API_URL": "http://collector.internal:9999/"})
    assert str(api.requests[0].url).startswith("http://collector.internal:9999/api/v1/runs?")


def test_tail_exits_0_on_ctrl_c_and_prints_json_lines() -> None:
    clock = ManualClock()
    api = Api([summary(start_ns=int((clock() - 60) * 1e9))])

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    code, out, err = command(["tail", "--json"], api, clock=clock, sleep=interrupt)
    assert (code, err) == (0, "")
    assert [json.loads(line)["run_id"] for line in out.splitlines()] == [SOURCE]
    assert float(api.requests[0].url.params["since"]) == clock() - 300, "--since 5m by default"


def test_force_color_colours_the_output_of_a_pipe() -> None:
    _, out, _ = command(["list"], Api([summary()]), env={"AFR_API_KEY": KEY, "FORCE_COLOR": "1"})
    assert "\x1b[31m" in out
    _, out, _ = command(["list"], Api([summary()]))
    assert "\x1b" not in out


@pytest.mark.parametrize("url", ["collector:4318", "ftp://host", "http://[::1", f"{KEY}@"])
def test_a_url_that_is_not_http_is_refused_without_quoting_it(url: str) -> None:
    api = Api([])
    code, out, err = command(["list", "--url", url], api)
    assert (code, out, api.requests) == (2, "", [])
    assert err == "afr runs list: the collector URL is not an http(s) URL (--url, AFR_API_URL)\n"
