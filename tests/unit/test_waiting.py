"""tests/waiting.py's wait_until on a clock the test moves: nothing here sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tests.fakes import ManualClock
from tests.waiting import wait_until, wait_until_async


def _answers(*values: object) -> Callable[[], object]:
    """A predicate answering ``values`` in turn (an exception instance is raised)."""
    pending = list(values)

    def predicate() -> object:
        value = pending.pop(0)
        if isinstance(value, Exception):
            raise value
        return value

    return predicate


def test_returns_the_first_truthy_answer_polling_every_interval() -> None:
    clock = ManualClock(0.0)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    found = wait_until(
        _answers(None, [], {"state": "finished"}),
        timeout_s=10,
        what="the sweep",
        interval_s=0.5,
        clock=clock,
        sleep=sleep,
    )
    assert found == {"state": "finished"}
    assert slept == [0.5, 0.5]


def test_an_answer_at_once_does_not_wait() -> None:
    clock = ManualClock(0.0)
    assert wait_until(lambda: True, timeout_s=0, what="x", clock=clock, sleep=clock.advance)
    assert clock.now == 0.0


def test_times_out_naming_what_was_awaited() -> None:
    clock = ManualClock(0.0)
    calls: list[float] = []

    def finished() -> bool:
        calls.append(clock.now)
        return False

    with pytest.raises(AssertionError) as raised:
        wait_until(
            finished,
            timeout_s=2,
            what="job j1 to finish",
            interval_s=0.5,
            clock=clock,
            sleep=clock.advance,
        )
    assert str(raised.value) == "timed out after 2 s waiting for job j1 to finish"
    assert calls == [0.0, 0.5, 1.0, 1.5, 2.0], "tried once more at the deadline, then gave up"


class _Unfinished(dict[str, str]):
    """A falsy answer that has something to show: a job's state while it runs."""

    def __bool__(self) -> bool:
        return False


def test_the_last_falsy_answer_is_in_the_message() -> None:
    clock = ManualClock(0.0)
    with pytest.raises(AssertionError, match=r"the job \(last: \{'state': 'running'\}\)$"):
        wait_until(
            lambda: _Unfinished(state="running"),
            timeout_s=1,
            what="the job",
            clock=clock,
            sleep=clock.advance,
        )


def test_ignored_exceptions_mean_not_yet_and_the_last_is_the_cause() -> None:
    clock = ManualClock(0.0)
    refused = ConnectionRefusedError("still starting")
    assert (
        wait_until(
            _answers(ConnectionRefusedError("starting"), "up"),
            timeout_s=5,
            what="the server",
            ignoring=(ConnectionError,),
            clock=clock,
            sleep=clock.advance,
        )
        == "up"
    )
    with pytest.raises(AssertionError, match="waiting for the server") as raised:
        wait_until(
            _answers(refused, refused, refused),
            timeout_s=0.1,
            what="the server",
            ignoring=(ConnectionError,),
            clock=clock,
            sleep=clock.advance,
        )
    assert raised.value.__cause__ is refused


def test_other_exceptions_propagate_at_once() -> None:
    clock = ManualClock(0.0)
    with pytest.raises(KeyError):
        wait_until(
            _answers(None, KeyError("bug"), "never reached"),
            timeout_s=60,
            what="x",
            ignoring=(ConnectionError,),
            clock=clock,
            sleep=clock.advance,
        )
    assert clock.now == 0.05, "one interval slept, then the error"


def test_the_async_twin_lets_the_loop_run_between_polls_and_names_what_timed_out() -> None:
    clock = ManualClock(0.0)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)
        await asyncio.sleep(0)

    async def scenario() -> tuple[object, str]:
        started: list[int] = []
        loop = asyncio.get_running_loop()
        loop.call_soon(started.append, 4242)  # what the awaited code does meanwhile
        pid = await wait_until_async(
            lambda: started[0] if started else None,
            timeout_s=5, what="the pid", interval_s=1, clock=clock, sleep=sleep,
        )  # fmt: skip
        with pytest.raises(AssertionError) as raised:
            await wait_until_async(
                lambda: None, timeout_s=2, what="a job that never starts", clock=clock, sleep=sleep
            )
        return pid, str(raised.value)

    pid, message = asyncio.run(scenario())
    assert pid == 4242
    assert message == "timed out after 2 s waiting for a job that never starts"
    assert slept[0] == 1  # the first poll found nothing: the loop ran during the sleep
