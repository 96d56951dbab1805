"""Attribute names the bridge writes: OTel GenAI conventions first, ``afr.*`` for the rest.

The GenAI names follow opentelemetry-semantic-conventions 0.66b2 (see docs/reference.md §2).
Everything the conventions have no name for (handoffs, guardrails, the SDK's own ids, trace
metadata, run kind) is an ``afr.*`` attribute defined here and nowhere else, so the
collector's normalizer and the replay worker read the same names the exporter writes.
"""

from __future__ import annotations

from typing import Final

# --- OpenTelemetry GenAI semantic conventions -------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"
GEN_AI_WORKFLOW_NAME: Final = "gen_ai.workflow.name"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
GEN_AI_TOOL_DEFINITIONS: Final = "gen_ai.tool.definitions"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
ERROR_TYPE: Final = "error.type"

# The evaluation event: ``gen_ai.evaluation.result`` and its attributes, as the GenAI
# conventions define them (semantic-conventions-genai, model/gen-ai/events.yaml, stability
# "development"; the same attribute names as opentelemetry-semantic-conventions 0.66b2's
# gen_ai_attributes). A replay's verdict, an eval's outcome and assertions and a sweep's
# result are emitted as this event on their run's workflow root (ADR 35).
EVENT_GEN_AI_EVALUATION_RESULT: Final = "gen_ai.evaluation.result"
GEN_AI_EVALUATION_NAME: Final = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
"""A double: 1.0 for a pass, 0.0 for a fail, absent where no score applies."""
GEN_AI_EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"
ERROR_TYPE_OTHER: Final = "_OTHER"
"""``error.type``'s fallback value, where no more exact class of error is known."""

OP_INVOKE_WORKFLOW: Final = "invoke_workflow"
OP_INVOKE_AGENT: Final = "invoke_agent"
OP_CHAT: Final = "chat"
OP_EXECUTE_TOOL: Final = "execute_tool"
PROVIDER_OPENAI: Final = "openai"

# --- afr's own ---------------------------------------------------------------------------
AFR_SPAN_TYPE: Final = "afr.span.type"
"""The SDK span type (agent, task, turn, response, generation, function, handoff, guardrail,
custom, mcp_tools, speech, transcription, speech_group, or a future one), or ``workflow``."""
AFR_SDK_TRACE_ID: Final = "afr.sdk.trace_id"
AFR_SDK_SPAN_ID: Final = "afr.sdk.span_id"
AFR_SDK_PARENT_ID: Final = "afr.sdk.parent_id"
AFR_WORKFLOW_NAME: Final = "afr.workflow.name"
AFR_TRACE_METADATA: Final = "afr.trace.metadata"
AFR_RUN_KIND: Final = "afr.run.kind"
AFR_SOURCE_RUN_ID: Final = "afr.source_run_id"
AFR_MODEL_API: Final = "afr.model.api"
AFR_MODEL_SETTINGS: Final = "afr.model.settings"
AFR_AGENT_HANDOFFS: Final = "afr.agent.handoffs"
AFR_AGENT_TOOLS: Final = "afr.agent.tools"
AFR_AGENT_OUTPUT_TYPE: Final = "afr.agent.output_type"
AFR_TASK_NAME: Final = "afr.task.name"
AFR_RUN_INPUT: Final = "afr.run.input"
"""On the task span: the input the run was started with (text, or JSON of input items), so
a run stopped before any model call (a tripped input guardrail) can still be replayed."""
AFR_RUN_MAX_TURNS: Final = "afr.run.max_turns"
AFR_AGENTS: Final = "afr.agents"
"""On the task span: JSON ``{"entry": name, "agents": {name: definition}}`` of every agent
reachable from the starting agent by handoffs — instructions (when static), model, the
model settings the agent (or the run config) set (never a server's echoed defaults), tool
definitions with their schemas, handoff targets, output schema — so a replay can enter an
agent the source never reached."""
AFR_TURN_NUMBER: Final = "afr.turn.number"
AFR_USAGE_AGGREGATE: Final = "afr.usage.aggregate"
"""JSON usage of a task or turn span: an aggregate of the model spans below it."""
AFR_HANDOFF_FROM: Final = "afr.handoff.from_agent"
AFR_HANDOFF_TO: Final = "afr.handoff.to_agent"
AFR_GUARDRAIL_NAME: Final = "afr.guardrail.name"
AFR_GUARDRAIL_TRIGGERED: Final = "afr.guardrail.triggered"
AFR_CUSTOM_NAME: Final = "afr.custom.name"
AFR_CUSTOM_DATA: Final = "afr.custom.data"
REPLAY_VERDICT_SPAN: Final = "replay.verdict"
"""The custom span a replay (or eval) run records its verdict on: its data holds the verdict,
the reason and the first divergence from the source run's tool calls."""
REPLAY_RECORDED_MODEL_CALL_SPAN: Final = "replay.recorded_model_call"
"""The custom span a fork records for each model call it answered from the capture (no
request was sent): its data holds the call's number (``model_call``, from 1) and agent."""
AFR_MCP_SERVER: Final = "afr.mcp.server"
AFR_MCP_TOOLS: Final = "afr.mcp.tools"
AFR_MCP_DATA: Final = "afr.mcp.data"
AFR_AUDIO_INPUT_FORMAT: Final = "afr.audio.input_format"
AFR_AUDIO_OUTPUT_FORMAT: Final = "afr.audio.output_format"
AFR_AUDIO_BYTES: Final = "afr.audio.base64_chars"
AFR_SPAN_DATA: Final = "afr.span.data"
"""JSON of ``span_data.export()`` for span types this bridge does not know yet."""
AFR_ERROR_DATA: Final = "afr.error.data"
AFR_CONTENT_CAPTURED: Final = "afr.content.captured"
AFR_TRUNCATED: Final = "afr.truncated"
"""Set by the collector, not the exporter: the key of the JSON document that replaces a value
cut to its size limit (``{"afr.truncated": true, "original_bytes": N, ...}``), and the mark
ending a cut name."""

RUN_KIND_CAPTURE: Final = "capture"
RUN_KIND_REPLAY: Final = "replay"
RUN_KIND_EVAL: Final = "eval"
RUN_KIND_SWEEP: Final = "sweep"
RUN_KINDS: Final = (RUN_KIND_CAPTURE, RUN_KIND_REPLAY, RUN_KIND_EVAL, RUN_KIND_SWEEP)

# Trace-metadata keys a caller (the replay worker) sets to mark what a run is.
METADATA_RUN_KIND: Final = "afr.run_kind"
METADATA_SOURCE_RUN_ID: Final = "afr.source_run_id"
METADATA_VERDICT: Final = "afr.verdict"
"""A replay's verdict, set on its trace metadata before the trace ends."""
METADATA_REPLAY: Final = "afr.replay"
"""How a replay was made: ``{policy, stub_outputs, model}`` (an eval synthesized from it
replays the same way)."""
METADATA_LINKED_RUNS: Final = "afr.linked_runs"
"""``{role: run id}`` of more runs the root links to (an eval run: its replay; a sweep: its
eval runs); each becomes an OTel link with ``afr.link.role``."""
AFR_LINK_ROLE: Final = "afr.link.role"
METADATA_DETERMINISTIC_IDS: Final = "afr.deterministic_ids"
"""``true``: the trace's OTel span ids derive from (trace id, the span's place in start
order) instead of the SDK's random span ids, so a run executed again under the same trace id
(a retried eval of a sweep) exports the same span ids and the store keeps it once."""

# Trace-metadata keys of an eval run (the root span's ``afr.trace.metadata``); the store's run
# summary reads the status, name and sweep id (collector/store/schema.py).
METADATA_EVAL_ID: Final = "afr.eval.id"
METADATA_EVAL_NAME: Final = "afr.eval.name"
METADATA_EVAL_STATUS: Final = "afr.eval.status"
METADATA_EVAL_ASSERTIONS: Final = "afr.eval.assertions"
"""``[{"kind", "expected", "actual", "passed"}]``, in the eval's order."""
METADATA_SWEEP_ID: Final = "afr.sweep.id"
"""On an eval run of a sweep and on the sweep's own run."""

# Trace-metadata keys of a sweep run.
METADATA_SWEEP_SLOT: Final = "afr.sweep.slot"
METADATA_SWEEP_TRIGGER: Final = "afr.sweep.trigger"
METADATA_SWEEP_COUNTS: Final = "afr.sweep.counts"
METADATA_SWEEP_COST_USD: Final = "afr.sweep.cost_usd"
METADATA_SWEEP_DURATION_S: Final = "afr.sweep.duration_s"

# What afr's evaluation events are called (``gen_ai.evaluation.name``) and the labels they
# carry (``gen_ai.evaluation.score.label``) besides a verdict's own name (docs/replay-and-evals.md).
METADATA_EVALUATIONS: Final = "afr.evaluations"
"""Trace metadata a caller (the replay worker) sets before the trace ends: a list of
``gen_ai.evaluation.result`` attribute maps, each emitted as one event on the workflow root
(and not repeated in ``afr.trace.metadata``)."""
EVALUATION_REPLAY_VERDICT: Final = "afr.replay.verdict"
EVALUATION_EVAL: Final = "afr.eval"
EVALUATION_ASSERTION_PREFIX: Final = "afr.eval.assertion."
"""Followed by the assertion's kind: ``afr.eval.assertion.tool_called``."""
EVALUATION_SWEEP: Final = "afr.sweep"
LABEL_PASS: Final = "pass"  # noqa: S105 -- a score label, not a password
LABEL_FAIL: Final = "fail"
LABEL_INCONCLUSIVE: Final = "inconclusive"
LABEL_ERROR: Final = "error"

AFR_EXPORTER_VERSION: Final = "afr.exporter.version"
"""Resource attribute: the afr-exporter version that exported the spans."""

SCOPE_NAME: Final = "afr.exporter"
