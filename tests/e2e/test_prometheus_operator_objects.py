"""spec.monitoring end to end, with the Prometheus operator's real CRDs (copied from its module by
the toolchain): asked for before the CRDs exist, the objects are skipped with a condition and an
Event saying what to install; once the CRDs are installed, the operator creates a PodMonitor that
selects exactly the cluster's member pods on their metrics port and a PrometheusRule that
promtool accepts, both validated by the API server against the CRDs' schemas; a part turned off
is deleted, and what is left goes with the cluster."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from kubehelpers import CLUSTERS, WaitTimeout, toolchain_component, wait_until
from prometheushelpers import tool

pytestmark = [pytest.mark.cluster, pytest.mark.toolchain("prometheus", "prometheus_operator_crds")]

CRDS = ("podmonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com")


def crd_directory() -> str:
    return toolchain_component("prometheus_operator_crds")


def remove_crds(kube) -> None:
    kube("delete", "crd", *CRDS, "--ignore-not-found", "--wait=true", timeout=120)


def test_monitoring_objects_follow_the_spec_and_wait_for_the_crds(etcd_cluster, tmp_path):
    kube, namespace, name = etcd_cluster.kube, etcd_cluster.namespace, etcd_cluster.name
    # Nothing else uses the Prometheus operator's CRDs: this test owns them.
    remove_crds(kube)
    manifest = etcd_cluster.manifest(3)
    manifest["spec"]["monitoring"] = {
        "podMonitor": True,
        "prometheusRule": True,
        "scrapeInterval": "15s",
        "labels": {"release": "prometheus"},
    }
    kube.apply(manifest)
    try:
        etcd_cluster.wait_available(3)
        # The metrics Service lists every member's metrics port (ServiceMonitors select it).
        members = {p["status"]["podIP"] for p in etcd_cluster.pods()}

        def metrics_endpoints():
            endpoints = kube.get("endpoints", f"{name}-metrics", namespace)
            (subset,) = endpoints.get("subsets") or [{}]
            addresses = {a["ip"] for a in subset.get("addresses", [])}
            return addresses == members and subset["ports"] == [
                {"name": "metrics", "port": 2381, "protocol": "TCP"}
            ]

        wait_until("the metrics Service's endpoints are the members", metrics_endpoints, 30)
        skipped = wait_until(
            "the Monitoring condition says the CRDs are missing",
            lambda: (
                (c := etcd_cluster.condition("Monitoring")).get("reason") == "MonitoringCRDsMissing"
                and c
            ),
            timeout=60,
        )
        assert skipped["status"] == "False"
        assert (
            "does not serve monitoring.coreos.com/v1 PodMonitor, PrometheusRule"
            in (skipped["message"])
        )
        assert "MonitoringCRDsMissing" in etcd_cluster.event_reasons()
        # Not an error: the cluster itself is fine.
        assert etcd_cluster.condition("Degraded")["status"] == "False"

        kube("apply", "--server-side", "-f", crd_directory())
        kube("wait", "crd", *CRDS, "--for=condition=Established", "--timeout=60s")
        # A change of the EtcdCluster is looked at at once (otherwise within the steady period).
        kube("annotate", CLUSTERS, name, "-n", namespace, "example.com/touched=1", "--overwrite")
        in_place = wait_until(
            "the Monitoring condition says the objects are in place",
            lambda: (c := etcd_cluster.condition("Monitoring")).get("status") == "True" and c,
            # A new CRD's storage may answer 429 for a moment: the client waits and tries again.
            timeout=90,
        )
        assert in_place["message"] == (
            f"PodMonitor {name} (every 15s) and PrometheusRule {name} (16 alerts) in place"
        )
        uid = etcd_cluster.get()["metadata"]["uid"]

        monitor = kube.get("podmonitors.monitoring.coreos.com", name, namespace)
        assert monitor["metadata"]["labels"]["release"] == "prometheus"
        assert [ref["uid"] for ref in monitor["metadata"]["ownerReferences"]] == [uid]
        selector = monitor["spec"]["selector"]
        selected = kube(
            "get", "pods", "-n", namespace, "-o", "name", "-l",
            ",".join(
                [f"{k}={v}" for k, v in selector["matchLabels"].items()]
                + [e["key"] for e in selector["matchExpressions"]]
            ),
        ).split()  # fmt: skip
        members = {f"pod/{p['metadata']['name']}" for p in etcd_cluster.pods()}
        assert set(selected) == members and len(members) == 3
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert endpoint["interval"] == "15s"
        for pod in etcd_cluster.pods():
            ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
            assert endpoint["port"] in ports

        rule = kube.get("prometheusrules.monitoring.coreos.com", name, namespace)
        assert [ref["uid"] for ref in rule["metadata"]["ownerReferences"]] == [uid]
        written = tmp_path / "rules.yml"
        written.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
        checked = subprocess.run(
            [tool("promtool"), "check", "rules", str(written)], capture_output=True
        )
        assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
        for group in rule["spec"]["groups"]:
            for each in group["rules"]:
                assert f'namespace="{namespace}",etcdcluster="{name}"' in each["expr"], each

        etcd_cluster.patch_spec(monitoring={"podMonitor": False})

        def pod_monitor_deleted():
            found = kube.get("podmonitors.monitoring.coreos.com", namespace=namespace)["items"]
            return not found and "MonitoringObjectDeleted" in etcd_cluster.event_reasons()

        wait_until("the PodMonitor turned off is deleted, with an Event", pod_monitor_deleted, 60)
        assert kube.get("prometheusrules.monitoring.coreos.com", name, namespace)

        kube("delete", CLUSTERS, name, "-n", namespace, "--wait=true", timeout=120)
        wait_until(
            "the PrometheusRule goes with its cluster",
            lambda: (
                not kube.get("prometheusrules.monitoring.coreos.com", namespace=namespace)["items"]
            ),
            timeout=60,
        )
    except WaitTimeout:
        print(json.dumps(etcd_cluster.get().get("status"), indent=2))
        raise
    finally:
        remove_crds(kube)
