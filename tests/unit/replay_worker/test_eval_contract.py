"""The afr.eval/v1 contract: files round-trip, ids are content addresses, a bad file is
refused with its path, the JSON Pointer of the bad field and why, and the checked-in JSON
Schema is the one the models generate."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from replay_worker.evals.contract import (
    EvalDocument,
    EvalFileError,
    HandoffTaken,
    MaxTurns,
    NoSpanErrored,
    OutputSchema,
    Provenance,
    ReplaySpec,
    ToolArgument,
    ToolCalled,
    eval_id,
    json_schema,
    json_schema_text,
    load_eval,
    load_evals,
    write_eval,
)
from replay_worker.replay.fixture import AgentSpec, CapturedCall, Fixture

SCHEMA_FILE = Path(__file__).parents[3] / "schemas" / "afr.eval.v1.schema.json"
REFUND_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["order_id", "amount"],
}


def fixture_json() -> dict[str, Any]:
    fixture = Fixture(
        source_run_id="a" * 32,
        source_status="error",
        workflow="refund-desk",
        input="Please refund the duplicate 12.00 on order A-1001.",
        entry_agent="Refund Agent",
        agents={
            "Refund Agent": AgentSpec(
                instructions="Refund orders.",
                model="gpt-4.1-mini",
                tools=[
                    {
                        "name": "refund_order",
                        "description": "Refund an amount on an order.",
                        "parameters": REFUND_SCHEMA,
                        "strict": True,
                    }
                ],
            )
        },
        tool_calls=[
            CapturedCall(
                "refund_order",
                "call_1",
                '{"order_id": "A-1001", "amount": "12.OO"}',
                "An error occurred while running the tool. Please try again.",
                "Error running tool (non-fatal)",
            )
        ],
    )
    document: dict[str, Any] = json.loads(json.dumps(fixture.to_json()))
    return document


def document(**changes: Any) -> EvalDocument:
    fields: dict[str, Any] = {
        "name": "refund-desk: refund_order corrected",
        "provenance": Provenance(
            source_run_id="a" * 32,
            replay_run_id="b" * 32,
            created_at="2026-12-01T10:00:00.123456Z",
        ),
        "fixture": fixture_json(),
        "replay": ReplaySpec(stub_outputs={"refund_order": '{"status": "refunded"}'}),
        "assertions": [
            ToolArgument(tool="refund_order", pointer="/amount", equals=12.0, call="any"),
            ToolCalled(tool="refund_order", min_count=1, max_count=3),
            HandoffTaken(from_agent="Triage Agent", to_agent="Refund Agent"),
            MaxTurns(turns=5),
            NoSpanErrored(),
        ],
    }
    fields.update(changes)
    return EvalDocument.create(**fields)


def written(tmp_path: Path, raw: dict[str, Any], name: str = "bad.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(raw))
    return path


def test_a_written_eval_reloads_to_the_same_document_and_bytes(tmp_path: Path) -> None:
    original = document()
    path = write_eval(original, tmp_path)
    assert path == tmp_path / f"{original.id}.json"
    text = path.read_text()
    assert text.endswith("}\n") and text == original.to_json_text()
    assert list(json.loads(text)) == sorted(json.loads(text)), "sorted keys"
    loaded = load_eval(path)
    assert loaded == original
    assert loaded.to_json_text() == text
    assert loaded.to_fixture().tool_calls[0].arguments.endswith('"12.OO"}')
    stamp = path.stat().st_mtime_ns
    assert write_eval(loaded, tmp_path) == path
    assert path.stat().st_mtime_ns == stamp, "the same eval again changes nothing"
    assert [p.name for p in tmp_path.iterdir()] == [path.name], "no staging file left"


def test_the_id_is_a_content_address() -> None:
    first, again = document(), document()
    assert first.id == again.id and first.id.startswith("eval_") and len(first.id) == 21
    assert first.id == eval_id(first.content())
    assert "id" not in first.content()
    assert document(name="another name").id != first.id
    assert (
        document(assertions=[MaxTurns(turns=6)]).id != document(assertions=[MaxTurns(turns=5)]).id
    )


def test_a_tool_argument_keeps_exactly_the_check_it_was_given() -> None:
    null = ToolArgument(tool="t", pointer="/a~1b/0", equals=None)
    pattern = ToolArgument(tool="t", pointer="/id", matches=r"^A-\d+$")
    typed = ToolArgument(tool="t", pointer="", type="object")
    for assertion in (null, pattern, typed):
        dumped = assertion.model_dump(mode="json")
        assert len({"equals", "matches", "type"} & set(dumped)) == 1, dumped
        assert ToolArgument.model_validate(dumped) == assertion
    assert null.check == ("equals", None), '"equals": null checks for null'
    assert pattern.check == ("matches", r"^A-\d+$")
    assert typed.check == ("type", "object")


def test_an_output_schema_assertion_is_written_under_schema(tmp_path: Path) -> None:
    original = document(assertions=[OutputSchema(json_schema={"type": "object"}), NoSpanErrored()])
    raw = json.loads(original.to_json_text())
    assert raw["assertions"][0] == {"kind": "output_schema", "schema": {"type": "object"}}
    assert load_eval(write_eval(original, tmp_path)) == original


def bad(pointer: str, reason: str, edit: Callable[[dict[str, Any]], None]) -> Any:
    return pytest.param(edit, pointer, reason, id=reason.split(" ")[0] + pointer)


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        target = raw
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    return edit


def _delete(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        target = raw
        for part in path[:-1]:
            target = target[part]
        del target[path[-1]]

    return edit


@pytest.mark.parametrize(
    ("edit", "pointer", "reason"),
    [
        bad(
            "/assertions/0/kind",
            "unknown assertion kind",
            _set(("assertions", 0), {"kind": "final_output_equals", "text": "Done."}),
        ),
        bad("/assertions/1/kind", "an assertion needs a kind", _delete(("assertions", 1, "kind"))),
        bad(
            "/assertions/0/pointer",
            "String should match pattern",
            _set(("assertions", 0, "pointer"), "amount"),
        ),
        bad(
            "/assertions/0/pointer",
            "String should match pattern",
            _set(("assertions", 0, "pointer"), "/a~2b"),
        ),
        bad(
            "/schema",
            "unsupported schema version; expected afr.eval/v1",
            _set(("schema",), "afr.eval/v2"),
        ),
        bad("/schema", "unsupported schema version", _delete(("schema",))),
        bad(
            "/assertions/0",
            "exactly one of equals, matches or type",
            _set(("assertions", 0, "type"), "number"),
        ),
        bad(
            "/assertions/0",
            "matches is not an RE2 regular expression",
            lambda raw: raw["assertions"].__setitem__(
                0, {"kind": "tool_argument", "tool": "refund_order", "pointer": "", "matches": "("}
            ),
        ),
        bad(
            "/assertions/1",
            "max_count is below min_count",
            _set(("assertions", 1, "min_count"), 4),
        ),
        bad(
            "/assertions/2/to",
            "Extra inputs are not permitted",
            _set(("assertions", 2, "to"), "Refund Agent"),
        ),
        bad(
            "/assertions/3/schema",
            "not a valid JSON Schema at /type",
            _set(("assertions", 3), {"kind": "output_schema", "schema": {"type": 12}}),
        ),
        bad("/assertions", "at least 1 item", _set(("assertions",), [])),
        bad(
            "/provenance/source_run_id",
            "String should match pattern",
            _set(("provenance", "source_run_id"), "trace_123"),
        ),
        bad(
            "/provenance/created_at",
            "String should match pattern",
            _set(("provenance", "created_at"), "yesterday"),
        ),
        bad(
            "/fixture",
            "fixture version must be one of afr.fixture/2, afr.fixture/3",
            _set(("fixture", "version"), "afr.fixture/1"),
        ),
        bad("/fixture", "not a replay fixture", _delete(("fixture", "agents"))),
        bad("/replay/policy", "Input should be", _set(("replay", "policy"), "fuzzy")),
        bad(
            "/id",
            "does not match the content (edited or tampered)",
            _set(("assertions", 0, "equals"), "12.OO"),
        ),
        bad(
            "/id",
            "does not match the content (edited or tampered)",
            _set(("id",), "eval_" + "0" * 16),
        ),
        bad("/id", "String should match pattern", _set(("id",), "eval_1")),
    ],
)
def test_a_bad_eval_file_is_refused_with_path_pointer_and_reason(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], pointer: str, reason: str
) -> None:
    raw = json.loads(document().to_json_text())
    edit(raw)
    path = written(tmp_path, raw)
    with pytest.raises(EvalFileError) as refused:
        load_eval(path)
    assert (refused.value.path, refused.value.pointer) == (path, pointer)
    assert reason in refused.value.reason
    assert str(refused.value).startswith(f"{path}: {pointer}: ")


def test_a_file_that_is_not_an_eval_object_is_refused(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": "afr.eval/v1",')
    with pytest.raises(EvalFileError, match="not JSON") as refused:
        load_eval(broken)
    assert refused.value.pointer == ""
    with pytest.raises(EvalFileError, match="an eval is a JSON object"):
        load_eval(written(tmp_path, [1, 2], name="list.json"))  # type: ignore[arg-type]
    with pytest.raises(EvalFileError, match="cannot read"):
        load_eval(tmp_path / "missing.json")


def test_a_directory_loads_sorted_and_the_first_bad_file_names_itself(tmp_path: Path) -> None:
    one = write_eval(document(), tmp_path / "evals")
    two = write_eval(document(name="other"), tmp_path / "evals" / "nested")
    (tmp_path / "evals" / "README.md").write_text("not an eval")
    loaded = load_evals([tmp_path / "evals"])
    assert [path for path, _ in loaded] == sorted([one, two])
    raw = json.loads(one.read_text())
    raw["assertions"][0]["kind"] = "prose"
    bad_file = written(tmp_path / "evals", raw, name="zz-bad.json")
    with pytest.raises(EvalFileError) as refused:
        load_evals([tmp_path / "evals"])
    assert (refused.value.path, refused.value.pointer) == (bad_file, "/assertions/0/kind")


def test_the_checked_in_schema_is_the_one_the_models_generate() -> None:
    assert SCHEMA_FILE.read_text() == json_schema_text(), (
        "schemas/afr.eval.v1.schema.json is stale: run `afr eval schema -o "
        "schemas/afr.eval.v1.schema.json`"
    )


def test_the_json_schema_accepts_an_eval_and_rejects_what_the_loader_rejects() -> None:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    good = json.loads(document().to_json_text())
    assert list(validator.iter_errors(good)) == []
    for edit in (
        _set(("assertions", 0), {"kind": "final_output_equals", "text": "Done."}),
        _delete(("assertions", 1, "kind")),
        _set(("assertions", 0, "pointer"), "amount"),
        _set(("assertions", 0, "type"), "number"),  # two checks
        _delete(("assertions", 0, "equals")),  # no check
        _set(("schema",), "afr.eval/v2"),
        _delete(("schema",)),
    ):
        raw = copy.deepcopy(good)
        edit(raw)
        assert list(validator.iter_errors(raw)), raw


def test_afr_eval_schema_prints_and_writes_the_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from afr.cli import main

    assert main(["eval", "schema"]) == 0
    assert capsys.readouterr().out == json_schema_text()
    target = tmp_path / "schemas" / "afr.eval.v1.schema.json"
    assert main(["eval", "schema", "-o", str(target)]) == 0
    assert target.read_text() == json_schema_text()
