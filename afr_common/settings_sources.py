"""The one way the collector's and the worker's settings read secret files."""

from __future__ import annotations

from pathlib import Path

from pydantic import field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SecretsSettingsSource

__all__ = ["SecretsDirSettings"]


class SecretsDirSettings(BaseSettings):
    """Settings read from keywords, then the environment, then a dotenv file, then the files
    of the subclass's ``secrets_dir`` field (one file per variable, named like it, as
    ``afr secrets init`` writes them and Compose or Kubernetes mount them)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The directory is itself a setting (a keyword or the environment); unset or not a
        # directory, no file is read and the validator below says why.
        directory = init_settings().get("secrets_dir") or env_settings().get("secrets_dir")
        found = Path(directory) if directory else None
        files = SecretsSettingsSource(
            settings_cls, secrets_dir=found if found is not None and found.is_dir() else None
        )
        return (init_settings, env_settings, dotenv_settings, files)

    @field_validator("secrets_dir", check_fields=False)
    @classmethod
    def _check_secrets_dir(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_dir():
            prefix = str(cls.model_config.get("env_prefix") or "").upper()
            raise ValueError(f"{prefix}SECRETS_DIR: {value} is not a directory")
        return value
