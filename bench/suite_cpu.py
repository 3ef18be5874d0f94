#!/usr/bin/env python3
"""Where the test suite's CPU goes: a command (default `hack/test_lanes.py`) run with the
kernel's process accounting on, then every process that exited meanwhile summed by what it was.

    bench/suite_cpu.py [--out FILE] [-- COMMAND ...]
    bench/suite_cpu.py --report PACCT [--out FILE]

On 2 cores at 99% busy a suite's wall time is its CPU time over two, so what to make cheaper is
whatever this lists first. Each process is put in the part of the run its nearest ancestor with
a telling name belongs to (the local cluster's control plane, the node agents and the pods they
run, the operator and everything it starts, the tests and what they start), and also counted by
its own command name (a module run is ``python3``; an exec'd script is its file name, 15
characters at most). Accounting records a process when it exits: the local cluster must be
stopped by the end (`make test` and `.ci/run` stop a cluster they started) for its servers to
be counted. Needs root (acct(2)). Results: bench/results/suite_cpu.json unless --out.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
AHZ = 100  # the ticks of acct(5)'s times
# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime,
# etime (float, ticks), utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t), comm[16].
RECORD = struct.Struct("<BBHIIIIIIf8H16s")

# The part of the run a process belongs to, by the name of it or of its nearest ancestor that
# has one of these (first match going up the tree). A pytest process's part is its lane's.
PARTS = {
    "control plane": {"kube-apiserver", "kube-controller", "kube-scheduler", "coredns"},
    "node agents and pods": {"nodeagent"},
    "operator": {"ansible-operato"},  # comm keeps 15 characters
    # The operator's warm-start server (and the ones the local lane's tests of it start) leaves
    # its parent: its children are found by their own name.
    "operator's warm start": {"qk_warm_start.py"},
    "health watch": {"qk_health_watch"},
    "toolchain build": {"install.py"},
    "lint": {"ruff", "ansible-lint"},
}
SAMPLE_SECONDS = 0.5


def _python_label(argv: list[str]) -> str | None:
    """What a Python process runs: ``-m X`` -> X (its last dotted part), else its script's
    file name."""
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-m" and i + 1 < len(argv):
            return argv[i + 1].rsplit(".", 1)[-1]
        if not arg.startswith("-"):
            return os.path.basename(arg)
    return None


class Sampler:
    """Names the Python processes (accounting knows them only as python3) by their argv, read
    from /proc every SAMPLE_SECONDS: most short-lived ones are missed, but what they run under
    (a pytest lane, ansible-operator) is found, and that is what decides their part."""

    def __init__(self):
        self.labels: dict[tuple[int, int], str] = {}  # (pid, start second): label
        self.boot = self._boot_time()
        self.tick = os.sysconf("SC_CLK_TCK")
        self.stop = False

    @staticmethod
    def _boot_time() -> float:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
        return 0.0

    def scan(self) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                start = int(self.boot + int(stat.rsplit(")", 1)[1].split()[19]) / self.tick)
                if (pid, start) in self.labels:
                    continue
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                argv = [a.decode(errors="replace") for a in argv if a]
                if not argv or "python" not in os.path.basename(argv[0]):
                    self.labels[(pid, start)] = ""
                    continue
                label = _python_label(argv) or ""
                if label == "pytest":
                    environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
                    env = dict(e.split("=", 1) for e in environ.split("\0") if "=" in e)
                    worker = " worker" if "PYTEST_XDIST_WORKER" in env else ""
                    label = f"pytest {env.get('QK_TEST_LANE', 'one process')}{worker}"
                self.labels[(pid, start)] = label
            except (OSError, IndexError, ValueError):
                continue

    def run(self) -> None:
        while not self.stop:
            self.scan()
            time.sleep(SAMPLE_SECONDS)


def comp_t(value: int) -> int:
    """acct(5)'s 16-bit float: a 13-bit mantissa, a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * ((value >> 13) & 0x7))


def read_records(path: Path) -> list[dict]:
    data = path.read_bytes()
    out = []
    for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):
        fields = RECORD.unpack_from(data, offset)
        if fields[1] != 3:  # ac_version
            raise SystemExit(f"{path}: record {offset // RECORD.size} is not acct_v3")
        pid, ppid, btime, etime = fields[6], fields[7], fields[8], fields[9]
        utime, stime = comp_t(fields[10]), comp_t(fields[11])
        comm = fields[18].split(b"\0", 1)[0].decode(errors="replace")
        out.append(
            {
                "pid": pid,
                "ppid": ppid,
                "start": btime,
                "end": btime + etime / AHZ,
                "cpu": (utime + stime) / AHZ,
                "comm": comm,
            }
        )
    return out


def name_records(records: list[dict], labels: dict) -> None:
    for r in records:
        # The start time read from /proc (boot time + ticks) comes out 0-2 s before acct's.
        start = int(r["start"])
        found = (labels.get((r["pid"], start + d)) for d in (0, -1, -2, 1))
        r["name"] = next((name for name in found if name), r["comm"])


def link_parents(records: list[dict]) -> None:
    """Each record's parent: the record of its ppid alive when it started (pids are reused)."""
    by_pid = collections.defaultdict(list)
    for r in records:
        by_pid[r["pid"]].append(r)
    for r in records:
        candidates = [
            p
            for p in by_pid.get(r["ppid"], ())
            if p is not r and p["start"] <= r["start"] + 1 and p["end"] >= r["start"] - 1
        ]
        r["parent"] = min(candidates, key=lambda p: r["start"] - p["start"]) if candidates else None


def part_of(record: dict) -> str:
    node, depth = record, 0
    while node is not None and depth < 200:
        name = node["name"]
        if name.startswith("pytest "):
            return "tests: " + name.removeprefix("pytest ").removesuffix(" worker")
        for part, names in PARTS.items():
            if name in names:
                return part
        node, depth = node.get("parent"), depth + 1
    if record["comm"] == "etcd":
        return "etcd outside the node agents (the local cluster's own)"
    return "other"


def summarize(records: list[dict], wall: float | None, labels: dict) -> dict:
    name_records(records, labels)
    link_parents(records)
    parts = collections.Counter()
    commands = collections.defaultdict(lambda: [0.0, 0])
    by_part_command = collections.defaultdict(lambda: collections.defaultdict(lambda: [0.0, 0]))
    for r in records:
        part = part_of(r)
        parts[part] += r["cpu"]
        commands[r["name"]][0] += r["cpu"]
        commands[r["name"]][1] += 1
        entry = by_part_command[part][r["name"]]
        entry[0] += r["cpu"]
        entry[1] += 1
    total = sum(parts.values())

    def top(table, n):
        rows = sorted(table.items(), key=lambda item: -item[1][0])[:n]
        return [
            {"command": name, "cpu_seconds": round(cpu, 1), "processes": count}
            for name, (cpu, count) in rows
        ]

    return {
        "wall_seconds": round(wall, 1) if wall is not None else None,
        "cpu_seconds": round(total, 1),
        "processes": len(records),
        "parts": {
            part: {
                "cpu_seconds": round(cpu, 1),
                "share": round(cpu / total, 3) if total else 0,
                "top_commands": top(by_part_command[part], 12),
            }
            for part, cpu in parts.most_common()
        },
        "top_commands": top(commands, 30),
    }


def speed_probe() -> float:
    """CPU seconds of a fixed piece of work (a loop of 10^7 additions, 5 times, the best kept):
    the same machine has run it 1.5-1.8 times slower from one hour to the next (another tenant
    on the host), so runs compare only with this beside them."""
    best = None
    for _ in range(5):
        began = time.process_time()
        sum(range(10**7))
        spent = time.process_time() - began
        best = spent if best is None else min(best, spent)
    return round(best, 4)


def run_accounted(command: list[str], sampler: Sampler) -> tuple[Path, float, int]:
    libc = ctypes.CDLL(None, use_errno=True)
    pacct = Path(tempfile.mkdtemp(prefix="qk-suite-cpu-")) / "pacct"
    pacct.touch()
    if libc.acct(str(pacct).encode()) != 0:
        raise SystemExit(f"acct({pacct}): {os.strerror(ctypes.get_errno())} (needs root)")
    began = time.monotonic()
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    try:
        code = subprocess.run(command, cwd=ROOT).returncode
    finally:
        libc.acct(None)
        sampler.stop = True
        thread.join()
    return pacct, time.monotonic() - began, code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "suite_cpu.json")
    parser.add_argument("--report", type=Path, help="summarize an existing accounting file")
    parser.add_argument("command", nargs="*", help="default: hack/test_lanes.py")
    args = parser.parse_args()
    sampler = Sampler()
    if args.report:
        pacct, wall, code = args.report, None, None
        labels_file = args.report.with_name("labels.json")
        if labels_file.exists():
            for key, label in json.loads(labels_file.read_text()).items():
                pid, start = key.split(":")
                sampler.labels[(int(pid), int(start))] = label
    else:
        command = args.command or [sys.executable, str(ROOT / "hack" / "test_lanes.py")]
        probes = [speed_probe()]
        pacct, wall, code = run_accounted(command, sampler)
        probes.append(speed_probe())
        named = {f"{pid}:{start}": name for (pid, start), name in sampler.labels.items() if name}
        pacct.with_name("labels.json").write_text(json.dumps(named))
        print(f"[suite_cpu] accounting file {pacct}")
    summary = summarize(read_records(pacct), wall, sampler.labels)
    summary["exit_code"] = code
    if not args.report:
        summary["speed_probe_cpu_seconds"] = {"before": probes[0], "after": probes[1]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    for part, entry in summary["parts"].items():
        print(f"{part:55s} {entry['cpu_seconds']:9.1f} CPU-s  {entry['share']:6.1%}")
    print(f"{'all':55s} {summary['cpu_seconds']:9.1f} CPU-s over {summary['wall_seconds']} s")
    return code or 0


if __name__ == "__main__":
    sys.exit(main())
