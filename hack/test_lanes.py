#!/usr/bin/env python3
"""Run the whole test suite as two concurrent pytest processes ("lanes") and fail if either does.

The ``cluster`` lane runs every test that uses the local Kubernetes cluster (the e2e suite, the
molecule scenarios, ...) one at a time, as they share the cluster and its single operator. The
``local`` lane runs, at the same time, every other test: modules against real etcd, their own
API servers and object stores on free ports, unit tests. Which lane a test belongs to is decided
by tests/conftest.py (a test using the ``local_cluster`` fixture, or marked ``cluster``), so a
new test lands in the right one without being listed here.

The cluster lane prints as it goes; the local lane's output is kept in a file and printed when
it ends, so the two do not interleave. Usage: test_lanes.py [pytest options for both lanes]
(options only: a path would leave one of the lanes with nothing to run, which fails).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANES = ("cluster", "local")
# Slowest tests of each lane, printed at its end: what to look at when the suite grows.
DURATIONS = "--durations=15"


def pytest_command(lane: str, extra: list[str], basetemp: Path) -> list[str]:
    # One .pytest_cache writer is enough.
    cache = [] if lane == "cluster" else ["-p", "no:cacheprovider"]
    return [sys.executable, "-m", "pytest", *cache, DURATIONS, f"--basetemp={basetemp}", *extra]


def main(extra: list[str]) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="qk-test-lanes-"))
    started = time.monotonic()
    processes: dict[str, subprocess.Popen] = {}
    ended: dict[str, float] = {}
    logs = {}
    for lane in LANES:
        env = dict(os.environ, QK_TEST_LANE=lane)
        command = pytest_command(lane, extra, scratch / f"{lane}-tmp")
        if lane == "cluster":
            processes[lane] = subprocess.Popen(command, cwd=ROOT, env=env)
        else:
            logs[lane] = open(scratch / f"{lane}.log", "w+")  # noqa: SIM115 - read at the end
            processes[lane] = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=logs[lane], stderr=subprocess.STDOUT
            )

    def wait(lane: str) -> None:
        processes[lane].wait()
        ended[lane] = time.monotonic() - started

    waiters = [threading.Thread(target=wait, args=(lane,)) for lane in LANES]
    for waiter in waiters:
        waiter.start()
    try:
        for waiter in waiters:
            waiter.join()
    except KeyboardInterrupt:
        for process in processes.values():
            process.terminate()
        raise
    for lane, log in logs.items():
        log.seek(0)
        print(f"\n===== {lane} lane =====", flush=True)
        sys.stdout.write(log.read())
        log.close()
    print()
    codes = {lane: processes[lane].returncode for lane in LANES}
    for lane in LANES:
        verdict = "passed" if codes[lane] == 0 else f"FAILED (pytest exit {codes[lane]})"
        print(f"lane {lane}: {verdict} in {ended[lane]:.0f} s", flush=True)
    # pytest's exit 5 (nothing collected) is a failure here too: a lane emptied by a bad
    # selection would otherwise pass silently.
    passed = all(code == 0 for code in codes.values())
    if passed:  # failed tests keep their directories (tmp_path_retention_policy) for a look
        shutil.rmtree(scratch, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
