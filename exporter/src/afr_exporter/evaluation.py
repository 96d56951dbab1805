"""Evaluation results in the GenAI conventions' vocabulary: ``gen_ai.evaluation.result``.

A caller (the replay worker) describes each result with ``evaluation_result`` and puts the
list in the trace metadata under ``afr.evaluations`` before the trace ends; the converter
turns each entry into one span event on the trace's workflow root (``checked_evaluations``
says which entries are well-formed),
so any OTel backend that reads evaluation events shows them (docs/adr/0035). The metadata
is the carrier because it is the one thing the Agents SDK hands from the run to the
exporter at the trace's end; span events are what the exporter can write there. Pure, and
free of the Agents SDK and the OTel SDK, so the worker's own process can import it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from afr_exporter import semconv as sc

__all__ = [
    "MAX_EXPLANATION_CHARS",
    "EvaluationAttributes",
    "checked_evaluations",
    "evaluation_result",
]

MAX_EXPLANATION_CHARS = 2_000
"""An explanation says why in a sentence or a list of names; a longer one is cut (with
``…``) so that one result cannot grow the root span without bound."""

_STRING_KEYS = (
    sc.GEN_AI_EVALUATION_NAME,
    sc.GEN_AI_EVALUATION_SCORE_LABEL,
    sc.GEN_AI_EVALUATION_EXPLANATION,
    sc.ERROR_TYPE,
)

EvaluationAttributes = dict[str, str | float]


def _cut(text: str) -> str:
    return text if len(text) <= MAX_EXPLANATION_CHARS else text[: MAX_EXPLANATION_CHARS - 1] + "…"


def evaluation_result(
    name: str,
    *,
    label: str | None = None,
    value: float | None = None,
    explanation: str | None = None,
    error_type: str | None = None,
) -> EvaluationAttributes:
    """The attributes of one ``gen_ai.evaluation.result`` event: the name (required), the
    score's label and value where they apply, the explanation, and ``error.type`` when the
    evaluation itself ended in an error. Absent parts are left out, never sent empty."""
    attributes: EvaluationAttributes = {sc.GEN_AI_EVALUATION_NAME: name}
    if label is not None:
        attributes[sc.GEN_AI_EVALUATION_SCORE_LABEL] = label
    if value is not None:
        attributes[sc.GEN_AI_EVALUATION_SCORE_VALUE] = float(value)
    if explanation:
        attributes[sc.GEN_AI_EVALUATION_EXPLANATION] = _cut(explanation)
    if error_type:
        attributes[sc.ERROR_TYPE] = error_type
    return attributes


def _checked(entry: Any) -> EvaluationAttributes | None:
    """The entry as event attributes, keeping only the conventions' keys with their types;
    None for an entry without a name (the one required attribute)."""
    if not isinstance(entry, dict):
        return None
    name = entry.get(sc.GEN_AI_EVALUATION_NAME)
    if not isinstance(name, str) or not name:
        return None
    attributes: EvaluationAttributes = {}
    for key in _STRING_KEYS:
        value = entry.get(key)
        if isinstance(value, str) and value:
            attributes[key] = _cut(value) if key == sc.GEN_AI_EVALUATION_EXPLANATION else value
    score = entry.get(sc.GEN_AI_EVALUATION_SCORE_VALUE)
    if isinstance(score, int | float) and not isinstance(score, bool) and math.isfinite(score):
        attributes[sc.GEN_AI_EVALUATION_SCORE_VALUE] = float(score)
    return attributes


def checked_evaluations(entries: Any) -> list[EvaluationAttributes]:
    """The well-formed entries of ``afr.evaluations`` (a list of ``evaluation_result`` maps),
    in order; anything else is skipped, since trace metadata is the caller's and the exporter
    never raises for it."""
    if not isinstance(entries, Sequence) or isinstance(entries, str | bytes):
        return []
    return [a for a in map(_checked, entries) if a is not None]
