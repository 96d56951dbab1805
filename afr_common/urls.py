"""URLs as they may be printed: a settings error, a log line or a status page names where a
service points without the password the URL carries."""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

__all__ = ["redact_url"]


def redact_url(url: str) -> str:
    """``url`` without its password (in the user part or a ``password=`` parameter)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a URL that does not parse>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}{':***' if colon else ''}@{hosts}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = "&".join(
            f"{quote(k)}={'***' if k.lower().endswith('password') else quote(v)}" for k, v in pairs
        )
    if (netloc, query) == (parts.netloc, parts.query):
        return url  # nothing to hide: as given (urlunsplit drops the // of chdb:///path)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
