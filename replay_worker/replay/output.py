"""The structured output a replayed agent must produce, from the schema captured for it.

The source agent's ``output_type`` is a Python type the worker does not have; its JSON
schema was recorded at capture. A replay asks the model for that schema and validates the
final output against it, so a replay that answers in the wrong shape fails as the source
did (the SDK raises ``ModelBehaviorError``) and its trace shows it where the source's did
(the SDK marks the current span, the turn, "Invalid JSON provided").
"""

from __future__ import annotations

import json
from typing import Any

from agents.agent_output import AgentOutputSchemaBase
from agents.exceptions import ModelBehaviorError
from agents.tracing import SpanError, get_current_span

from replay_worker.replay.validation import argument_validator

__all__ = ["CapturedOutputSchema"]


class CapturedOutputSchema(AgentOutputSchemaBase):
    def __init__(self, name: str, schema: dict[str, Any], strict: bool) -> None:
        self._name = name
        self._schema = schema
        self._strict = strict

    def is_plain_text(self) -> bool:
        return False

    def name(self) -> str:
        return self._name

    def json_schema(self) -> dict[str, Any]:
        return self._schema

    def is_strict_json_schema(self) -> bool:
        return self._strict

    def validate_json(self, json_str: str) -> Any:
        reason = argument_validator(self._schema, strict=self._strict)(json_str)
        if reason is not None:
            span = get_current_span()
            if span is not None:  # as agents.util._json.validate_json marks it
                span.set_error(SpanError(message="Invalid JSON provided", data={}))
            # The reason names fields and error kinds, never values.
            raise ModelBehaviorError(f"Invalid JSON when parsing output for {self._name}: {reason}")
        return json.loads(json_str)
