"""The toolchain's manifest, `$QK_CACHE/toolchain.json`: where each component install.py built
lives. install.py records a component as soon as it is built, so a part of the toolchain built in
the background (`install.py --part tests --announce`, which `make test` starts beside the tests)
shows up piece by piece; `component()` waits for one that such a build has announced and fails at
once, with the build's log, when it failed or nothing is building it.

Stdlib only: install.py imports it before the virtualenv exists.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

CACHE = Path(os.environ.get("QK_CACHE", Path.home() / ".cache" / "quorumkeeper"))
MANIFEST = CACHE / "toolchain.json"
# {"pid", "components" (manifest keys), "log", "failed" once it has}: a build in the background.
BUILDING = CACHE / "toolchain-building.json"
LOCKS = CACHE / "locks"
# The toolchain's part only some tests need (manifest keys; install.py's steps with "-"), in the
# order `make test` builds it beside the tests, which run the tests needing it in the same order
# (tests/conftest.py): MinIO from the first backup tests on; Prometheus, then cert-manager, for
# the shared cluster tests the exclusive ones wait behind; the soak checker, operator-sdk, opm
# and OLM for the local lane's and the exclusive lane's last tests.
TESTS_PART = [
    "minio",
    "prometheus_operator_crds",
    "prometheus",
    "cert_manager",
    "soak_checker",
    "operator_sdk",
    "opm",
    "olm",
]


class MissingComponent(RuntimeError):
    """A component the manifest does not have and no build is bringing."""


def read() -> dict:
    return json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}


@contextmanager
def _locked(name: str = "toolchain.json"):
    LOCKS.mkdir(parents=True, exist_ok=True)
    with open(LOCKS / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def installing(step: str):
    """Held while a process installs ``step``: a second install.py (`make toolchain` while
    `make test` builds in the background) waits for the first and then finds it built, instead
    of building it into the same directory at the same time."""
    return _locked(f"installing-{step}")


def _write(path: Path, content: dict) -> None:
    # Readers never see half a file: they read while another process writes.
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")
    scratch.replace(path)


def update(changes: dict, remove: tuple[str, ...] = ()) -> None:
    """Set ``changes`` and drop ``remove`` in the manifest; other processes' entries stay."""
    with _locked():
        manifest = read()
        for key in remove:
            manifest.pop(key, None)
        manifest.update(changes)
        _write(MANIFEST, manifest)


def announce(components: list[str], log: str | None) -> None:
    """This process builds ``components`` (manifest keys): readers wait for them. Their old
    entries are dropped until then, so nothing uses a version this build replaces."""
    update({}, remove=tuple(components))
    _write(BUILDING, {"pid": os.getpid(), "components": components, "log": log})


def finished(error: str | None = None) -> None:
    """The announced build ended: gone when it succeeded, kept with the error when not."""
    if not BUILDING.exists():
        return
    building = json.loads(BUILDING.read_text())
    if building.get("pid") != os.getpid():
        return
    if error is None:
        BUILDING.unlink(missing_ok=True)
    else:
        _write(BUILDING, {**building, "failed": error})


def building() -> dict | None:
    try:
        return json.loads(BUILDING.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def component(key: str, timeout: float = 3600) -> object:
    """The manifest's entry for ``key``; while a background build has it announced, waits for it
    (a cold build of the slowest, Prometheus, takes minutes)."""
    deadline = time.monotonic() + timeout
    while True:
        manifest = read()
        if key in manifest:
            return manifest[key]
        build = building()
        if not build or key not in build.get("components", []):
            # Recorded and the build done between the two reads: the manifest has it now.
            manifest = read()
            if key in manifest:
                return manifest[key]
            raise MissingComponent(f"{MANIFEST} has no {key!r}: run `make toolchain`")
        if build.get("failed") or not _alive(build["pid"]):
            raise MissingComponent(
                f"the toolchain's background build stopped before {key!r} was built "
                f"({build.get('failed') or 'the process is gone'}); its log: {build.get('log')}"
            )
        if time.monotonic() > deadline:
            raise MissingComponent(
                f"{key!r} not built after {timeout:.0f}s; the build's log: {build.get('log')}"
            )
        time.sleep(2)
