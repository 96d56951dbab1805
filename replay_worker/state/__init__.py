"""The worker's small state (docs/architecture.md, decision 11): jobs, webhook-id deduplication, the
day's spend and sweep slots. By default one SQLite file under the worker's data directory,
for one machine; with ``AFR_WORKER_STATE_URL``, a PostgreSQL database that worker replicas on
several hosts share (ADR 12; the engines are in ``state_engines.py``). One module per
concern: ``jobs.py``, ``spend.py``, ``sweeps.py``, over the one claim-with-a-lease helper
(``lease.py``) and the one transaction helper (``base.py``); ``store.py`` puts them together
as ``StateStore``.

Every worker process that opens the same state shares it: the HTTP processes that accept
hooks, and the replay processes that reserve and settle model costs. Each check-and-write is
one transaction the engine makes atomic across processes and hosts (SQLite: ``BEGIN
IMMEDIATE``; PostgreSQL: ``SERIALIZABLE``, run again after a serialization failure), so "is
this webhook id new?", "does this request fit the day's budget?" and "is this job or slot
free?" each have one answer. The SQLite file must be on a local disk (WAL needs shared
memory).

Money is stored as integer nano-dollars, so sums of many small charges stay exact.

A job is claimed with a lease its worker renews while the replay runs. A worker that dies
leaves its jobs ``running`` with a lease that runs out; whoever claims next re-queues them
(a worker on the same host does it at start, when it sees the owner's pid is gone). A job
runs at most ``MAX_ATTEMPTS`` times; after that it fails with the reason.

Sweep slots live here too: a sweep is claimed the same way (one owner, a renewed lease, a
dead owner's sweep resumed by the next), records each eval's outcome as it finishes, and is
marked finished once; a finished slot never runs again (ADR 16).
"""

from replay_worker.money import Clock, nusd, usd, utc_day
from replay_worker.state.jobs import FINISHED, MAX_ATTEMPTS, Job, JobState
from replay_worker.state.lease import Owner, pid_alive
from replay_worker.state.spend import DaySpend
from replay_worker.state.store import StateStore, open_state_store
from replay_worker.state.sweeps import (
    SWEEP_MAX_ATTEMPTS,
    ShardMismatch,
    ShardRecord,
    Sweep,
    SweepResult,
    SweepState,
)
from replay_worker.state_engines import StateSchemaTooNew, StateStoreUnavailable

__all__ = [
    "FINISHED",
    "MAX_ATTEMPTS",
    "SWEEP_MAX_ATTEMPTS",
    "Clock",
    "DaySpend",
    "Job",
    "JobState",
    "Owner",
    "ShardMismatch",
    "ShardRecord",
    "StateSchemaTooNew",
    "StateStore",
    "StateStoreUnavailable",
    "Sweep",
    "SweepResult",
    "SweepState",
    "nusd",
    "open_state_store",
    "pid_alive",
    "usd",
    "utc_day",
]
