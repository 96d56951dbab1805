"""The eval contract, ``afr.eval/v1``: defined once, here, with pydantic.

An eval is a portable JSON file: a self-contained replay fixture (so it runs with no access to
the store it came from), how to replay it (stub outputs, matching policy), and a closed set
of structural assertions over what the replayed run does. Free-text equality on model prose
is deliberately not offered: a fixing model that words its answer differently still passes.

The JSON Schema in ``schemas/afr.eval.v1.schema.json`` is generated from these models
(``afr eval schema``) and checked against them in CI. The id is content-addressed: the
SHA-256 of the canonical JSON of everything but the id itself, so a tampered file is
refused and the same runs always give the same file and id.

What the models enforce beyond shapes, so a bad file fails at load with its path, the JSON
Pointer of the bad field and why, never halfway through a run: a ``tool_argument`` has
exactly one check (present keys count: ``"equals": null`` checks for JSON null) and its
``matches`` compiles as RE2; an ``output_schema`` is a valid JSON Schema (2020-12);
``max_count`` is not below ``min_count``; the fixture loads as a replay fixture.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

import re2
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from replay_worker.hooks.models import Fork
from replay_worker.replay.fixture import FIXTURE_VERSIONS, Fixture, FixtureError

__all__ = [
    "ASSERTION",
    "ASSERTIONS",
    "SCHEMA_VERSION",
    "Assertion",
    "CostAtMost",
    "EvalDocument",
    "EvalFileError",
    "GuardrailOutcome",
    "HandoffTaken",
    "LatencyAtMost",
    "MaxTurns",
    "NoSpanErrored",
    "OutputSchema",
    "Provenance",
    "ReplaySpec",
    "ToolArgument",
    "ToolCalled",
    "ToolNotCalled",
    "ToolOrder",
    "eval_id",
    "json_schema",
    "json_schema_text",
    "load_eval",
    "load_evals",
    "write_eval",
]

SCHEMA_VERSION = "afr.eval/v1"
JSON_POINTER_PATTERN = r"^(/([^~/]|~[01])*)*$"
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is reported with the file, not on stderr


def _require_kind(schema: dict[str, Any]) -> None:
    """``kind`` has a default for Python callers, but a file must name it: it is the tag
    that picks the assertion."""
    schema["required"] = ["kind", *[r for r in schema.get("required", []) if r != "kind"]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Assertion(_Strict):
    model_config = ConfigDict(json_schema_extra=_require_kind)


class ToolCalled(_Assertion):
    """The tool was called at least ``min_count`` and (when set) at most ``max_count`` times."""

    kind: Literal["tool_called"] = "tool_called"
    tool: str
    min_count: int = Field(default=1, ge=0)
    max_count: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> ToolCalled:
        if self.max_count is not None and self.max_count < self.min_count:
            raise ValueError("max_count is below min_count")
        return self


class ToolNotCalled(_Assertion):
    kind: Literal["tool_not_called"] = "tool_not_called"
    tool: str


_ARGUMENT_CHECKS = ("equals", "matches", "type")


def _argument_schema(schema: dict[str, Any]) -> None:
    _require_kind(schema)
    schema["oneOf"] = [{"required": [check]} for check in _ARGUMENT_CHECKS]


class ToolArgument(_Assertion):
    """An argument of the tool's calls, at a JSON Pointer (RFC 6901) into the arguments.
    Exactly one of ``equals`` (JSON equality: ``12`` equals ``12.0``), ``matches`` (an RE2
    regular expression, searched in the value as text) and ``type`` (a JSON type name); a
    check is the key being present, so ``"equals": null`` checks for null. ``call``: which
    calls must hold it: ``"any"`` (at least one), ``"all"``, ``"last"``."""

    model_config = ConfigDict(json_schema_extra=_argument_schema)

    kind: Literal["tool_argument"] = "tool_argument"
    tool: str
    pointer: str = Field(pattern=JSON_POINTER_PATTERN)
    equals: Any = None
    matches: str | None = None
    type: Literal["string", "number", "integer", "boolean", "object", "array", "null"] | None = None
    call: Literal["any", "all", "last"] = "last"

    @model_validator(mode="after")
    def _one_check(self) -> ToolArgument:
        checks = [c for c in _ARGUMENT_CHECKS if c in self.model_fields_set]
        if len(checks) != 1:
            raise ValueError("exactly one of equals, matches or type")
        if checks == ["matches"]:
            if self.matches is None:
                raise ValueError("matches must be a regular expression, not null")
            try:
                re2.compile(self.matches, _RE2_OPTIONS)
            except re2.error as exc:
                reason = (
                    exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
                )
                raise ValueError(f"matches is not an RE2 regular expression: {reason}") from None
        if checks == ["type"] and self.type is None:
            raise ValueError("type must be a JSON type name, not null")
        return self

    @model_serializer(mode="wrap")
    def _only_the_check(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Only the check that was given is written: a file reloads to the same assertion."""
        data: dict[str, Any] = handler(self)
        for check in _ARGUMENT_CHECKS:
            if check not in self.model_fields_set:
                data.pop(check, None)
        return data

    @property
    def check(self) -> tuple[Literal["equals", "matches", "type"], Any]:
        """Which check this is, and its operand."""
        if "equals" in self.model_fields_set:
            return "equals", self.equals
        if "matches" in self.model_fields_set:
            return "matches", self.matches
        return "type", self.type


class HandoffTaken(_Assertion):
    kind: Literal["handoff_taken"] = "handoff_taken"
    from_agent: str
    to_agent: str


class ToolOrder(_Assertion):
    kind: Literal["tool_order"] = "tool_order"
    tools: list[str] = Field(min_length=1)
    mode: Literal["strict", "subsequence"] = "subsequence"


class MaxTurns(_Assertion):
    kind: Literal["max_turns"] = "max_turns"
    turns: int = Field(ge=1)


class NoSpanErrored(_Assertion):
    """No replayed tool call failed and the run raised nothing; ``span_types`` narrows it
    (``tool``, ``run``)."""

    kind: Literal["no_span_errored"] = "no_span_errored"
    span_types: list[Literal["tool", "run"]] | None = None


class GuardrailOutcome(_Assertion):
    kind: Literal["guardrail"] = "guardrail"
    name: str
    triggered: bool


class OutputSchema(_Assertion):
    """The run's final output, as JSON, validates against ``schema`` (JSON Schema 2020-12)."""

    kind: Literal["output_schema"] = "output_schema"
    json_schema: dict[str, Any] = Field(alias="schema")

    model_config = ConfigDict(populate_by_name=True)

    @field_validator("json_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            Draft202012Validator.check_schema(value)
        except SchemaError as exc:
            where = "".join(f"/{p}" for p in exc.absolute_path)
            raise ValueError(f"not a valid JSON Schema at {where or '/'}: {exc.message}") from None
        return value


class CostAtMost(_Assertion):
    """The run's model cost, in USD, as the ledger settled it."""

    kind: Literal["cost_at_most"] = "cost_at_most"
    usd: float = Field(ge=0)


class LatencyAtMost(_Assertion):
    """The run's wall time."""

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
ASSERTIONS: tuple[type[_Assertion], ...] = (
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
ASSERTION: TypeAdapter[Assertion] = TypeAdapter(Assertion)
"""Validates one assertion on its own (a model-proposed one, ``--assist``)."""


class Provenance(_Strict):
    source_run_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    replay_run_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    created_at: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$")
    """When the fixing replay ran (ISO 8601, UTC): from the store, so synthesis is
    deterministic."""


class ReplaySpec(_Strict):
    stub_outputs: dict[str, str] = Field(default_factory=dict)
    policy: Literal["exact", "strict", "lenient"] = "exact"
    model: str | None = None
    """The model the fixing replay used; ``afr eval run --model`` overrides it."""
    fork: Fork | None = None
    """The fixing replay was a fork: the eval forks the fixture at the same step with the
    same overrides (its fixture must record the model calls: ``afr.fixture/3``)."""

    @model_serializer(mode="wrap")
    def _fork_when_forked(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No ``fork`` key for a whole replay: the content, and so the id, of an eval
        written before forks existed stays what it was."""
        data: dict[str, Any] = handler(self)
        if self.fork is None:
            data.pop("fork", None)
        return data


def _document_schema(schema: dict[str, Any]) -> None:
    schema["required"] = ["schema", *[r for r in schema.get("required", []) if r != "schema"]]


class EvalDocument(_Strict):
    schema_version: Literal["afr.eval/v1"] = Field(default="afr.eval/v1", alias="schema")
    id: str = Field(pattern=r"^eval_[0-9a-f]{16}$")
    name: str = Field(min_length=1)
    provenance: Provenance
    fixture: dict[str, Any]
    replay: ReplaySpec = Field(default_factory=ReplaySpec)
    assertions: list[Assertion] = Field(min_length=1)

    model_config = ConfigDict(populate_by_name=True, json_schema_extra=_document_schema)

    @field_validator("fixture")
    @classmethod
    def _fixture(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("version") not in FIXTURE_VERSIONS:
            raise ValueError(f"fixture version must be one of {', '.join(FIXTURE_VERSIONS)}")
        try:
            Fixture.from_json(value)
        except (FixtureError, TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a replay fixture: {type(exc).__name__}: {exc}") from None
        return value

    @classmethod
    def create(
        cls,
        *,
        name: str,
        provenance: Provenance,
        fixture: dict[str, Any],
        replay: ReplaySpec,
        assertions: list[Any],
    ) -> EvalDocument:
        """A document with its content-addressed id."""
        draft = cls(
            id="eval_" + "0" * 16,
            name=name,
            provenance=provenance,
            fixture=fixture,
            replay=replay,
            assertions=assertions,
        )
        return draft.model_copy(update={"id": eval_id(draft.content())})

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


def json_schema_text() -> str:
    """The schema as ``schemas/afr.eval.v1.schema.json`` holds it (``afr eval schema``)."""
    return json.dumps(json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


class EvalFileError(ValueError):
    """A bad eval file: its path, the JSON Pointer of the bad field, and why."""

    def __init__(self, path: Path, pointer: str, reason: str) -> None:
        super().__init__(f"{path}: {pointer or '(document)'}: {reason}")
        self.path, self.pointer, self.reason = path, pointer, reason


def _pointer(location: tuple[int | str, ...]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in location)


def load_eval(path: Path) -> EvalDocument:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
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
        location = _file_location(first["loc"])
        if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
            location += ("kind",)
            reason = (
                "unknown assertion kind; expected one of " + ", ".join(sorted(_ASSERTION_KINDS))
                if first["type"] == "union_tag_invalid"
                else "an assertion needs a kind"
            )
        else:
            reason = first["msg"].removeprefix("Value error, ")
        raise EvalFileError(path, _pointer(location), reason) from None
    if eval_id(document.content()) != document.id:
        raise EvalFileError(path, "/id", "does not match the content (edited or tampered)")
    return document


_ASSERTION_KINDS = frozenset(str(model.model_fields["kind"].default) for model in ASSERTIONS)


def _file_location(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """pydantic puts the discriminator's value after an assertion's index in error
    locations (``assertions/0/tool_argument/pointer``); the file has no such level."""
    return tuple(
        part
        for i, part in enumerate(loc)
        if not (i >= 2 and loc[i - 2] == "assertions" and isinstance(loc[i - 1], int))
        or part not in _ASSERTION_KINDS
    )


def load_evals(paths: list[Path]) -> list[tuple[Path, EvalDocument]]:
    """Every ``*.json`` eval under ``paths`` (files or directories), sorted by path; the
    first bad file raises ``EvalFileError``."""
    files: list[Path] = []
    for path in paths:
        files += sorted(path.rglob("*.json")) if path.is_dir() else [path]
    return [(f, load_eval(f)) for f in sorted(set(files))]


def write_eval(document: EvalDocument, directory: Path) -> Path:
    """Writes ``<directory>/<id>.json`` (pretty, sorted keys, newline at the end) and returns
    its path. Atomic, and a no-op when the file already holds these bytes: writing the same
    eval twice changes nothing, not even the file's modification time."""
    path = directory / f"{document.id}.json"
    text = document.to_json_text().encode()
    try:
        if path.read_bytes() == text:
            return path
    except FileNotFoundError:
        pass
    directory.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(dir=directory, prefix=f".{document.id}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text)
        os.chmod(staging, 0o644)
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise
    return path
