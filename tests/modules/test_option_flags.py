"""Every etcd setting spec.options can hold, as qk_options turns it into flags, is accepted by
each etcd version the operator runs (3.4, 3.5, 3.6) and takes effect: a flag one version does
not know would crash-loop every member of a cluster that sets it."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    effective_options,
    option_flags,
)

EVERY_OPTION = {
    "quotaBackendBytes": "256Mi",
    "autoCompaction": {"mode": "revision", "retention": "1000"},
    "snapshotCount": 5000,
    "heartbeatIntervalMs": 60,
    "electionTimeoutMs": 600,
    "maxRequestBytes": "2Mi",
    "metrics": "extensive",
    "maxTxnOps": 4,
    "logLevel": "warn",
}


def txn(member, puts: int) -> tuple[int, str]:
    """A transaction of ``puts`` puts through the member's gRPC gateway: (HTTP status, body)."""
    encode = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    body = {
        "success": [
            {"request_put": {"key": encode(f"/txn/{i}"), "value": encode("v")}} for i in range(puts)
        ]
    }
    request = urllib.request.Request(
        f"{member.client_url}/v3/kv/txn", data=json.dumps(body).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def test_every_option_is_a_flag_each_etcd_version_accepts_and_applies(etcd_factory):
    flags = option_flags(effective_options({"options": EVERY_OPTION}))
    assert len(flags) == len(EVERY_OPTION) + 1  # autoCompaction is two flags
    cluster = etcd_factory(n=1, flags=flags)
    (member,) = cluster.nodes.values()

    assert txn(member, 4)[0] == 200
    status, body = txn(member, 5)
    assert status != 200 and "too many operations in txn request" in body, body
    with urllib.request.urlopen(f"{member.client_url}/metrics", timeout=10) as answer:  # noqa: S310
        metrics = answer.read().decode()
    # --metrics=extensive: the per-method gRPC handling histograms
    assert "grpc_server_handling_seconds_bucket" in metrics
    assert "etcd_server_quota_backend_bytes{} 2.68435456e+08" in metrics or (
        "etcd_server_quota_backend_bytes 2.68435456e+08" in metrics
    )
    # --log-level=warn: no more info lines once the flags are read (the harness asks for info
    # before them, so the last one given wins)
    lines = [json.loads(line) for line in member.log_tail(200).splitlines() if line.startswith("{")]
    assert lines and all(line.get("level") != "info" for line in lines), member.log_tail(20)
