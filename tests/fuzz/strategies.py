"""Strategies and helpers shared by the fuzz tests: texts of every awkward kind, JSON-ish
documents, span records."""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from tests.records import BASE_NS, span_record

__all__ = [
    "BASE_NS",
    "any_text",
    "broken_json",
    "fuzz_settings",
    "huge_text",
    "json_text",
    "json_values",
    "lone_surrogate",
    "record",
    "utf8_text",
    "value_text",
]

_CI_EXAMPLES = 100  # max_examples of the ``ci`` profile (tests/fuzz/conftest.py)


def fuzz_settings(ci_examples: int, **overrides: Any) -> settings:
    """``ci_examples`` under the ``ci`` profile, as many more under another as its
    ``max_examples`` is above ``ci``'s (``deep``: 50 times)."""
    profile = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    scale = profile.max_examples / _CI_EXAMPLES
    return settings(profile, max_examples=max(1, round(ci_examples * scale)), **overrides)


# --- texts ---------------------------------------------------------------------------------
lone_surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
"""What JSON's ``\\ud800`` decodes to: a str, but not UTF-8."""

# Text a decoder produces: any code point but a surrogate (NUL, controls, U+FFFD, emoji...).
utf8_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
# Anything a Python str can hold: lone surrogates included, and often (characters() rarely
# draws one, and two drawn side by side may make a valid pair).
any_text = st.text(st.characters(), max_size=40) | st.builds(
    lambda before, surrogate, after: before + surrogate + after,
    utf8_text,
    lone_surrogate,
    utf8_text,
)


@st.composite
def huge_text(draw: st.DrawFn) -> str:
    unit = draw(st.sampled_from(["x", "é", "日", "😀", "\x01", '"', "\\", "{", " "]))
    return unit * draw(st.integers(1_000, 300_000))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | any_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def json_text(draw: st.DrawFn) -> str:
    """A JSON document as text: escaped (``\\ud800``) or raw, compact or spaced."""
    return json.dumps(
        draw(json_values),
        ensure_ascii=draw(st.booleans()),
        separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])),
    )


@st.composite
def broken_json(draw: st.DrawFn) -> str:
    """A JSON document cut short, or with a piece of text pasted in."""
    text = draw(json_text())
    cut = draw(st.integers(0, len(text)))
    return text[:cut] + draw(st.sampled_from(["", "\x00", "}", "]]", '"', "\\", "\\u12", "NaN"]))


value_text = st.one_of(
    any_text,
    json_text(),
    broken_json(),
    st.sampled_from(["", " ", "null", "[]", "{}", "nan", "-1", "1e400", "9" * 5000, "true"]),
)
"""An attribute value: text, JSON, broken JSON, numbers in every spelling."""


# --- span records --------------------------------------------------------------------------
record = span_record
