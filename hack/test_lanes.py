#!/usr/bin/env python3
"""Run the whole test suite as concurrent pytest processes ("lanes") and fail if any does.

The ``cluster`` lane runs every test that uses the local Kubernetes cluster (the e2e suite, the
molecule scenarios, ...): the tests that can share it (each in its own namespace against the
one operator), and the tests marked ``exclusive``, alone, because they stop the operator or a
node for everyone, or measure how fast the status follows a fault; the exclusive ones first
when the tests' part of the toolchain is already built (Lanes.cluster). The shared part runs
in QK_CLUSTER_WORKERS pytest-xdist workers side by side, by work stealing (default 2: with
reconciles as cheap as they are now, 2 workers ran the shared tests in 17.6 min against 26.6
one at a time, on 2 cores; when a no-op reconcile cost 5 times more, they made it slower). The
``local`` lane runs, at the same time and at a lower CPU priority (LOCAL_LANE_NICENESS), every
other test: modules against real etcd, their own API servers and object stores on free ports,
unit tests. Which lane a test belongs to is decided by tests/conftest.py (a test using the
``local_cluster`` fixture, or marked ``cluster`` or ``exclusive``), so a new test lands in the
right one without being listed here.

Beside them, the part of the toolchain only some tests need is built (`install.py --part tests`,
at the lowest CPU priority); those tests wait for what they need, and its failure fails the run.

The cluster lane prints as it goes; the local lane's output is kept in a file and printed when
it ends, so the two do not interleave. Usage: test_lanes.py [pytest options for every lane]
(options only: a path would leave one of the lanes with nothing to run, which fails).
Environment: QK_CLUSTER_WORKERS (default 2) workers for the shared part of the cluster lane;
QK_EXCLUSIVE_FIRST=0 runs the shared part first even when the toolchain is built (to time one
order against the other); QK_KEEP_CLUSTER=1 keeps a local cluster this run started.
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
LOCALCLUSTER = [sys.executable, str(ROOT / "hack" / "cluster" / "localcluster.py")]
# The toolchain's part only some tests need (MinIO, Prometheus, cert-manager, OLM, opm,
# operator-sdk, the soak checker): built beside the tests, at the lowest CPU priority so that it
# takes what the tests leave idle, and waited for by the tests that need it (a cold build of it
# is 7 of the toolchain's 16 minutes on 2 cores; warm, it only checks stamps).
TESTS_TOOLCHAIN = ["nice", "-n", "19", "python3", str(ROOT / "hack" / "toolchain" / "install.py")]
# The local lane gives way to the cluster lane: on 2 cores both together kept the machine 93-96 %
# busy while the cluster lane's exclusive part ran alone at 50 %, so CPU the local lane takes
# from the shared part makes the whole run longer, where the same work done beside the exclusive
# part costs nothing. Its processes mostly wait on etcd and API servers they started; a
# niceness changes only how CPU is shared when both want it.
LOCAL_LANE_NICENESS = 10
# Slowest tests of each lane, printed at its end: what to look at when the suite grows.
DURATIONS = "--durations=15"
# The e2e session's decoy CRD (tests/e2e/conftest.py), which the workers leave for the last.
DECOY_CRD = "etcdclusters.etcd-operator.cozystack.io"


def machine_cpu() -> tuple[float, float]:
    """(busy, all) CPU time of the whole machine so far, in clock ticks (/proc/stat): how much of
    its CPU a part of the run left unused, which says whether more could run beside it."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    total = sum(fields[:8])  # guest time is counted in user already
    return total - idle, total


def busy_share(before: tuple[float, float], after: tuple[float, float]) -> float:
    spent = after[1] - before[1]
    return (after[0] - before[0]) / spent if spent else 0.0


def pytest_command(lane: str, extra: list[str], basetemp: Path) -> list[str]:
    # One .pytest_cache writer at a time is enough: the cluster lane's parts run one after the
    # other, the local lane beside them writes none.
    cache = ["-p", "no:cacheprovider"] if lane == "local" else []
    workers = []
    count = int(os.environ.get("QK_CLUSTER_WORKERS", "2"))
    if lane == "cluster-shared" and count > 1:
        workers = ["-n", str(count), "--dist", "worksteal"]
    niceness = ["nice", "-n", str(LOCAL_LANE_NICENESS)] if lane == "local" else []
    return [
        *niceness,
        sys.executable,
        "-m",
        "pytest",
        *cache,
        *workers,
        DURATIONS,
        f"--basetemp={basetemp}",
        *extra,
    ]


def cluster_order(tests_toolchain_built: bool) -> tuple[str, str]:
    """The cluster lane's two parts in the order they run. The exclusive tests leave the machine
    half idle, which the local lane takes (it runs at a lower priority): they go first, so that
    less of the local lane is left to run beside the shared tests. Not while the tests' part of
    the toolchain is still being built (a cold run): the exclusive lane's last tests need its
    last components, and would wait for them while the shared lane could be running; nor with
    QK_EXCLUSIVE_FIRST=0."""
    order = ("cluster-shared", "cluster-exclusive")
    if tests_toolchain_built and os.environ.get("QK_EXCLUSIVE_FIRST", "1") != "0":
        return order[::-1]
    return order


class Lanes:
    def __init__(self, extra: list[str]):
        self.extra = extra
        self.scratch = Path(tempfile.mkdtemp(prefix="qk-test-lanes-"))
        self.started = time.monotonic()
        self.results: dict[str, tuple[int, float]] = {}  # part: (exit code, seconds it took)
        self.busy: dict[str, float] = {}  # part: the machine's CPU busy share while it ran
        self.cpu_at_start = machine_cpu()
        self.running: list[subprocess.Popen] = []
        self.tests_toolchain_built = threading.Event()

    def run(self, lane: str, log=None) -> int:
        began, cpu = time.monotonic(), machine_cpu()
        env = dict(os.environ, QK_TEST_LANE=lane, QK_KEEP_CLUSTER="1")
        command = pytest_command(lane, self.extra, self.scratch / f"{lane}-tmp")
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT if log else None,
        )
        self.running.append(process)
        code = process.wait()
        self.results[lane] = (code, time.monotonic() - began)
        self.busy[lane] = busy_share(cpu, machine_cpu())
        return code

    def local(self) -> None:
        with open(self.scratch / "local.log", "w+") as log:
            self.run("local", log)
            log.seek(0)
            self.local_output = log.read()

    def cluster(self) -> None:
        began = time.monotonic()
        started_here = subprocess.run([*LOCALCLUSTER, "status"], capture_output=True).returncode
        up = subprocess.run([*LOCALCLUSTER, "up"], capture_output=True, text=True, timeout=900)
        self.results["cluster-up"] = (up.returncode, time.monotonic() - began)
        if up.returncode != 0:
            print(f"local cluster did not come up:\n{up.stdout}\n{up.stderr}", flush=True)
            return
        built = self.tests_toolchain_built.is_set() and self.results["toolchain-tests"][0] == 0
        order = cluster_order(built)
        print(f"cluster lane: {', then '.join(order)}", flush=True)
        try:
            for part in order:
                self.run(part)
        finally:
            if started_here and os.environ.get("QK_KEEP_CLUSTER") != "1":
                subprocess.run([*LOCALCLUSTER, "down"], capture_output=True, timeout=300)
            else:
                self.remove_decoy_crd()

    @staticmethod
    def remove_decoy_crd() -> None:
        sys.path.insert(0, str(ROOT / "tests"))
        from kubehelpers import STATE, Kube

        Kube(STATE / "kubeconfig").run(
            "delete", "crd", DECOY_CRD, "--ignore-not-found", "--wait=false", check=False
        )

    def build_tests_toolchain(self) -> None:
        began = time.monotonic()
        log_path = self.scratch / "toolchain-tests.log"
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                [*TESTS_TOOLCHAIN, "--part", "tests", "--announce", str(log_path)],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            self.running.append(process)
            code = process.wait()
        self.results["toolchain-tests"] = (code, time.monotonic() - began)
        self.toolchain_output = log_path.read_text()
        self.tests_toolchain_built.set()

    def main(self) -> int:
        threads = [
            threading.Thread(target=self.build_tests_toolchain),
            threading.Thread(target=self.cluster),
            threading.Thread(target=self.local),
        ]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                thread.join()
        except KeyboardInterrupt:
            for process in self.running:
                process.terminate()
            raise
        print("\n===== the toolchain's part for tests =====", flush=True)
        sys.stdout.write(getattr(self, "toolchain_output", ""))
        print("\n===== local lane =====", flush=True)
        sys.stdout.write(getattr(self, "local_output", ""))
        print()
        parts = ("toolchain-tests", "cluster-up", "cluster-shared", "cluster-exclusive", "local")
        for part in parts:
            if part not in self.results:
                print(f"{part}: NOT RUN", flush=True)
                continue
            code, seconds = self.results[part]
            verdict = "passed" if code == 0 else f"FAILED (exit {code})"
            busy = f" (machine CPU {self.busy[part]:.0%} busy)" if part in self.busy else ""
            print(f"{part}: {verdict} in {seconds:.0f} s{busy}", flush=True)
        whole = busy_share(self.cpu_at_start, machine_cpu())
        print(
            f"all lanes: {time.monotonic() - self.started:.0f} s (machine CPU {whole:.0%} busy)",
            flush=True,
        )
        # pytest's exit 5 (nothing collected) is a failure here too: a lane emptied by a bad
        # selection would otherwise pass silently.
        passed = len(self.results) == len(parts) and all(c == 0 for c, _ in self.results.values())
        if passed:  # failed tests keep their directories (tmp_path_retention_policy) for a look
            shutil.rmtree(self.scratch, ignore_errors=True)
        return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(Lanes(sys.argv[1:]).main())
