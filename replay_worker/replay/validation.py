"""Argument validation for stand-in tools: accept exactly what the captured SDK tool accepted.

A captured tool is known only by the JSON schema the SDK sent to the model
(``FunctionTool.params_json_schema``). The real tool did not validate with that schema: the
SDK's ``function_tool`` (agents 0.24.0, ``tool.py`` ``_prepare_arguments``) does

1. ``json.loads(input) if input else {}`` -- an empty string is ``{}``; anything ``json.loads``
   rejects (and only that: ``NaN``/``Infinity`` tokens and huge integers are accepted) fails;
   a value that is not a JSON object fails;
2. ``params_pydantic_model(**data)`` -- keyword construction, i.e. pydantic's Python-mode,
   *lax* validation of the model ``function_schema`` built from the Python signature with
   ``create_model(..., __config__=ConfigDict())``. So ``"2"`` and ``2.0`` pass for ``int``,
   ``2.5`` and ``"x"`` do not; ``"true"``/``1`` pass for ``bool``; ``"2026-13-05"`` fails for
   ``datetime.date``; and extra keys are *ignored* -- even though the strict JSON schema says
   ``additionalProperties: false`` -- unless the function has ``**kwargs`` (then the root model
   forbids extras, which only a non-strict schema can express);
3. ``to_call_args``: a ``**kwargs`` key that names one of the named parameters fails.

Any failure becomes a ``ModelBehaviorError`` (shown to the model through the tool's
``failure_error_function``).

This module rebuilds an equivalent pydantic model *from the JSON schema* and runs the same
three steps, so pydantic applies the same coercions, formats, constraints, required keys and
extras policy. Mapped faithfully:

- ``integer``/``number``/``string``/``boolean``/``null`` -> ``int``/``float``/``str``/``bool``/
  ``None``, with ``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``/
  ``multipleOf``/``minLength``/``maxLength``/``pattern`` as ``Field`` constraints (same regex
  engine as the SDK's model);
- string formats: ``date``, ``date-time``, ``time``, ``duration``, ``uuid`` (and ``uuid1``..
  ``uuid8``), ``uri`` (``AnyUrl``; ``HttpUrl`` when ``maxLength`` is 2083), ``binary``
  (``bytes``), ``path``, ``ipv4``/``ipv6``/``ipvany*`` addresses, interfaces and networks,
  ``password`` (``SecretStr`` accepts any string), ``email``/``name-email`` (``EmailStr``/
  ``NameEmail`` when ``email-validator`` is installed, else ``str``: without it the SDK could
  not have built such a tool either), ``fraction``, ``zoneinfo``, ``regex``; a
  ``contentMediaType: application/json`` string is ``Json[...]``;
- arrays: ``items`` -> ``list[T]``, ``uniqueItems`` -> ``set[T]`` (pydantic's set accepts
  duplicates), ``prefixItems`` -> ``tuple[...]``, ``minItems``/``maxItems``;
- objects with ``properties`` -> nested models (each property by its JSON name), objects with
  only ``additionalProperties`` -> ``dict[str, T]``, ``minProperties``/``maxProperties``;
- ``enum``/``const`` -> ``Literal`` (pydantic validates a plain ``Enum`` like the ``Literal`` of
  its values), except an integer enum from ``$defs``, which is rebuilt as an ``IntEnum`` (it
  also accepts ``"1"``);
- ``anyOf``/``oneOf`` (with ``discriminator``) -> unions (``None`` member -> optional),
  ``type`` lists, single ``allOf`` wrappers, ``$ref``/``$defs`` including recursive models;
- required keys and defaults: a non-strict schema's ``required`` is the model's. A strict
  schema marks every key required, so there a key is optional when it has a ``default`` or
  accepts ``null`` (the SDK strips ``default: null``), required otherwise;
- extras: ignored, except where a non-strict schema says ``additionalProperties: false``
  (pydantic emits that only for ``extra='forbid'``); ``**kwargs`` collisions are rejected.

Anything else in a (sub)schema -- ``not``, ``if``/``then``/``else``, ``patternProperties``,
multi-entry ``allOf``, a ``oneOf`` without ``discriminator``, an unknown ``format``, a
``$ref`` with constraining siblings, non-scalar ``const``/``enum`` values... -- is validated by
``jsonschema`` (Draft 2020-12 with its format checker) *for that sub-schema only*, on the JSON
value as parsed (no lax coercion there). If the whole schema cannot be rebuilt, the whole
argument object is checked that way.

What a JSON schema cannot tell apart -- the stand-in takes the first reading of each pair
(pinned by ``test_schema_ambiguities`` in
``tests/unit/replay_worker/test_validation_differential.py``): ``int`` vs ``StrictInt`` (and
every ``Strict*``), ``float`` vs ``FiniteFloat``, ``datetime`` vs ``AwareDatetime``/
``NaiveDatetime``/``PastDatetime``..., ``date`` vs ``PastDate``/``FutureDate``, ``IntEnum`` vs a
plain ``Enum`` with int values, ``dict[str, X]`` vs ``dict[int, X]``, ``float | str`` vs
``Decimal`` (both ``anyOf: [number, string]``), ``AnyUrl`` vs ``AnyHttpUrl``/``FileUrl``...,
``Path`` vs ``FilePath``/``DirectoryPath`` (existence on the capture machine), no validator vs
custom validators. In a strict schema: ``x: X | None = None`` vs ``x: X | None`` (required);
required vs ``Field(default_factory=...)`` and ``*args``; in a nested model, the default
``extra='ignore'`` vs ``extra='forbid'``. In the ``**kwargs`` collision rule: keyword-bindable
parameters vs positional-only ones, and a non-required list without default is taken for
``*args``.

Rejection reasons name field paths (property names from the schema; list indices; any other
key as ``*``) and pydantic error types, never argument values or unknown key names.
"""

from __future__ import annotations

import copy
import datetime
import enum
import importlib.util
import ipaddress
import json
import keyword
import pathlib
import re
import threading
import zoneinfo
from collections import OrderedDict
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Annotated, Any, Literal, Union
from urllib.parse import unquote
from uuid import UUID

import jsonschema
from pydantic import (
    AnyUrl,
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    IPvAnyAddress,
    IPvAnyInterface,
    IPvAnyNetwork,
    Json,
    PlainValidator,
    SecretStr,
    ValidationError,
    create_model,
)
from pydantic.types import UUID1, UUID3, UUID4, UUID5, UUID6, UUID7, UUID8
from pydantic_core import PydanticCustomError

__all__ = ["ArgumentValidator", "argument_validator"]

_MAX_REASON_ERRORS = 3

# Keywords that describe but never constrain an instance.
_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$comment",
        "$schema",
        "$id",
        "$anchor",
        "$defs",
        "definitions",
    }
)
_NUMBER_KEYS = frozenset(
    {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)
_STRING_KEYS = frozenset(
    {"type", "format", "minLength", "maxLength", "pattern", "contentMediaType", "contentSchema"}
)
_ARRAY_KEYS = frozenset({"type", "items", "prefixItems", "minItems", "maxItems", "uniqueItems"})
_OBJECT_KEYS = frozenset(
    {"type", "properties", "required", "additionalProperties", "minProperties", "maxProperties"}
)
_TYPE_KEYS: dict[str, frozenset[str]] = {
    "null": frozenset({"type"}),
    "boolean": frozenset({"type"}),
    "integer": _NUMBER_KEYS,
    "number": _NUMBER_KEYS,
    "string": _STRING_KEYS,
    "array": _ARRAY_KEYS,
    "object": _OBJECT_KEYS,
}
_HTTP_URL_MAX_LENGTH = 2083
_Extra = Literal["ignore", "forbid", "allow"]

# Special forms and generics applied to types computed at run time (opaque to mypy).
_ANNOTATED: Any = Annotated
_LITERAL: Any = Literal
_UNION: Any = Union
_LIST: Any = list
_SET: Any = set
_DICT: Any = dict
_TUPLE: Any = tuple
_JSON: Any = Json


def _email_types() -> tuple[Any, Any]:
    if importlib.util.find_spec("email_validator") is None:
        return str, str
    from pydantic import EmailStr, NameEmail

    return EmailStr, NameEmail


_EMAIL_STR, _NAME_EMAIL = _email_types()

# format -> type whose own validation is the whole meaning of the format.
_FORMATS: dict[str, Any] = {
    "date": datetime.date,
    "date-time": datetime.datetime,
    "time": datetime.time,
    "duration": datetime.timedelta,
    "uuid": UUID,
    "uuid1": UUID1,
    "uuid3": UUID3,
    "uuid4": UUID4,
    "uuid5": UUID5,
    "uuid6": UUID6,
    "uuid7": UUID7,
    "uuid8": UUID8,
    "binary": bytes,
    "password": SecretStr,
    "email": _EMAIL_STR,
    "name-email": _NAME_EMAIL,
    # FilePath/DirectoryPath check existence on the capture machine: not replayable, so any
    # path the SDK would parse is accepted.
    "path": pathlib.Path,
    "file-path": pathlib.Path,
    "directory-path": pathlib.Path,
    "ipv4": ipaddress.IPv4Address,
    "ipv6": ipaddress.IPv6Address,
    "ipv4interface": ipaddress.IPv4Interface,
    "ipv6interface": ipaddress.IPv6Interface,
    "ipv4network": ipaddress.IPv4Network,
    "ipv6network": ipaddress.IPv6Network,
    "ipvanyaddress": IPvAnyAddress,
    "ipvanyinterface": IPvAnyInterface,
    "ipvanynetwork": IPvAnyNetwork,
    "fraction": Fraction,
    "zoneinfo": zoneinfo.ZoneInfo,
    "regex": re.Pattern,
}


class _Unmappable(Exception):
    """A sub-schema with no faithful pydantic equivalent: validate it with jsonschema."""


def _constraining_keys(node: Mapping[str, Any]) -> set[str]:
    return set(node) - _ANNOTATIONS


def _field_name(index: int, name: str, taken: set[str]) -> str:
    usable = (
        name.isidentifier()
        and not keyword.iskeyword(name)
        and not name.startswith("_")
        and not name.startswith("model_")
        and not hasattr(BaseModel, name)
    )
    if usable:
        return name
    candidate = f"field_{index}_"
    while candidate in taken:
        candidate += "_"
    return candidate


class _Builder:
    """Rebuilds pydantic types from one root schema."""

    def __init__(self, root: dict[str, Any], strict: bool) -> None:
        self.root = root
        self.strict = strict
        self.namespace: dict[str, Any] = {}
        self.models: list[type[BaseModel]] = []
        self._ref_types: dict[str, Any] = {}
        self._ref_in_progress: dict[str, str | None] = {}
        self._counter = 0
        self.fallbacks = 0
        self._jsonschema_class = jsonschema.validators.validator_for(
            root, default=jsonschema.Draft202012Validator
        )

    # --- entry points -------------------------------------------------------------------

    def root_model(self) -> type[BaseModel]:
        model = self._object_model(self.root)
        for _ in range(len(self.models)):
            incomplete = [m for m in self.models if not m.__pydantic_complete__]
            if not incomplete:
                break
            for built in incomplete:
                built.model_rebuild(_types_namespace=self.namespace, raise_errors=False)
        if not model.__pydantic_complete__:
            raise _Unmappable("unresolved references")
        return model

    def annotation(self, node: object) -> Any:
        """The type for a sub-schema; jsonschema for whatever cannot be mapped."""
        if node is True:
            return Any
        if not isinstance(node, dict):
            return self.fallback(node)
        try:
            return self._annotation(node)
        except _Unmappable:
            return self.fallback(node)

    # --- helpers ------------------------------------------------------------------------

    def _name(self, hint: str) -> str:
        self._counter += 1
        safe = re.sub(r"\W", "_", hint)[:40] or "Model"
        return f"{safe}_{self._counter}"

    def resolve(self, ref: str) -> dict[str, Any]:
        if not ref.startswith("#/"):
            raise _Unmappable(ref)
        target: object = self.root
        for raw in unquote(ref[2:]).split("/"):
            key = raw.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or key not in target:
                raise _Unmappable(ref)
            target = target[key]
        if not isinstance(target, dict):
            raise _Unmappable(ref)
        return target

    def accepts_null(self, node: object, depth: int = 0) -> bool:
        if node is True:
            return True
        if not isinstance(node, dict) or depth > 20:
            return False
        if "$ref" in node:
            try:
                return self.accepts_null(self.resolve(node["$ref"]), depth + 1)
            except _Unmappable:
                return False
        typ = node.get("type")
        if typ == "null" or (isinstance(typ, list) and "null" in typ):
            return True
        for key in ("anyOf", "oneOf"):
            members = node.get(key)
            if isinstance(members, list) and any(self.accepts_null(m, depth + 1) for m in members):
                return True
        if "const" in node:
            return node["const"] is None
        if "enum" in node:
            return isinstance(node["enum"], list) and None in node["enum"]
        all_of = node.get("allOf")
        if isinstance(all_of, list):
            return all(self.accepts_null(m, depth + 1) for m in all_of)
        return not _constraining_keys(node)

    def fallback(self, node: object) -> Any:
        self.fallbacks += 1
        schema: Any = node
        if isinstance(node, dict):
            schema = dict(node)
            for defs_key in ("$defs", "definitions"):
                root_defs = self.root.get(defs_key)
                if isinstance(root_defs, dict):
                    schema[defs_key] = {**root_defs, **schema.get(defs_key, {})}
        validator = self._jsonschema_class(
            schema, format_checker=self._jsonschema_class.FORMAT_CHECKER
        )

        def check(value: Any) -> Any:
            error = jsonschema.exceptions.best_match(validator.iter_errors(value))
            if error is not None:
                raise PydanticCustomError(
                    "json_schema",
                    "does not satisfy the schema keyword {keyword}",
                    {"keyword": str(error.validator)},
                )
            return value

        return _ANNOTATED[Any, PlainValidator(check)]

    # --- mapping ------------------------------------------------------------------------

    def _annotation(self, node: dict[str, Any]) -> Any:
        keys = _constraining_keys(node)
        if "$ref" in node:
            if keys != {"$ref"}:
                raise _Unmappable("$ref with constraining siblings")
            return self._ref(node["$ref"])
        if "allOf" in node:
            all_of = node["allOf"]
            if keys != {"allOf"} or not isinstance(all_of, list) or len(all_of) != 1:
                raise _Unmappable("allOf")
            return self.annotation(all_of[0])
        if "anyOf" in node or "oneOf" in node:
            return self._union(node, keys)
        if "const" in node or "enum" in node:
            return self._literal(node, keys)
        typ = node.get("type")
        if typ is None:
            if "properties" in node:
                typ = "object"
            elif not keys:
                return Any
            else:
                raise _Unmappable("untyped constraints")
        if isinstance(typ, list):
            if not typ or not all(t in _TYPE_KEYS for t in typ):
                raise _Unmappable("type list")
            self._only(keys, set().union(*(_TYPE_KEYS[t] for t in typ)))
            members = [
                self._annotation(
                    {k: v for k, v in node.items() if k in _ANNOTATIONS or k in _TYPE_KEYS[t]}
                    | {"type": t}
                )
                for t in typ
            ]
            return members[0] if len(members) == 1 else _UNION[tuple(members)]
        if typ == "null":
            self._only(keys, {"type"})
            return None
        if typ == "boolean":
            self._only(keys, {"type"})
            return bool
        if typ in ("integer", "number"):
            self._only(keys, _NUMBER_KEYS)
            return self._constrained(
                int if typ == "integer" else float,
                node,
                {
                    "minimum": "ge",
                    "maximum": "le",
                    "exclusiveMinimum": "gt",
                    "exclusiveMaximum": "lt",
                    "multipleOf": "multiple_of",
                },
            )
        if typ == "string":
            self._only(keys, _STRING_KEYS)
            return self._string(node)
        if typ == "array":
            self._only(keys, _ARRAY_KEYS)
            return self._array(node)
        if typ == "object":
            self._only(keys, _OBJECT_KEYS)
            return self._object(node)
        raise _Unmappable(f"type {typ}")

    @staticmethod
    def _only(keys: set[str], allowed: frozenset[str] | set[str]) -> None:
        if not keys <= allowed:
            raise _Unmappable(", ".join(sorted(keys - allowed)))

    @staticmethod
    def _constrained(base: Any, node: dict[str, Any], mapping: dict[str, str]) -> Any:
        kwargs: dict[str, Any] = {}
        for json_key, pydantic_key in mapping.items():
            if json_key in node:
                value = node[json_key]
                if isinstance(value, bool) or not isinstance(value, int | float | str):
                    raise _Unmappable(json_key)
                kwargs[pydantic_key] = value
        return _ANNOTATED[base, Field(**kwargs)] if kwargs else base

    def _ref(self, ref: str) -> Any:
        if ref in self._ref_types:
            return self._ref_types[ref]
        if ref in self._ref_in_progress:
            model_name = self._ref_in_progress[ref]
            if model_name is None:
                raise _Unmappable("recursive non-object $ref")
            return model_name  # forward reference, resolved by model_rebuild
        target = self.resolve(ref)
        try:
            if self._is_object_model(target):
                model_name = self._name(str(target.get("title") or ref.rsplit("/", 1)[-1]))
                self._ref_in_progress[ref] = model_name
                result: Any = self._object_model(target, model_name=model_name)
            else:
                self._ref_in_progress[ref] = None
                if "enum" in target and self._int_enum_values(target) is not None:
                    # An enum class in $defs: IntEnum also accepts "1" (see module docstring).
                    result = self._int_enum(target)
                else:
                    result = self.annotation(target)
        finally:
            del self._ref_in_progress[ref]
        self._ref_types[ref] = result
        return result

    @staticmethod
    def _is_object_model(node: dict[str, Any]) -> bool:
        return isinstance(node.get("properties"), dict) and node.get("type", "object") == "object"

    @staticmethod
    def _int_enum_values(node: dict[str, Any]) -> list[int] | None:
        values = node.get("enum")
        if (
            node.get("type") == "integer"
            and isinstance(values, list)
            and values
            and all(isinstance(v, int) and not isinstance(v, bool) for v in values)
            and not (_constraining_keys(node) - {"type", "enum"})
        ):
            return list(values)
        return None

    def _int_enum(self, node: dict[str, Any]) -> Any:
        values = self._int_enum_values(node) or []
        members = {f"V{i}": value for i, value in enumerate(dict.fromkeys(values))}
        int_enum: Any = enum.IntEnum
        return int_enum(self._name(str(node.get("title") or "IntEnum")), members)

    def _is_defs_enum(self, node: dict[str, Any]) -> bool:
        """An enum inlined from ``$defs`` (strict schemas inline a ``$ref`` with siblings)."""
        title = node.get("title")
        if not isinstance(title, str):
            return False
        for defs_key in ("$defs", "definitions"):
            defs = self.root.get(defs_key)
            if isinstance(defs, dict):
                target = defs.get(title)
                if isinstance(target, dict) and target.get("enum") == node.get("enum"):
                    return True
        return False

    def _literal(self, node: dict[str, Any], keys: set[str]) -> Any:
        self._only(keys, {"type", "const", "enum"})
        if "enum" in node and self._int_enum_values(node) is not None and self._is_defs_enum(node):
            return self._int_enum(node)
        values: list[Any] = []
        if "const" in node:
            values.append(node["const"])
        if "enum" in node:
            if not isinstance(node["enum"], list) or not node["enum"]:
                raise _Unmappable("enum")
            if "const" in node:
                if node["const"] not in node["enum"]:
                    raise _Unmappable("const outside enum")
            else:
                values.extend(node["enum"])
        for value in values:
            if value is not None and not isinstance(value, str | int | float | bool):
                raise _Unmappable("non-scalar const")
        typ = node.get("type")
        if typ is not None:
            # A value outside the declared type cannot be produced by pydantic: let jsonschema
            # keep the meaning exact.
            type_check = (
                {
                    "string": lambda v: isinstance(v, str),
                    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
                    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
                    "boolean": lambda v: isinstance(v, bool),
                    "null": lambda v: v is None,
                }.get(typ)
                if isinstance(typ, str)
                else None
            )
            if type_check is None or not all(type_check(v) for v in values):
                raise _Unmappable("typed literal")
        return _LITERAL[tuple(values)]

    def _union(self, node: dict[str, Any], keys: set[str]) -> Any:
        members_key = "anyOf" if "anyOf" in node else "oneOf"
        members = node[members_key]
        discriminator = node.get("discriminator")
        self._only(keys, {members_key, "discriminator"})
        if not isinstance(members, list) or not members:
            raise _Unmappable(members_key)
        if members_key == "oneOf" and not isinstance(discriminator, dict):
            # "exactly one" is not pydantic's union semantics.
            raise _Unmappable("oneOf without discriminator")
        types = [self.annotation(member) for member in members]
        union: Any = types[0] if len(types) == 1 else _UNION[tuple(types)]
        if isinstance(discriminator, dict) and len(types) > 1:
            prop = discriminator.get("propertyName")
            if (
                isinstance(prop, str)
                and all(isinstance(t, type) and issubclass(t, BaseModel) for t in types)
                and all(prop in t.model_fields for t in types)
            ):
                return _ANNOTATED[union, Field(discriminator=prop)]
        return union

    def _string(self, node: dict[str, Any]) -> Any:
        media_type = node.get("contentMediaType")
        if media_type is not None or "contentSchema" in node:
            if media_type != "application/json" or (
                set(node) & {"format", "minLength", "maxLength", "pattern"}
            ):
                raise _Unmappable("contentMediaType")
            inner = self.annotation(node["contentSchema"]) if "contentSchema" in node else Any
            return _JSON[inner]
        fmt = node.get("format")
        if fmt is None:
            return self._constrained(
                str,
                node,
                {"minLength": "min_length", "maxLength": "max_length", "pattern": "pattern"},
            )
        if fmt == "uri":
            if node.get("pattern") is not None or node.get("minLength", 1) != 1:
                raise _Unmappable("uri constraints")
            max_length = node.get("maxLength")
            if max_length is None:
                return AnyUrl
            if max_length == _HTTP_URL_MAX_LENGTH:
                return HttpUrl
            raise _Unmappable("uri maxLength")
        if not isinstance(fmt, str) or fmt not in _FORMATS:
            raise _Unmappable(f"format {fmt}")
        base = _FORMATS[fmt]
        if base in (str, bytes):
            return self._constrained(
                base,
                node,
                {"minLength": "min_length", "maxLength": "max_length", "pattern": "pattern"},
            )
        if set(node) & {"minLength", "maxLength", "pattern"}:
            raise _Unmappable("constrained format")
        return base

    def _array(self, node: dict[str, Any]) -> Any:
        length = {"minItems": "min_length", "maxItems": "max_length"}
        prefix = node.get("prefixItems")
        if prefix is not None:
            if not isinstance(prefix, list) or node.get("items", False) is not False:
                raise _Unmappable("prefixItems with items")
            if any(node.get(k, len(prefix)) != len(prefix) for k in ("minItems", "maxItems")):
                raise _Unmappable("prefixItems length")
            if node.get("uniqueItems"):
                raise _Unmappable("unique tuple")
            if not prefix:
                return _TUPLE[()]
            return _TUPLE[tuple(self.annotation(p) for p in prefix)]
        item = self.annotation(node["items"]) if "items" in node else Any
        unique = node.get("uniqueItems", False)
        if unique not in (True, False):
            raise _Unmappable("uniqueItems")
        container: Any = _SET[item] if unique else _LIST[item]
        return self._constrained(container, node, length)

    def _object(self, node: dict[str, Any]) -> Any:
        if self._is_object_model(node):
            return self._object_model(node)
        additional = node.get("additionalProperties", True)
        size = {"minProperties": "min_length", "maxProperties": "max_length"}
        if additional is False:
            if set(node) & set(size):
                raise _Unmappable("closed object size")
            return self._object_model(node)
        value = Any if additional is True else self.annotation(additional)
        return self._constrained(_DICT[str, value], node, size)

    def _extra_policy(self, node: dict[str, Any]) -> tuple[_Extra, Any]:
        additional = node.get("additionalProperties", True)
        if additional is True or additional == {}:
            return "ignore", None
        if additional is False:
            # Strict schemas close every object; the SDK's models ignore extras regardless.
            return ("ignore" if self.strict else "forbid"), None
        return "allow", self.annotation(additional)

    def _object_model(
        self, node: dict[str, Any], *, model_name: str | None = None
    ) -> type[BaseModel]:
        self._only(_constraining_keys(node), _OBJECT_KEYS - {"minProperties", "maxProperties"})
        if node.get("type", "object") != "object":
            raise _Unmappable("object type")
        properties = node.get("properties", {})
        required = node.get("required", [])
        if (
            not isinstance(properties, dict)
            or not isinstance(required, list)
            or not set(required) <= set(properties)
        ):
            raise _Unmappable("properties")
        name = model_name or self._name(str(node.get("title") or "Object"))
        taken = set(properties)
        fields: dict[str, Any] = {}
        for index, (prop, schema) in enumerate(properties.items()):
            field_name = _field_name(index, prop, taken)
            taken.add(field_name)
            annotation = self.annotation(schema)
            has_default = isinstance(schema, dict) and "default" in schema
            default = copy.deepcopy(schema["default"]) if has_default else None
            # A strict schema lists every key as required, but the SDK strips only
            # `default: null`: a default or a null-accepting schema marks an optional key.
            optional = prop not in required or (
                self.strict and (has_default or self.accepts_null(schema))
            )
            info = (
                Field(default=default, alias=prop)
                if optional
                else Field(default=..., alias=prop)  # required
            )
            fields[field_name] = (annotation, info)
        extra, extra_type = self._extra_policy(node)
        base: type[BaseModel] = BaseModel
        if extra_type is not None:
            # Extras validated against ``additionalProperties`` (pydantic's typed extras).
            base = type(
                f"{name}_base",
                (BaseModel,),
                {
                    "__annotations__": {"__pydantic_extra__": _DICT[str, extra_type]},
                    "model_config": ConfigDict(extra="allow"),
                },
            )
        config = ConfigDict(extra=extra) if extra_type is None else None
        model = create_model(name, __base__=base, __config__=config, **fields)
        self.namespace[name] = model
        self.models.append(model)
        return model


def _infer_strict(schema: Mapping[str, Any]) -> bool:
    properties = schema.get("properties")
    required = schema.get("required")
    return (
        schema.get("additionalProperties") is False
        and isinstance(properties, dict)
        and isinstance(required, list)
        and set(required) == set(properties)
    )


def _kwargs_field(schema: dict[str, Any], builder: _Builder) -> tuple[str, frozenset[str]] | None:
    """The ``**kwargs`` property of a non-strict schema, and the names its keys must avoid.

    Only a function with ``**kwargs`` gets a root model that forbids extras; its kwargs
    property is the one open object that is neither required nor defaulted.
    """
    if builder.strict or schema.get("additionalProperties") is not False:
        return None
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return None
    required = set(schema.get("required") or [])

    def resolved(node: object) -> dict[str, Any]:
        if isinstance(node, dict) and "$ref" in node:
            try:
                return builder.resolve(node["$ref"])
            except _Unmappable:
                return {}
        return node if isinstance(node, dict) else {}

    candidates = [
        name
        for name, node in properties.items()
        if name not in required
        and "default" not in resolved(node)
        and resolved(node).get("type") == "object"
        and "properties" not in resolved(node)
        and resolved(node).get("additionalProperties", True) is not False
    ]
    if len(candidates) != 1:
        return None
    kwargs_name = candidates[0]
    reserved = frozenset(
        name
        for name, node in properties.items()
        if name != kwargs_name
        # *args (a list with a default factory) is not a keyword-bindable name.
        and not (
            name not in required
            and resolved(node).get("type") == "array"
            and "default" not in resolved(node)
        )
    )
    return kwargs_name, reserved


def _property_names(schema: object) -> set[str]:
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            properties = node.get("properties")
            if isinstance(properties, dict):
                names.update(k for k in properties if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return names


def _loc_path(loc: tuple[int | str, ...], known: set[str]) -> str:
    parts: list[str] = []
    for segment in loc:
        if isinstance(segment, int):
            parts.append(f"[{segment}]")
        else:
            parts.append(("." if parts else "") + (segment if segment in known else "*"))
    return "".join(parts) or "(root)"


class ArgumentValidator:
    """Validates raw tool-call arguments as the captured SDK tool would have.

    Call it with the arguments string the model sent: ``None`` means the real tool would
    have accepted it; otherwise a short reason (field paths and error kinds, never values).
    """

    def __init__(self, schema: dict[str, Any], *, strict: bool | None = None) -> None:
        self.schema = copy.deepcopy(schema)
        self.strict = _infer_strict(self.schema) if strict is None else strict
        builder = _Builder(self.schema, self.strict)
        self._known = _property_names(self.schema)
        self._kwargs: tuple[str, frozenset[str]] | None = None
        self._model: type[BaseModel] | None
        self._whole: type[BaseModel] | None = None
        try:
            self._model = builder.root_model()
            self._kwargs = _kwargs_field(self.schema, builder)
        except Exception:
            # Nothing pydantic can express faithfully: the whole object goes to jsonschema.
            self._model = None
            self._whole = create_model("Whole", value=(builder.fallback(self.schema), ...))
        self.fallbacks = builder.fallbacks
        """How many (sub-)schemas are validated by jsonschema rather than pydantic."""

    @property
    def fully_mapped(self) -> bool:
        """True when pydantic validates everything (no jsonschema fallback anywhere)."""
        return self._model is not None and self.fallbacks == 0

    def __call__(self, arguments: str) -> str | None:
        try:
            data = json.loads(arguments) if arguments else {}
        except Exception:
            return "arguments are not valid JSON"
        if not isinstance(data, dict):
            return "arguments are not a JSON object"
        try:
            if self._model is None:
                assert self._whole is not None
                self._whole(value=data)
                return None
            self._model(**data)
        except ValidationError as exc:
            return self._reason(exc)
        except Exception as exc:
            return f"arguments could not be validated ({type(exc).__name__})"
        if self._kwargs is not None:
            name, reserved = self._kwargs
            value = data.get(name)
            if isinstance(value, dict) and reserved & set(value):
                return f"{name}: key names a named parameter"
        return None

    def _reason(self, exc: ValidationError) -> str:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        parts: list[str] = []
        for error in errors[:_MAX_REASON_ERRORS]:
            loc = tuple(error["loc"])
            if self._model is None and loc[:1] == ("value",):
                loc = loc[1:]
            parts.append(f"{_loc_path(loc, self._known)}: {error['type']}")
        more = len(errors) - _MAX_REASON_ERRORS
        suffix = f" (+{more} more)" if more > 0 else ""
        return "invalid arguments: " + "; ".join(parts) + suffix


_CACHE_SIZE = 256
_cache: OrderedDict[tuple[str, bool | None], ArgumentValidator] = OrderedDict()
_cache_lock = threading.Lock()


def argument_validator(
    schema: dict[str, Any], *, strict: bool | None = None
) -> Callable[[str], str | None]:
    """The validator for a captured tool schema, cached per schema (up to 256, LRU).

    ``strict`` is the captured tool's ``strict`` flag (``FunctionTool.strict_json_schema``);
    ``None`` infers it from the schema (root closed and every property required).
    """
    try:
        key = (json.dumps(schema, sort_keys=True, allow_nan=False), strict)
    except (TypeError, ValueError):
        return ArgumentValidator(schema, strict=strict)
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None:
            _cache.move_to_end(key)
            return cached
    validator = ArgumentValidator(schema, strict=strict)
    with _cache_lock:
        _cache[key] = validator
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return validator
