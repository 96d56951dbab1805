"""The replay worker's settings (env prefix ``AFR_WORKER_``), validated at start-up."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from afr_common.prices import CONSERVATIVE_RATES, UNLISTED_MODEL, Rates, parse_price_table
from afr_common.settings_sources import SecretsDirSettings
from afr_common.urls import redact_url
from replay_worker.schedule import parse_schedule
from replay_worker.state_engines import POSTGRES_SCHEMES

_DATA_DIR_ENV = "AFR_DATA_DIR"


def _data_dir() -> Path:
    """The data directory as the collector and ``afr up`` resolve it."""
    return Path(os.environ.get(_DATA_DIR_ENV) or ".afr/data")


__all__ = ["DEFAULT_PRICES_PER_MTOK", "WorkerSettings"]

DEFAULT_PRICES_PER_MTOK: dict[str, Rates] = {UNLISTED_MODEL: CONSERVATIVE_RATES}
"""No override: every model the price database knows at its price, any other at "*"."""


class WorkerSettings(SecretsDirSettings):
    # populate_by_name: fields with an env alias (the AFR_SWEEP_* names) still take keywords.
    # hide_input_in_errors: a value that fails validation may be a secret (the state URL's
    # password, a key); the error names the field and the reason, never the value.
    model_config = SettingsConfigDict(
        env_prefix="AFR_WORKER_", extra="ignore", populate_by_name=True, hide_input_in_errors=True
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=0, le=65535)
    collector_url: str = "http://127.0.0.1:4318"
    """The collector's HTTP port: read API for runs, OTLP/HTTP is not used."""
    collector_otlp_endpoint: str = "http://127.0.0.1:4317"
    """Where replay traces go (OTLP/gRPC)."""
    collector_key: SecretStr | None = None
    """Project key for reading runs and writing replay traces."""
    webhook_secret: SecretStr | None = None
    """Standard Webhooks secret (``whsec_<base64>``) that signs ``POST /hooks/replay``."""
    webhook_tolerance_s: int = Field(default=300, ge=1)
    secrets_dir: Path | None = None
    """A directory of files named like the variables (``AFR_WORKER_COLLECTOR_KEY``,
    ``AFR_WORKER_WEBHOOK_SECRET``...), each holding one value, as ``afr secrets init`` writes
    them and Compose or Kubernetes mount them; the environment wins over a file."""

    model_base_url: str | None = None
    """OpenAI-compatible base URL; unset -> OpenAI (``OPENAI_BASE_URL`` if set)."""
    model_api_key: SecretStr | None = Field(default_factory=lambda: _env_secret("OPENAI_API_KEY"))
    default_model: str | None = None
    """Model for replays when the hook names none; unset -> the model the run used."""
    model_api: Literal["responses", "chat"] = "responses"
    max_output_tokens: int = Field(default=2048, ge=1)
    """Bound on every replay model call: sent to the model and used to reserve its cost."""
    max_turns: int = Field(default=12, ge=1)
    run_wait_s: float = Field(default=5.0, ge=0)
    """How long a job waits for a run the collector does not show yet: spans are visible
    up to one batch interval (1 s) after the collector acknowledged them."""

    job_budget_usd: float = Field(default=0.50, ge=0)
    day_budget_usd: float = Field(default=10.0, ge=0)
    prices_per_mtok: dict[str, Rates] = Field(default_factory=lambda: dict(DEFAULT_PRICES_PER_MTOK))
    """Budget prices that override the price database (``genai-prices``, as the collector
    prices runs: ADR 39), in ``AFR_MODEL_PRICES``' forms; ``"*"`` prices any model neither
    knows, conservatively (default ``CONSERVATIVE_RATES``: $10 in, $40 out)."""

    data_dir: Path = Field(default_factory=lambda: _data_dir() / "worker")
    """The state store (jobs, webhook ids, the day's spend, sweep slots) when ``state_url`` is
    unset: every worker process using the same directory shares them. A local disk. Unset:
    ``<AFR_DATA_DIR>/worker`` (``./.afr/data/worker``), where ``afr up`` starts its worker,
    so ``afr worker``, ``afr eval run`` and ``afr eval synthesize --assist`` share one day
    budget with it."""
    state_url: SecretStr | None = None
    """A PostgreSQL database shared by worker replicas on several hosts
    (``postgresql://user:password@host:5432/afr``; libpq URI, ``?sslmode=...`` and the like
    pass through). Unset: the SQLite file ``<data_dir>/state.sqlite``, for one machine. Only
    its redacted form (``state_location``) is ever printed."""
    concurrency: int = Field(default=2, ge=1, le=64)
    """Replay processes, each running one job at a time (the SDK's trace processors are
    process-global). Jobs beyond this wait in the queue."""
    jobs_per_process: int = Field(default=100, ge=1)
    """Jobs a replay process runs before it is replaced (1: a fresh process for every job)."""
    job_timeout_s: float = Field(default=600.0, gt=0)
    """A replay still running after this is killed and its job fails with the reason."""
    job_lease_s: float = Field(default=30.0, ge=1)
    """A running job's claim, renewed by its worker; another worker re-queues the job once
    the lease has run out (its worker died)."""
    shutdown_grace_s: float = Field(default=10.0, ge=0)
    """On shutdown, running jobs get this long to finish; the rest are put back in the queue."""
    evals_dir: Path = Path("evals")
    """Where evals live as ``<eval id>.json`` files, meant for version control:
    ``POST /hooks/evals`` and ``afr eval synthesize`` write them here."""

    # Nightly sweeps over ``evals_dir`` (replay_worker/scheduler.py). Documented under their
    # AFR_SWEEP_* names; AFR_WORKER_SWEEP_* works too.
    sweep_enabled: bool = Field(
        default=True, validation_alias=AliasChoices("AFR_SWEEP_ENABLED", "AFR_WORKER_SWEEP_ENABLED")
    )
    """Runs the schedule (``POST /hooks/sweeps`` works either way). A slot is scheduled only
    while ``evals_dir`` exists."""
    sweep_cron: str = Field(
        default="0 3 * * *",
        validation_alias=AliasChoices("AFR_SWEEP_CRON", "AFR_WORKER_SWEEP_CRON"),
    )
    """Five-field cron expression (Debian cron semantics, parsed by cronsim); an optional
    ``CRON_TZ=<zone> `` prefix gives its time zone."""
    sweep_tz: str | None = Field(
        default=None, validation_alias=AliasChoices("AFR_SWEEP_TZ", "AFR_WORKER_SWEEP_TZ")
    )
    """IANA zone the cron expression is read in; unset: UTC (or the expression's CRON_TZ)."""
    sweep_catchup_s: float = Field(
        default=6 * 3600.0,
        ge=0,
        validation_alias=AliasChoices("AFR_SWEEP_CATCHUP_S", "AFR_WORKER_SWEEP_CATCHUP_S"),
    )
    """A slot missed while no worker ran still runs (once) if a worker comes back within
    this long after it; only the latest missed slot is caught up."""
    sweep_timeout_s: float = Field(
        default=6 * 3600.0,
        gt=0,
        validation_alias=AliasChoices("AFR_SWEEP_TIMEOUT_S", "AFR_WORKER_SWEEP_TIMEOUT_S"),
    )
    """A sweep process still running after this is killed; the slot is retried (resuming).
    A slot run as shards whose shards have not all recorded after this is failed by a later
    slot's first shard (ADR 26)."""

    @field_validator("prices_per_mtok", mode="before")
    @classmethod
    def _prices(cls, value: object) -> dict[str, Rates]:
        table = parse_price_table(value, name="AFR_WORKER_PRICES_PER_MTOK")
        table.setdefault(UNLISTED_MODEL, CONSERVATIVE_RATES)
        return table

    @field_validator("state_url", mode="after")
    @classmethod
    def _state_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None  # AFR_WORKER_STATE_URL= (empty): the SQLite file
        url = value.get_secret_value().strip()
        if urlsplit(url).scheme.lower() not in POSTGRES_SCHEMES:
            raise ValueError(
                f"AFR_WORKER_STATE_URL must be a postgresql:// URL, not {redact_url(url)!r}"
            )
        return SecretStr(url)

    @model_validator(mode="after")
    def _sweep_schedule(self) -> WorkerSettings:
        parse_schedule(self.sweep_cron, self.sweep_tz)  # fail at start-up, with the reason
        return self

    @property
    def state_path(self) -> Path:
        """The SQLite file used when ``state_url`` is unset."""
        return self.data_dir / "state.sqlite"

    @property
    def state_location(self) -> str:
        """Where the state store is, safe to print: the URL without its password, or the
        SQLite file."""
        if self.state_url is not None:
            return redact_url(self.state_url.get_secret_value())
        return str(self.state_path)


def _env_secret(name: str) -> SecretStr | None:
    value = os.environ.get(name)
    return SecretStr(value) if value else None
