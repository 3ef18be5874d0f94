"""cert-manager on the local cluster for one test: its CRDs applied, and its controllers (built
from the Go module proxy by hack/toolchain/install.py: cert-manager) run on the host against the
cluster's API server, watching only the test's namespace, so that tests never share one. A CA
Issuer made the way cert-manager's documentation makes one: a SelfSigned Issuer signs a CA
Certificate, whose Secret a CA Issuer signs with."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kubehelpers import toolchain_component, wait_until

API = "cert-manager.io/v1"


def toolchain() -> dict:
    return toolchain_component("cert_manager")


class CertManager:
    def __init__(self, kube, namespace: str, log_dir: Path):
        self.kube, self.namespace, self.log_dir = kube, namespace, log_dir
        self.process = None

    def __enter__(self):
        tools = toolchain()
        self.kube("apply", "--server-side", "--force-conflicts", "-f", tools["crds"])
        for crd in ("certificates", "certificaterequests", "issuers", "clusterissuers"):
            self.kube("wait", "--for=condition=Established", f"crd/{crd}.cert-manager.io")
        log = open(self.log_dir / "cert-manager.log", "w")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(
            [
                tools["controller"],
                f"--kubeconfig={self.kube.kubeconfig}",
                f"--namespace={self.namespace}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        return self

    def __exit__(self, *exc):
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def ready(self, kind: str, name: str) -> bool:
        obj = json.loads(
            self.kube("get", f"{kind}.cert-manager.io", name, "-n", self.namespace, "-o", "json")
        )
        conditions = (obj.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def ca_issuer(self, name: str, common_name: str) -> str:
        """A CA Issuer ``name`` whose CA (Secret ``<name>-ca``) a SelfSigned Issuer made."""

        def obj(kind, obj_name, spec):
            metadata = {"namespace": self.namespace, "name": obj_name}
            return {"apiVersion": API, "kind": kind, "metadata": metadata, "spec": spec}

        ca = {
            "isCA": True,
            "commonName": common_name,
            "secretName": f"{name}-ca",
            "privateKey": {"algorithm": "ECDSA", "size": 256},
            "issuerRef": {"name": f"{name}-selfsigned", "kind": "Issuer"},
        }
        self.kube.apply(
            obj("Issuer", f"{name}-selfsigned", {"selfSigned": {}}),
            obj("Certificate", f"{name}-ca", ca),
            obj("Issuer", name, {"ca": {"secretName": f"{name}-ca"}}),
        )
        wait_until(f"Issuer {name} Ready", lambda: self.ready("issuer", name), 60)
        return name
