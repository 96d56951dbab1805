# ruff: noqa: S608 - attack SQL built from constants, sent as a client would
"""The adversarial corpus of the tenancy matrix (found by a reviewer attacking the embedded
store's scoping): (id, sql, url params[, text only the other project's rows can give]).

kind "leak": the answer (body, any status) must hold neither the other project's marker nor its
trace id, and must not be a 5xx. kind "oracle": as "leak", and the body must not be the answer
only the other project's rows can give (the `expect_not` text)."""

M = "THEIRS-MARKER-7f3a"
T = "afr.otel_traces"
SCALAR_MERGE = (
    "(SELECT arrayStringConcat(groupArray(SpanName), '|') FROM merge('afr', 'otel_traces'))"
)

LEAKS: list[tuple[str, str, dict[str, str]]] = [
    # A. the user's WHERE / PREWHERE / HAVING / JOIN ON runs before the project filter: error text
    ("where-toInt32", f"SELECT count() FROM {T} WHERE toInt32(SpanName) = 1", {}),
    ("prewhere-toInt32", f"SELECT count() FROM {T} PREWHERE toInt32(SpanName) = 1", {}),
    ("where-trace-id", f"SELECT count() FROM {T} WHERE toInt32(TraceId) = 1", {}),
    (
        "where-status-message",
        f"SELECT count() FROM {T} WHERE SpanName LIKE 'tool%' AND toInt32(concat('x', StatusMessage)) = 1",
        {},
    ),
    ("where-or", f"SELECT * FROM {T} WHERE TraceId = 'x' OR toInt32(SpanName) = 1", {}),
    ("subquery-where", f"SELECT count() FROM (SELECT * FROM {T}) WHERE toInt32(SpanName) = 1", {}),
    (
        "cte-where",
        f"WITH t AS (SELECT * FROM {T}) SELECT count() FROM t WHERE toInt32(SpanName) = 1",
        {},
    ),
    ("having", f"SELECT count() FROM {T} GROUP BY SpanName HAVING toInt32(SpanName) = 1", {}),
    (
        "join-on",
        f"SELECT count() FROM {T} AS a JOIN {T} AS b ON a.SpanId = b.SpanId AND toInt32(b.SpanName) = 1",
        {},
    ),
    (
        "in-subquery-where",
        f"SELECT count() FROM {T} WHERE SpanName IN (SELECT SpanName FROM {T} WHERE toInt32(SpanName) = 1)",
        {},
    ),
    ("runs-where", "SELECT count() FROM afr.runs WHERE toInt32(concat('x', TraceId)) = 1", {}),
    (
        "view-traces-trace-id-ts",
        "SELECT count() FROM afr.traces_trace_id_ts WHERE toInt32(concat('x', TraceId)) = 1",
        {},
    ),
    (
        "final-prewhere",
        f"SELECT count() FROM {T} FINAL PREWHERE toInt32(SpanName) = 1",
        {"apply_prewhere_after_final": "1"},
    ),
    (
        "native-where",
        f"SELECT count() FROM {T} WHERE toInt32(SpanName) = 1",
        {"default_format": "Native", "client_protocol_version": "54460"},
    ),
    # B. scalar subqueries are evaluated during the check's EXPLAIN QUERY TREE and replaced by
    #    __getScalar(hash): their reads (merge(), mergeTreeIndex()) never reach check_reads
    (
        "scalar-merge",
        "SELECT (SELECT groupArray((ProjectId, SpanName, TraceId, StatusMessage)) FROM merge('afr', 'otel_traces'))",
        {},
    ),
    (
        "scalar-merge-with",
        "WITH (SELECT groupArray(SpanName) FROM merge('afr', 'otel_traces')) AS x SELECT x",
        {},
    ),
    (
        "scalar-merge-where",
        f"SELECT count() FROM {T} WHERE SpanName = (SELECT any(SpanName) FROM merge('afr', 'otel_traces') WHERE ProjectId = 'elsewhere') OR 1",
        {},
    ),
    (
        "scalar-merge-runs-mv",
        "SELECT (SELECT groupArray(tuple(*)) FROM merge('afr', 'runs_mv'))",
        {},
    ),
    ("scalar-merge-regex", "SELECT (SELECT groupArray(TraceId) FROM merge('afr', '^runs'))", {}),
    (
        "scalar-mergeTreeIndex",
        "SELECT (SELECT groupArray(tuple(*)) FROM mergeTreeIndex('afr', 'otel_traces', with_marks = true))",
        {},
    ),
    (
        "tf-arg-scalar-merge",
        "SELECT * FROM generateRandom((SELECT concat('`', any(SpanName), '` UInt8') FROM merge('afr', 'otel_traces') WHERE ProjectId = 'elsewhere' AND SpanName != ''), 1, 10, 2) LIMIT 1 FORMAT TSVWithNames",
        {},
    ),
    # C. the check's own EXPLAIN evaluates first: an error there quotes the value even for a query
    #    the check would then refuse (it reads afr.runs_mv)
    (
        "explain-step-error",
        f"SELECT toFixedString('a', toUInt8(assumeNotNull({SCALAR_MERGE}))) FROM afr.runs_mv",
        {},
    ),
    (
        "explain-step-error-tf",
        f"SELECT * FROM afr.runs_mv, numbers(toUInt64(assumeNotNull({SCALAR_MERGE})))",
        {},
    ),
    # D. SHOW / DESCRIBE are never analysed
    (
        "show-columns-where-error",
        f"SHOW COLUMNS FROM otel_traces FROM afr WHERE field = 'SpanId' AND toInt32(assumeNotNull({SCALAR_MERGE})) = 1",
        {},
    ),
    (
        "describe-format-infer",
        "DESCRIBE TABLE format(JSONEachRow, (SELECT concat('{\"', any(SpanName), '\":1}') FROM merge('afr', 'otel_traces') WHERE ProjectId = 'elsewhere'))",
        {},
    ),
    (
        "describe-generateRandom",
        "DESCRIBE TABLE generateRandom((SELECT concat('`', any(SpanName), '` UInt8') FROM merge('afr', 'otel_traces') WHERE ProjectId = 'elsewhere' AND SpanName != ''))",
        {},
    ),
]

# Answers only the other project's rows can give (1 bit each: enough to read a value by bisection).
ORACLES: list[tuple[str, str, dict[str, str], str]] = [
    (
        "exists-scalar-merge",
        "SELECT EXISTS (SELECT 1 FROM merge('afr', 'otel_traces') WHERE SpanName LIKE '%THEIRS%')",
        {},
        "1\n",
    ),
    (
        "show-columns-in-merge",
        "SHOW COLUMNS FROM otel_traces FROM afr WHERE field IN (SELECT 'SpanId' FROM merge('afr', 'otel_traces') WHERE SpanName LIKE '%THEIRS%')",
        {},
        "SpanId",
    ),
    (
        "describe-fixedstring-count",
        "DESCRIBE (SELECT toFixedString('a', (SELECT toUInt8(count()) FROM merge('afr', 'otel_traces') WHERE ProjectId = 'elsewhere')))",
        {},
        "FixedString(4)",
    ),
    (
        "throwIf-where",
        "SELECT count() FROM afr.otel_traces WHERE throwIf(SpanName LIKE '%THEIRS%')",
        {},
        "FUNCTION_THROW_IF_VALUE_IS_NON_ZERO",
    ),
]

# Held from the start (no leak: a refusal, or our rows only).
HELD: list[tuple[str, str, dict[str, str]]] = [
    ("backticks", "SELECT * FROM `afr`.`otel_traces` WHERE ProjectId != 'shop'", {}),
    ("double-quotes", 'SELECT * FROM "afr"."otel_traces" WHERE ProjectId != \'shop\'', {}),
    ("unqualified", "SELECT * FROM otel_traces WHERE ProjectId != 'shop'", {}),
    ("case", "SELECT * FROM AFR.OTEL_TRACES", {}),
    ("one-ident", "SELECT * FROM `afr.otel_traces`", {}),
    ("database-system", "SELECT query FROM processes", {"database": "system"}),
    (
        "information-schema",
        "SELECT * FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = 'afr'",
        {},
    ),
    ("system-parts", "SELECT count() FROM system.parts", {}),
    ("scalar-processes", "SELECT (SELECT groupArray(query) FROM system.processes)", {}),
    ("scalar-runs-mv", "SELECT (SELECT groupArray(TraceId) FROM afr.runs_mv)", {}),
    ("scalar-view", f"SELECT (SELECT groupArray(SpanName) FROM view(SELECT * FROM {T}))", {}),
    ("in-merge", "SELECT 1 WHERE 'x' IN (SELECT SpanName FROM merge('afr', 'otel_traces'))", {}),
    ("loop", f"SELECT (SELECT groupArray(SpanName) FROM loop({T}) LIMIT 10)", {}),
    ("viewExplain", f"SELECT * FROM viewExplain('EXPLAIN', '', (SELECT * FROM {T}))", {}),
    ("explain-subquery", f"SELECT * FROM (EXPLAIN indexes = 1 SELECT * FROM {T})", {}),
    ("explain", f"EXPLAIN ESTIMATE SELECT * FROM {T}", {}),
    ("format-tf", "SELECT * FROM format(JSONEachRow, '{\"a\":1}')", {}),
    ("input", "SELECT * FROM input('a String')", {}),
    ("cluster", f"SELECT * FROM cluster('default', {T})", {}),
    ("python", "SELECT * FROM Python(plan)", {}),
    ("dictGet", "SELECT dictGet('afr.d', 'x', 1)", {}),
    ("joinGet", "SELECT joinGet('afr.j', 'x', 1)", {}),
    ("minmax-projection", f"SELECT min(Timestamp), max(Timestamp), count() FROM {T}", {}),
    ("runs-mv-final", "SELECT * FROM afr.runs_mv FINAL", {}),
    ("final-where", f"SELECT count() FROM {T} FINAL WHERE toInt32(SpanName) = 1", {}),
    ("global-in", f"SELECT count() FROM {T} WHERE TraceId GLOBAL IN (SELECT TraceId FROM {T})", {}),
    (
        "window",
        f"SELECT SpanName, row_number() OVER (PARTITION BY ProjectId ORDER BY Timestamp) FROM {T}",
        {},
    ),
    ("order-by-toInt32", f"SELECT SpanName FROM {T} ORDER BY toInt32(SpanName) LIMIT 1", {}),
    (
        "recursive-cte",
        "WITH RECURSIVE t AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM t WHERE n < 5) SELECT count() FROM t",
        {},
    ),
    ("multi-statement", "SELECT 1; SELECT * FROM afr.runs_mv", {}),
    ("nul-byte", "SELECT 1\x00 UNION ALL SELECT count() FROM afr.runs_mv", {}),
    ("comment-nul", "SELECT 1 /*\x00*/ UNION ALL SELECT count() FROM afr.runs_mv", {}),
    (
        "newline-literal",
        "SELECT 'a\nFORMAT TSV\nTABLE id: 1, table_name: system.one', count() FROM afr.runs_mv",
        {},
    ),
    ("alias-injection", "SELECT 1 AS `a\nTABLE id: 9, table_name: system.processes`", {}),
    ("compatibility", f"SELECT SpanName, ProjectId FROM {T}", {"compatibility": "23.1"}),
    ("settings-in-query", f"SELECT * FROM {T} SETTINGS additional_table_filters = {{}}", {}),
    ("settings-url-filters", f"SELECT * FROM {T}", {"additional_table_filters": "x"}),
    ("settings-url-cache", f"SELECT * FROM {T}", {"use_query_cache": "1"}),
    ("settings-odd-chars", f"SELECT * FROM {T}", {"max_threads": "1%26readonly%3D0"}),
    ("show-processlist", "SHOW PROCESSLIST", {}),
    ("show-create", "SHOW CREATE TABLE afr.otel_traces", {}),
    ("exists-table", "EXISTS TABLE afr.runs_mv", {}),
    (
        "completions",
        "SELECT word FROM system.completions WHERE word ILIKE '%MARKER%' OR word ILIKE '%billing%'",
        {},
    ),
]

# A client's input that was answered 5xx: now 4xx (none took the server down).
FIVE_XX: list[tuple[str, str, dict[str, str]]] = [
    ("throwIf", "SELECT throwIf(1)", {}),
    ("division", "SELECT intDiv(1, 0)", {}),
    ("parser-depth", "SELECT " + "(" * 3000 + "1" + ")" * 3000, {}),
    (
        "recursive-cte-depth",
        "WITH RECURSIVE t AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM t) SELECT count() FROM t",
        {},
    ),
    ("illegal-type", "SELECT * FROM numbers((SELECT count() FROM afr.otel_traces))", {}),
    ("template-format-bypass", "SELECT 1 FORMAT Template SETTINGS readonly = 1", {}),
    (
        "native-format-mismatch",
        "SELECT 1 FORMAT JSON SETTINGS readonly = 1",
        {"default_format": "Native", "client_protocol_version": "54460"},
    ),
    ("sampling", f"SELECT count() FROM {T} SAMPLE 1", {}),
]

# Resource limits the engine enforces: 500 as ClickHouse answers them; the server stays up.
LIMITS: list[tuple[str, str, dict[str, str]]] = [
    ("memory", "SELECT arrayMap(x -> x, range(100000000))", {}),
    (
        "result-bytes",
        "SELECT * FROM generateRandom('a Array(String)', 1, 1000000, 1000) LIMIT 1000",
        {},
    ),
]

# Reads the check of the query tree (layer 2) must refuse by itself, not only the filters.
LAYER2_GAPS: list[tuple[str, str, dict[str, str]]] = [
    ("final-suffix", "SELECT count(), any(ProjectId) FROM afr.runs_mv FINAL", {}),
    (
        "alias-less-table-in-constant",
        "SELECT toFixedString('a', (SELECT toUInt8(count()) FROM afr.runs_mv))",
        {},
    ),
    ("scalar-hides-system-table", "SELECT (SELECT count() FROM system.parts)", {}),
    ("scalar-hides-mv", "SELECT (SELECT groupArray(TraceId) FROM afr.runs_mv)", {}),
]
