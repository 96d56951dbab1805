"""A flood of refused requests must not keep their memory (issue 12, seen from outside).

Before the fix, every refused gRPC export (``context.abort``) left its request bytes in a
reference cycle that only the cyclic GC frees, and the collector's GC tuning
(``tune_gc_for_ingest``: gen-0 threshold 50k objects) let ~1.3 GB pile up in 8 s of
wrong-key 1.5 MiB requests. Runs in a child process: the GC tuning is process-wide.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_CHILD = textwrap.dedent(
    """
    import json, sys, tempfile
    from pathlib import Path
    import grpc, httpx
    from collector.settings import CollectorSettings
    from collector.server import CollectorThread, tune_gc_for_ingest

    def rss_mib():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024

    tune_gc_for_ingest()
    transport, requests = sys.argv[1], int(sys.argv[2])
    settings = CollectorSettings(
        data_dir=Path(tempfile.mkdtemp()), grpc_port=0, http_port=0, wal_max_bytes=1 << 20
    )
    body = b"\\x0a" + b"x" * (1536 * 1024)
    statuses = set()
    with CollectorThread(settings) as collector:
        key = collector.keys.create("p")
        before = rss_mib()
        channel = grpc.insecure_channel(
            f"127.0.0.1:{collector.grpc_port}",
            options=[("grpc.max_send_message_length", 64 << 20)],
        )
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        client = httpx.Client()
        for n in range(requests):
            # Half with a wrong key, half with a good key but an undecodable body.
            auth = "Bearer wrong" if n % 2 else f"Bearer {key}"
            if transport == "grpc":
                try:
                    export(body, metadata=[("authorization", auth)], timeout=10)
                    statuses.add("OK")
                except grpc.RpcError as error:
                    statuses.add(error.code().name)
            else:
                answer = client.post(
                    f"http://127.0.0.1:{collector.http_port}/v1/traces",
                    content=body,
                    headers={"authorization": auth, "content-type": "application/x-protobuf"},
                )
                statuses.add(answer.status_code)
        after = rss_mib()
    print(json.dumps({"before": before, "after": after, "statuses": sorted(map(str, statuses))}))
    """
)


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_refused_requests_do_not_keep_their_memory(transport: str) -> None:
    requests = 400  # 600 MiB of refused bodies: kept, they would dwarf the bound below
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, transport, str(requests)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
        check=True,
    )
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    expected = ["INVALID_ARGUMENT", "UNAUTHENTICATED"] if transport == "grpc" else ["400", "401"]
    assert figures["statuses"] == expected
    growth = figures["after"] - figures["before"]
    assert growth < 150, f"RSS grew {growth} MiB over {requests} refused 1.5 MiB requests"
