"""The short chaos soak: rounds of every fault kind against a 3-member cluster under a client
workload (hack/soak). Fails when a round does not recover, when an acknowledged write is not read
back, or when the recorded history is not linearizable. `make soak` runs the long one."""

from __future__ import annotations

import json
import os
import sys

import pytest
from kubehelpers import ROOT

os.environ.setdefault("GRPC_VERBOSITY", "NONE")
sys.path.insert(0, str(ROOT / "hack"))

from soak.chaos import KINDS, Config, Soak, summarize  # noqa: E402

pytestmark = pytest.mark.toolchain("soak_checker")

ROUNDS_PER_KIND = 2
# Start no new round after this long, so that the test stays within about 4.5 minutes even on a
# slow machine; the first pass through the kinds takes about 2 minutes on 2 cores.
BUDGET_S = 170


# Stops nodes and the operator: alone.
@pytest.mark.exclusive
@pytest.mark.timeout(600)
def test_short_soak(etcd_cluster, tmp_path):
    config = Config(
        rounds=ROUNDS_PER_KIND * len(KINDS),
        fault_duration=(2.0, 5.0),
        node_stop_duration=(13.0, 16.0),  # just past the node's NotReady
        operator_delay=(0.0, 4.0),
        recovery_timeout=120,
        budget=BUDGET_S,
    )
    soak = Soak(
        etcd_cluster.kube.kubeconfig,
        etcd_cluster.namespace,
        etcd_cluster.name,
        etcd_cluster.manifest(3),
        config,
        artifacts=tmp_path / "soak",
    )
    report = soak.run()
    (tmp_path / "soak.json").write_text(json.dumps(report, indent=2))
    print(summarize(report))  # shown with -rP or -s
    where = f"report {tmp_path / 'soak.json'}, artifacts {report.get('artifacts')}"
    assert report["passed"], f"soak failed: {report['failures']}; {where}"
    assert report["lost_writes"] == [] and report["linearizable"] is True
    # Every acknowledged write read back at its revision, but those a NOSPACE round's
    # compaction took first (the fill's window: a small part).
    read_back, compacted = report["acknowledged_writes_read_back"], report["compacted_writes"]
    assert report["acknowledged_writes"] == read_back + compacted and read_back > 0
    assert compacted <= read_back // 10, f"{compacted} writes compacted before read back; {where}"
    assert report["rounds_recovered"] == report["rounds"]
    ran = {kind for kind, count in report["faults"].items() if count}
    assert ran == set(KINDS), f"rounds ran out of time: only {sorted(ran)}; {where}"
    ops = report["operations"]
    # The clients reached every member (replaced members count anew), and the faults hit them.
    assert len(ops["served_by"]) >= 3, ops
    assert ops["ok"] > 100 and ops["failed"] + ops["indeterminate"] > 0, ops
