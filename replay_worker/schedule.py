"""Sweep schedules and their slots: pure, no I/O, no clock of their own.

A schedule is a five-field cron expression (Debian cron semantics, including its handling
of DST changes, through ``cronsim``) read in a time zone: ``AFR_SWEEP_TZ``, or a
``CRON_TZ=<zone> `` prefix of the expression, else UTC. Each instant it names is a *slot*,
and a slot's sweep id is derived from it (``replay_worker/scheduler.py`` says how and why).
The settings parse the schedule at start-up, so this sits below them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

__all__ = ["Schedule", "Slot", "manual_slot", "parse_schedule", "utc_label"]


@dataclass(frozen=True)
class Slot:
    """A sweep slot: its derived id and its label (the instant in UTC for a slot of the
    schedule, the given label for a manual one)."""

    sweep_id: str
    label: str
    at: datetime | None = None
    """The scheduled instant (UTC); None for a manual slot."""


def utc_label(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _digest(text: str) -> str:
    return "sweep_" + hashlib.sha256(text.encode()).hexdigest()[:16]


def manual_slot(label: str) -> Slot:
    return Slot(_digest(f"manual|{label}"), label)


class Schedule:
    """A parsed cron expression in its time zone (``parse_schedule`` builds one)."""

    def __init__(self, cron: str, zone: ZoneInfo) -> None:
        self.cron = cron
        self.zone = zone

    def __repr__(self) -> str:
        return f"Schedule({self.cron!r}, {self.zone.key!r})"

    def slot(self, at: datetime) -> Slot:
        label = utc_label(at)
        return Slot(_digest(f"{self.cron}|{label}"), label, at.astimezone(UTC))

    def latest(self, now: datetime) -> datetime:
        """The latest instant of the schedule at or before ``now`` (UTC)."""
        start = now.astimezone(self.zone).replace(microsecond=0) + timedelta(seconds=1)
        return next(CronSim(self.cron, start, reverse=True)).astimezone(UTC)

    def next(self, now: datetime) -> datetime:
        """The first instant of the schedule after ``now`` (UTC)."""
        return next(CronSim(self.cron, now.astimezone(self.zone))).astimezone(UTC)

    def due(self, now: datetime, catchup_s: float) -> Slot | None:
        """The slot to run at ``now``: the latest one, unless it is more than ``catchup_s``
        old (missed while no worker ran, for too long: the next one is the one to run)."""
        latest = self.latest(now)
        if (now - latest).total_seconds() > catchup_s:
            return None
        return self.slot(latest)

    def is_instant(self, moment: datetime) -> bool:
        return moment.second == 0 and moment.microsecond == 0 and self.latest(moment) == moment

    def resolve(self, label: str) -> Slot:
        """A slot named by a person: an ISO 8601 instant of this schedule (with its offset,
        or ``Z``) is that scheduled slot; any other label is a manual slot of its own."""
        try:
            moment = datetime.fromisoformat(label)
        except ValueError:
            return manual_slot(label)
        try:
            if moment.tzinfo is not None and self.is_instant(moment.astimezone(UTC)):
                return self.slot(moment)
        except OverflowError:  # at the edge of what a datetime holds: no instant of ours
            pass
        return manual_slot(label)


def parse_schedule(expression: str, zone: str | None = None) -> Schedule:
    """``expression``: five cron fields, optionally after ``CRON_TZ=<zone>``; ``zone``: an
    IANA name. Raises ValueError saying what is wrong."""
    fields = expression.split()
    expression_zone: str | None = None
    if fields and fields[0].startswith(("CRON_TZ=", "TZ=")):
        expression_zone = fields.pop(0).split("=", 1)[1]
    if expression_zone and zone and expression_zone != zone:
        raise ValueError(
            f"the sweep cron expression says CRON_TZ={expression_zone} but AFR_SWEEP_TZ is {zone}"
        )
    name = expression_zone or zone or "UTC"
    try:
        tz = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} for sweeps") from None
    cron = " ".join(fields)
    try:
        next(CronSim(cron, datetime(2000, 1, 1, tzinfo=tz)))
    except CronSimError as exc:
        raise ValueError(f"bad sweep cron expression {expression!r}: {exc}") from None
    except StopIteration:
        raise ValueError(f"the sweep cron expression {expression!r} never fires") from None
    return Schedule(cron, tz)
