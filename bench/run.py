#!/usr/bin/env python3
"""Benchmarks of the local cluster and the operator; results go to bench/results/.

    bench/run.py [--only NAME ...] [--runs N]

- cluster_up_warm: `localcluster.py down` then `up` with a warm toolchain cache (one run).
- pod_ready: create -> Ready of one etcd pod (median of 10).
- static_etcd_floor: three static etcd pods (no operator) -> a healthy 3-member cluster
  (median of 5); the floor the operator's create time is compared with.
- operator_create: EtcdCluster of 3 -> Available (median of 5).
- operator_scale_3_to_5: Available at 3 -> Available at 5 (median of 5).
- operator_member_recovery: a member's etcd process killed -> that member healthy in etcd again
  (median of 5 kills of one 3-member cluster).

Each result file holds every sample, the median and the goal from the issues. Not a test: the
numbers depend on the machine; they are recorded, not asserted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "hack" / "cluster"))

import faults  # noqa: E402
from conftest import EtcdClusterDriver  # noqa: E402  (tests/e2e/conftest.py)
from kubehelpers import CACHE, STATE, Kube, wait_until  # noqa: E402

RESULTS = ROOT / "bench" / "results"
LOCALCLUSTER = [sys.executable, str(ROOT / "hack" / "cluster" / "localcluster.py")]
ETCD_IMAGE = "quay.io/coreos/etcd:v3.6.16"


def record(name: str, samples: list[float], goal: str, unit: str = "s", **extra) -> dict:
    result = {
        "name": name,
        "unit": unit,
        "samples": [round(s, 3) for s in samples],
        "median": round(statistics.median(samples), 3),
        "min": round(min(samples), 3),
        "max": round(max(samples), 3),
        "goal": goal,
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} cpus={os.cpu_count()}",
        **extra,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{name}: median {result['median']}{unit} over {len(samples)} ({goal})", flush=True)
    return result


def fresh_namespace(kube: Kube) -> str:
    name = "bench-" + uuid.uuid4().hex[:6]
    kube("create", "namespace", name)
    wait_until("default ServiceAccount", lambda: kube.exists("serviceaccount", "default", name), 30)
    return name


def bench_cluster_up_warm(kube: Kube, runs: int) -> None:
    subprocess.run([*LOCALCLUSTER, "down"], check=True, capture_output=True)
    started = time.monotonic()
    subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "cluster-up"],
        check=True,
        capture_output=True,
    )
    record("cluster_up_warm", [time.monotonic() - started], "under 30 s (issue 2)")


def etcd_pod(name: str, initial_cluster: str = "", subdomain: str = "", domain: str = "") -> dict:
    """An etcd pod; with initial_cluster, a static member <name>.<subdomain>.<domain>."""
    args = [
        f"--name={name}",
        "--data-dir=/var/lib/etcd/data",
        "--listen-client-urls=http://0.0.0.0:2379",
        "--advertise-client-urls=http://127.0.0.1:2379",
        "--listen-peer-urls=http://0.0.0.0:2380",
    ]
    if initial_cluster:
        host = f"{name}.{subdomain}.{domain}"
        args += [
            f"--initial-advertise-peer-urls=http://{host}:2380",
            f"--initial-cluster={initial_cluster}",
            "--initial-cluster-state=new",
        ]
    spec = {
        "containers": [
            {
                "name": "etcd",
                "image": ETCD_IMAGE,
                "command": ["/usr/local/bin/etcd"],
                "args": args,
                "readinessProbe": {"tcpSocket": {"port": 2379}, "periodSeconds": 1},
            }
        ]
    }
    if subdomain:
        spec.update(hostname=name, subdomain=subdomain)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "etcd"}},
        "spec": spec,
    }


def bench_pod_ready(kube: Kube, runs: int) -> None:
    namespace = fresh_namespace(kube)
    samples = []
    for i in range(max(runs, 10)):
        name = f"p{i}"
        started = time.monotonic()
        kube.apply(etcd_pod(name), namespace=namespace)
        wait_until(f"{name} Ready", lambda n=name: kube.pod_ready(n, namespace), 60, interval=0.05)
        samples.append(time.monotonic() - started)
    kube.run("delete", "namespace", namespace, "--wait=false", check=False)
    record("pod_ready", samples, "under 3 s median (issue 2)")


def static_floor_once(kube: Kube, etcdctl: str) -> float:
    namespace = fresh_namespace(kube)
    names = [f"s{i}" for i in range(3)]
    domain = f"{namespace}.svc.cluster.local"
    initial = ",".join(f"{n}=http://{n}.floor.{domain}:2380" for n in names)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "floor"},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"bench": "etcd"},
            "ports": [{"name": "peer", "port": 2380}],
        },
    }
    started = time.monotonic()
    kube.apply(
        service, *(etcd_pod(n, initial, "floor", domain) for n in names), namespace=namespace
    )

    def healthy():
        ips = [p["status"].get("podIP") for p in kube.get("pods", namespace=namespace)["items"]]
        if len(ips) != 3 or not all(ips):
            return False
        endpoints = ",".join(f"http://{ip}:2379" for ip in ips)
        result = subprocess.run(
            [etcdctl, f"--endpoints={endpoints}", "endpoint", "health", "--command-timeout=2s"],
            capture_output=True,
            text=True,
        )
        return result.returncode == 0

    wait_until("3 static members healthy", healthy, 120, interval=0.1)
    elapsed = time.monotonic() - started
    kube.run("delete", "namespace", namespace, "--wait=false", check=False)
    return elapsed


def bench_static_floor(kube: Kube, runs: int) -> None:
    manifest = json.loads((CACHE / "toolchain.json").read_text())
    etcdctl = str(Path(manifest["etcd"]["3.6.16"]) / "etcdctl")
    samples = [static_floor_once(kube, etcdctl) for _ in range(runs)]
    record("static_etcd_floor", samples, "the floor for operator_create")


def operator_once(kube: Kube) -> tuple[float, float]:
    """One EtcdCluster: create 3 -> Available, then scale to 5 -> Available."""
    driver = EtcdClusterDriver(kube, fresh_namespace(kube), name="bench")
    started = time.monotonic()
    driver.create(3)
    driver.wait_available(3, timeout=300)
    create = time.monotonic() - started

    started = time.monotonic()
    driver.scale(5)
    driver.wait_available(5, timeout=300)
    scale = time.monotonic() - started
    kube.run("delete", "namespace", driver.namespace, "--wait=false", check=False)
    return create, scale


def bench_operator(kube: Kube, runs: int) -> None:
    subprocess.run([*LOCALCLUSTER, "deploy-operator"], check=True, capture_output=True)
    create, scale = zip(*(operator_once(kube) for _ in range(runs)), strict=True)
    floor_file = RESULTS / "static_etcd_floor.json"
    floor = json.loads(floor_file.read_text())["median"] if floor_file.exists() else None
    record(
        "operator_create", list(create), "<= 2x the static floor and <= 20 s (issue 3)", floor=floor
    )
    record("operator_scale_3_to_5", list(scale), "<= 20 s (issue 3)")


def bench_recovery(kube: Kube, runs: int) -> None:
    """A member's etcd process killed -> that member healthy in etcd again (runs kills of one
    3-member cluster), then the EtcdCluster reports Available with 3 healthy members."""
    subprocess.run([*LOCALCLUSTER, "deploy-operator"], check=True, capture_output=True)
    manifest = json.loads((CACHE / "toolchain.json").read_text())
    etcdctl = str(Path(manifest["etcd"]["3.6.16"]) / "etcdctl")
    driver = EtcdClusterDriver(kube, fresh_namespace(kube), name="bench")
    driver.create(3)
    driver.wait_available(3, timeout=300)
    samples = []
    for _ in range(runs):
        victim = driver.pod_of("bench-1")
        restarts_before = victim["status"]["containerStatuses"][0]["restartCount"]
        endpoint = f"http://{victim['status']['podIP']}:2379"
        started = time.monotonic()
        faults.crash_pod(driver.namespace, victim["metadata"]["name"])
        samples.append(member_recovered(driver, etcdctl, endpoint, restarts_before) - started)
        driver.wait_available(3, timeout=120)
    kube.run("delete", "namespace", driver.namespace, "--wait=false", check=False)
    record("operator_member_recovery", samples, "<= 15 s (issue 3)")


def member_recovered(driver, etcdctl: str, endpoint: str, restarts_before: int) -> float:
    """The moment the killed member (restarted) answers as a healthy member of its cluster."""

    def healthy_again():
        restarts = driver.pod_of("bench-1")["status"]["containerStatuses"][0]["restartCount"]
        if restarts <= restarts_before:
            return False
        command = [etcdctl, f"--endpoints={endpoint}", "endpoint", "health", "--command-timeout=1s"]
        return subprocess.run(command, capture_output=True, text=True).returncode == 0

    wait_until("the killed member healthy again", healthy_again, 120, interval=0.1)
    return time.monotonic()


BENCHMARKS = {
    "cluster_up_warm": bench_cluster_up_warm,
    "pod_ready": bench_pod_ready,
    "static_etcd_floor": bench_static_floor,
    "operator": bench_operator,
    "recovery": bench_recovery,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(BENCHMARKS))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    subprocess.run([*LOCALCLUSTER, "up"], check=True, capture_output=True)
    kube = Kube(STATE / "kubeconfig")
    for name in args.only or list(BENCHMARKS):
        BENCHMARKS[name](kube, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
