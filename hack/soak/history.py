"""The soak's history: every client operation with its invocation and return time, input, output
and outcome, in the format hack/soak/checker reads; and the checker's verdict on it.

Outcomes:
- ``ok``: the server answered; the output is what it said.
- ``failed``: definitely not applied: the request never left the client (no connection), or the
  member rejected it before proposing it to raft (see ``DEFINITE_FAILURES``).
- ``indeterminate``: anything else (timeout, connection lost while waiting, an error raised after
  the proposal). A write may or may not have happened: the checker lets it take effect at any
  moment after its call, or never (its return time is infinite).

Times are nanoseconds of ``time.monotonic_ns()`` since the history's epoch, one clock for every
client (they run in one process), taken before the request is sent and after the answer arrives,
so each interval contains the real one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

OUTCOMES = ("ok", "failed", "indeterminate")
OPS = ("get", "put", "cas")
# etcd answers these before a request reaches raft (v3rpc's unary interceptor, or the apply-gap
# check in front of the proposal), so the request had no effect. "no leader" comes only for
# requests that carry the `hasleader` metadata, which the workload always sends.
DEFINITE_FAILURES = (
    "etcdserver: no leader",
    "etcdserver: too many requests",
    "etcdserver: rpc not supported for learner",
    "etcdserver: not capable",
)


def classify(error_text: str, sent: bool) -> str:
    """The outcome of a request that did not return an answer."""
    if not sent:
        return "failed"
    if any(error_text.startswith(d) or f"({d})" in error_text for d in DEFINITE_FAILURES):
        return "failed"
    return "indeterminate"


class History:
    """Thread-safe list of operation records (dicts in the checker's format)."""

    def __init__(self, epoch_ns: int | None = None):
        self.epoch_ns = time.monotonic_ns() if epoch_ns is None else epoch_ns
        self.records: list[dict] = []
        self._lock = threading.Lock()

    def now(self) -> int:
        return time.monotonic_ns() - self.epoch_ns

    def begin(self, client: int, op: str, key: str, value=None, expect=None) -> dict:
        """A new record, its call time taken now (before the request is sent)."""
        if op not in OPS:
            raise ValueError(f"unknown op {op!r}")
        record = {"client": client, "op": op, "key": key}
        if value is not None:
            record["value"] = value
        if expect is not None:
            record["expect"] = expect
        with self._lock:
            record["id"] = len(self.records)
            self.records.append(record)
        record["call"] = self.now()
        return record

    def finish(self, record: dict, outcome: str, **fields) -> dict:
        """Complete a record; an indeterminate one has no return time (it may never happen)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        returned = self.now()
        record.update(fields, outcome=outcome)
        record["return"] = None if outcome == "indeterminate" else returned
        # For reading the history: when the client gave up, even on an indeterminate operation.
        record["gave_up"] = returned
        return record

    def snapshot(self) -> list[dict]:
        with self._lock:
            return [dict(r) for r in self.records if "outcome" in r]

    def counts(self) -> dict:
        records = self.snapshot()
        counts = {"total": len(records), **dict.fromkeys(OUTCOMES, 0)}
        by_op = {op: dict.fromkeys(OUTCOMES, 0) for op in OPS}
        served_by: dict[str, int] = {}  # answered operations per member ID
        for r in records:
            counts[r["outcome"]] += 1
            by_op[r["op"]][r["outcome"]] += 1
            if r.get("member"):
                served_by[r["member"]] = served_by.get(r["member"], 0) + 1
        counts["by_op"], counts["served_by"] = by_op, served_by
        return counts

    def acknowledged_writes(self) -> list[dict]:
        """Writes the server confirmed: ok puts and ok compare-and-swaps that succeeded."""
        return [
            r
            for r in self.snapshot()
            if r["outcome"] == "ok"
            and (r["op"] == "put" or (r["op"] == "cas" and r.get("succeeded")))
        ]

    def keys(self) -> list[str]:
        return sorted({r["key"] for r in self.snapshot()})

    def dump(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        document = {"epoch": "time.monotonic_ns() at the start", "operations": self.snapshot()}
        path.write_text(json.dumps(document, separators=(",", ":")) + "\n")
        return path


class CheckerError(RuntimeError):
    pass


def checker_binary() -> Path:
    """The checker `make toolchain` built (toolchain.json names its directory)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "toolchain"))
    import manifest

    try:
        directory = manifest.component("soak_checker")
    except (OSError, ValueError, manifest.MissingComponent) as error:
        raise CheckerError(f"no soak checker: {error}") from error
    binary = Path(directory) / "soak-checker"
    if not binary.exists():
        raise CheckerError(f"{binary} is missing: run `make toolchain`")
    return binary


def check(history_path: Path, html: Path | None = None, timeout_s: float = 300) -> dict:
    """Run the checker on a history file; its JSON verdict (``result`` is ``linearizable``,
    ``not-linearizable`` or ``unknown``)."""
    command = [str(checker_binary()), "-history", str(history_path), "-timeout", f"{timeout_s}s"]
    if html is not None:
        command += ["-html", str(html)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + 120)
    if result.returncode not in (0, 1, 2):
        raise CheckerError(f"checker failed ({result.returncode}): {result.stderr.strip()}")
    return json.loads(result.stdout)
