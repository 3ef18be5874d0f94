"""A TCP proxy on the loopback to a local port, forwarding both ways: a member's client port as
seen through something in between (a Service, a network that holds traffic back)."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """Forwards each connection to ``upstream_port``. With ``listening=False`` its port is bound
    but refuses connections, as a Service's address does until kube-proxy routes it, until
    ``listen()``. Subclasses see each chunk in ``forward``."""

    def __init__(self, upstream_port: int, listening: bool = True):
        self.upstream_port = upstream_port
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.bind(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sockets = [self.server]
        if listening:
            self.listen()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def listen(self) -> None:
        self.server.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def listen_after(self, seconds: float) -> threading.Timer:
        timer = threading.Timer(seconds, self.listen)
        timer.daemon = True
        timer.start()
        return timer

    def forward(self, data: bytes, tail: bytes, from_client: bool) -> bool:
        """Whether to pass ``data`` on (``tail``: the end of what came before it this way)."""
        return True

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                return
            self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source, sink, from_client: bool) -> None:
        tail = b""
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    sink.shutdown(socket.SHUT_WR)
                return
            passed = self.forward(data, tail, from_client)
            tail = (tail + data)[-256:]
            if not passed:
                continue
            try:
                sink.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
