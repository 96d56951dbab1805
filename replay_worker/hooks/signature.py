"""Standard Webhooks signatures (docs/reference.md §7) for ``POST /hooks/replay``.

Signed content: ``"{webhook-id}.{webhook-timestamp}.{raw body}"``, HMAC-SHA256, base64, in
``webhook-signature: v1,<sig>`` (several space-separated during secret rotation). The secret
is ``whsec_<base64 key>``. A timestamp outside the tolerance, a missing header or a wrong
signature is refused before any work; comparisons are constant-time; errors never include
the secret or the expected signature.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping

__all__ = ["SignatureError", "generate_secret", "sign", "verify"]

PREFIX = "whsec_"


class SignatureError(Exception):
    """The request is not signed by a holder of the secret (or not recently)."""


def generate_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def _key(secret: str) -> bytes:
    body = secret.removeprefix(PREFIX)
    try:
        return base64.b64decode(body, validate=True)
    except ValueError:
        raise ValueError("the webhook secret must be whsec_<base64>") from None


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    content = f"{webhook_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_s: int = 300,
    now: float | None = None,
) -> str:
    """Returns the webhook id of a valid request; raises SignatureError otherwise."""
    webhook_id = headers.get("webhook-id")
    stamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not webhook_id or not stamp or not signatures:
        raise SignatureError("missing webhook-id, webhook-timestamp or webhook-signature header")
    current = time.time() if now is None else now
    try:
        timestamp = int(stamp)
        stale = abs(current - timestamp) > tolerance_s
    except (ValueError, OverflowError):  # not a number; or one no float can be compared with
        raise SignatureError("webhook-timestamp is not unix seconds") from None
    if stale:
        raise SignatureError("webhook-timestamp is outside the allowed window")
    expected = sign(secret, webhook_id, timestamp, body).split(",", 1)[1].encode()
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected):
            return webhook_id
    raise SignatureError("no valid signature")
