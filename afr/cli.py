"""The ``afr`` command: the composition root that wires the parts for one machine."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]


@contextlib.contextmanager
def _loading_the_sdk() -> Iterator[None]:
    """Around a command's imports of the Agents SDK (openai, mcp, pydantic models: ~200,000
    objects that live as long as the process). The cyclic GC is paused while they load and
    what they built is then moved to the permanent generation (``gc.freeze``), so no
    collection walks them again: neither the dozens during the imports nor the full ones
    after, the last of them at exit. Measured on 2 cores: a process that imports the SDK
    this way takes ~0.6x the time (2.3 -> 1.5 s on a quiet machine). The few thousand
    cycles the imports leave as garbage stay (a few hundred KB). Once the SDK is loaded (a
    test calling ``main``) it does nothing."""
    if "agents" in sys.modules:
        yield
        return
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _seed(args: argparse.Namespace) -> int:
    from agents import gen_trace_id

    import afr_exporter
    from afr.incident import RefundDesk, build_model, failing_script, run_incident
    from afr.scripted_model import ScriptedModelServer

    settings: dict[str, Any] = {}
    if args.endpoint:
        settings["endpoint"] = args.endpoint
    if args.protocol:
        settings["protocol"] = args.protocol
    processor = afr_exporter.install(**settings)
    desk = RefundDesk()
    trace_id = gen_trace_id()
    with ScriptedModelServer(failing_script()) as model:
        result = asyncio.run(
            run_incident(build_model(args.api, model.base_url), desk, trace_id=trace_id)
        )
    flushed = processor.force_flush(args.flush_timeout_s)
    processor.shutdown(timeout=1)
    stats = processor.stats
    print(f"seeded the failing refund-desk run ({args.api} API); refunds made: {len(desk.refunds)}")
    print(f"final answer: {result.final_output}")
    print(f"run id: {trace_id.removeprefix('trace_')}")
    print(
        f"spans exported {stats.exported}, dropped {stats.dropped}"
        + ("" if flushed else " (flush timed out: is the collector up?)")
    )
    return 0 if flushed and stats.dropped == 0 else 1


def _collector_settings(args: argparse.Namespace) -> Any:
    from collector.settings import CollectorSettings

    overrides: dict[str, Any] = {}
    for name in ("data_dir", "grpc_port", "http_port", "grpc_host", "http_host"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    if getattr(args, "no_auth", False):
        overrides["auth_enabled"] = False
    if getattr(args, "sql_port", None) is not None:
        overrides["sql_port"] = args.sql_port
    elif getattr(args, "sql", False) and "AFR_SQL_PORT" not in os.environ:
        from collector.settings import SQL_DEFAULT_PORT

        overrides["sql_port"] = SQL_DEFAULT_PORT
    settings = CollectorSettings(**overrides)
    if args.command == "up" and "AFR_INGEST_WORKERS" not in os.environ:
        settings = settings.model_copy(update={"ingest_workers": os.cpu_count() or 1})
    return settings


def _up(args: argparse.Namespace) -> int:
    import logging
    import signal

    from afr.local import LOCAL_KEY_FILE, WEBHOOK_SECRET_FILE, ensure_local_key
    from collector.server import Collector, tune_gc_for_ingest

    tune_gc_for_ingest()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = _collector_settings(args)

    async def serve() -> None:
        collector = Collector(settings)
        await collector.start()
        created = ensure_local_key(collector.keys, settings.data_dir)
        worker_server = None
        if not args.no_worker:
            worker, worker_server, worker_task, worker_port = await _start_worker(
                settings, collector
            )
        print(f"afr collector up (store {settings.store_location})")
        print(f"  OTLP/gRPC  http://{settings.grpc_host}:{collector.grpc_port}")
        print(f"  OTLP/HTTP  http://{settings.http_host}:{collector.http_port}/v1/traces")
        print(f"  read API   http://{settings.http_host}:{collector.http_port}/api/v1/runs")
        if collector.sql_port is not None:
            from collector.sqlapi import SQL_PASSWORD_FILE

            secret = settings.data_dir / SQL_PASSWORD_FILE
            where = "AFR_SQL_PASSWORD" if settings.sql_password else f"{secret} (mode 0600)"
            print(
                f"  SQL (ClickHouse HTTP) http://{settings.sql_host}:{collector.sql_port}  "
                f"user {settings.sql_user}, password in {where}"
            )
        if args.grafana_url:
            print(f"  {_grafana_line(args.grafana_url, collector)}")
        if created is not None:
            print(
                f"  created project 'local'; its key (...{created[-4:]}) is in "
                f"{settings.data_dir / LOCAL_KEY_FILE} (mode 0600)"
            )
        if worker_server is not None:
            print(f"  replay hook http://{worker.settings.host}:{worker_port}/hooks/replay")
            print(
                f"    ({worker.settings.concurrency} replay processes; jobs and spend in "
                f"{worker.settings.state_location})"
            )
            print(
                f"    (signing secret in {settings.data_dir / WEBHOOK_SECRET_FILE}; try: afr replay <run id>)"
            )
            print(f"  {_sweep_line(worker)}")
        if collector.recovered_rows:
            print(
                f"  recovered {collector.recovered_rows} acknowledged spans from the write-ahead log"
            )
        sys.stdout.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        if worker_server is not None:
            worker_server.should_exit = True
            await worker_task
        await collector.stop()

    asyncio.run(serve())
    return 0


def _grafana_line(grafana_url: str, collector: Any) -> str:
    """Where to look in Grafana: the newest failing run's timeline, else the run list."""
    from urllib.parse import urlencode

    base = grafana_url.rstrip("/")
    newest = collector.reader.newest_failing_run()
    if newest is None:
        return f"Grafana    {base}/d/afr-runs (no failing run stored yet)"
    project, run_id = newest
    query = urlencode({"var-project": project, "var-run_id": run_id})
    return f"Grafana    newest failing run: {base}/d/afr-run?{query}"


async def _start_worker(settings: Any, collector: Any) -> tuple[Any, Any, Any, int]:
    """The replay worker next to the collector, wired to it over loopback."""
    from afr.local import ensure_webhook_secret, read_local_key
    from replay_worker.app import ReplayWorker
    from replay_worker.settings import WorkerSettings

    overrides: dict[str, Any] = {
        "collector_url": f"http://127.0.0.1:{collector.http_port}",
        "collector_otlp_endpoint": f"http://127.0.0.1:{collector.grpc_port}",
    }
    if "AFR_WORKER_COLLECTOR_KEY" not in os.environ:
        overrides["collector_key"] = read_local_key(settings.data_dir)
    if "AFR_WORKER_WEBHOOK_SECRET" not in os.environ:
        overrides["webhook_secret"] = ensure_webhook_secret(settings.data_dir)
    if "AFR_WORKER_DATA_DIR" not in os.environ:
        overrides["data_dir"] = settings.data_dir / "worker"
    worker = ReplayWorker(WorkerSettings(**overrides))
    server, task, port = await worker.serve()
    return worker, server, task, port


def _sweep_line(worker: Any) -> str:
    settings, schedule = worker.settings, worker.sweeps.schedule
    if not settings.sweep_enabled:
        return "sweeps: not scheduled (AFR_SWEEP_ENABLED=false); POST /hooks/sweeps still runs one"
    return f"sweeps: '{schedule.cron}' ({schedule.zone.key}) over {settings.evals_dir}" + (
        "" if settings.evals_dir.is_dir() else " (no such directory yet: nothing to sweep)"
    )


def _worker(args: argparse.Namespace) -> int:
    import logging
    import signal

    from replay_worker.app import ReplayWorker
    from replay_worker.settings import WorkerSettings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    async def serve() -> None:
        worker = ReplayWorker(WorkerSettings())
        server, task, port = await worker.serve()
        print(f"afr replay worker up: POST http://{worker.settings.host}:{port}/hooks/replay")
        print(
            f"  {worker.settings.concurrency} replay processes; jobs and spend in "
            f"{worker.settings.state_location}"
        )
        print(f"  {_sweep_line(worker)}")
        sys.stdout.flush()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
        await task

    asyncio.run(serve())
    return 0


def _replay(args: argparse.Namespace) -> int:
    import json

    from afr.local import WEBHOOK_SECRET_FILE
    from collector.settings import CollectorSettings
    from replay_worker.settings import WorkerSettings
    from replay_worker.trigger import request_replay, wait_for_job

    # As the worker reads it: the environment, then AFR_WORKER_SECRETS_DIR; then the file a
    # local `afr up` wrote.
    configured = WorkerSettings().webhook_secret
    secret = configured.get_secret_value() if configured is not None else ""
    if not secret:
        path = (args.data_dir or CollectorSettings().data_dir) / WEBHOOK_SECRET_FILE
        if not path.exists():
            print(
                f"afr replay: no AFR_WORKER_WEBHOOK_SECRET (nor in AFR_WORKER_SECRETS_DIR)"
                f" and no {path}",
                file=sys.stderr,
            )
            return 2
        secret = path.read_text().strip()
    stubs = dict(item.split("=", 1) for item in args.stub)
    try:
        accepted = request_replay(
            args.worker, secret, args.run_id, model=args.model, stubs=stubs, policy=args.policy
        )
    except Exception as exc:
        print(f"afr replay: {exc}", file=sys.stderr)
        return 1
    job = wait_for_job(args.worker, accepted["job_id"], args.timeout_s)
    print(json.dumps(job, indent=2))
    if job["state"] != "succeeded":
        return 1
    result = job["result"]
    print(f"verdict {result['verdict']}; replay run {result['replay_run_id']}", file=sys.stderr)
    return 0


def _keys(args: argparse.Namespace) -> int:
    from collector.auth import KeyStore

    settings = _collector_settings(args)
    keys = KeyStore(settings.keys_path)
    if args.keys_command == "create":
        try:
            key = keys.create(args.project)
        except ValueError as exc:
            print(f"afr keys: {exc}", file=sys.stderr)
            return 2
        print(key)
        print(
            f"(project {args.project!r}; this is the only time the key is shown)", file=sys.stderr
        )
        return 0
    if args.keys_command == "list":
        print(f"{'key id':14} {'project':20} {'last4':6} {'created':26} revoked")
        for info in keys.list():
            print(
                f"{info.key_id:14} {info.project:20} {info.last4:6} {info.created_at:26} {info.revoked_at or ''}"
            )
        return 0
    if keys.revoke(args.key_id):
        print(f"revoked {args.key_id}")
        return 0
    print(f"afr keys: no active key with id {args.key_id!r}", file=sys.stderr)
    return 1


def _eval_synthesize(args: argparse.Namespace) -> int:
    """Two runs read, one file written: no Agents SDK (``--assist`` loads it, to ask a model)."""
    import re

    from replay_worker.client import CollectorClient, CollectorUnavailable, RunNotFound
    from replay_worker.evals.contract import write_eval
    from replay_worker.evals.synthesis import SynthesisError, fetch_runs, synthesize
    from replay_worker.settings import WorkerSettings

    run_id = args.replay_run_id.lower().removeprefix("trace_")
    if not re.fullmatch(r"[0-9a-f]{32}", run_id):
        print("afr eval synthesize: a run id is 32 hex digits", file=sys.stderr)
        return 2
    settings = WorkerSettings()
    key: str | None
    if settings.collector_key:
        key = settings.collector_key.get_secret_value()
    else:  # the local project's key, where `afr up` keeps it
        from afr.local import read_local_key
        from collector.settings import CollectorSettings

        key = read_local_key(args.data_dir or CollectorSettings().data_dir)
    client = CollectorClient(args.collector or settings.collector_url, key)
    try:
        source, replay = asyncio.run(fetch_runs(client, run_id, wait_s=settings.run_wait_s))
        document = synthesize(source, replay)
    except SynthesisError as exc:
        print(f"afr eval synthesize: refused: {exc}", file=sys.stderr)
        return 1
    except (RunNotFound, CollectorUnavailable) as exc:
        print(f"afr eval synthesize: {exc}", file=sys.stderr)
        return 1
    if args.assist:
        with _loading_the_sdk():
            from replay_worker.evals.assist import assist_with_settings

        if args.data_dir is not None and "AFR_WORKER_DATA_DIR" not in os.environ:
            settings = settings.model_copy(update={"data_dir": args.data_dir / "worker"})
        try:
            outcome, cost_usd = asyncio.run(assist_with_settings(document, replay, settings))
        except Exception as exc:  # the model, its budget: nothing is written
            print(
                f"afr eval synthesize: --assist failed: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            return 1
        for rejected in outcome.rejected:
            print(f"  not kept: {rejected['reason']}: {rejected['proposal']}", file=sys.stderr)
        print(
            f"--assist kept {len(outcome.kept)} of "
            f"{len(outcome.kept) + len(outcome.rejected)} proposed assertions (${cost_usd:.6f})",
            file=sys.stderr,
        )
        document = outcome.apply(document)
    path = write_eval(document, args.output or settings.evals_dir)
    print(path)
    print(
        f"{document.id}: {document.name} ({len(document.assertions)} assertions)", file=sys.stderr
    )
    return 0


def _eval_run(args: argparse.Namespace) -> int:
    with _loading_the_sdk():
        from replay_worker.evals.command import RunOptions, parse_shard, run_command
        from replay_worker.settings import WorkerSettings

    try:
        shard = parse_shard(args.shard) if args.shard else None
        if args.workers < 1:
            raise ValueError("--workers must be at least 1")
    except ValueError as exc:
        print(f"afr eval run: {exc}", file=sys.stderr)
        return 2
    options = RunOptions(
        paths=args.paths or [WorkerSettings().evals_dir],
        agent=args.agent,
        model=args.model,
        shard=shard,
        junit=args.junit,
        allow_inconclusive=args.allow_inconclusive,
        sweep_id=args.sweep_id,
        slot=args.slot,
        json_output=args.json,
        workers=args.workers,
        export=not args.no_export,
        list_only=args.list,
    )
    return run_command(options)


def _eval_schema(args: argparse.Namespace) -> int:
    from replay_worker.evals.contract import json_schema_text

    if args.output is None:
        sys.stdout.write(json_schema_text())
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json_schema_text())
    print(args.output)
    return 0


def _sweep_run(args: argparse.Namespace) -> int:
    import json

    from afr.local import read_local_key
    from collector.settings import CollectorSettings
    from replay_worker.settings import WorkerSettings

    with _loading_the_sdk():
        from replay_worker.sweeps import SweepLost, run_foreground

    overrides: dict[str, Any] = {}
    if args.evals is not None:
        overrides["evals_dir"] = args.evals
    data_dir = args.data_dir or CollectorSettings().data_dir
    if "AFR_WORKER_DATA_DIR" not in os.environ:  # the state `afr up`'s worker uses
        overrides["data_dir"] = data_dir / "worker"
    if "AFR_WORKER_COLLECTOR_KEY" not in os.environ:
        overrides["collector_key"] = read_local_key(data_dir)
    try:
        settings = WorkerSettings(**overrides)
    except ValueError as exc:
        print(f"afr sweep run: {exc}", file=sys.stderr)
        return 2
    if not settings.evals_dir.is_dir():
        print(f"afr sweep run: no evals directory {settings.evals_dir}", file=sys.stderr)
        return 2
    try:
        summary, sweep = run_foreground(settings, slot_label=args.slot)
    except SweepLost as exc:
        print(f"afr sweep run: {exc}", file=sys.stderr)
        return 1
    if summary is None:
        if sweep.state != "finished":
            print(
                f"afr sweep run: sweep {sweep.sweep_id} (slot {sweep.slot}) is {sweep.state}"
                + (" in a worker" if sweep.state == "running" else "")
                + (
                    " (run as shards by `afr eval run --shard I/N --slot`: its last shard"
                    " finishes it)"
                    if sweep.state == "sharded"
                    else ""
                )
                + (f": {sweep.error['reason']}" if sweep.error else ""),
                file=sys.stderr,
            )
            return 1
        print(f"slot {sweep.slot} was swept already; its summary:", file=sys.stderr)
        print(json.dumps(sweep.summary, indent=2))
        done = sweep.summary or {}
        return 0 if done and not (done["failed"] or done["errored"]) else 1
    print(json.dumps(summary.to_json(), indent=2))
    print(
        f"sweep {summary.sweep_id}: {summary.passed} passed, {summary.failed} failed, "
        f"{summary.inconclusive} inconclusive, {summary.errored} errored; "
        f"${summary.cost_usd:.6f}, {summary.duration_s:.1f} s; run {summary.sweep_run_id}",
        file=sys.stderr,
    )
    return 0 if summary.ok else 1


def _schema(args: argparse.Namespace) -> int:
    from collector.settings import CollectorSettings
    from collector.store.cluster import schema_text

    try:
        settings = CollectorSettings()  # AFR_DATABASE, AFR_TTL_DAYS: as the collector has them
        text = schema_text(
            database=args.database or settings.database,
            ttl_days=settings.ttl_days if args.ttl_days is None else args.ttl_days,
            cluster=args.cluster,
            shards=args.shards,
            replicas=args.replicas,
            config=args.config,
        )
    except ValueError as exc:
        print(f"afr schema: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


def _runs(args: argparse.Namespace) -> int:
    from afr.runs.cli import run_command

    return run_command(args)


def _grafana(args: argparse.Namespace) -> int:
    from afr.grafana.command import run_command

    return run_command(args)


def _demo(args: argparse.Namespace) -> int:
    from afr.demo import DEMO_DATA_DIR, run_demo

    return run_demo(args.data_dir or DEMO_DATA_DIR)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="afr", description="afr, the Agent Flight Recorder")
    commands = parser.add_subparsers(dest="command", required=True)

    seed = commands.add_parser(
        "seed",
        help="produce the canonical failing run and export it through the bridge",
        description="Runs the refund-desk incident through the real Agents SDK Runner against "
        "the scripted model and exports it over OTLP (OTEL_EXPORTER_OTLP_* apply).",
    )
    seed.add_argument("--api", choices=["responses", "chat"], default="responses")
    seed.add_argument("--endpoint", help="OTLP endpoint (default: OTEL_EXPORTER_OTLP_ENDPOINT)")
    seed.add_argument("--protocol", choices=["grpc", "http/protobuf"])
    seed.add_argument("--flush-timeout-s", type=float, default=15.0)
    seed.set_defaults(func=_seed)

    def collector_flags(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--data-dir", type=Path, help="default ./.afr/data (AFR_DATA_DIR)")

    up = commands.add_parser("up", help="run the collector on the embedded store")
    collector_flags(up)
    up.add_argument("--grpc-port", type=int)
    up.add_argument("--http-port", type=int)
    up.add_argument("--grpc-host")
    up.add_argument("--http-host")
    up.add_argument("--no-auth", action="store_true", help="store everything as project 'default'")
    up.add_argument("--no-worker", action="store_true", help="do not start the replay worker")
    up.add_argument(
        "--grafana-url", help="print the link to the newest failing run's timeline in this Grafana"
    )
    up.add_argument(
        "--sql",
        action="store_true",
        help="serve the store read-only over ClickHouse's HTTP protocol, for Grafana "
        "(port 8123 or AFR_SQL_PORT)",
    )
    up.add_argument("--sql-port", type=int, help="port of the SQL interface (implies --sql)")
    up.set_defaults(func=_up)

    worker = commands.add_parser(
        "worker", help="run the replay worker alone (AFR_WORKER_* settings)"
    )
    worker.set_defaults(func=_worker)

    replay = commands.add_parser(
        "replay", help="replay a run through the worker and print the verdict"
    )
    replay.add_argument("run_id")
    replay.add_argument("--worker", default="http://127.0.0.1:8787")
    replay.add_argument("--model", help="model to replay against (default: the run's)")
    replay.add_argument(
        "--stub", action="append", default=[], help="tool=output: replay_stub_output for a tool"
    )
    replay.add_argument(
        "--policy",
        choices=("exact", "strict", "lenient"),
        default=None,
        help="how calls are matched to captured ones (lenient: approximate verdict)",
    )
    replay.add_argument("--timeout-s", type=float, default=300)
    collector_flags(replay)
    replay.set_defaults(func=_replay)

    keys = commands.add_parser("keys", help="manage project API keys")
    keys_commands = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_commands.add_parser("create", help="create a key (printed once)")
    create.add_argument("--project", required=True)
    collector_flags(create)
    listing = keys_commands.add_parser("list", help="list keys (ids and last 4 characters only)")
    collector_flags(listing)
    revoke = keys_commands.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id")
    collector_flags(revoke)
    keys.set_defaults(func=_keys)

    # afr eval <command>: one parser for every eval command (synthesize, schema, run...).
    evals = commands.add_parser("eval", help="portable regression evals (afr.eval/v1 files)")
    eval_commands = evals.add_subparsers(dest="eval_command", required=True)
    synthesize = eval_commands.add_parser(
        "synthesize",
        help="write the eval a FAILURE_FIXED replay implies into the evals directory",
        description="Reads the replay run and its source through the collector's read API "
        "(AFR_WORKER_COLLECTOR_URL, key AFR_WORKER_COLLECTOR_KEY or the local project's key), "
        "derives the assertions that capture the correction, and writes <dir>/<eval id>.json. "
        "The same runs always give the same file.",
    )
    synthesize.add_argument("replay_run_id")
    synthesize.add_argument(
        "-o", "--output", type=Path, help="evals directory (default AFR_WORKER_EVALS_DIR, ./evals)"
    )
    synthesize.add_argument("--collector", help="collector URL (default AFR_WORKER_COLLECTOR_URL)")
    synthesize.add_argument(
        "--assist",
        action="store_true",
        help="also ask the configured model for assertions (kept only if valid and holding on "
        "the fixing replay; costs through the ledger; not deterministic)",
    )
    collector_flags(synthesize)
    synthesize.set_defaults(func=_eval_synthesize)
    schema = eval_commands.add_parser("schema", help="print or write the afr.eval/v1 JSON Schema")
    schema.add_argument("-o", "--output", type=Path, help="write it to this file")
    schema.set_defaults(func=_eval_schema)
    run_evals = eval_commands.add_parser(
        "run",
        help="replay every eval and check its assertions (exit 1 on a failed eval)",
        description="Replays each eval through the replay engine (tools answered from the "
        "captured outcomes, models and budgets as the worker's: AFR_WORKER_MODEL_*, "
        "AFR_WORKER_*_BUDGET_USD), checks its assertions, prints a table and writes each eval "
        "run to the collector when one is configured (AFR_WORKER_COLLECTOR_KEY, "
        "AFR_WORKER_COLLECTOR_OTLP_ENDPOINT). Exit status: 0 all passed, 1 any failed, "
        "errored or inconclusive, 2 bad input.",
    )
    run_evals.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help="eval files or directories (default AFR_WORKER_EVALS_DIR, ./evals)",
    )
    run_evals.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="run against the agent as the code defines it now (its instructions, tool "
        "schemas, handoffs) instead of the captured one",
    )
    run_evals.add_argument("--model", help="model to run against (default: each eval's)")
    run_evals.add_argument(
        "--shard",
        metavar="I/N",
        help="run only shard I of N: I from 1 to N, or 0 to N-1 (a Kubernetes Indexed Job's "
        "JOB_COMPLETION_INDEX; 0/N is N/N); N machines cover each eval once",
    )
    run_evals.add_argument("--junit", type=Path, metavar="FILE", help="write a JUnit XML report")
    run_evals.add_argument(
        "--allow-inconclusive",
        action="store_true",
        help="an INCONCLUSIVE eval does not fail the run (a skipped test in JUnit)",
    )
    of_sweep = run_evals.add_mutually_exclusive_group()
    of_sweep.add_argument("--sweep-id", help="record the eval runs as part of this sweep")
    of_sweep.add_argument(
        "--slot",
        help="record the eval runs as the sweep of this slot (named as for afr sweep run "
        "--slot): every shard and retry of a slot writes each eval's run once; exit 3 when "
        "the runs did not all reach the collector",
    )
    run_evals.add_argument("--workers", type=int, default=1, help="eval processes (default 1)")
    run_evals.add_argument("--json", action="store_true", help="print the outcomes as JSON")
    run_evals.add_argument(
        "--list", action="store_true", help="print the evals this shard would run, and exit"
    )
    run_evals.add_argument(
        "--no-export", action="store_true", help="do not write the eval runs to the collector"
    )
    run_evals.set_defaults(func=_eval_run)

    sweep = commands.add_parser("sweep", help="sweeps: every eval of the evals directory")
    sweep_commands = sweep.add_subparsers(dest="sweep_command", required=True)
    sweep_run = sweep_commands.add_parser(
        "run",
        help="run one sweep now, in the foreground, and print its summary",
        description="Runs every eval of the evals directory as one sweep slot claimed in the "
        "worker's state store, so a slot never runs twice to completion (a worker's or this "
        "command's), writes the eval runs and the sweep's summary run (kind sweep) to the "
        "collector, and prints the summary. Exit status: 0 nothing failed or errored, 1 "
        "otherwise (or the slot is running elsewhere), 2 bad input.",
    )
    sweep_run.add_argument(
        "--evals", type=Path, help="evals directory (default AFR_WORKER_EVALS_DIR, ./evals)"
    )
    sweep_run.add_argument(
        "--slot",
        help="the slot to run: an instant of the schedule (2026-12-01T03:00:00Z: that "
        "scheduled slot, done once) or any label (a manual slot of its own); default: a new "
        "manual slot",
    )
    collector_flags(sweep_run)
    sweep_run.set_defaults(func=_sweep_run)

    schema = commands.add_parser(
        "schema",
        help="print the store's DDL: one node (as the collector applies it) or a cluster",
        description="Without --cluster: the single-node schema the collector applies itself. "
        "With --cluster NAME: the schema of a ClickHouse cluster (ON CLUSTER, Replicated "
        "tables, Distributed tables under the collector's names; docs/adr/0022), to apply "
        "once on any node with clickhouse-client --multiquery; the collector then runs with "
        "AFR_CLICKHOUSE_CLUSTER=NAME and never migrates.",
    )
    schema.add_argument("--cluster", metavar="NAME", help="the cluster in remote_servers")
    schema.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help="the DDL first checks that the node's cluster has N shards; with --config, the "
        "cluster definition for N shards",
    )
    schema.add_argument("--replicas", type=int, default=1, help="per shard, for --config")
    schema.add_argument(
        "--config",
        choices=("xml", "yaml"),
        help="print the cluster definition (remote_servers, macros, Keeper) instead",
    )
    schema.add_argument("--database", help="default AFR_DATABASE (afr)")
    schema.add_argument("--ttl-days", type=int, help="default AFR_TTL_DAYS (none)")
    schema.set_defaults(func=_schema)

    from afr.runs.parser import add_runs_parser  # stdlib only at import: cheap for every command

    add_runs_parser(commands).set_defaults(func=_runs)  # afr runs list|show|tail

    from afr.grafana.command import add_grafana_parser  # stdlib only at import

    add_grafana_parser(commands).set_defaults(func=_grafana)  # afr grafana push

    from afr.secrets_cli import add_secrets_parser  # stdlib only at import

    add_secrets_parser(commands)  # afr secrets init

    from afr.sql_users_cli import add_sql_users_parser  # stdlib only at import

    add_sql_users_parser(commands)  # afr sql-users create|list|revoke

    from afr.openapi_cli import add_openapi_parser  # stdlib only at import

    add_openapi_parser(commands)  # afr openapi [--write|--check]

    demo = commands.add_parser("demo", help="walk the sacred path end to end and say what happened")
    demo.add_argument("--data-dir", type=Path, help="default ./.afr/demo")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except Exception as error:
        # An install without the extra: say what to do. Only a command that loaded the
        # store's client can have raised it (the eval commands never do, nor pay its import).
        store = sys.modules.get("collector.store.client")
        if store is not None and isinstance(error, store.EmbeddedStoreMissing):
            print(f"afr: {error}", file=sys.stderr)
            return 2
        raise
    return code


if __name__ == "__main__":
    sys.exit(main())
