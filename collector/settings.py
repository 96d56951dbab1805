"""The collector's one settings object (env prefix ``AFR_``), validated at start-up."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from afr_common.prices import PriceBook, Rates, parse_price_table
from afr_common.settings_sources import SecretsDirSettings
from afr_common.urls import redact_url

__all__ = ["SQL_DEFAULT_PORT", "CollectorSettings"]

MiB = 1024 * 1024
SQL_DEFAULT_PORT = 8123
"""ClickHouse's HTTP port: what Grafana's ClickHouse datasource and clients expect."""


class CollectorSettings(SecretsDirSettings):
    model_config = SettingsConfigDict(env_prefix="AFR_", extra="ignore")

    data_dir: Path = Path(".afr/data")
    """Embedded store, write-ahead log, API keys and generated secrets live here."""
    clickhouse_url: str | None = None
    """``http(s)://user:pw@host:8123/db`` for a ClickHouse server; unset -> chDB under data_dir."""
    clickhouse_password: SecretStr | None = None
    """Password of ``clickhouse_url``'s user when the URL holds none: kept out of the URL so
    it can come from a secret file (``secrets_dir``)."""
    database: str = "afr"
    clickhouse_cluster: str | None = None
    """The cluster (``remote_servers`` name) whose ``afr schema --cluster`` tables
    ``clickhouse_url`` serves: the collector checks that schema instead of migrating, and
    inserts and reads through the Distributed tables with the settings they need (ADR 22)."""
    secrets_dir: Path | None = None
    """A directory of files named like the variables (``AFR_CLICKHOUSE_PASSWORD``,
    ``AFR_REDACTION_KEY``...), each holding one value, as ``afr secrets init`` writes them and
    Compose or Kubernetes mount them; the environment wins over a file."""

    grpc_host: str = "127.0.0.1"
    grpc_port: int = Field(default=4317, ge=0, le=65535)
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=4318, ge=0, le=65535)

    max_request_bytes: int = Field(default=64 * MiB, ge=1024)
    """Largest accepted export, measured after decompression."""
    max_inflight_bytes: int = Field(default=256 * MiB, ge=MiB)
    """Request bytes being decoded and processed at once; more is refused with a retry hint
    (UNAVAILABLE / 503), one request is always let through. Decoding costs a few times a
    request's size, so this bounds the collector's working memory."""
    auth_enabled: bool = True
    """False serves every request as project ``default``: local experiments only."""

    batch_max_rows: int = Field(default=10_000, ge=1)
    batch_max_bytes: int = Field(default=32 * MiB, ge=MiB)
    """Each insert holds at most ``batch_max_rows`` rows and about this many bytes. An
    insert's peak memory follows its size: 10k rows of ~3 KB held the collector's peak RSS
    ~200 MiB under 20k rows' for the same CPU per row (ADR 43)."""
    batch_interval_s: float = Field(default=1.0, gt=0)
    """The writer inserts at most about once per interval (ClickHouse prefers <= 1 insert/s)."""
    wal_max_bytes: int = Field(default=1024 * MiB, ge=MiB)
    """Acknowledged-but-not-inserted data the log may hold before exports are refused."""
    wal_fsync: bool = True
    store_fsync: bool = True
    """Inserted parts are fsynced before their log segment is deleted (so an acknowledged
    span survives an OS crash or power loss, not only a killed process). Measured cost:
    ~10-30% per insert of 4k rows on this machine's disk; inserts run ~1/s in the background."""
    retry_after_s: float = Field(default=2.0, gt=0, le=5)
    """Retry hint for UNAVAILABLE/503; short, since OTLP clients give up after ~10 s."""
    ttl_days: int | None = Field(default=None, ge=1)
    """Spans (and run summaries) older than this many days are dropped; a change applies to
    the existing tables at the next start."""
    max_span_age_days: int = Field(default=30, ge=0)
    """A span that started longer ago than this is rejected on its own (a broken clock, or
    data that would spread one insert over years of partitions); 0: no bound (backfills).
    With ``ttl_days`` set, the smaller of the two applies."""
    max_span_future_s: float = Field(default=86_400.0, ge=0)
    """How far in the future a span may start (clock skew)."""

    ingest_workers: int = Field(default=0, ge=0, le=64)
    """Processes that decode, normalize, redact and encode (0: in the collector process).
    ``afr up`` defaults to one per CPU: the per-span work is Python, bound by the GIL."""

    redaction_enabled: bool = True
    """False stores content exactly as received: for data you know holds nothing secret."""
    redaction_prefilter: bool | None = None
    """Find where detectors can match with Hyperscan before RE2 matches them exactly
    (collector/processors/prefilter.py, ADR 29); unset: when the package is installed.
    What is stored is the same either way; only the speed differs."""
    redaction_config: Path | None = None
    """TOML file adding, disabling or allow-listing rules (see collector/privacy.py)."""
    redaction_key: SecretStr | None = None
    """HMAC key of the pseudonyms; unset -> generated once into data_dir/redaction.key."""
    failure_signatures: bool = True
    """Each errored span gets its failure cause at ingest, each failing run a signature, and
    runs cluster by it (ADR 34); False: no cause, no signature, no clusters (runs stay failed)."""
    max_body_bytes: int = Field(default=256 * 1024, ge=1024)
    max_span_bytes: int = Field(default=4 * MiB, ge=4096)

    api_max_runs: int = Field(default=200, ge=1, le=10_000)
    api_max_spans: int = Field(default=10_000, ge=1)
    api_default_lookback_s: float = Field(default=7 * 86_400, gt=0)
    api_query_timeout_s: float = Field(default=10.0, gt=0)

    model_prices: dict[str, Rates] = Field(default_factory=dict)
    """Prices by model name that override the price database (``genai-prices``, ADR 39):
    USD per million tokens, ``[input, output]``, ``[input, output, cache_read, cache_write]``
    (reasoning last, optionally) or an object with those names. The store's ``model_prices``
    table holds them and the database's prices of every model it has seen (the dashboards
    price tokens with it). A model neither knows is unpriced: its runs' cost is unknown
    (``cost_usd`` null), never $0."""

    sql_host: str = "127.0.0.1"
    sql_port: int | None = Field(default=None, ge=0, le=65535)
    """The read-only ClickHouse HTTP interface over the embedded store (``afr up --sql``,
    default port ``SQL_DEFAULT_PORT``); unset: off. See collector/sqlapi and ADR 17."""
    sql_user: str = Field(default="afr", min_length=1)
    sql_password: SecretStr | None = None
    """Unset -> generated once into data_dir/sql.password (mode 0600)."""
    sql_max_execution_time_s: float = Field(default=30.0, gt=0, le=3600)
    sql_max_memory_bytes: int = Field(default=1024 * MiB, ge=16 * MiB)
    sql_max_result_bytes: int | None = Field(default=256 * MiB, ge=1024)
    """Cap on a result's size in the engine (uncompressed blocks); None: no cap."""
    sql_max_result_rows: int | None = Field(default=None, ge=1)
    sql_max_concurrency: int | None = Field(default=None, ge=1, le=256)
    """Queries running at once (ClickHouse's ``max_concurrent_queries``); unset: two per core,
    no more than ``sql_memory_budget_bytes`` holds at ``sql_max_memory_bytes`` each, at least
    two. A query that finds every slot taken waits in the queue (``sql_queue_max_wait_ms``)."""
    sql_max_concurrency_per_user: int | None = Field(default=None, ge=1, le=256)
    """Slots one user (credential) may hold at once; unset: all but one, so another user
    always finds a slot coming free for it."""
    sql_memory_budget_bytes: int | None = Field(default=None, ge=16 * MiB)
    """Memory the SQL interface's queries may use together; unset: a quarter of the machine's
    (or the container's) memory."""
    sql_queue_max_wait_ms: int = Field(default=10_000, ge=0, le=600_000)
    """How long a query waits for a slot before it is refused (503,
    TOO_MANY_SIMULTANEOUS_QUERIES); 0: refused at once, as ClickHouse does by default."""
    sql_thread_priority: int = Field(default=10, ge=0, le=19)
    """The nice value of the SQL interface's query threads (ClickHouse's
    ``os_thread_priority``): above ingest's 0, so dashboards take the CPU ingest leaves."""
    sql_max_threads: int | None = Field(default=None, ge=1, le=256)
    """Engine threads one SQL-interface query may use (ClickHouse's ``max_threads``; a client
    may lower it); unset: half the cores, at least one, so the queries running at once leave
    ingest cores to write on."""
    sql_max_queued: int = Field(default=256, ge=1, le=100_000)
    """Queries waiting at once (one user: half of it); one more is refused at once."""
    sql_max_query_bytes: int = Field(default=MiB, ge=1024, le=64 * MiB)

    @model_validator(mode="after")
    def _check_sql(self) -> CollectorSettings:
        if (
            self.sql_port is not None
            and self.clickhouse_url
            and not self.clickhouse_url.startswith("chdb:///")
        ):
            raise ValueError(
                "the SQL interface (--sql, AFR_SQL_PORT) serves the embedded store only: with "
                "AFR_CLICKHOUSE_URL set, point Grafana's ClickHouse datasource at that server"
            )
        return self

    @model_validator(mode="after")
    def _check_cluster(self) -> CollectorSettings:
        if self.clickhouse_cluster and not (self.clickhouse_url or "").startswith("http"):
            raise ValueError(
                "AFR_CLICKHOUSE_CLUSTER needs AFR_CLICKHOUSE_URL: a node of that cluster "
                "(http:// or https://)"
            )
        return self

    @field_validator("model_prices", mode="before")
    @classmethod
    def _check_prices(cls, value: object) -> dict[str, Rates]:
        # "*" (the worker's budget price of unknown models) prices nothing here: a run's
        # cost is never a guess.
        table = parse_price_table(value)
        table.pop("*", None)
        return table

    def price_book(self) -> PriceBook:
        """The prices of runs: ``model_prices`` over the database."""
        return PriceBook(self.model_prices)

    @field_validator("clickhouse_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value in (None, ""):
            return None
        if not value.startswith(("http://", "https://", "chdb://")):
            raise ValueError("AFR_CLICKHOUSE_URL must start with http://, https:// or chdb://")
        return value

    @property
    def store_dsn(self) -> str:
        if self.clickhouse_url:
            return _with_password(self.clickhouse_url, self.clickhouse_password)
        return f"chdb://{(self.data_dir / 'chdb').resolve()}"

    @property
    def store_location(self) -> str:
        """Where the store is, safe to print or log: the URL without its password, or the
        embedded store's directory."""
        return redact_url(self.store_dsn)

    @property
    def span_window_ns(self) -> tuple[int, int] | None:
        """(before, after) now that a span's start may lie; None: the store's whole range."""
        days = min(
            [d for d in (self.max_span_age_days, self.ttl_days) if d],
            default=0,
        )
        if not days:
            return None
        return days * 86_400 * 1_000_000_000, int(self.max_span_future_s * 1_000_000_000)

    @property
    def max_partitions_per_insert(self) -> int:
        """ClickHouse's guard against an insert spread over many daily partitions, sized to
        the accepted window (0: unbounded, when the window is)."""
        window = self.span_window_ns
        if window is None:
            return 0
        return (window[0] + window[1]) // (86_400 * 1_000_000_000) + 3

    @property
    def wal_dir(self) -> Path:
        return self.data_dir / "wal"

    @property
    def keys_path(self) -> Path:
        return self.data_dir / "keys.sqlite"


def _with_password(url: str, password: SecretStr | None) -> str:
    """``url`` with ``password`` for its user (``default`` if it names none), unless the URL
    holds a password already."""
    parts = urlsplit(url)
    if password is None or parts.password is not None or parts.scheme == "chdb":
        return url
    user, _, host = parts.netloc.rpartition("@")  # the user as written: percent-encoded
    secret = quote(password.get_secret_value(), safe="")
    return urlunsplit(parts._replace(netloc=f"{user or 'default'}:{secret}@{host}"))
