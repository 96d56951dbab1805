"""The cost ledger over the real state store, on each engine (``state_at``: SQLite and
PostgreSQL): worst case reserved before a request, real cost charged after (overruns included
and recorded), budgets refused before anything is sent, one day's budget shared by every
ledger on the store, UTC days from an injected clock."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from replay_worker.ledger import BudgetExceeded, DayBudget, JobLedger
from replay_worker.settings import DEFAULT_PRICES_PER_MTOK
from replay_worker.state import StateStore
from tests.fakes import ManualClock

BEFORE_MIDNIGHT = dt.datetime(2025, 11, 30, 23, 59, 59, tzinfo=dt.UTC).timestamp()


def ledger(
    state_at: Path | str,
    limit: float = 1.0,
    day: float = 10.0,
    clock: ManualClock | None = None,
) -> JobLedger:
    budget = DayBudget(StateStore(state_at), day, clock or ManualClock())
    return JobLedger(limit, budget, dict(DEFAULT_PRICES_PER_MTOK))


def test_reserve_worst_case_then_settle_to_usage(state_at: Path | str) -> None:
    book = ledger(state_at)
    reservation = book.reserve("gpt-4.1-mini", 10_000, 2_000)
    assert reservation.cost_usd == pytest.approx((10_000 * 0.40 + 2_000 * 1.60) / 1e6)
    assert book.day.spend().spent_usd == pytest.approx(reservation.cost_usd), (
        "counted in full while in flight"
    )
    charged = book.settle(reservation, 1_000, 100)
    assert charged == pytest.approx((1_000 * 0.40 + 100 * 1.60) / 1e6)
    assert book.in_flight_usd == 0
    assert book.cost_usd == pytest.approx(charged)
    assert book.overrun_usd == 0
    assert book.day.spend().spent_usd == pytest.approx(charged)


def test_unknown_outcome_is_charged_the_full_reservation(state_at: Path | str) -> None:
    book = ledger(state_at)
    reservation = book.reserve("some-new-model", 1_000, 1_000)
    assert reservation.cost_usd == pytest.approx((1_000 * 10 + 1_000 * 40) / 1e6), (
        "unknown models priced conservatively"
    )
    book.settle(reservation, None, None)
    assert book.cost_usd == pytest.approx(reservation.cost_usd)
    assert book.day.spend().spent_usd == pytest.approx(reservation.cost_usd)


def test_usage_beyond_the_reservation_is_charged_in_full_and_recorded(state_at: Path | str) -> None:
    book = ledger(state_at)
    reservation = book.reserve("gpt-4.1", 100, 10)  # $0.00028
    charged = book.settle(reservation, 100, 1_000)  # the model ignored max_tokens: $0.0082
    assert charged == pytest.approx((100 * 2 + 1_000 * 8) / 1e6)
    assert book.cost_usd == pytest.approx(charged), "never capped at the reservation"
    assert book.overrun_usd == pytest.approx(charged - reservation.cost_usd)
    spend = book.day.spend()
    assert spend.spent_usd == pytest.approx(charged)
    assert spend.overrun_usd == pytest.approx(book.overrun_usd)


def test_budgets_refuse_before_the_request(state_at: Path | str) -> None:
    book = ledger(state_at, limit=0.001)
    with pytest.raises(BudgetExceeded, match="job budget"):
        book.reserve("gpt-4.1", 1_000_000, 0)
    assert book.requests == 0
    assert book.day.spend().requests == 0


def test_ledgers_on_one_store_file_share_the_day_budget(state_at: Path | str) -> None:
    clock = ManualClock()
    first = ledger(state_at, day=0.002, clock=clock)
    second = ledger(state_at, day=0.002, clock=clock)  # its own connection: another process
    first.settle(first.reserve("gpt-4.1", 1_000, 0), None, None)
    with pytest.raises(BudgetExceeded, match="day budget"):
        second.reserve("gpt-4.1", 1_000, 0)


def test_an_overrun_counts_against_the_rest_of_the_day(state_at: Path | str) -> None:
    book = ledger(state_at, day=0.01)
    book.settle(book.reserve("gpt-4.1", 100, 10), 100, 1_200)  # $0.0098 spent
    with pytest.raises(BudgetExceeded, match="day budget"):
        book.reserve("gpt-4.1", 100, 10)


def test_a_request_is_charged_to_the_day_it_was_reserved_across_utc_midnight(
    state_at: Path | str,
) -> None:
    clock = ManualClock(BEFORE_MIDNIGHT)
    book = ledger(state_at, day=0.005, clock=clock)
    late = book.reserve("gpt-4.1", 1_000, 250)  # $0.004 reserved on the 30th
    clock.advance(2)  # the answer comes on the 1st
    book.settle(late, 1_000, 100)
    assert book.day.spend("2025-11-30").spent_usd == pytest.approx(0.0028)
    assert book.day.spend("2025-12-01").spent_usd == 0
    fresh = book.reserve("gpt-4.1", 1_000, 250)  # would not fit the 30th's budget any more
    assert fresh.day == "2025-12-01"
    assert book.day.spend().spent_usd == pytest.approx(0.004)


# The price database's figures (genai-prices 0.2.3), USD per million tokens, as published:
# gpt-4.1-mini 0.40 in, 0.10 cached in, 1.60 out; claude-sonnet-4 3 in, 0.30 cache read,
# 3.75 cache write, 15 out.
@pytest.mark.parametrize(
    ("model", "usage", "expected"),
    [
        # 10k input of which 8k cached, 2k output of which 1.5k reasoning (at the output rate)
        (
            "gpt-4.1-mini",
            (10_000, 2_000, 8_000, 0, 1_500),
            2_000 * 0.40 + 8_000 * 0.10 + 2_000 * 1.60,
        ),
        # Anthropic: 6k read, 2k written of 10k
        (
            "claude-sonnet-4-20250514",
            (10_000, 500, 6_000, 2_000, 0),
            2_000 * 3 + 6_000 * 0.30 + 2_000 * 3.75 + 500 * 15,
        ),
        # a model only the override table knows, with its own cache rate
        ("house-model", (1_000, 100, 600, 0, 0), 400 * 2 + 600 * 0.5 + 100 * 8),
        # a model nobody knows: the conservative "*" rates, whatever the kind
        ("some-new-model", (1_000, 100, 600, 0, 50), 1_000 * 10 + 100 * 40),
    ],
    ids=["database-cached-reasoning", "database-cache-write", "override", "unlisted"],
)
def test_settled_usage_is_priced_per_token_kind_at_the_database_rates(
    state_at: Path | str, model: str, usage: tuple[int, ...], expected: float
) -> None:
    budget = DayBudget(StateStore(state_at), 10.0, ManualClock())
    book = JobLedger(1.0, budget, {**DEFAULT_PRICES_PER_MTOK, "house-model": [2, 8, 0.5, 2]})
    input_tokens, output_tokens, cache_read, cache_write, reasoning = usage
    charged = book.settle(
        book.reserve(model, input_tokens, output_tokens),
        input_tokens,
        output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        reasoning_tokens=reasoning,
    )
    assert charged == pytest.approx(expected / 1e6)
    assert book.day.spend().spent_usd == pytest.approx(expected / 1e6)


def test_the_reservation_takes_the_dearest_rate_of_each_kind(state_at: Path | str) -> None:
    # A prompt may turn out to be written to the cache, which costs more than plain input.
    reservation = ledger(state_at).reserve("claude-sonnet-4-20250514", 10_000, 1_000)
    assert reservation.cost_usd == pytest.approx((10_000 * 3.75 + 1_000 * 15) / 1e6)
