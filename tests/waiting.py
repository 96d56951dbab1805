"""Waiting in tests for what another process does: one helper, its clock injected.

A test that waits for a server to start, a job to finish or a process to exit polls a
condition until it holds or a timeout passes. Written once here, with the clock and the
sleep as parameters, so its own test (tests/unit/test_waiting.py) drives it by hand and
never sleeps, and every timeout says what it was waiting for. Waiting for a thread of the
test's own process is better done on a ``threading.Event`` it sets: no polling at all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

_SHOWN_CHARS = 300  # of the last answer in a timeout's message: enough to see its state


def wait_until(
    predicate: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.05,
    ignoring: tuple[type[Exception], ...] = (),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Calls ``predicate`` every ``interval_s`` until it returns something truthy, and
    returns that. After ``timeout_s`` it is called once more, then an AssertionError names
    ``what`` was awaited and the last falsy answer. Exceptions of the ``ignoring`` types
    count as "not yet" (a server still starting refuses connections); the last one is the
    AssertionError's cause. Any other exception propagates at once."""
    deadline = clock() + timeout_s
    last_error: Exception | None = None
    answer: T | None = None
    while True:
        try:
            answer = predicate()
        except ignoring as error:
            last_error = error
        else:
            if answer:
                return answer
        if clock() >= deadline:
            message = f"timed out after {timeout_s:g} s waiting for {what}"
            if answer is not None and answer is not False:
                message += f" (last: {answer!r:.{_SHOWN_CHARS}})"
            raise AssertionError(message) from last_error
        sleep(interval_s)


async def wait_until_async(
    predicate: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """``wait_until`` inside an event loop: the loop runs (the code awaited on progresses)
    between two calls of ``predicate``."""
    deadline = clock() + timeout_s
    while True:
        answer = predicate()
        if answer:
            return answer
        if clock() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        await sleep(interval_s)
