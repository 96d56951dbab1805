"""What a collector's processes load, which is what their resident memory is made of: an
ingest worker builds its processors without the collector's servers (gRPC, HTTP, the read
and SQL APIs: ~23 MiB of RSS per worker), and the embedded store's allocator returns freed
pages within a second unless the operator configured it (``JE_MALLOC_CONF``). And how an
ingest worker's garbage collector runs (seldom, and never over its start-up heap), and the
pipes its requests and rows go through (wide enough for a request in a few writes)."""

from __future__ import annotations

import fcntl
import functools
import json
import os
import pickle
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from collector.store.client import EMBEDDED_JEMALLOC_CONF

# What a spawned ingest worker runs before its first request: the parent's main module
# (`afr up` is `afr.cli`) and the pool initializer's arguments, unpickled.
WORKER_START = """
import json, pickle, sys
import afr.cli  # the parent's __main__, imported by spawn as __mp_main__
processors = pickle.loads(sys.stdin.buffer.read())()
print(json.dumps({"names": [name for name, _ in processors], "modules": sorted(sys.modules)}))
"""

SERVER_MODULES = ("grpc", "uvicorn", "starlette", "collector.server", "collector.receiver.grpc")


def _in_a_worker(script: str, data_dir: Path, *args: str) -> Any:
    """What ``script`` prints (JSON), run in a fresh interpreter handed the factory the
    collector hands its worker pool (Collector.__init__), pickled as spawn sends it."""
    from collector.server import default_processors
    from collector.settings import CollectorSettings

    factory = functools.partial(default_processors, CollectorSettings(data_dir=data_dir))
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        input=pickle.dumps(factory),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


def test_an_ingest_worker_builds_its_processors_without_the_servers(tmp_path: Path) -> None:
    loaded = _in_a_worker(WORKER_START, tmp_path)
    assert loaded["names"] == ["redact", "normalize", "signature", "truncate"]
    assert [m for m in SERVER_MODULES if m in loaded["modules"]] == []


def _run_on_a_store(script: str, store: Path, env: dict[str, str] | None = None) -> Any:
    """What ``script`` prints (JSON), run in a fresh interpreter from the checkout's root
    with ``store`` (a chDB directory) as its argument."""
    done = subprocess.run(
        [sys.executable, "-c", script, str(store)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


OPEN_STORE = """
import json, os, sys
from collector.store.client import ClickHouseStore
ClickHouseStore("chdb://" + sys.argv[1])
import chdb  # noqa: F401
print(json.dumps(os.environ.get("JE_MALLOC_CONF")))
"""


@pytest.mark.parametrize(
    ("operator", "expected"),
    [
        pytest.param(None, EMBEDDED_JEMALLOC_CONF, id="not set: the collector's"),
        pytest.param("dirty_decay_ms:5000", "dirty_decay_ms:5000", id="set: the operator's"),
        pytest.param("", "", id="set empty: jemalloc's defaults"),
    ],
)
def test_the_embedded_store_tunes_its_allocator_unless_the_operator_did(
    tmp_path: Path, operator: str | None, expected: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JE_MALLOC_CONF"}
    if operator is not None:
        env["JE_MALLOC_CONF"] = operator
    assert _run_on_a_store(OPEN_STORE, tmp_path / "store", env=env) == expected


# A store opened and used as a collector starts, then chDB's start-up pages given back, then
# used again: what of its library is resident at each step, and what the store gives.
RELEASE_PAGES = """
import json, os, sys, time
sys.path.insert(0, os.environ["AFR_TEST_SITE"])  # its own copy of chDB
from collector.blocks import encode_block
from collector.store.client import ClickHouseStore, release_start_up_pages
from tests.records import span_record

def library_kib(field="Rss:"):
    library = os.path.realpath(sys.modules["chdb._chdb"].__file__)
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        fields = line.split()
        if not fields[0].endswith(":"):
            inside = len(fields) >= 6 and fields[5] == library
        elif inside and fields[0] == field:
            total += int(fields[1])
    return total

store = ClickHouseStore("chdb://" + sys.argv[1])
store.migrate()
now = time.time_ns()
store.insert_rows(encode_block([span_record(trace_id=f"{n:032x}", timestamp_ns=now) for n in range(3)]))
before, written = library_kib(), library_kib("Anonymous:")
advised = release_start_up_pages()
after, written_after = library_kib(), library_kib("Anonymous:")
store.insert_rows(encode_block([span_record(trace_id=f"{n:032x}", timestamp_ns=now) for n in range(3, 5)]))
print(json.dumps({
    "advised": advised, "before": before, "after": after, "used_again": library_kib(),
    "written": written, "written_after": written_after,
    "library": os.path.realpath(sys.modules["chdb._chdb"].__file__),
    "spans": store.query("SELECT count() FROM {db}.otel_traces FINAL")[0][0],
    "runs": store.query("SELECT count() FROM {db}.run_summary")[0][0],
}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_PAGEOUT is Linux's")
def test_the_embedded_stores_start_up_pages_go_back_and_the_store_works_on(
    tmp_path: Path,
) -> None:
    """``afr up``, once serving, gives back the pages of chDB's library that only its
    start-up read (ADR 55): ~180 MiB of the collector's resident memory, of which an
    ingesting collector reads about half again; the store works on.

    The kernel pages out only what no other process maps, and this test process may have
    chDB loaded: the script loads a copy of the library of its own, as a collector alone
    on its host (or in its container) has it."""
    import chdb

    site = tmp_path / "site"
    try:
        installed = Path(chdb.__file__).parent
        shutil.copytree(installed, site / "chdb")
        libraries = installed.parent / "chdb_core.libs"  # what the library links (its RPATH)
        if libraries.is_dir():
            shutil.copytree(libraries, site / libraries.name)
        figures = _run_on_a_store(
            RELEASE_PAGES, tmp_path / "store", env={**os.environ, "AFR_TEST_SITE": str(site)}
        )
    finally:
        shutil.rmtree(site, ignore_errors=True)  # (530 MB: not kept for pytest's history)
    assert figures["library"].startswith(str(site))
    if figures["advised"] == 0:
        pytest.skip("this kernel does not take MADV_PAGEOUT (Linux 5.4+)")
    assert figures["before"] > 50 * 1024  # KiB: the library as start-up left it
    assert figures["after"] < figures["before"] / 4
    # The pages the loader wrote (relocations) are left where they are: never swapped out.
    assert figures["written"] > 0 and figures["written_after"] == figures["written"]
    assert figures["used_again"] < figures["before"]
    assert (figures["spans"], figures["runs"]) == (5, 5)


# The pool's own initializer, then 200k allocations of cyclic garbage (a list holding itself).
WORKER_GARBAGE = """
import gc, json, os, pickle, sys
from collector.pipeline import _init_worker
_init_worker(pickle.loads(sys.stdin.buffer.read()), os.getppid())
collections = []
gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(info))
for _ in range(200_000):
    cycle = []
    cycle.append(cycle)
del cycle
print(json.dumps({
    "threshold": gc.get_threshold(),
    "frozen": gc.get_freeze_count(),
    "collections": len(collections),
    "left": sum(len(gc.get_objects(generation)) for generation in range(3)),
}))
"""


def test_an_ingest_worker_collects_garbage_seldom_and_never_walks_its_start_up_heap(
    tmp_path: Path,
) -> None:
    """A request frees nearly all it allocates by reference count; at CPython's default a
    worker ran ~8 collections per request (~3% of its CPU on realistic spans), each walking
    the compiled rules and modules it holds for life. Cyclic garbage is still collected."""
    worker = _in_a_worker(WORKER_GARBAGE, tmp_path)
    assert worker["threshold"] == [10_000, 10, 10]
    assert worker["frozen"] > 10_000  # the start-up heap: never walked again
    # 200k cycles at CPython's default threshold (700) are ~285 collections; here ~20.
    assert 1 <= worker["collections"] <= 40
    assert worker["left"] < 20_000  # the cycles were collected, not kept


@pytest.mark.skipif(not hasattr(fcntl, "F_GETPIPE_SZ"), reason="pipe sizes are Linux's")
def test_requests_and_rows_reach_the_ingest_workers_through_wide_pipes(tmp_path: Path) -> None:
    """An SDK batch of 512 spans is ~1.6 MB, its rows ~2 MB: through 64 KiB pipes, each is
    ~30 writes with a wake-up of the other side each time. The pool a dead worker's
    replaced by is built the same way."""
    from collector.pipeline import _PIPE_BYTES, Pipeline
    from collector.server import default_processors
    from collector.settings import CollectorSettings
    from collector.store.wal import WriteAheadLog

    reader, writer = os.pipe()
    try:  # the kernel grants it whole or not at all (pipe-max-size, the user's pipe pages)
        fcntl.fcntl(writer, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    except OSError:
        pytest.skip("this system gives no pipe of 1 MiB to this user")
    finally:
        os.close(reader)
        os.close(writer)
    wal = WriteAheadLog(tmp_path / "wal", max_bytes=1 << 20, fsync=False, retry_after_s=1.0)
    factory = functools.partial(default_processors, CollectorSettings(data_dir=tmp_path))
    pipeline = Pipeline([], wal, workers=1, processor_factory=factory)
    expected = _PIPE_BYTES
    try:
        pipeline.warm_up()
        for pool in (pipeline._pool, pipeline._new_pool()):
            assert pool is not None
            queues: list[Any] = [pool._call_queue, pool._result_queue]  # type: ignore[attr-defined]
            sizes = [fcntl.fcntl(q._writer.fileno(), fcntl.F_GETPIPE_SZ) for q in queues]
            assert sizes == [expected, expected]
            if pool is not pipeline._pool:
                pool.shutdown(wait=True)
    finally:
        pipeline.close()


# A request's memory as glibc sees it: ~20 MB of blocks (the request, its rows, the records
# between) taken, then all freed at its end; the page faults of the next ten requests.
WORKER_REQUESTS = """
import json, os, pickle, resource, sys
from collector.pipeline import _init_worker
_init_worker(pickle.loads(sys.stdin.buffer.read()), os.getppid())
size, count = int(sys.argv[1]), int(sys.argv[2])

def request():
    blocks = [bytes(size) for _ in range(count)]
    del blocks

for _ in range(5):
    request()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    request()
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))
"""


@pytest.mark.skipif("glibc" not in platform.libc_ver()[0], reason="the heap is glibc's")
@pytest.mark.parametrize(
    ("size", "count"),
    [(100_000, 200), (1 << 20, 20), (2 << 20, 10)],
    ids=["records' blocks", "rows' blocks", "request bodies"],
)
def test_an_ingest_worker_keeps_its_heap_for_the_next_request(
    tmp_path: Path, size: int, count: int
) -> None:
    """glibc gives the top of its heap back once twice the last large block freed lies
    unused there, and a request frees that much at its end: every request faulted its
    memory in afresh (~1.5 page faults and ~4 us of kernel time per span in each worker at
    saturation; 0.2 faults with the heap kept, for the same peak RSS). Here, without it:
    2,700-10,500 faults over ten requests of 20 MB."""
    assert _in_a_worker(WORKER_REQUESTS, tmp_path, str(size), str(count)) < 200
