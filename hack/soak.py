#!/usr/bin/env python3
"""Chaos soak: minority faults against an EtcdCluster under load; history and writes checked.

Rounds of one fault each against a fresh EtcdCluster while clients record a history, then a
linearizability check of that history and a read-back of every acknowledged write.

    hack/soak.py --rounds 30 --report bench/results/soak.json

Runs against $KUBECONFIG (default: the local cluster's); on the local cluster it first deploys
the operator from this working tree (--no-deploy to use the one running). Each run gets its own
namespace, deleted afterwards when the soak passed (--keep-namespace keeps it). The report is
JSON (see docs/testing-and-benchmarks.md, "Chaos soak"); on failure the history, its
visualization, the Events and the operator's log are written next to it. Exit status 0 when
the soak passed, 1 when not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # grpc logs every refused connection otherwise

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT / "hack", ROOT / "tests", ROOT / "tests" / "e2e"):
    sys.path.insert(0, str(path))

from conftest import EtcdClusterDriver  # noqa: E402  (tests/e2e/conftest.py: the cluster's manifest)
from kubehelpers import STATE, Kube, wait_until  # noqa: E402
from soak.chaos import KINDS, OPERATOR_SCENARIOS, Config, Soak, summarize  # noqa: E402

LOCAL_KUBECONFIG = STATE / "kubeconfig"


def span(text: str) -> tuple[float, float]:
    low, _, high = text.partition(":")
    return float(low), float(high or low)


def deploy_operator(kube: Kube) -> None:
    """The operator from this working tree, leading (a new pod waits out the old one's lease)."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "cluster" / "localcluster.py"), "deploy-operator"],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise SystemExit(f"[soak] operator deployment failed:\n{result.stdout}{result.stderr}")

    def leading():
        pods = kube.get(
            "pods", namespace="quorumkeeper-system", selector="control-plane=controller-manager"
        )["items"]
        live = [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]
        holder = kube.get("lease", "quorumkeeper", "quorumkeeper-system")["spec"].get(
            "holderIdentity", ""
        )
        return len(live) == 1 and holder.startswith(live[0] + "_")

    wait_until("the operator to lead", leading, 180)


def main(argv: list[str] | None = None) -> int:
    defaults = Config()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=defaults.rounds)
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma list of {', '.join(KINDS)}")
    ap.add_argument("--report", type=Path, default=ROOT / "bench" / "results" / "soak.json")
    ap.add_argument("--replicas", type=int, default=defaults.replicas)
    ap.add_argument("--version", default="3.6.16", help="etcd version of the cluster")
    ap.add_argument("--clients", type=int, default=defaults.clients)
    ap.add_argument("--keys", type=int, default=defaults.keys, help="keys per round")
    ap.add_argument("--rate", type=float, default=defaults.rate, help="ops/s per client")
    ap.add_argument("--seed", type=int, default=defaults.seed)
    ap.add_argument(
        "--fault-duration", type=span, default=defaults.fault_duration, metavar="MIN:MAX"
    )
    ap.add_argument(
        "--node-stop-duration", type=span, default=defaults.node_stop_duration, metavar="MIN:MAX"
    )
    ap.add_argument(
        "--operator-delay", type=span, default=defaults.operator_delay, metavar="MIN:MAX"
    )
    ap.add_argument(
        "--operator-scenarios",
        default=",".join(OPERATOR_SCENARIOS),
        help=f"kill-operator during: {', '.join(OPERATOR_SCENARIOS)}",
    )
    ap.add_argument("--recovery-timeout", type=float, default=defaults.recovery_timeout)
    ap.add_argument("--budget", type=float, default=None, help="start no round after N seconds")
    ap.add_argument("--no-deploy", action="store_true", help="use the operator already running")
    ap.add_argument("--keep-namespace", action="store_true")
    args = ap.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if unknown := set(kinds) - set(KINDS):
        ap.error(f"unknown fault kinds {sorted(unknown)}")
    scenarios = tuple(s for s in args.operator_scenarios.split(",") if s)
    if unknown := set(scenarios) - set(OPERATOR_SCENARIOS):
        ap.error(f"unknown operator scenarios {sorted(unknown)}")

    kubeconfig = Path(os.environ.get("KUBECONFIG") or LOCAL_KUBECONFIG)
    kube = Kube(kubeconfig)
    if not args.no_deploy and kubeconfig == LOCAL_KUBECONFIG:
        print("[soak] deploying the operator from this working tree", flush=True)
        deploy_operator(kube)
    namespace = "soak-" + uuid.uuid4().hex[:6]
    kube("create", "namespace", namespace)
    wait_until(
        "default ServiceAccount", lambda: kube.exists("serviceaccount", "default", namespace), 30
    )
    driver = EtcdClusterDriver(kube, namespace, name="soak", version=args.version)
    config = Config(
        rounds=args.rounds,
        kinds=kinds,
        replicas=args.replicas,
        clients=args.clients,
        keys=args.keys,
        rate=args.rate,
        seed=args.seed,
        fault_duration=args.fault_duration,
        node_stop_duration=args.node_stop_duration,
        operator_delay=args.operator_delay,
        operator_scenarios=scenarios,
        recovery_timeout=args.recovery_timeout,
        budget=args.budget,
    )
    artifacts = args.report.with_name(args.report.stem + "-artifacts")
    soak = Soak(
        kubeconfig, namespace, driver.name, driver.manifest(args.replicas), config, artifacts
    )
    report = soak.run()
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=2) + "\n")
    print(summarize(report), flush=True)
    print(f"report: {args.report}", flush=True)
    if report["passed"] and not args.keep_namespace:
        kube.run("delete", "namespace", namespace, "--wait=false", check=False)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
