"""``afr replay bisect RUN``: find the step where a run's failure was decided.

It takes a replay's change options (``--model``, ``--stub``, the fork overrides) and
bisects the run's model calls: a probe forks the run at ``llm:k`` with the change, the model
live from there on, and the answer is the latest step from which going live with the change
still reaches FAILURE_FIXED (the algorithm, its assumption and what stops it:
``replay_worker/replay/bisect.py``, docs/adr/0038-bisect.md).

Every probe is a replay job of the worker, posted to its signed hook exactly as
``afr replay --from`` posts one: a replay run linked to its source, with its verdict, its
cost in the worker's ledger and against its day budget. Before it asks for any replay the
command reads the run from the collector's read API (``--url``/``AFR_API_URL``, the key in
``AFR_API_KEY`` or the local project's) and plans the fork at every step, so an unknown run,
a run that did not fail or made no model call, or a change no step can take is refused with
the reason, and no replay is made.

The parser is ``afr replay bisect`` (``afr.cli`` hands ``replay bisect`` to it: ``afr replay``
itself takes the run id as its first argument).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from afr.commands.common import add_data_dir_flag

if TYPE_CHECKING:
    from replay_worker.replay.bisect import Bisection, Votes
    from replay_worker.replay.fixture import Fixture

__all__ = ["COMMAND", "add_bisect_parser", "bisect_argv"]

COMMAND = "replay bisect"
"""The subcommand's name as the parser holds it: ``afr replay bisect`` arrives as two
arguments, and ``bisect_argv`` joins them."""
_PROG = "afr replay bisect"


def bisect_argv(argv: list[str]) -> list[str]:
    """``argv`` with ``replay bisect`` as the one subcommand it is to the parser."""
    if argv[:2] == ["replay", "bisect"]:
        return [COMMAND, *argv[2:]]
    return argv


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_bisect_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``afr replay bisect``."""
    bisect = commands.add_parser(
        COMMAND,
        prog=_PROG,
        help="find the step where a run's failure was decided: bisect its model calls",
        description="Forks the run at model calls chosen by bisection, with the change the"
        " options give applied and the model live from the step on, and reports the latest"
        " step from which the run still reaches FAILURE_FIXED. Assumes that a run fixed from a"
        " step is fixed from every earlier one. Each probe is a replay job of the worker (a"
        " replay run linked to the source, charged to its ledger). Exit status 0 when"
        " decided, 1 when a budget or an undecided probe stopped it, 2 on bad input.",
    )
    bisect.add_argument("run_id")
    bisect.add_argument("--worker", default="http://127.0.0.1:8787")
    bisect.add_argument(
        "--url",
        help="the collector's read API, to plan the probes (default AFR_API_URL or ...:4318)",
    )
    bisect.add_argument("--model", help="model to replay against (default: the run's)")
    bisect.add_argument(
        "--stub", action="append", default=[], help="tool=output: replay_stub_output for a tool"
    )
    bisect.add_argument(
        "--policy",
        choices=("exact", "strict", "lenient"),
        default=None,
        help="how calls are matched to captured ones (lenient: approximate verdict)",
    )
    change = bisect.add_argument_group(
        "change", "what every probe changes, as `afr replay --from` takes it (at each probe's step)"
    )
    change.add_argument(
        "--output", action="append", default=[], metavar="CALL_ID=TEXT", help="the call's output"
    )
    change.add_argument(
        "--error",
        action="append",
        default=[],
        metavar="CALL_ID=TEXT",
        help="the call fails, the model is shown TEXT",
    )
    change.add_argument(
        "--arguments",
        action="append",
        default=[],
        metavar="CALL_ID=JSON",
        help="the call's arguments (only a fork at that call takes them: refused here)",
    )
    change.add_argument("--instructions", action="append", default=[], metavar="AGENT=TEXT")
    change.add_argument("--agent-model", action="append", default=[], metavar="AGENT=MODEL")
    change.add_argument(
        "--agent-settings",
        action="append",
        default=[],
        metavar="AGENT=JSON",
        help="model settings over the agent's, e.g. '{\"temperature\": 0}'",
    )
    change.add_argument(
        "--guardrail",
        action="append",
        default=[],
        metavar="NAME=true|false",
        help="an input guardrail's outcome (only llm:1 takes it)",
    )
    change.add_argument("--input", metavar="TEXT", help="the run's user input")
    budget = bisect.add_argument_group("budget", "what a bisection may spend")
    budget.add_argument(
        "--repeats",
        type=_positive,
        default=1,
        metavar="R",
        help="replays per probe, decided by majority (default 1)",
    )
    budget.add_argument(
        "--max-replays",
        type=_positive,
        default=None,
        metavar="N",
        help="replays in all; the report says what it could not decide (default: no limit"
        " but the worker's day budget)",
    )
    bisect.add_argument(
        "--timeout-s", type=float, default=300, help="how long to wait for each replay"
    )
    bisect.add_argument("--json", action="store_true", help="the report as JSON")
    add_data_dir_flag(bisect)
    bisect.set_defaults(func=_bisect)


class _Refused(Exception):
    """Bad input: the message says what, and no replay was made (exit status 2)."""


def _fixture(args: argparse.Namespace) -> Fixture:
    from afr.runs.cli import resolve_key
    from afr.runs.client import API_URL_ENV, DEFAULT_API_URL, RunsApiError, RunsClient
    from replay_worker.replay.fixture import FixtureError, build_fixture

    url = args.url or os.environ.get(API_URL_ENV) or DEFAULT_API_URL
    try:
        with RunsClient(url, resolve_key(args, os.environ)) as client:
            run = client.get_run(args.run_id)
    except RunsApiError as exc:
        raise _Refused(str(exc)) from None
    try:
        return build_fixture(run)
    except FixtureError as exc:
        raise _Refused(f"run {args.run_id} cannot be replayed: {exc}") from None


def _steps(fixture: Fixture, overrides: list[dict[str, Any]]) -> tuple[int, str | None]:
    """How many steps (``llm:1..``) take the change, and why the next does not (None: every
    model call of the run does)."""
    from pydantic import ValidationError

    from replay_worker.hooks.models import Fork, problem
    from replay_worker.replay.fork import ForkError, plan_fork

    run = fixture.source_run_id
    calls = fixture.model_calls
    if calls is None:
        raise _Refused(
            f"run {run}: its fixture ({fixture.version}) records no model calls to bisect"
        )
    if not calls:
        raise _Refused(f"run {run} made no model call: there is no step to bisect")
    if not fixture.source_failed:
        raise _Refused(
            f"run {run} did not fail (status {fixture.source_status}): bisect looks for the"
            " step where a failure was decided"
        )
    for step in range(1, len(calls) + 1):
        try:
            fork = Fork.model_validate({"step": f"llm:{step}", "overrides": overrides})
        except ValidationError as exc:
            raise _Refused(f"bad change: {problem(exc)}") from None
        try:
            plan_fork(fixture, fork)
        except ForkError as exc:
            if step == 1:
                raise _Refused(f"no step of run {run} takes this change: {exc}") from None
            return step - 1, str(exc)
    return len(calls), None


class _Prober:
    """Probes through the worker: its hook, its jobs, its health for the day budget."""

    def __init__(
        self, args: argparse.Namespace, secret: str, overrides: list[dict[str, Any]]
    ) -> None:
        self.args = args
        self.secret = secret
        self.overrides = overrides
        self.stubs = dict(item.split("=", 1) for item in args.stub)

    def _day_budget_spent(self) -> str | None:
        import httpx

        try:
            health = httpx.get(self.args.worker.rstrip("/") + "/healthz", timeout=10).json()
        except (httpx.HTTPError, ValueError):
            return None  # the hook below says what is wrong with the worker
        budget, spent = health.get("day_budget_usd"), health.get("day_spent_usd")
        if isinstance(budget, int | float) and isinstance(spent, int | float) and spent >= budget:
            return f"the worker's day budget is spent (${spent:.4f} of ${budget:.2f})"
        return None

    def __call__(self, step: int, repeats: int) -> Votes:
        from replay_worker.replay.bisect import Votes, vote_of
        from replay_worker.trigger import request_replay, wait_for_job

        spent = self._day_budget_spent()
        if spent is not None:
            return Votes((), stopped=spent)
        fork = {"step": f"llm:{step}", "overrides": self.overrides}
        job_ids: list[str] = []
        stopped: str | None = None
        for _ in range(repeats):  # all at once: the worker runs them side by side
            try:
                accepted = request_replay(
                    self.args.worker,
                    self.secret,
                    self.args.run_id,
                    model=self.args.model,
                    stubs=self.stubs,
                    policy=self.args.policy,
                    fork=fork,
                )
            except Exception as exc:
                stopped = f"the worker did not take the probe at llm:{step}: {exc}"
                break
            job_ids.append(str(accepted["job_id"]))
        votes = []
        for job_id in job_ids:
            job = wait_for_job(self.args.worker, job_id, self.args.timeout_s)
            result, error = job.get("result") or {}, job.get("error") or {}
            if job["state"] == "succeeded":
                verdict = str(result["verdict"])
                votes.append(
                    vote_of(
                        verdict,
                        replay_run_id=result.get("replay_run_id"),
                        job_id=job_id,
                        detail=result.get("reason") if verdict == "INCONCLUSIVE" else None,
                    )
                )
                continue
            if job["state"] == "failed":
                detail = str(error.get("reason") or "the job failed")
                if error.get("status") == 402:  # the ledger refused: no more replays today
                    stopped = f"the worker's budget stopped a replay: {detail}"
            else:
                detail = f"not finished after {self.args.timeout_s:g} s (job {job['state']})"
            votes.append(vote_of(None, job_id=job_id, detail=detail))
        return Votes(tuple(votes), stopped=stopped)


def _describe(fixture: Fixture, step: int) -> str:
    """What the source's model call at ``step`` did: its agent and what it answered."""
    calls = fixture.model_calls or []
    call = calls[step - 1]
    items = call.output or []
    names = [str(i.get("name")) for i in items if i.get("type") == "function_call"]
    said = ", ".join(names) if names else ("a message" if items else "no captured output")
    return f"{call.agent or 'an agent'}: {said}"


def _report_json(
    args: argparse.Namespace,
    fixture: Fixture,
    overrides: list[dict[str, Any]],
    limit: str | None,
    result: Bisection,
) -> dict[str, Any]:
    deciding = result.deciding_step
    return {
        "run_id": fixture.source_run_id,
        "model_calls": len(fixture.model_calls or []),
        "change": {
            "model": args.model,
            "stubs": dict(item.split("=", 1) for item in args.stub),
            "policy": args.policy,
            "overrides": overrides,
        },
        "steps_limit": limit,
        "deciding_call": None if deciding is None else _describe(fixture, deciding),
        **result.to_json(),
    }


def _report_text(report: dict[str, Any], result: Bisection) -> str:
    run, n = report["run_id"], result.steps
    lines = [
        f"afr replay bisect {run}: {n} step(s) llm:1..llm:{n}, {result.repeats} replay(s) a probe"
    ]
    if report["steps_limit"]:
        lines.append(f"  steps after llm:{n} cannot take the change: {report['steps_limit']}")
    for probe in result.probes:
        verdicts = ", ".join(
            f"{v.verdict or 'no verdict'}" + (f" ({v.detail})" if v.detail else "")
            for v in probe.votes
        )
        runs = " ".join(v.replay_run_id for v in probe.votes if v.replay_run_id)
        lines.append(
            f"  llm:{probe.step:<4} {probe.decision.replace('_', ' '):<10}"
            f" {probe.agreed}/{probe.repeats} agreed  {verdicts}"
            + (f"  runs {runs}" if runs else "")
        )
    if result.status == "found":
        step = result.fixed_through
        after = (
            f"from llm:{step + 1} on it is not"
            if step < n
            else "it is fixed even from the last model call"
        )
        lines.append(
            f"decided at llm:{step} ({report['deciding_call']}): live from llm:{step} with the"
            f" change the run reaches FAILURE_FIXED, {after}"
        )
    elif result.status == "never_fixed":
        lines.append("never fixed: not even live from llm:1 does the change reach FAILURE_FIXED")
    else:
        first, last = result.undecided_range or (1, n)
        known = []
        if result.fixed_through:
            known.append(f"fixed from llm:{result.fixed_through}")
        if result.failing_from <= n:
            known.append(f"not fixed from llm:{result.failing_from}")
        lines.append(
            f"undecided: llm:{first}..llm:{last} not decided"
            + (f" ({', '.join(known)})" if known else "")
            + f"; stopped: {result.stopped}"
        )
    lines.append(
        f"{len(result.probes)} probe(s), {result.replays} replay(s) (at most"
        f" {report['probe_bound']} probes for {n} steps); each a replay run linked to the"
        f" source: afr runs list --source-run {run}"
    )
    split = report["split_probes"]
    contradictions = report["contradictions"]
    lines.append(
        "assumed: fixed from a step means fixed from every earlier one; "
        + (
            "contradicted: "
            + ", ".join(f"{c['not_fixed']} not fixed, {c['fixed']} fixed" for c in contradictions)
            if contradictions
            else "no contradiction observed"
        )
        + (f"; the replays of {', '.join(split)} disagreed" if split else "")
    )
    return "\n".join(lines)


def _bisect(args: argparse.Namespace) -> int:
    from afr.commands.replay import fork_overrides, hook_secret
    from replay_worker.replay.bisect import bisect_failure

    try:
        overrides = fork_overrides(args)
        if args.arguments:
            raise _Refused(
                "--arguments: a tool call's arguments are overridden only by a fork at that"
                " call (`afr replay RUN --from CALL_ID --arguments ...`); bisect moves the step"
            )
        for item in args.stub:
            if "=" not in item or not item.partition("=")[0]:
                raise _Refused(f"--stub takes TOOL=OUTPUT, not {item!r}")
        secret = hook_secret(args.data_dir)
        fixture = _fixture(args)
        steps, limit = _steps(fixture, overrides)
    except (ValueError, _Refused) as exc:
        print(f"{_PROG}: {exc}", file=sys.stderr)
        return 2
    result = bisect_failure(
        steps,
        _Prober(args, secret, overrides),
        repeats=args.repeats,
        max_replays=args.max_replays,
    )
    report = _report_json(args, fixture, overrides, limit, result)
    print(json.dumps(report, indent=2) if args.json else _report_text(report, result))
    return 0 if result.status != "undecided" else 1
