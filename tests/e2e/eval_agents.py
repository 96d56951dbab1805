"""The refund desk as its code might look on the next deploy, for ``afr eval run --agent``.

``current``: the agents exactly as ``afr.incident`` defines them (what the eval captured).
``amount_dropped``: a refactor lost the ``amount`` parameter of ``refund_order`` — the
instructions still ask for it, the model still sends it, and the tool now refuses it.
"""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, function_tool

from afr.incident import REFUND_INSTRUCTIONS, TRIAGE_INSTRUCTIONS, RefundDesk, abuse_screen

MODEL = "gpt-4.1-mini"


def _desk(refund_agent: Agent[Any]) -> Agent[Any]:
    return Agent(
        name="Triage Agent",
        instructions=TRIAGE_INSTRUCTIONS,
        model=MODEL,
        handoffs=[refund_agent],
        input_guardrails=[abuse_screen],
    )


@function_tool
def refund_order(order_id: str) -> str:
    """Refund an order in full.

    Args:
        order_id: The order to refund, e.g. A-1001.
    """
    return json.dumps({"status": "refunded", "order_id": order_id})


current = _desk(
    Agent(
        name="Refund Agent",
        instructions=REFUND_INSTRUCTIONS,
        model=MODEL,
        tools=[RefundDesk().refund_tool()],
    )
)

amount_dropped = _desk(
    Agent(name="Refund Agent", instructions=REFUND_INSTRUCTIONS, model=MODEL, tools=[refund_order])
)


def not_an_agent() -> str:
    return "nope"
