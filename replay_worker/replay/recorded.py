"""The recorded-model stand-in: a fork's prefix, answered from the capture.

``RecordedModel`` implements the SDK's ``Model`` interface in front of an agent's live model.
The model calls of a replay are numbered across all its agents (``Tape``): while the tape
holds a recorded answer for the next call, the stand-in answers with it — a
``ModelResponse`` built from the captured output items, with no usage, no request sent and
nothing charged — and records a ``replay.recorded_model_call`` span; once the tape is used
up, every call goes to the live model (through the ledger, as any replay's). Both model APIs
are answered the same way: the SDK hands items of the Responses shape to the runner
whichever API a model speaks, and the item ids are the SDK's own placeholder, which its
OpenAI models strip before a request.

A recorded call asked for by another agent than the one that made it means the replay left
the source's path inside the prefix, which a deterministic prefix cannot do: the run stops
with ``PrefixDiverged`` and its verdict is ``INCONCLUSIVE``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agents import Model, ModelResponse, ModelSettings, ModelTracing, Usage
from agents.exceptions import AgentsException
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.tracing import custom_span
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputItem,
    ResponseOutputMessage,
    ResponseOutputText,
)

from afr_exporter import semconv as sc
from replay_worker.replay.fork import RecordedAnswer

__all__ = ["PrefixDiverged", "RecordedModel", "Tape"]


class PrefixDiverged(AgentsException):
    """A recorded model call was asked for by another agent than the one that made it."""


class Tape:
    """The recorded answers of one replay, in order, shared by all its agents' models."""

    def __init__(self, answers: list[RecordedAnswer]) -> None:
        self._answers = answers
        self.position = 0
        self.diverged: str | None = None

    @property
    def exhausted(self) -> bool:
        return self.position >= len(self._answers)

    def take(self, agent: str) -> RecordedAnswer | None:
        """The next recorded answer, or None: the call is live."""
        if self.exhausted:
            return None
        answer = self._answers[self.position]
        if answer.agent is not None and answer.agent != agent:
            self.diverged = (
                f"model call llm:{answer.index} was made by {answer.agent!r} in the source,"
                f" by {agent!r} in the fork"
            )
            raise PrefixDiverged(f"the recorded prefix diverged: {self.diverged}")
        self.position += 1
        return answer


def _items(answer: RecordedAnswer) -> list[ResponseOutputItem]:
    items: list[ResponseOutputItem] = []
    for item in answer.items:
        if item["type"] == "message":
            texts = [c for c in item.get("content") or [] if c.get("type") == "output_text"]
            items.append(
                ResponseOutputMessage(
                    id=FAKE_RESPONSES_ID,
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[
                        ResponseOutputText(type="output_text", text=str(c["text"]), annotations=[])
                        for c in texts
                    ],
                )
            )
        elif item["type"] == "function_call":
            items.append(
                ResponseFunctionToolCall(
                    id=FAKE_RESPONSES_ID,
                    type="function_call",
                    call_id=str(item["call_id"]),
                    name=str(item["name"]),
                    arguments=str(item["arguments"]),
                    status="completed",
                )
            )
    return items


class RecordedModel(Model):
    """One agent's model in a fork: the tape's answer while it has one, else ``live``."""

    def __init__(self, tape: Tape, agent: str, live: Model) -> None:
        self._tape = tape
        self._agent = agent
        self._live = live

    def _answer(self) -> list[ResponseOutputItem] | None:
        answer = self._tape.take(self._agent)
        if answer is None:
            return None
        data = {"model_call": answer.index, "agent": self._agent}
        with custom_span(sc.REPLAY_RECORDED_MODEL_CALL_SPAN, data=data):
            pass
        return _items(answer)

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        items = self._answer()
        if items is None:
            return await self._live.get_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                *args,
                **kwargs,
            )
        return ModelResponse(output=items, usage=Usage(), response_id=None)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *args: Any,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        items = self._answer()
        if items is None:
            async for event in self._live.stream_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                *args,
                **kwargs,
            ):
                yield event
            return
        response = Response(
            id=FAKE_RESPONSES_ID,
            created_at=0,
            model="recorded",
            object="response",
            output=items,
            parallel_tool_calls=True,
            tool_choice="auto",
            tools=[],
        )
        yield ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=0
        )

    async def close(self) -> None:
        await self._live.close()
