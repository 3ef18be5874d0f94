#!/usr/bin/env python3
"""The etcd_snapshot module against `etcdctl snapshot save` + boto3 `upload_file`, without the
cluster: a real etcd 3.6.16 process holding ~1 GiB (1 MiB values) and a real MinIO process, both
on this host; results in bench/results/backup_local_1gib.json.

    bench/backup_local.py [--runs 3] [--mib 1024] [--previous DIR]

Each run times, on the same data and the same MinIO:
- baseline: `etcdctl snapshot save` to a file, then boto3 `upload_file` (default TransferConfig);
- module: the real module (`ansible localhost -m etcd_snapshot`, as the role runs it), its own
  ``seconds`` (snapshot stream to object committed) and wall time, and the peak RSS (VmHWM) of
  the module's process, sampled from /proc.
The module also backs up an empty etcd once: RSS growth = peak with the 1.2 GiB snapshot minus
peak with the empty one (the cluster benchmark's definition).

--previous DIR also runs, in the same runs, the module of another tree (its library/ and
plugins/, e.g. `git archive COMMIT library plugins | tar -x -C DIR`), to compare two versions
under the same load.

Not a test: the numbers depend on the machine (2 shared cores here); they are recorded.
"""

from __future__ import annotations

import argparse
import asyncio
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
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # kubehelpers, which the harnesses import
sys.path.insert(0, str(ROOT / "tests" / "modules"))

import minioharness  # noqa: E402

import etcdharness  # noqa: E402

RESULTS = ROOT / "bench" / "results"
VERSION = "3.6.16"
VALUE = 1024 * 1024
KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret"}
BUCKET = "bench"


async def fill(endpoint: str, count: int, concurrency: int = 8) -> None:
    """``count`` keys of 1 MiB of incompressible bytes each (each value different)."""
    import grpc.aio
    from etcd3aio.kv import KVService

    block = os.urandom(2 * VALUE)
    todo = iter(range(count))
    async with grpc.aio.insecure_channel(endpoint.removeprefix("http://")) as channel:
        kv = KVService(channel)

        async def worker():
            for i in todo:  # shared: each key is taken by one worker
                offset = (i * 4099) % VALUE
                await kv.put(f"/bench/large/{i:06d}", block[offset : offset + VALUE], timeout=60)

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def children(pid: int) -> set[int]:
    """``pid`` and all its descendants now."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, grew = {pid}, True
    while grew:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


def hwm_mib(pid: int) -> tuple[float, str] | None:
    """(VmHWM in MiB, command line) of ``pid``, None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024, cmdline
    return None


class ModulePeak(threading.Thread):
    """The peak RSS of the AnsiballZ_etcd_snapshot.py process under ``pid`` (VmHWM, read every
    50 ms; it only grows, so the last reading before the process exits is its peak)."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0.0, threading.Event()

    def run(self):
        while not self.stop.wait(0.05):
            for pid in children(self.pid):
                got = hwm_mib(pid)
                # The python process, not the `sh -c` that started it.
                if (
                    got
                    and "AnsiballZ_etcd_snapshot.py" in got[1]
                    and not got[1].startswith(("sh ", "/bin/sh"))
                ):
                    self.peak = max(self.peak, got[0])


def run_module(args: dict, home: Path, tree: Path = ROOT) -> dict:
    cmd = [etcdharness.ansible_bin(), "localhost", "-m", "etcd_snapshot", "-a", json.dumps(args)]
    env = etcdharness.ansible_env(home)
    # A tree of an earlier commit may predate ansible.cfg's collection (modules importing
    # ansible.module_utils.qk_*): give it its module_utils path as well.
    env.update(
        ANSIBLE_CONFIG=str(tree / "ansible.cfg"),
        ANSIBLE_LIBRARY=str(tree / "library"),
        ANSIBLE_MODULE_UTILS=str(tree / "plugins" / "module_utils"),
    )
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT)
    )
    sampler = ModulePeak(proc.pid)
    sampler.start()
    out, err = proc.communicate(timeout=900)
    wall = time.monotonic() - started
    sampler.stop.set()
    sampler.join()
    try:
        result = json.loads(out)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError) as exc:
        raise RuntimeError(
            f"module output not parsed ({exc}):\n{out[-3000:]}\n{err[-3000:]}"
        ) from exc
    if result.get("failed"):
        raise RuntimeError(f"etcd_snapshot failed: {result.get('msg')}")
    return {**result, "wall": wall, "module_rss_mib_peak": round(sampler.peak, 1)}


def module_once(endpoint: str, minio: str, key: str, home: Path, tree: Path = ROOT) -> dict:
    url = f"s3://{BUCKET}/{key}?endpoint={minio}&region=us-east-1"
    res = run_module(
        {"endpoints": [endpoint], "object_url": url, "credentials": KEYS, "snapshot_timeout": 900},
        home,
        tree,
    )
    size_mib = res["size"] / 2**20
    return {
        "seconds": res["seconds"],
        "wall_seconds": round(res["wall"], 2),
        "snapshot_mib": round(size_mib, 1),
        "mib_per_s": round(size_mib / res["seconds"], 1) if res["seconds"] else 0.0,
        "module_rss_mib_peak": res["module_rss_mib_peak"],
        "key": key,
    }


def baseline_once(endpoint: str, client, path: Path, key: str) -> dict:
    etcdctl = etcdharness.etcd_binary(VERSION).parent / "etcdctl"
    started = time.monotonic()
    subprocess.run(
        [str(etcdctl), f"--endpoints={endpoint}", "snapshot", "save", str(path)],
        check=True,
        capture_output=True,
        timeout=900,
    )
    saved = time.monotonic()
    client.upload_file(str(path), BUCKET, key)
    done = time.monotonic()
    size_mib = path.stat().st_size / 2**20
    path.unlink()
    return {
        "seconds": round(done - started, 2),
        "snapshot_save_seconds": round(saved - started, 2),
        "upload_seconds": round(done - saved, 2),
        "snapshot_mib": round(size_mib, 1),
        "mib_per_s": round(size_mib / (done - started), 1),
        "key": key,
    }


def median(results: list[dict], field: str) -> float:
    return round(statistics.median(r[field] for r in results), 2)


def module_summary(runs: list[dict], reference: dict, baseline: list[dict]) -> dict:
    return {
        "median_seconds": median(runs, "seconds"),
        "median_wall_seconds": median(runs, "wall_seconds"),
        "median_mib_per_s": median(runs, "mib_per_s"),
        "throughput_ratio_to_baseline": round(
            median(runs, "mib_per_s") / median(baseline, "mib_per_s"), 2
        ),
        "median_rss_mib_peak": median(runs, "module_rss_mib_peak"),
        "rss_mib_peak_empty_snapshot": reference["module_rss_mib_peak"],
        "median_rss_mib_growth": round(
            median(runs, "module_rss_mib_peak") - reference["module_rss_mib_peak"], 1
        ),
        "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mib", type=int, default=1024, help="MiB written (1 MiB values)")
    parser.add_argument("--previous", type=Path, help="a tree whose module runs too")
    parser.add_argument("--previous-label", default="previous", help="what --previous is")
    parser.add_argument("--output", default="backup_local_1gib", help="results file name")
    args = parser.parse_args()

    trees = {"module": ROOT}
    if args.previous:
        trees[args.previous_label] = args.previous.resolve()
    work = Path(tempfile.mkdtemp(prefix="qk-backup-bench-"))
    big = etcdharness.EtcdCluster(etcdharness.etcd_binary(VERSION), VERSION, work / "big")
    empty = etcdharness.EtcdCluster(etcdharness.etcd_binary(VERSION), VERSION, work / "empty")
    results = {name: [] for name in ["baseline", *trees]}
    references = {}
    try:
        with minioharness.MinioServer(work / "minio" / "data", *KEYS.values()) as minio:
            big.start(1, prefix="big")
            empty.start(1, prefix="empty")
            client = minioharness.s3_client(minio.endpoint, KEYS)
            client.create_bucket(Bucket=BUCKET)
            endpoint = big.endpoints()[0]
            started = time.monotonic()
            asyncio.run(fill(endpoint, args.mib))
            fill_seconds = time.monotonic() - started
            print(f"filled {args.mib} MiB in {fill_seconds:.1f} s", flush=True)

            home = work / "ansible-home"
            for name, tree in trees.items():
                references[name] = module_once(
                    empty.endpoints()[0], minio.endpoint, f"{name}-empty.db", home, tree
                )
                print(f"{name}, empty etcd: {references[name]}", flush=True)

            def step(name, i):
                if name == "baseline":
                    return baseline_once(endpoint, client, work / "base.db", f"baseline-{i}.db")
                return module_once(endpoint, minio.endpoint, f"{name}-{i}.db", home, trees[name])

            names = list(results)
            for i in range(args.runs):
                # Rotate the order: none always runs first, on a colder or warmer machine.
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    results[name].append(step(name, i))
                    print(f"run {i}: {name} {results[name][-1]}", flush=True)
                for obj in client.list_objects_v2(Bucket=BUCKET).get("Contents", []):
                    client.delete_object(Bucket=BUCKET, Key=obj["Key"])
            leftovers = client.list_multipart_uploads(Bucket=BUCKET).get("Uploads") or []
    finally:
        big.teardown()
        empty.teardown()
        shutil.rmtree(work, ignore_errors=True)

    baseline = results["baseline"]
    result = {
        "name": args.output,
        "runs": args.runs,
        "what": "etcd 3.6.16 (one member) and MinIO as processes on this host; baseline: "
        "etcdctl snapshot save to a file + boto3 upload_file (default TransferConfig); module: "
        "ansible localhost -m etcd_snapshot, `seconds` = snapshot stream to object committed; "
        "RSS growth = the module process's peak minus its peak backing up an empty etcd",
        "data": {"written_mib": args.mib, "value_bytes": VALUE, "fill_seconds": fill_seconds},
        "baseline": {
            "median_seconds": median(baseline, "seconds"),
            "median_mib_per_s": median(baseline, "mib_per_s"),
            "runs": baseline,
        },
        **{name: module_summary(results[name], references[name], baseline) for name in trees},
        "goal": "throughput >= 0.8x the baseline's, module RSS growth < 64 MiB (issue 7)",
        "open_multipart_uploads_left": len(leftovers),
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} cpus={os.cpu_count()} (shared with other work)",
        "load_average_at_end": os.getloadavg(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.output}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"baseline {result['baseline']['median_mib_per_s']} MiB/s", flush=True)
    for name in trees:
        summary = result[name]
        print(
            f"{name}: {summary['median_mib_per_s']} MiB/s, "
            f"{summary['throughput_ratio_to_baseline']}x the baseline; RSS growth "
            f"{summary['median_rss_mib_growth']} MiB",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
