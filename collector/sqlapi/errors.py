"""ClickHouse's error shape, and the one place its codes become HTTP statuses.

Clients of a ClickHouse server (clickhouse-connect, clickhouse-go, Grafana) read the code from
the ``X-ClickHouse-Exception-Code`` header or from the body's ``Code: <n>.`` prefix, so every
refusal of the SQL interface, ours or the engine's, leaves in that shape.
"""

from __future__ import annotations

import re
from enum import IntEnum

__all__ = ["Code", "SqlError", "from_engine", "http_status", "render"]


class Code(IntEnum):
    """The ClickHouse error codes this interface raises itself (names as ClickHouse spells them)."""

    BAD_ARGUMENTS = 36
    UNKNOWN_FUNCTION = 46
    UNKNOWN_IDENTIFIER = 47
    NOT_IMPLEMENTED = 48
    UNKNOWN_TABLE = 60
    SYNTAX_ERROR = 62
    UNKNOWN_FORMAT = 73
    UNKNOWN_DATABASE = 81
    UNKNOWN_COMPRESSION_METHOD = 89
    UNKNOWN_SETTING = 115
    TIMEOUT_EXCEEDED = 159
    READONLY = 164
    TOO_MANY_SIMULTANEOUS_QUERIES = 202
    QUERY_IS_TOO_LARGE = 229
    CANNOT_DECOMPRESS = 271
    UNKNOWN_QUERY_PARAMETER = 456
    BAD_QUERY_PARAMETER = 457
    ACCESS_DENIED = 497
    AUTHENTICATION_FAILED = 516
    UNKNOWN_EXCEPTION = 1002


class SqlError(Exception):
    """A refusal in ClickHouse's terms. The message is shown to the client as is: it never
    holds a credential."""

    def __init__(self, code: int, message: str, name: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.name = name or _name_of(code)


def _name_of(code: int) -> str:
    try:
        return Code(code).name
    except ValueError:
        return "UNKNOWN_EXCEPTION"


# chDB nests an error once per layer it passes ("Code: 164. DB::Exception: Code: 164. ...
# (READONLY) (version 26.9.2.1). (READONLY)"); these peel it back to the innermost text.
_PREFIX = re.compile(r"^(?:[^\n]*?)Code: (\d+)\. DB::Exception: ")
_NESTED_PREFIX = re.compile(r"^Code: \d+\. DB::Exception: ")
_SUFFIX = re.compile(r"(?:\.? \(([A-Z][A-Z0-9_]*)\)(?: \(version [^)]*\))?)+\.?\s*$")


def from_engine(text: str) -> SqlError:
    """The engine's exception text (``Code: <n>. DB::Exception: ... (NAME)``) as a SqlError."""
    text = text.strip()
    match = _PREFIX.match(text)
    if match is None:
        return SqlError(Code.UNKNOWN_EXCEPTION, text or "unknown engine error")
    code = int(match.group(1))
    message = text[match.end() :]
    while (nested := _NESTED_PREFIX.match(message)) is not None:
        message = message[nested.end() :]
    suffix = _SUFFIX.search(message)
    name = None
    if suffix is not None:
        names = re.findall(r"\(([A-Z][A-Z0-9_]*)\)", suffix.group(0))
        name = names[-1] if names else None
        message = message[: suffix.start()]
    return SqlError(code, message.rstrip(" ."), name)


def render(error: SqlError, version: str) -> bytes:
    """The body ClickHouse sends with an error, byte for byte in shape."""
    return f"Code: {error.code}. DB::Exception: {error.message}. ({error.name}) (version {version})\n".encode()


_BAD_REQUEST = frozenset(
    {
        36,  # BAD_ARGUMENTS
        427,  # CANNOT_COMPILE_REGEXP
        6,  # CANNOT_PARSE_TEXT
        25,  # CANNOT_PARSE_ESCAPE_SEQUENCE
        26,  # CANNOT_PARSE_QUOTED_STRING
        38,  # CANNOT_PARSE_DATE
        41,  # CANNOT_PARSE_DATETIME
        72,  # CANNOT_PARSE_NUMBER
        441,  # CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING
        675,  # CANNOT_PARSE_IPV4
        676,  # CANNOT_PARSE_IPV6
        27,  # CANNOT_PARSE_INPUT_ASSERTION_FAILED
        376,  # CANNOT_PARSE_UUID
        15,  # DUPLICATE_COLUMN
        44,  # ILLEGAL_COLUMN
        37,  # UNKNOWN_ELEMENT_IN_AST
        123,  # UNKNOWN_TYPE_OF_AST_NODE
        8,  # THERE_IS_NO_COLUMN
        167,  # TOO_DEEP_AST
        168,  # TOO_BIG_AST
        223,  # UNEXPECTED_AST_STRUCTURE
        62,  # SYNTAX_ERROR
        117,  # INCORRECT_DATA
        53,  # TYPE_MISMATCH
        321,  # VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
        # Not in ClickHouse's table (which answers 500): a bad query parameter and a body that
        # does not inflate are the client's input, and bad input never gets a 5xx here.
        456,  # UNKNOWN_QUERY_PARAMETER
        457,  # BAD_QUERY_PARAMETER
        271,  # CANNOT_DECOMPRESS
        # Also the client's query, answered 500 by ClickHouse: a 5xx would say we failed.
        395,  # FUNCTION_THROW_IF_VALUE_IS_NON_ZERO
        153,  # ILLEGAL_DIVISION
        306,  # TOO_DEEP_RECURSION
        43,  # ILLEGAL_TYPE_OF_ARGUMENT
        141,  # SAMPLING_NOT_SUPPORTED
        206,  # ALIAS_REQUIRED
        20,  # NUMBER_OF_COLUMNS_DOESNT_MATCH
    }
)
_NOT_FOUND = frozenset(
    {
        60,  # UNKNOWN_TABLE
        46,  # UNKNOWN_FUNCTION
        47,  # UNKNOWN_IDENTIFIER
        50,  # UNKNOWN_TYPE
        56,  # UNKNOWN_STORAGE
        81,  # UNKNOWN_DATABASE
        115,  # UNKNOWN_SETTING
        152,  # UNKNOWN_DIRECTION_OF_SORTING
        63,  # UNKNOWN_AGGREGATE_FUNCTION
        73,  # UNKNOWN_FORMAT
        336,  # UNKNOWN_DATABASE_ENGINE
        78,  # UNKNOWN_TYPE_OF_QUERY
        511,  # UNKNOWN_ROLE
    }
)
_STATUS = {
    194: 401,  # REQUIRED_PASSWORD
    # ClickHouse answers 403 for a wrong password; 401 (with WWW-Authenticate) is what HTTP
    # means by "who are you", and what Grafana's datasource turns into its credentials hint.
    516: 401,  # AUTHENTICATION_FAILED
    192: 403,  # UNKNOWN_USER
    193: 403,  # WRONG_PASSWORD
    497: 403,  # ACCESS_DENIED
    # ClickHouse answers 500 for READONLY; a refused write is the client's request, not a fault.
    164: 403,  # READONLY
    229: 413,  # QUERY_IS_TOO_LARGE
    48: 501,  # NOT_IMPLEMENTED
    209: 503,  # SOCKET_TIMEOUT
    76: 503,  # CANNOT_OPEN_FILE
    439: 503,  # CANNOT_SCHEDULE_TASK
    # ClickHouse answers 500; 503 is what load shedding means, and clients retry it.
    202: 503,  # TOO_MANY_SIMULTANEOUS_QUERIES
    381: 411,  # HTTP_LENGTH_REQUIRED
    159: 408,  # TIMEOUT_EXCEEDED (ClickHouse's choice since 22.5)
    779: 415,  # UNSUPPORTED_MEDIA_TYPE
    89: 415,  # UNKNOWN_COMPRESSION_METHOD (ClickHouse: 500): a Content-Encoding we do not take
}


def http_status(code: int) -> int:
    """ClickHouse's ``exceptionCodeToHTTPStatus`` (src/Server/HTTP/exceptionCodeToHTTPStatus.cpp),
    with the deviations marked above."""
    if code in _BAD_REQUEST:
        return 400
    if code in _NOT_FOUND:
        return 404
    return _STATUS.get(code, 500)
