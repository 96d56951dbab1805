"""Exporter configuration: keyword arguments first, then environment, then defaults.

The OTLP connection follows the standard variables (``OTEL_EXPORTER_OTLP_*`` and their
``_TRACES_`` forms): endpoint, headers (``authorization=Bearer <key>``), timeout and
compression are read by the OpenTelemetry exporters themselves unless given here, so they
behave exactly as they do for any OTel SDK user. The protocol and afr's own knobs are
validated here, at install time, so a typo fails fast instead of losing spans later.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ExporterSettings"]

DEFAULT_MAX_QUEUE_SPANS = 65_536
DEFAULT_MAX_EXPORT_BATCH = 512
DEFAULT_SCHEDULE_DELAY_S = 0.2
DEFAULT_SHUTDOWN_TIMEOUT_S = 5.0

Protocol = Literal["grpc", "http/protobuf"]


class ExporterSettings(BaseSettings):
    """Settings of the afr bridge; every field can also be given to ``install()``."""

    model_config = SettingsConfigDict(
        env_prefix="AFR_EXPORTER_", populate_by_name=True, extra="forbid"
    )

    protocol: Protocol = Field(
        default="grpc",
        validation_alias=AliasChoices(
            "protocol",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
    )
    endpoint: str | None = None
    """OTLP endpoint; unset -> the OTel exporter reads ``OTEL_EXPORTER_OTLP_*ENDPOINT``."""
    headers: dict[str, str] | None = None
    """Extra headers; unset -> the OTel exporter reads ``OTEL_EXPORTER_OTLP_*HEADERS``."""
    timeout_s: float | None = Field(default=None, gt=0)
    """Per-export deadline including retries; unset -> ``OTEL_EXPORTER_OTLP_*TIMEOUT`` (10 s)."""
    compression: Literal["gzip", "none"] | None = None
    max_queue_spans: int = Field(default=DEFAULT_MAX_QUEUE_SPANS, ge=1)
    """Spans held for the background thread; beyond this, new spans are dropped and counted."""
    max_export_batch: int = Field(default=DEFAULT_MAX_EXPORT_BATCH, ge=1)
    schedule_delay_s: float = Field(default=DEFAULT_SCHEDULE_DELAY_S, gt=0)
    shutdown_timeout_s: float = Field(default=DEFAULT_SHUTDOWN_TIMEOUT_S, ge=0)
    retry_initial_s: float = Field(default=0.5, gt=0)
    """A batch the collector did not take is retried after this, doubling each time..."""
    retry_max_s: float = Field(default=30.0, gt=0)
    """...up to this; it is kept until it goes through (or the process exits)."""
    capture_content: bool = Field(
        default=True,
        validation_alias=AliasChoices(
            "capture_content",
            "AFR_EXPORTER_CAPTURE_CONTENT",
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
        ),
    )
    """False -> no messages, instructions, tool arguments or results leave the process."""
    semconv_opt_in: str = Field(
        default="",
        validation_alias=AliasChoices("semconv_opt_in", "OTEL_SEMCONV_STABILITY_OPT_IN"),
    )
    """As the OTel instrumentations read it: with ``gen_ai_latest_experimental`` among its
    comma-separated values the bridge writes the latest GenAI conventions' names (the
    workflow folded into ``invoke_agent``, ``gen_ai.agent.id``); else today's."""
    service_name: str | None = None
    """``service.name``; unset -> ``OTEL_SERVICE_NAME``, then ``afr-agent``."""

    @property
    def latest_genai_conventions(self) -> bool:
        return "gen_ai_latest_experimental" in {
            part.strip() for part in self.semconv_opt_in.split(",")
        }

    keep_openai_uploader: bool = False
    """Keep the SDK's default processor that uploads traces to OpenAI."""

    @field_validator("protocol", mode="before")
    @classmethod
    def _normalise_protocol(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value
