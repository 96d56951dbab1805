"""Bytes on disk per span: what the store keeps of a span, against the span's size on the wire.

The corpus is the collector bench's realistic one (agent traces, 9 spans each, JSON message
bodies, a secret every ~2 KB), stored the way the collector stores it: decoded, through the
collector's own processors (``default_processors``: redact, normalize, truncate), encoded
(``encode_block``: Native blocks) and inserted by ``ClickHouseStore.insert_rows`` in inserts
of ~10k rows, on the embedded engine, with the materialized views attached. Figures, per span and as a
ratio to the OTLP request size (protobuf, uncompressed; gzip given beside it):

- the data directory (``du``: blocks allocated) right after the inserts, then after
  ``OPTIMIZE TABLE ... FINAL`` once the merged-away parts are removed; active and
  merged-away parts (``system.parts``) per table, before and after the merges;
- per column of the spans table and of the materialized views' tables (``system.columns``:
  compressed and uncompressed bytes, measured on a copy in wide parts: the tables' own parts
  are compact, ADR 43, and keep no per-column sizes), the skipping indices, marks and
  primary index;
- whether any body is stored twice (an ``Input``/``Output`` whose attribute is still in
  ``SpanAttributes``/``BodyAttributes``, or a body attribute equal to either);
- the compression ratio of the same codecs on real prose (the corpus's 12-word vocabulary
  compresses better than agent text does), and what the store would take at that ratio;
- codec variants of the body columns, each on a fresh database: bytes per span after merges,
  insert CPU per row (``time.process_time`` around the inserts, merges stopped, so the figure
  is the insert's own parse + compress + views), merge CPU per row (``OPTIMIZE FINAL``) and a
  full scan of the bodies; interleaved over ``ROUNDS``, the least of each (CPU time only
  grows with interference from other work on the machine).

Runs in child processes: chDB hosts one engine per process, and each variant gets its own.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.collector_bench import TRACES_PER_REQUEST, make_requests

REQUESTS = 120
"""60,480 spans: six inserts of 10,080 rows."""
REQUESTS_PER_INSERT = 20
SPANS_PER_TRACE = 9
SECRET_EVERY_BYTES = 2048
SEED = 5
ROUNDS = 5
TARGET_RATIO = 0.3
RESULTS = Path(__file__).parent / "results"
INSERTS_DIR = "inserts"
DATABASE = "afr"
BODY_COLUMNS = ("SpanAttributes", "Input", "Output", "BodyAttributes")
TABLES = ("otel_traces", "runs", "otel_traces_trace_id_ts")
"""Filled by the materialized views (the run summary, the trace time bounds)."""
PROSE_LEVELS = (1, 3, 5, 6, 9)
SCHEMA_VARIANT = "the schema's"
VARIANTS: dict[str, dict[str, str]] = {
    SCHEMA_VARIANT: {},
    SCHEMA_VARIANT + ", again": {},
    "SpanAttributes ZSTD(3)": {"SpanAttributes": "ZSTD(3)"},
    "all four ZSTD(1)": dict.fromkeys(BODY_COLUMNS, "ZSTD(1)"),
    "all four ZSTD(5)": dict.fromkeys(BODY_COLUMNS, "ZSTD(5)"),
    "all four ZSTD(6)": dict.fromkeys(BODY_COLUMNS, "ZSTD(6)"),
    "all four ZSTD(9)": dict.fromkeys(BODY_COLUMNS, "ZSTD(9)"),
}
"""Codecs of the body columns, applied to an empty spans table before the inserts. The
schema's runs twice: the gap between the two is the noise of the CPU figures."""
_SETTLE_S = 90.0


def _disk_bytes(path: Path) -> int:
    """What ``du`` counts: the blocks allocated to every file under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue  # a part removed while walking
    return total


def prepare(requests: list[bytes], data_dir: Path) -> list[bytes]:
    """The inserts the collector would make of ``requests``: decoded, processed, encoded."""
    from collector.blocks import NATIVE_PREFIX, encode_block
    from collector.decode import decode_protobuf, to_records
    from collector.server import default_processors
    from collector.settings import CollectorSettings

    processors = default_processors(CollectorSettings(data_dir=data_dir))
    blocks = []
    for raw in requests:
        records = to_records(decode_protobuf(raw), "project-1", time.time_ns()).records
        for _, processor in processors:
            records = processor(records)
        blocks.append(encode_block(records)[len(NATIVE_PREFIX) :])
    # Joined as the writer joins the log's records: one prefix, the blocks back to back.
    return [
        NATIVE_PREFIX + b"".join(blocks[i : i + REQUESTS_PER_INSERT])
        for i in range(0, len(blocks), REQUESTS_PER_INSERT)
    ]


def _parts(store: Any, database: str) -> list[dict[str, Any]]:
    rows = store.query(
        "SELECT table, active, count(), sum(rows), sum(bytes_on_disk), "
        "sum(data_compressed_bytes), sum(data_uncompressed_bytes), sum(marks_bytes), "
        "sum(primary_key_size), sum(secondary_indices_compressed_bytes) "
        "FROM system.parts WHERE database = {d:String} GROUP BY table, active ORDER BY table",
        {"d": database},
    )
    keys = (
        "table",
        "active",
        "parts",
        "rows",
        "bytes_on_disk",
        "compressed",
        "uncompressed",
        "marks",
        "primary_index",
        "skip_indices",
    )
    return [dict(zip(keys, (r[0], bool(r[1]), *map(int, r[2:])), strict=True)) for r in rows]


def _columns(store: Any, database: str) -> list[dict[str, Any]]:
    rows = store.query(
        "SELECT table, name, type, compression_codec, data_compressed_bytes, "
        "data_uncompressed_bytes, marks_bytes FROM system.columns "
        "WHERE database = {d:String} AND data_compressed_bytes > 0 "
        "ORDER BY table, data_compressed_bytes DESC",
        {"d": database},
    )
    keys = ("table", "column", "type", "codec", "compressed", "uncompressed", "marks")
    return [dict(zip(keys, (*r[:4], *map(int, r[4:])), strict=True)) for r in rows]


def _indices(store: Any, database: str) -> list[dict[str, Any]]:
    rows = store.query(
        "SELECT table, name, type_full, data_compressed_bytes, data_uncompressed_bytes, "
        "marks_bytes FROM system.data_skipping_indices WHERE database = {d:String}",
        {"d": database},
    )
    keys = ("table", "index", "type", "compressed", "uncompressed", "marks")
    return [dict(zip(keys, (*r[:3], *map(int, r[3:])), strict=True)) for r in rows]


def snapshot(store: Any, database: str, chdb_dir: Path) -> dict[str, Any]:
    return {
        "data_dir_bytes": _disk_bytes(chdb_dir),
        "parts": _parts(store, database),
        "indices": _indices(store, database),
    }


def _settle(store: Any, database: str) -> float:
    """Waits until the merged-away parts are removed (the engine's cleanup runs every ~30-40 s)."""
    began = time.perf_counter()
    while time.perf_counter() - began < _SETTLE_S:
        inactive = store.query(
            "SELECT count() FROM system.parts WHERE database = {d:String} AND NOT active",
            {"d": database},
        )[0][0]
        if not inactive:
            break
        time.sleep(2)
    return time.perf_counter() - began


_TWICE = """
SELECT
    countIf(InputKey != '' AND (mapContains(SpanAttributes, InputKey)
        OR mapContains(BodyAttributes, InputKey))),
    countIf(OutputKey != '' AND (mapContains(SpanAttributes, OutputKey)
        OR mapContains(BodyAttributes, OutputKey))),
    countIf(arrayExists(v -> (v = Input AND Input != '') OR (v = Output AND Output != ''),
        arrayConcat(mapValues(SpanAttributes), mapValues(BodyAttributes)))),
    sum(length(Input) + length(Output)),
    sum(arraySum(arrayMap(v -> length(v), mapValues(BodyAttributes)))),
    sum(arraySum(arrayMap(v -> length(v), mapValues(SpanAttributes)))),
    countIf(Input != ''), countIf(Output != ''), countIf(length(BodyAttributes) > 0),
    count()
FROM {db}.otel_traces FINAL
"""
_BODY_KEYS = """
SELECT key, count(), sum(length(BodyAttributes[key]))
FROM {db}.otel_traces FINAL ARRAY JOIN mapKeys(BodyAttributes) AS key
GROUP BY key ORDER BY 3 DESC LIMIT 10
"""
_SCAN = (
    "SELECT sum(length(Input) + length(Output)), "
    "sum(arraySum(arrayMap(v -> length(v), mapValues(SpanAttributes)))), "
    "sum(arraySum(arrayMap(v -> length(v), mapValues(BodyAttributes)))) "
    "FROM {db}.otel_traces SETTINGS max_threads = 1, use_uncompressed_cache = 0"
)


def stored_twice(store: Any) -> dict[str, Any]:
    row = store.query(_TWICE)[0]
    keys = (
        "input_key_also_in_maps",
        "output_key_also_in_maps",
        "map_value_equal_to_a_body",
        "input_output_chars",
        "body_attribute_chars",
        "span_attribute_chars",
        "spans_with_input",
        "spans_with_output",
        "spans_with_body_attributes",
        "spans",
    )
    figures: dict[str, Any] = dict(zip(keys, map(int, row), strict=True))
    figures["body_attribute_keys"] = [
        {"key": key, "spans": int(spans), "chars": int(chars)}
        for key, spans, chars in store.query(_BODY_KEYS)
    ]
    return figures


def wide_copy_columns(store: Any, database: str) -> list[dict[str, Any]]:
    """Per-column sizes of every table, from a copy in wide parts: their own parts are
    compact up to 48 MiB (ADR 43, ADR 46: only a merged part past that is wide), and a
    compact part keeps no per-column sizes."""
    columns = []
    for table in TABLES:
        copy = f"{table}_wide_copy"
        store.command(f"CREATE TABLE {{db}}.{copy} AS {{db}}.{table}")
        try:
            store.command(f"ALTER TABLE {{db}}.{copy} MODIFY SETTING min_bytes_for_wide_part = 0")
            store.command(f"INSERT INTO {{db}}.{copy} SELECT * FROM {{db}}.{table}")  # noqa: S608 (constant names)
            store.command(f"OPTIMIZE TABLE {{db}}.{copy} FINAL")
            columns += [
                {**c, "table": table} for c in _columns(store, database) if c["table"] == copy
            ]
        finally:
            store.command(f"DROP TABLE {{db}}.{copy} SYNC")
    return columns


def _prose_bodies() -> list[str]:
    """The repository's own Markdown as 2,000-character user messages, like the corpus's."""
    root = Path(__file__).resolve().parent.parent
    files = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    text = "".join(path.read_text(encoding="utf-8") for path in files if path.is_file())
    return [
        json.dumps([{"role": "user", "parts": [{"type": "text", "content": text[i : i + 2000]}]}])
        for i in range(0, len(text), 2000)
    ]


def prose_ratios(store: Any, database: str) -> dict[str, float]:
    """Compression ratio of each codec on real prose: the corpus's vocabulary is 12 words,
    which compresses better than agent text does."""
    bodies = _prose_bodies()
    ratios = {}
    for level in PROSE_LEVELS:
        table = f"prose_zstd_{level}"
        store.command(
            f"CREATE TABLE {{db}}.{table} (Body String CODEC(ZSTD({level}))) "
            "ENGINE = MergeTree ORDER BY tuple() SETTINGS min_bytes_for_wide_part = 0"
        )
        try:
            store.query(
                f"INSERT INTO {{db}}.{table} SELECT arrayJoin({{bodies:Array(String)}})",
                {"bodies": bodies},
            )
            store.command(f"OPTIMIZE TABLE {{db}}.{table} FINAL")
            (column,) = [c for c in _columns(store, database) if c["table"] == table]
            ratios[f"ZSTD({level})"] = column["uncompressed"] / column["compressed"]
        finally:
            store.command(f"DROP TABLE {{db}}.{table} SYNC")
    return ratios


def _alter(codecs: dict[str, str]) -> str | None:
    if not codecs:
        return None
    changes = ", ".join(f"MODIFY COLUMN {name} CODEC({codec})" for name, codec in codecs.items())
    return f"ALTER TABLE {{db}}.otel_traces {changes}"


def variant(
    dsn: str, database: str, codecs: dict[str, str], inserts: list[bytes]
) -> dict[str, Any]:
    """One codec variant on a fresh database: its size after merges and its CPU per row."""
    from collector.blocks import payload_rows
    from collector.store.client import ClickHouseStore

    store = ClickHouseStore(dsn, database)
    try:
        store.migrate()
        if alter := _alter(codecs):
            store.command(alter)
        rows = sum(payload_rows(block) for block in inserts)
        store.command("SYSTEM STOP MERGES")  # every table's: no merge's CPU in the figure
        began = time.process_time()
        for block in inserts:
            store.insert_rows(block)
        insert_cpu_s = time.process_time() - began
        store.command("SYSTEM START MERGES")
        began = time.process_time()
        store.command("OPTIMIZE TABLE {db}.otel_traces FINAL")
        merge_cpu_s = time.process_time() - began
        scans = []
        for _ in range(3):
            began = time.perf_counter()
            store.query(_SCAN)
            scans.append(time.perf_counter() - began)
        parts = [p for p in _parts(store, database) if p["active"] and p["table"] == "otel_traces"]
        columns = {
            c["column"]: c["compressed"]
            for c in _columns(store, database)
            if c["table"] == "otel_traces"
        }
        codec_of = {
            c["column"]: c["codec"]
            for c in _columns(store, database)
            if c["column"] in BODY_COLUMNS
        }
        return {
            "rows": rows,
            "codecs": codec_of,
            "spans_bytes_on_disk": parts[0]["bytes_on_disk"],
            "body_columns_compressed": sum(columns.get(name, 0) for name in BODY_COLUMNS),
            "insert_cpu_us_per_row": insert_cpu_s / rows * 1e6,
            "merge_cpu_us_per_row": merge_cpu_s / rows * 1e6,
            "scan_ms": min(scans) * 1000,
        }
    finally:
        store.command("SYSTEM START MERGES")
        store.command(f"DROP DATABASE IF EXISTS {database} SYNC")
        store.close()


def measure(data_dir: Path) -> dict[str, Any]:
    """The store as the migrations make it: sizes before and after merges. Leaves the
    inserts in ``data_dir`` for the variants."""
    from collector.store.client import ClickHouseStore

    requests = make_requests(REQUESTS, seed=SEED, secret_every_bytes=SECRET_EVERY_BYTES)
    spans = len(requests) * TRACES_PER_REQUEST * SPANS_PER_TRACE
    began = time.perf_counter()
    inserts = prepare(requests, data_dir)
    (data_dir / INSERTS_DIR).mkdir()
    for number, block in enumerate(inserts):
        (data_dir / INSERTS_DIR / f"{number:03d}.jsonl").write_bytes(block)
    results: dict[str, Any] = {
        "spans": spans,
        "inserts": len(inserts),
        "rows_per_insert": spans // len(inserts),
        "wire_bytes": sum(len(raw) for raw in requests),
        "wire_gzip_bytes": sum(len(gzip.compress(raw, 6)) for raw in requests),
        "encoded_row_bytes": sum(len(block) for block in inserts),
        "prepare_s": time.perf_counter() - began,
    }
    chdb_dir = data_dir / "chdb"
    dsn = f"chdb://{chdb_dir}"
    store = ClickHouseStore(dsn, DATABASE)
    store.migrate()
    began = time.process_time()
    for block in inserts:
        store.insert_rows(block)
    results["insert_cpu_us_per_row_merges_running"] = (time.process_time() - began) / spans * 1e6
    results["inserted"] = snapshot(store, DATABASE, chdb_dir)
    began = time.process_time()
    for table in TABLES:
        store.command(f"OPTIMIZE TABLE {{db}}.{table} FINAL")
    results["optimize_cpu_s"] = time.process_time() - began
    results["optimized"] = snapshot(store, DATABASE, chdb_dir)
    results["settle_s"] = _settle(store, DATABASE)
    results["merged"] = snapshot(store, DATABASE, chdb_dir)
    results["stored_twice"] = stored_twice(store)
    results["columns"] = wide_copy_columns(store, DATABASE)
    results["prose_ratios"] = prose_ratios(store, DATABASE)
    store.close()

    return results


def variant_child(data_dir: Path, number: int) -> dict[str, Any]:
    """One variant in a fresh engine of its own: CPU per row grows with what an engine did
    before (databases made and dropped), which would bias the later variants."""
    inserts = [path.read_bytes() for path in sorted((data_dir / INSERTS_DIR).glob("*.jsonl"))]
    engine_dir = data_dir / f"variant-{number}"
    try:
        codecs = list(VARIANTS.values())[number]
        return variant(f"chdb://{engine_dir / 'chdb'}", "variant", codecs, inserts)
    finally:
        shutil.rmtree(engine_dir, ignore_errors=True)


def _run_child(*args: str) -> dict[str, Any]:
    output = subprocess.run(
        [sys.executable, "-m", "bench.storage_bench", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    figures: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return figures


def run(data_dir: Path) -> dict[str, Any]:
    results = _run_child("measure", str(data_dir))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    for _ in range(ROUNDS):
        for number, name in enumerate(VARIANTS):
            runs[name].append(_run_child("variant", str(data_dir), str(number)))
    results["variants"] = {
        name: {
            **{k: v for k, v in figures[-1].items() if not k.endswith(("_us_per_row", "_ms"))},
            **{
                key: min(f[key] for f in figures)
                for key in ("insert_cpu_us_per_row", "merge_cpu_us_per_row", "scan_ms")
            },
            "insert_cpu_us_per_row_rounds": [f["insert_cpu_us_per_row"] for f in figures],
        }
        for name, figures in runs.items()
    }
    return results


def _per_span(results: dict[str, Any], value: float) -> str:
    per_span = value / results["spans"]
    wire = results["wire_bytes"] / results["spans"]
    return f"{per_span:7.1f} B/span = {per_span / wire:.3f}x wire"


def _active(snapshot_: dict[str, Any], table: str | None = None) -> int:
    return sum(
        p["bytes_on_disk"]
        for p in snapshot_["parts"]
        if p["active"] and (table is None or p["table"] == table)
    )


def _part_count(snapshot_: dict[str, Any], table: str) -> int:
    return sum(p["parts"] for p in snapshot_["parts"] if p["active"] and p["table"] == table)


def _inactive(snapshot_: dict[str, Any]) -> int:
    return sum(p["bytes_on_disk"] for p in snapshot_["parts"] if not p["active"])


def _columns_report(results: dict[str, Any], columns: list[dict[str, Any]], top: int) -> None:
    spans = results["spans"]
    for table in TABLES:
        of_table = [c for c in columns if c["table"] == table]
        total = sum(c["compressed"] for c in of_table) or 1
        for c in of_table[:top]:
            print(
                f"    {table + '.' + c['column']:<40} {c['compressed'] / spans:7.1f} "
                f"{c['uncompressed'] / spans:8.1f} {c['uncompressed'] / max(c['compressed'], 1):6.1f}x "
                f"{c['compressed'] / total:6.1%}  {c['codec'] or 'LZ4 (default)'}"
            )
        if rest := of_table[top:]:
            print(
                f"    {table + ' (' + str(len(rest)) + ' other columns)':<40} "
                f"{sum(c['compressed'] for c in rest) / spans:7.1f}"
            )


def report(results: dict[str, Any]) -> None:
    spans = results["spans"]
    wire = results["wire_bytes"] / spans
    print(
        f"storage bench: {spans:,} spans (realistic agent traces, a secret every ~2 KB), "
        f"{wire:.0f} B/span on the wire (OTLP protobuf; gzip {results['wire_gzip_bytes'] / spans:.0f}),"
        f" {results['inserts']} inserts of {results['rows_per_insert']:,} rows"
    )
    for label, key in (
        ("after the inserts", "inserted"),
        ("just after OPTIMIZE FINAL", "optimized"),
        ("after merges, settled", "merged"),
    ):
        shot = results[key]
        print(
            f"  data dir {label:<26} {_per_span(results, shot['data_dir_bytes'])}  "
            f"(active parts {_active(shot) / spans:.0f} B/span, merged-away parts awaiting "
            f"removal {_inactive(shot) / spans:.0f} B/span)"
        )
    print(
        f"  target: after merges <= {TARGET_RATIO}x wire; merged-away parts were removed "
        f"{results['settle_s']:.0f} s after the merge"
    )
    merged = results["merged"]
    for table in TABLES:
        before = _active(results["inserted"], table)
        print(
            f"  {table:<24} active parts: {_per_span(results, _active(merged, table))} after merges;"
            f" before {before / spans:.1f} B/span in {_part_count(results['inserted'], table)} parts"
        )
    spans_part = next(p for p in merged["parts"] if p["active"] and p["table"] == "otel_traces")
    print(
        f"    otel_traces part: columns {spans_part['compressed'] / spans:.1f}, marks "
        f"{spans_part['marks'] / spans:.2f}, primary index {spans_part['primary_index'] / spans:.3f}, "
        f"skip indices {spans_part['skip_indices'] / spans:.2f} B/span"
    )
    print("  columns after merges (B/span compressed, uncompressed, ratio, share of the table):")
    _columns_report(results, results["columns"], top=8)
    print(
        "  skipping indices: "
        + ", ".join(
            f"{i['table']}.{i['index']} ({i['type']}) {i['compressed'] / spans:.3f} B/span"
            for i in merged["indices"]
        )
    )
    twice = results["stored_twice"]
    print(
        f"  text stored twice: {twice['input_key_also_in_maps']} spans whose Input attribute and "
        f"{twice['output_key_also_in_maps']} whose Output attribute is also in a map, "
        f"{twice['map_value_equal_to_a_body']} with a map value equal to a body; BodyAttributes "
        "(other attributes over 1 KiB): "
        + ", ".join(f"{k['key']} on {k['spans']:,} spans" for k in twice["body_attribute_keys"])
    )
    print(
        "  codec variants of SpanAttributes, Input, Output, BodyAttributes (fresh table, merges "
        f"stopped during the inserts, the least of {ROUNDS} interleaved rounds):"
    )
    base = results["variants"][SCHEMA_VARIANT]
    base_bytes = base["spans_bytes_on_disk"] / base["rows"]
    print(
        f"    {'variant':<24} {'otel_traces B/span':>19} {'x wire':>7} "
        f"{'insert CPU us/row':>18} {'merge CPU us/row':>17} {'body scan ms':>13}"
    )
    for name, figures in results["variants"].items():
        per_span = figures["spans_bytes_on_disk"] / figures["rows"]
        cpu = figures["insert_cpu_us_per_row"]
        print(
            f"    {name:<24} {per_span:8.1f} ({per_span / base_bytes - 1:+6.1%}) {per_span / wire:7.3f} "
            f"{cpu:8.1f} ({cpu / base['insert_cpu_us_per_row'] - 1:+6.1%}) "
            f"{figures['merge_cpu_us_per_row']:17.1f} {figures['scan_ms']:13.0f}"
        )
    again = results["variants"][SCHEMA_VARIANT + ", again"]["insert_cpu_us_per_row"]
    print(
        f"    noise: the schema's twice, {base['insert_cpu_us_per_row']:.1f} and {again:.1f} us/row "
        "(a difference smaller than theirs is not measured here)"
    )
    print(
        "  the same codecs on real prose (this repository's Markdown as 2 KB messages): "
        + ", ".join(f"{k} {v:.2f}x" for k, v in results["prose_ratios"].items())
    )
    bodies = {c["column"]: c for c in results["columns"] if c["table"] == "otel_traces"}
    body_raw = sum(bodies[name]["uncompressed"] for name in BODY_COLUMNS if name in bodies)
    body_stored = sum(bodies[name]["compressed"] for name in BODY_COLUMNS if name in bodies)
    rest = results["merged"]["data_dir_bytes"] - body_stored
    for codec in ("ZSTD(3)", "ZSTD(9)"):
        estimate = rest + body_raw / results["prose_ratios"][codec]
        print(
            f"    bodies compressing like that prose at {codec}: data dir after merges "
            f"~{_per_span(results, estimate).strip()} (an estimate; the wire size kept)"
        )
    print(
        f"  insert CPU with merges running (the store as migrated): "
        f"{results['insert_cpu_us_per_row_merges_running']:.1f} us/row"
    )


def main() -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix="afr-bench-storage-"))
    try:
        results = run(data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    report(results)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "storage.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    mode, where = sys.argv[1], Path(sys.argv[2])
    figures = measure(where) if mode == "measure" else variant_child(where, int(sys.argv[3]))
    print(json.dumps(figures))
