"""TCP ports for the servers tests start on 127.0.0.1, free of the races of ``bind(0)``.

A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from the ephemeral range, the
same one every outgoing connection on the machine draws from, and is free again the moment the
probing socket closes: before the server a test starts binds it, another test's server or any
client may take it, and the test then talks to a stranger (CI saw a stopped etcd member
answer healthy). Ports here come from below the ephemeral range and are reserved across
processes (every pytest worker, every lane) by a lock file held until the process exits.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

# Below Linux's default ephemeral range (32768-60999) and above well-known servers' ports.
_FIRST, _LAST = 20000, 32000
_LOCKS = Path(tempfile.gettempdir()) / "quorumkeeper-test-ports"
_held: dict[int, int] = {}


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _reserve(port: int) -> bool:
    descriptor = os.open(_LOCKS / str(port), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return False
    _held[port] = descriptor
    return True


def free_port() -> int:
    """A port nothing listens on that no other test process holds, kept for this process."""
    _LOCKS.mkdir(exist_ok=True)
    for _ in range(1000):
        port = random.randint(_FIRST, _LAST)  # noqa: S311 - not for security
        # A port something outside the tests listens on stays reserved, never handed out.
        if port not in _held and _reserve(port) and _bindable(port):
            return port
    raise RuntimeError(f"no free port in {_FIRST}-{_LAST} after 1000 tries")
