#!/usr/bin/env python3
"""A restore pod's download (`qk_objectstore fetch`, the ``fetch`` init container) against boto3's
`download_file` of the same object, without the cluster: a real MinIO process on this host holding
one object of ~1 GiB, uploaded the way a backup is (its SHA-256 recorded); results in
bench/results/fetch_local_1gib.json.

    bench/fetch_local.py [--runs 5] [--mib 1024] [--previous DIR]

Each run times, on the same object and the same MinIO, alternating which goes first:
- baseline: boto3 `download_file` to a file (the restore benchmark's baseline download);
- fetch: `python3 -m ...qk_objectstore fetch --sha256 ...` as the restore pod runs it, alone;
- fetch x3: three at once, as the three restore pods of a 3-member restore do on one machine.
For each: the wall time, the CPU of the downloading processes (their rusage) and of MinIO (its
/proc stat), each process's own CPU per GiB. The page cache is dropped before each (root only),
so that no run pays to reclaim what the previous one left.

--previous DIR also runs the fetch of another tree (its plugins/, e.g. `git archive COMMIT
plugins | tar -x -C DIR`) in the same runs, to compare two versions under the same load.

Not a test: the numbers depend on the machine (2 shared cores here); they are recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # kubehelpers, which the harnesses import
sys.path.insert(0, str(ROOT / "tests" / "modules"))

import minioharness  # noqa: E402

RESULTS = ROOT / "bench" / "results"
KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret"}
BUCKET = "bench"
MODULE = "ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore"
TICKS = os.sysconf("SC_CLK_TCK")


def collections_dir(tree: Path) -> Path:
    """A collections directory whose quorumkeeper.etcd is ``tree`` (as the operator image's
    /opt/ansible/collections holds the project)."""
    where = Path(tempfile.mkdtemp(prefix="qk-fetch-collections-"))
    (where / "ansible_collections" / "quorumkeeper").mkdir(parents=True)
    (where / "ansible_collections" / "quorumkeeper" / "etcd").symlink_to(tree)
    return where


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def drop_page_cache() -> None:
    os.sync()
    # Not root: the runs then share whatever the cache holds.
    with contextlib.suppress(OSError):
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


def run_at_once(commands: list[list[str]], env: dict) -> dict:
    """Run ``commands`` side by side; wall time and each one's own CPU (user + system)."""
    started = time.monotonic()
    procs = [
        subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for c in commands
    ]
    cpu, outputs = [], []
    for proc in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out, err = proc.stdout.read(), proc.stderr.read()
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(proc.args)} failed ({proc.returncode}): {err.decode()}")
        cpu.append(usage.ru_utime + usage.ru_stime)
        outputs.append(out)
    return {"seconds": time.monotonic() - started, "cpu": cpu, "outputs": outputs}


def measure(
    name: str, commands: list[list[str]], env: dict, minio_pid: int, gib: float, scratch: Path
) -> dict:
    drop_page_cache()
    minio_before = process_cpu(minio_pid)
    result = run_at_once(commands, env)
    minio_cpu = process_cpu(minio_pid) - minio_before
    for leftover in scratch.glob("*"):
        leftover.unlink()
    return {
        "what": name,
        "seconds": round(result["seconds"], 2),
        "client_cpu_seconds": [round(c, 2) for c in result["cpu"]],
        "client_cpu_per_gib": round(statistics.mean(result["cpu"]) / gib, 2),
        "minio_cpu_seconds": round(minio_cpu, 2),
    }


BASELINE = """
import sys, boto3
client = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                      aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3])
client.download_file(sys.argv[4], sys.argv[5], sys.argv[6])
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--previous", type=Path, help="another tree whose fetch runs beside")
    parser.add_argument("--out", type=Path, default=RESULTS / "fetch_local_1gib.json")
    args = parser.parse_args()

    trees = {"fetch": ROOT}
    if args.previous:
        trees["fetch (previous)"] = args.previous.resolve()
    collections = {name: collections_dir(tree) for name, tree in trees.items()}
    sys.path.insert(0, str(collections["fetch"]))
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils import qk_objectstore

    work = Path(tempfile.mkdtemp(prefix="qk-fetch-bench-"))
    scratch = work / "scratch"
    scratch.mkdir()
    credentials = work / "credentials"
    credentials.mkdir()
    for key, value in KEYS.items():
        (credentials / key).write_text(value)
    runs: dict[str, list[dict]] = {}
    try:
        with minioharness.MinioServer(work / "minio" / "data", *KEYS.values()) as minio:
            client = minioharness.s3_client(minio.endpoint, KEYS)
            client.create_bucket(Bucket=BUCKET)
            url = f"s3://{BUCKET}/snapshot.db?endpoint={minio.endpoint}&region=us-east-1"
            chunk = 4 * 1024 * 1024

            def chunks():
                for _ in range(args.mib // 4):
                    yield os.urandom(chunk)

            stored = qk_objectstore.upload(qk_objectstore.parse_object_url(url), chunks(), {**KEYS})
            gib = stored["size"] / 2**30
            envs = {
                name: {**os.environ, "PYTHONPATH": str(where)}
                for name, where in collections.items()
            }

            def fetch(tree_name: str, n: int) -> list[list[str]]:
                return [
                    [
                        sys.executable,
                        "-m",
                        MODULE,
                        "fetch",
                        "--url",
                        url,
                        "--dest",
                        str(scratch / f"{tree_name.split()[0]}-{i}.db"),
                        "--sha256",
                        stored["sha256"],
                        "--credentials-dir",
                        str(credentials),
                    ]
                    for i in range(n)
                ]

            baseline = [
                [
                    sys.executable,
                    "-c",
                    BASELINE,
                    minio.endpoint,
                    *KEYS.values(),
                    BUCKET,
                    "snapshot.db",
                    str(scratch / "baseline.db"),
                ]
            ]
            kinds = {"baseline": (baseline, os.environ.copy())}
            for name in trees:
                kinds[name] = (fetch(name, 1), envs[name])
                kinds[f"{name} x3"] = (fetch(name, 3), envs[name])
            order = list(kinds)
            for run in range(args.runs):
                # Alternate which goes first: the machine drifts within an hour.
                this_order = order if run % 2 == 0 else order[::-1]
                for kind in this_order:
                    commands, env = kinds[kind]
                    sample = measure(kind, commands, env, minio.process.pid, gib, scratch)
                    runs.setdefault(kind, []).append(sample)
                    print(json.dumps(sample), flush=True)
    finally:
        for where in (work, *collections.values()):
            shutil.rmtree(where, ignore_errors=True)

    summary = {
        kind: {
            "median_seconds": round(statistics.median(s["seconds"] for s in samples), 2),
            "median_client_cpu_per_gib": round(
                statistics.median(s["client_cpu_per_gib"] for s in samples), 2
            ),
            "median_minio_cpu_seconds": round(
                statistics.median(s["minio_cpu_seconds"] for s in samples), 2
            ),
            "runs": samples,
        }
        for kind, samples in runs.items()
    }
    result = {
        "name": "fetch_local_1gib",
        "what": __doc__.split("\n\n")[0],
        "object_mib": round(stored["size"] / 2**20, 1),
        "runs": args.runs,
        "results": summary,
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} cpus={os.cpu_count()}",
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for kind, values in summary.items():
        print(kind, {k: v for k, v in values.items() if k != "runs"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
