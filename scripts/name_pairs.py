"""Prints the letter-pair table ``collector.processors.providers._PAIR_SCORES`` is.

``_a_name`` tells a name (``reranker_v2_base_multilingual``) from a random token by how
its words are spelled: each pair of letters inside a word scores how much more often it
occurs in names and prose than in random letters, log2 of the ratio rounded and held to
-6..3, written as one digit (score + 6) per pair, ``aa`` to ``zz``. The counts come from
the text of this interpreter's standard library (its modules, comments and docs, tests
aside) and the identifiers of the packages installed beside it (technical words: sql, json,
oauth, grpc), each corpus as frequencies, the pair taken at the higher of the two.

Run it from the project's environment after a change of what the table should learn from;
paste its output over the constant. The table in the code is what counts: another set of
packages prints a slightly different one.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import string
import sys
import sysconfig
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collector.processors.providers import _WORD, _scored

_TOKEN = re.compile(r"[A-Za-z]+")
_IDENTIFIER = re.compile(r"\b[A-Za-z][A-Za-z0-9_]{19,60}\b")
_PAIRS = [a + b for a in string.ascii_lowercase for b in string.ascii_lowercase]
_FLOOR = 1e-5  # a pair never seen counts as this frequent (and scores -6)


def _count(texts: Iterator[str]) -> Counter[str]:
    """The letter pairs of the words ``_a_name`` scores, in ``texts``."""
    counts: Counter[str] = Counter()
    for text in texts:
        for word in filter(_scored, _WORD.findall(text)):
            counts.update(a + b for a, b in itertools.pairwise(word.lower()))
    return counts


def _files(root: Path, suffixes: tuple[str, ...], skip: tuple[str, ...]) -> Iterator[str]:
    for directory, _, names in sorted(os.walk(root)):
        if any(part in skip for part in Path(directory).parts):
            continue
        for name in sorted(names):
            if name.endswith(suffixes):
                yield (Path(directory) / name).read_text(errors="ignore")


def table() -> str:
    paths = sysconfig.get_paths()
    stdlib = _count(
        token
        for text in _files(
            Path(paths["stdlib"]), (".py", ".txt", ".rst"), ("site-packages", "test", "tests")
        )
        for token in _TOKEN.findall(text)
    )
    identifiers = _count(
        identifier
        for text in _files(Path(paths["purelib"]), (".py",), ())
        for identifier in set(_IDENTIFIER.findall(text))
    )
    totals = sum(stdlib.values()), sum(identifiers.values())
    digits = []
    for pair in _PAIRS:
        frequency = max(stdlib[pair] / totals[0], identifiers[pair] / totals[1], _FLOOR)
        score = max(-6, min(3, round(math.log2(frequency * len(_PAIRS)))))
        digits.append(str(score + 6))
    return "".join(digits)


if __name__ == "__main__":
    scores = table()
    sys.stdout.write("_PAIR_SCORES = (\n")
    for row in range(0, len(scores), 78):
        sys.stdout.write(f'    "{scores[row : row + 78]}"\n')
    sys.stdout.write(")\n")
