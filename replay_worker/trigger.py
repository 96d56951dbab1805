"""Client side of the replay hook: what ``afr replay RUN_ID`` and CI scripts use."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import httpx

from replay_worker.hooks.signature import sign

__all__ = ["request_replay", "signed_headers", "wait_for_job"]


def signed_headers(secret: str, body: bytes, webhook_id: str | None = None) -> dict[str, str]:
    """Standard Webhooks headers for ``body``, signed now."""
    webhook_id = webhook_id or "msg_" + secrets.token_hex(12)
    timestamp = int(time.time())
    return {
        "content-type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, webhook_id, timestamp, body),
    }


def request_replay(
    worker_url: str,
    secret: str,
    run_id: str | None,
    *,
    signature: str | None = None,
    model: str | None = None,
    stubs: dict[str, str] | None = None,
    policy: str | None = None,
    fork: dict[str, Any] | None = None,
    timeout_s: float = 10,
) -> dict[str, Any]:
    """``fork``: the hook's ``fork`` object (``{"step", "overrides"}``); ``signature``
    instead of ``run_id``: the newest production run that failed with it."""
    payload: dict[str, Any] = {"run_id": run_id} if run_id else {"signature": signature}
    if model:
        payload["model"] = model
    if stubs:
        payload["stubs"] = stubs
    if policy:
        payload["policy"] = policy
    if fork is not None:
        payload["fork"] = fork
    body = json.dumps(payload).encode()
    headers = signed_headers(secret, body)
    response = httpx.post(
        worker_url.rstrip("/") + "/hooks/replay", content=body, headers=headers, timeout=timeout_s
    )
    if response.status_code != 202:
        raise RuntimeError(
            f"the worker refused the replay: HTTP {response.status_code} {_reason(response)}"
        )
    answer: dict[str, Any] = response.json()
    return answer


def _reason(response: httpx.Response) -> str:
    """The worker's ``error`` (what it names at fault), else the body as sent."""
    try:
        body = response.json()
    except ValueError:
        return response.text
    return str(body["error"]) if isinstance(body, dict) and "error" in body else response.text


def wait_for_job(worker_url: str, job_id: str, timeout_s: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job: dict[str, Any] = httpx.get(
            f"{worker_url.rstrip('/')}/jobs/{job_id}", timeout=10
        ).json()
        if job["state"] in ("succeeded", "failed") or time.monotonic() > deadline:
            return job
        time.sleep(0.2)
