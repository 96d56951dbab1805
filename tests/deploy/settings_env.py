"""The environment variables the code reads, derived from its settings models.

Deployment manifests are checked against this: every ``AFR_*``/``OTEL_*`` variable they set
must be one a settings model reads (a typo is a setting silently left at its default).
"""

from __future__ import annotations

from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from afr_exporter.settings import ExporterSettings
from collector.settings import CollectorSettings
from replay_worker.settings import WorkerSettings

__all__ = ["MODELS", "env_names"]

MODELS: dict[str, type[BaseSettings]] = {
    "collector": CollectorSettings,
    "worker": WorkerSettings,
    "exporter": ExporterSettings,
}


def env_names(model: type[BaseSettings]) -> dict[str, str]:
    """Every variable ``model`` reads (upper case) → the field it fills."""
    prefix = str(model.model_config.get("env_prefix", ""))
    names: dict[str, str] = {}
    for field_name, field in model.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            for choice in alias.choices:
                if isinstance(choice, str):
                    names[choice.upper()] = field_name
        elif isinstance(alias, str):
            names[alias.upper()] = field_name
        else:
            names[(prefix + (field.alias or field_name)).upper()] = field_name
    return names
