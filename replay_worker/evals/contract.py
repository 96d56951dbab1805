"""The eval contract, ``afr.eval/v1``: defined once, here, with pydantic.

An eval is a portable JSON file: a self-contained replay fixture (so it runs with no access to
the store it came from), how to replay it (stub outputs, matching policy), and a closed set
of structural assertions over what the replayed run does. Free-text equality on model prose
is deliberately not offered: a fixing model that words its answer differently still passes.

The JSON Schema in ``schemas/afr.eval.v1.schema.json`` is generated from these models
(``afr eval schema``) and checked against them in CI. The id is content-addressed: the
SHA-256 of the canonical JSON of everything but the id itself, so a tampered file is
refused and the same runs always give the same file and id.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from replay_worker.replay.fixture import FIXTURE_VERSION, Fixture, FixtureError

__all__ = [
    "SCHEMA_VERSION",
    "Assertion",
    "EvalDocument",
    "EvalFileError",
    "Provenance",
    "ReplaySpec",
    "eval_id",
    "json_schema",
    "load_eval",
    "load_evals",
]

SCHEMA_VERSION = "afr.eval/v1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolCalled(_Strict):
    kind: Literal["tool_called"] = "tool_called"
    tool: str
    min_count: int = Field(default=1, ge=0)
    max_count: int | None = Field(default=None, ge=0)


class ToolNotCalled(_Strict):
    kind: Literal["tool_not_called"] = "tool_not_called"
    tool: str


class ToolArgument(_Strict):
    """An argument of the tool's calls, at a JSON Pointer (RFC 6901) into the arguments.
    Exactly one of ``equals``, ``matches`` (an RE2-compatible regular expression, searched
    in the value as text) and ``type`` (a JSON type name). ``call``: which calls must hold
    it: ``"any"`` (at least one), ``"all"``, ``"last"``."""

    kind: Literal["tool_argument"] = "tool_argument"
    tool: str
    pointer: str = Field(pattern=r"^(/([^~/]|~[01])*)*$")
    equals: Any = None
    matches: str | None = None
    type: Literal["string", "number", "integer", "boolean", "object", "array", "null"] | None = None
    call: Literal["any", "all", "last"] = "last"

    @model_validator(mode="after")
    def _one_check(self) -> ToolArgument:
        checks = {"equals", "matches", "type"} & self.model_fields_set
        if len(checks) != 1:
            raise ValueError("exactly one of equals, matches or type")
        return self


class HandoffTaken(_Strict):
    kind: Literal["handoff_taken"] = "handoff_taken"
    from_agent: str
    to_agent: str


class ToolOrder(_Strict):
    kind: Literal["tool_order"] = "tool_order"
    tools: list[str] = Field(min_length=1)
    mode: Literal["strict", "subsequence"] = "subsequence"


class MaxTurns(_Strict):
    kind: Literal["max_turns"] = "max_turns"
    turns: int = Field(ge=1)


class NoSpanErrored(_Strict):
    """No replayed tool call failed and the run raised nothing; ``span_types`` narrows it
    (``tool``, ``run``)."""

    kind: Literal["no_span_errored"] = "no_span_errored"
    span_types: list[Literal["tool", "run"]] | None = None


class GuardrailOutcome(_Strict):
    kind: Literal["guardrail"] = "guardrail"
    name: str
    triggered: bool


class OutputSchema(_Strict):
    kind: Literal["output_schema"] = "output_schema"
    json_schema: dict[str, Any] = Field(alias="schema")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class CostAtMost(_Strict):
    kind: Literal["cost_at_most"] = "cost_at_most"
    usd: float = Field(ge=0)


class LatencyAtMost(_Strict):
    kind: Literal["latency_at_most"] = "latency_at_most"
    seconds: float = Field(gt=0)


Assertion = Annotated[
    ToolCalled
    | ToolNotCalled
    | ToolArgument
    | HandoffTaken
    | ToolOrder
    | MaxTurns
    | NoSpanErrored
    | GuardrailOutcome
    | OutputSchema
    | CostAtMost
    | LatencyAtMost,
    Field(discriminator="kind"),
]


class Provenance(_Strict):
    source_run_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    replay_run_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    created_at: str
    """When the fixing replay ran (ISO 8601, UTC): from the store, so synthesis is
    deterministic."""


class ReplaySpec(_Strict):
    stub_outputs: dict[str, str] = Field(default_factory=dict)
    policy: Literal["exact", "strict", "lenient"] = "exact"
    model: str | None = None
    """The model the fixing replay used; ``afr eval run --model`` overrides it."""


class EvalDocument(_Strict):
    schema_version: Literal["afr.eval/v1"] = Field(default="afr.eval/v1", alias="schema")
    id: str = Field(pattern=r"^eval_[0-9a-f]{16}$")
    name: str = Field(min_length=1)
    provenance: Provenance
    fixture: dict[str, Any]
    replay: ReplaySpec = Field(default_factory=ReplaySpec)
    assertions: list[Assertion] = Field(min_length=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("fixture")
    @classmethod
    def _fixture(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("version") != FIXTURE_VERSION:
            raise ValueError(f"fixture version must be {FIXTURE_VERSION}")
        try:
            Fixture.from_json(value)
        except (FixtureError, TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a replay fixture: {type(exc).__name__}") from None
        return value

    def to_fixture(self) -> Fixture:
        return Fixture.from_json(self.fixture)

    def content(self) -> dict[str, Any]:
        """The document as JSON, without its id."""
        document = self.model_dump(mode="json", by_alias=True, exclude_none=False)
        document.pop("id")
        return document

    def to_json_text(self) -> str:
        document = self.model_dump(mode="json", by_alias=True)
        return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def eval_id(content: dict[str, Any]) -> str:
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "eval_" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def json_schema() -> dict[str, Any]:
    schema = EvalDocument.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://afr.dev/schemas/afr.eval.v1.schema.json"
    return schema


class EvalFileError(ValueError):
    """A bad eval file: its path, the JSON Pointer of the bad field, and why."""

    def __init__(self, path: Path, pointer: str, reason: str) -> None:
        super().__init__(f"{path}: {pointer or '/'}: {reason}")
        self.path, self.pointer, self.reason = path, pointer, reason


def _pointer(location: tuple[int | str, ...]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in location)


def load_eval(path: Path) -> EvalDocument:
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise EvalFileError(path, "", f"cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise EvalFileError(path, "", f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise EvalFileError(path, "", "an eval is a JSON object")
    if raw.get("schema") != SCHEMA_VERSION:
        raise EvalFileError(
            path, "/schema", f"unsupported schema version; expected {SCHEMA_VERSION}"
        )
    try:
        document = EvalDocument.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        location = tuple(p for p in first["loc"] if not _is_union_tag(p))
        raise EvalFileError(path, _pointer(location), first["msg"]) from None
    if eval_id(document.content()) != document.id:
        raise EvalFileError(path, "/id", "does not match the content (edited or tampered)")
    return document


def _is_union_tag(part: int | str) -> bool:
    """pydantic puts the discriminator's value into error locations; a pointer has none."""
    return isinstance(part, str) and part in _ASSERTION_KINDS


_ASSERTION_KINDS = frozenset(
    model.model_fields["kind"].default
    for model in (
        ToolCalled,
        ToolNotCalled,
        ToolArgument,
        HandoffTaken,
        ToolOrder,
        MaxTurns,
        NoSpanErrored,
        GuardrailOutcome,
        OutputSchema,
        CostAtMost,
        LatencyAtMost,
    )
)


def load_evals(paths: list[Path]) -> list[tuple[Path, EvalDocument]]:
    """Every ``*.json`` eval under ``paths`` (files or directories), sorted by path; the
    first bad file raises ``EvalFileError``."""
    files: list[Path] = []
    for path in paths:
        files += sorted(path.rglob("*.json")) if path.is_dir() else [path]
    return [(f, load_eval(f)) for f in sorted(set(files))]
