"""What a ClickHouse error means for the batch that met it: retry it, or find its bad rows.

Only errors that say the *data* is malformed let the writer split a batch and dead-letter
the rows the store refuses. Everything else (too many parts, memory or time limits, the
network, a server restarting, a missing table, a wrong password) says nothing about the
rows: the same batch is retried with backoff, and nothing is dead-lettered — bisecting it
would only make more parts and throw good rows away.

The code is read from the error (``Code: N.`` in ClickHouse's message, or the client's
``code`` attribute); the message itself is never logged: it can quote the rows.
"""

from __future__ import annotations

import re
from enum import Enum

__all__ = ["InsertFailure", "classify_insert_error", "clickhouse_code"]

_CODE = re.compile(r"Code: (\d+)\.")

# Codes that mean a row (or the block's content) cannot be stored as it is (names checked
# with ClickHouse's errorCodeToName on the engine in use).
_BAD_DATA = frozenset(
    {
        6,  # CANNOT_PARSE_TEXT
        26,  # CANNOT_PARSE_QUOTED_STRING
        27,  # CANNOT_PARSE_INPUT_ASSERTION_FAILED
        32,  # ATTEMPT_TO_READ_AFTER_EOF (a truncated row)
        33,  # CANNOT_READ_ALL_DATA
        38,  # CANNOT_PARSE_DATE
        41,  # CANNOT_PARSE_DATETIME
        53,  # TYPE_MISMATCH
        69,  # ARGUMENT_OUT_OF_BOUND
        70,  # CANNOT_CONVERT_TYPE
        72,  # CANNOT_PARSE_NUMBER
        117,  # INCORRECT_DATA
        131,  # TOO_LARGE_STRING_SIZE
        321,  # VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
        407,  # DECIMAL_OVERFLOW
        376,  # CANNOT_PARSE_UUID
        441,  # CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING
    }
)
_TOO_MANY_PARTITIONS = re.compile(r"Too many partitions for (a )?single INSERT block", re.I)


class InsertFailure(Enum):
    TRANSIENT = "transient"
    """Says nothing about the rows: back off and retry the same batch."""
    BAD_DATA = "bad_data"
    """Some row is malformed: split the batch, dead-letter the rows refused alone."""
    SPLIT = "split"
    """The block as a whole is refused (too many partitions): insert it in smaller blocks."""


def clickhouse_code(error: BaseException) -> int | None:
    code = getattr(error, "code", None)
    if isinstance(code, int) and code > 0:
        return code
    match = _CODE.search(str(error))
    return int(match.group(1)) if match else None


def classify_insert_error(error: BaseException) -> InsertFailure:
    code = clickhouse_code(error)
    if code == 252 and _TOO_MANY_PARTITIONS.search(str(error)):
        return InsertFailure.SPLIT
    if code in _BAD_DATA:
        return InsertFailure.BAD_DATA
    return InsertFailure.TRANSIENT
