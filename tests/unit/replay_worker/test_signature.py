"""Standard Webhooks signatures: verified over the raw bytes, time-bounded, rotation-aware."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from replay_worker.hooks.signature import SignatureError, generate_secret, sign, verify

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
BODY = b'{"run_id": "0af7651916cd43dd8448eb211c80319c"}'


def headers(
    signature: str, webhook_id: str = "msg_1", timestamp: int = 1_764_000_000
) -> dict[str, str]:
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }


def test_signature_is_hmac_sha256_of_id_timestamp_and_body() -> None:
    expected = base64.b64encode(
        hmac.new(
            b"0123456789abcdef0123456789abcdef", b"msg_1.1764000000." + BODY, hashlib.sha256
        ).digest()
    ).decode()
    assert sign(SECRET, "msg_1", 1_764_000_000, BODY) == "v1," + expected


def test_valid_signature_returns_the_webhook_id() -> None:
    signature = sign(SECRET, "msg_1", 1_764_000_000, BODY)
    assert verify(SECRET, headers(signature), BODY, now=1_764_000_100) == "msg_1"


def test_any_of_several_signatures_may_match_during_rotation() -> None:
    old = sign(generate_secret(), "msg_1", 1_764_000_000, BODY)
    new = sign(SECRET, "msg_1", 1_764_000_000, BODY)
    assert verify(SECRET, headers(f"{old} {new}"), BODY, now=1_764_000_000) == "msg_1"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda h, b: (h, b + b" "), "no valid signature"),
        (lambda h, b: ({**h, "webhook-id": "msg_2"}, b), "no valid signature"),
        (lambda h, b: ({**h, "webhook-timestamp": "1764000400"}, b), "outside the allowed window"),
        (lambda h, b: ({**h, "webhook-timestamp": "soon"}, b), "unix seconds"),
        (lambda h, b: ({k: v for k, v in h.items() if k != "webhook-signature"}, b), "missing"),
        (
            lambda h, b: ({**h, "webhook-signature": "v2," + h["webhook-signature"][3:]}, b),
            "no valid signature",
        ),
    ],
)
def test_tampering_is_refused(mutate: object, message: str) -> None:
    signed = headers(sign(SECRET, "msg_1", 1_764_000_000, BODY))
    tampered, body = mutate(signed, BODY)  # type: ignore[operator]
    with pytest.raises(SignatureError, match=message) as caught:
        verify(SECRET, tampered, body, now=1_764_000_000)
    assert SECRET not in str(caught.value)


def test_stale_requests_are_refused_both_ways() -> None:
    signature = sign(SECRET, "msg_1", 1_764_000_000, BODY)
    with pytest.raises(SignatureError):
        verify(SECRET, headers(signature), BODY, now=1_764_000_000 + 301)
    with pytest.raises(SignatureError):
        verify(SECRET, headers(signature), BODY, now=1_764_000_000 - 301)
