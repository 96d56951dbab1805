"""The worker's model client: the Agents SDK's real OpenAI model classes over one ``openai``
client built from the settings (``AFR_WORKER_MODEL_*``): OpenAI, or any compatible base URL.
Whoever builds a model from it wraps it in ``LedgerModel``, the one path of every model call.
"""

from __future__ import annotations

from collections.abc import Callable

from agents import Model
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI

from replay_worker.settings import WorkerSettings

__all__ = ["openai_model_factory"]


def openai_model_factory(settings: WorkerSettings) -> Callable[[str], Model]:
    """Real model classes over the real ``openai`` client: OpenAI, or any compatible base URL."""

    key = settings.model_api_key.get_secret_value() if settings.model_api_key else None
    client = AsyncOpenAI(
        base_url=settings.model_base_url, api_key=key or "missing-api-key", max_retries=1
    )

    def build(name: str) -> Model:
        if settings.model_api == "chat":
            return OpenAIChatCompletionsModel(model=name, openai_client=client)
        return OpenAIResponsesModel(model=name, openai_client=client)

    return build
