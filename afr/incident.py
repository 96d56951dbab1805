"""The canonical incident: the seeded failing run every part of afr is tested against.

A triage agent (with an input guardrail) hands off to a refund agent, which calls
``refund_order(order_id, amount)`` with the malformed amount ``"12.OO"``. The arguments fail
the tool's schema, the SDK reports the failure to the model, and the run ends without a
refund. It runs through the real ``Runner`` and the SDK's real OpenAI model classes,
pointed at the scripted model server, so it needs no API key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from agents import (
    Agent,
    GuardrailFunctionOutput,
    Model,
    RunConfig,
    RunContextWrapper,
    Runner,
    RunResult,
    TResponseInputItem,
    function_tool,
    gen_trace_id,
    input_guardrail,
)
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.models.openai_responses import OpenAIResponsesModel
from agents.tool import FunctionTool
from openai import AsyncOpenAI

from afr.scripted_model import ScriptedToolCall, ScriptedTurn

__all__ = [
    "INCIDENT_INPUT",
    "INCIDENT_WORKFLOW",
    "ModelApi",
    "RefundDesk",
    "build_model",
    "failing_script",
    "fixed_script",
    "run_incident",
]

ModelApi = Literal["responses", "chat"]

INCIDENT_WORKFLOW = "refund-desk"
INCIDENT_INPUT = "I was charged twice for order A-1001. Please refund the duplicate 12.00."
INCIDENT_MODEL = "gpt-4.1-mini"
TRIAGE_INSTRUCTIONS = (
    "You are the triage agent of an online shop. Route refund requests to the Refund Agent."
)
REFUND_INSTRUCTIONS = (
    "You are the refund agent. Call refund_order with the order id and the amount as a number, "
    "then tell the customer the outcome."
)
MALFORMED_AMOUNT = "12.OO"


@dataclass
class RefundDesk:
    """The shop's real side effects. A replay must never add to ``refunds``."""

    refunds: list[tuple[str, float]] = field(default_factory=list)

    def refund_tool(self) -> FunctionTool:
        desk = self

        @function_tool
        def refund_order(order_id: str, amount: float) -> str:
            """Refund an amount on an order.

            Args:
                order_id: The order to refund, e.g. A-1001.
                amount: The amount to refund, in the order's currency.
            """
            desk.refunds.append((order_id, amount))
            return json.dumps({"status": "refunded", "order_id": order_id, "amount": amount})

        return refund_order


@input_guardrail
async def abuse_screen(
    ctx: RunContextWrapper[Any], agent: Agent[Any], user_input: str | list[TResponseInputItem]
) -> GuardrailFunctionOutput:
    """Flags abusive requests before the triage agent acts on them."""
    text = user_input if isinstance(user_input, str) else json.dumps(user_input)
    flagged = "idiot" in text.lower()
    return GuardrailFunctionOutput(output_info={"flagged": flagged}, tripwire_triggered=flagged)


def build_model(api: ModelApi, base_url: str, api_key: str = "scripted-no-key") -> Model:
    """The SDK's real OpenAI model class for ``api``, pointed at ``base_url``."""
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    if api == "responses":
        return OpenAIResponsesModel(model=INCIDENT_MODEL, openai_client=client)
    return OpenAIChatCompletionsModel(model=INCIDENT_MODEL, openai_client=client)


def build_agents(model: Model, desk: RefundDesk) -> Agent[Any]:
    refund_agent: Agent[Any] = Agent(
        name="Refund Agent",
        instructions=REFUND_INSTRUCTIONS,
        model=model,
        tools=[desk.refund_tool()],
    )
    return Agent(
        name="Triage Agent",
        instructions=TRIAGE_INSTRUCTIONS,
        model=model,
        handoffs=[refund_agent],
        input_guardrails=[abuse_screen],
    )


def _script(amount_json: str, final_text: str) -> list[ScriptedTurn]:
    return [
        ScriptedTurn(
            tool_calls=(ScriptedToolCall("transfer_to_refund_agent", "{}", "call_handoff_1"),),
            expect_instructions_containing="triage agent",
        ),
        ScriptedTurn(
            tool_calls=(
                ScriptedToolCall(
                    "refund_order",
                    json.dumps({"order_id": "A-1001", "amount": json.loads(amount_json)}),
                    "call_refund_1",
                ),
            ),
            expect_instructions_containing="refund agent",
        ),
        ScriptedTurn(text=final_text, expect_instructions_containing="refund agent"),
    ]


def failing_script() -> list[ScriptedTurn]:
    """The model of the incident: it sends the amount as the string ``"12.OO"``."""
    return _script(
        json.dumps(MALFORMED_AMOUNT),
        "I'm sorry, I could not process the refund for order A-1001. Please try again later.",
    )


def fixed_script() -> list[ScriptedTurn]:
    """A model that gets the amount right: what a replay against a better model looks like."""
    return _script("12.0", "Done: 12.00 has been refunded on order A-1001.")


async def run_incident(
    model: Model,
    desk: RefundDesk | None = None,
    *,
    trace_id: str | None = None,
    trace_metadata: dict[str, Any] | None = None,
    include_sensitive_data: bool = True,
) -> RunResult:
    """Runs the refund desk once through the real ``Runner``; returns the SDK's result."""
    agent = build_agents(model, desk if desk is not None else RefundDesk())
    config = RunConfig(
        workflow_name=INCIDENT_WORKFLOW,
        trace_id=trace_id or gen_trace_id(),
        group_id="conv_refund_desk_demo",
        trace_metadata={"customer": "cust_42", **(trace_metadata or {})},
        trace_include_sensitive_data=include_sensitive_data,
    )
    return await Runner.run(agent, INCIDENT_INPUT, run_config=config)
