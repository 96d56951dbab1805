"""The replay worker's settings (env prefix ``AFR_WORKER_``), validated at start-up."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["DEFAULT_PRICES_PER_MTOK", "WorkerSettings"]

# USD per million tokens (input, output). "*" prices any model not listed, conservatively.
DEFAULT_PRICES_PER_MTOK: dict[str, tuple[float, float]] = {
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "*": (10.00, 40.00),
}


class WorkerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AFR_WORKER_", extra="ignore")

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
    prices_per_mtok: dict[str, tuple[float, float]] = Field(
        default_factory=lambda: dict(DEFAULT_PRICES_PER_MTOK)
    )

    data_dir: Path = Path(".afr/data/worker")
    """The state store (jobs, webhook ids, the day's spend): every worker process using the
    same directory shares them. A local disk. ``afr up`` uses ``<its data dir>/worker``."""
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

    @property
    def state_path(self) -> Path:
        return self.data_dir / "state.sqlite"


def _env_secret(name: str) -> SecretStr | None:
    value = os.environ.get(name)
    return SecretStr(value) if value else None
