"""The fault testbed (issue 12): load with exact accounting against a real collector process
under faults, and a validator that diffs the store against what was acknowledged.

- ``traces``: deterministic agent-like spans; every id maps back to the content it carries.
- ``hostile``: inputs the collector must refuse or bound without hurting good traffic.
- ``loadgen``: concurrent OTLP senders (gRPC, HTTP protobuf, HTTP JSON) and their ledger.
- ``collector``: collector processes under control (start, SIGKILL, SIGTERM, RSS, faults).
- ``faulty_collector``: ``python -m testbed.faulty_collector``, ``afr up`` with a store whose
  faults a control file drives.
- ``validator``: reads the store after the collector stopped and diffs it field by field.
- ``scenarios``: each scenario at a given scale, returning a report and checking invariants.
"""

from __future__ import annotations

from testbed.scenarios import FULL, SCENARIOS, SMALL, Report, Scale

__all__ = ["FULL", "SCENARIOS", "SMALL", "Report", "Scale"]
