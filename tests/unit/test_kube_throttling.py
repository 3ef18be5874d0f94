"""qk_kube's client comes back after a 429 as the API server asks (Retry-After), a few times,
then reports it: a server answering 429 while a new CRD's storage initializes, or throttling by
API priority and fairness, is no reason to fail a module."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    THROTTLED_RETRIES,
    KubeClient,
    KubeError,
)


class Server:
    """Answers 429 (Retry-After 0.1 s) ``throttled`` times, then 200 with a list."""

    def __init__(self, throttled: int):
        self.throttled, self.requests = throttled, 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                owner.requests += 1
                if owner.requests <= owner.throttled:
                    body = json.dumps(
                        {"kind": "Status", "reason": "TooManyRequests",
                         "message": "storage is (re)initializing"}
                    ).encode()  # fmt: skip
                    self.send_response(429)
                    self.send_header("Retry-After", "0.1")
                else:
                    body = json.dumps({"items": [{"metadata": {"name": "x"}}]}).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __exit__(self, *exc):
        self.httpd.shutdown()


def test_a_429_is_tried_again_after_the_servers_retry_after():
    with Server(throttled=THROTTLED_RETRIES) as url:
        client = KubeClient(url)
        items = client.list("v1", "Pod", "ns")
    assert [i["metadata"]["name"] for i in items] == ["x"]


def test_a_server_that_keeps_refusing_is_reported():
    server = Server(throttled=THROTTLED_RETRIES + 1)
    with server as url, pytest.raises(KubeError) as caught:
        KubeClient(url).list("v1", "Pod", "ns")
    assert caught.value.status == 429 and "storage is (re)initializing" in str(caught.value)
    assert server.requests == THROTTLED_RETRIES + 1
