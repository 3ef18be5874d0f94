# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""cert-manager as the signer of an EtcdCluster's certificates (``spec.tls.<part>.issuerRef``).

The operator writes one cert-manager ``Certificate`` per Secret the members, the operator and
applications use, under the names the operator-managed Secrets have; cert-manager issues and
renews them, and writes ``tls.crt``, ``tls.key`` and ``ca.crt`` (the issuer's CA). From then on
they are checked like the user's own Secrets (qk_cluster_tls.check_own and the trust rules of
_ensure_own_trust), so a renewal needs no restart and a CA changed behind the issuer is loaded
one member at a time, or refused when it would make members refuse each other.

``certificate`` renders an object (pure); ``ensure`` creates or corrects them and waits a
little for cert-manager to issue them, the way a user watching ``kubectl get certificate`` would.
"""

from __future__ import annotations

import time

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import member_labels
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import KubeError

CERTIFICATE_API = "cert-manager.io/v1"
NOT_INSTALLED = (
    "spec.tls issuerRef: cert-manager is not installed (the API server does not serve "
    "Certificates of cert-manager.io/v1): install cert-manager, or name your own Secrets instead"
)
# What each purpose's certificate may be used for. The members' server certificate is also a
# client one: etcd's gRPC gateway connects to its own member with it.
USAGES = {
    "server": ["digital signature", "key encipherment", "server auth", "client auth"],
    "peer": ["digital signature", "key encipherment", "server auth", "client auth"],
    "operator": ["digital signature", "key encipherment", "client auth"],
    "client": ["digital signature", "key encipherment", "client auth"],
    "user": ["digital signature", "key encipherment", "client auth"],
}


def certificate(secret, purpose, common_name, dns_names, issuer, cluster, namespace, owner):
    """The cert-manager Certificate whose Secret is ``secret``."""
    spec = {
        "secretName": secret,
        "commonName": common_name,
        "usages": USAGES[purpose],
        "privateKey": {"algorithm": "ECDSA", "size": 256},
        "issuerRef": {
            "name": issuer["name"],
            "kind": issuer.get("kind") or "Issuer",
            "group": issuer.get("group") or "cert-manager.io",
        },
        # Labels on the Secret cert-manager writes, so that it is found with the cluster's.
        "secretTemplate": {"labels": member_labels(cluster)},
    }
    if dns_names:
        spec["dnsNames"] = list(dns_names)
    metadata = {"name": secret, "namespace": namespace, "labels": member_labels(cluster)}
    if owner:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": CERTIFICATE_API,
        "kind": "Certificate",
        "metadata": metadata,
        "spec": spec,
    }


def _says(existing, wanted) -> bool:
    """Whether ``existing`` holds everything ``wanted`` does (fields the API server defaulted
    beside them do not count as a difference)."""
    if isinstance(wanted, dict):
        return isinstance(existing, dict) and all(
            _says(existing.get(k), v) for k, v in wanted.items()
        )
    return existing == wanted


def ready(obj: dict | None) -> tuple[bool, str]:
    """Whether cert-manager says the Certificate is issued and current, and if not what it says."""
    if not obj:
        return False, "not created"
    generation = (obj.get("metadata") or {}).get("generation")
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") != "Ready":
            continue
        current = condition.get("observedGeneration") in (None, generation)
        if condition.get("status") == "True" and current:
            return True, ""
        return False, f"{condition.get('reason') or 'NotReady'}: {condition.get('message') or ''}"
    return False, "not issued yet"


def ensure(
    kube,
    wanted: list[dict],
    *,
    wait_seconds=10.0,
    interval=0.25,
    clock=time.monotonic,
    sleep=time.sleep,
):
    """Create or correct the ``wanted`` Certificates, then wait up to ``wait_seconds`` for all
    to be Ready. Returns ``(changed names, problems)``: a problem per Certificate that is not
    Ready in time (with cert-manager's reason), or one saying cert-manager is not installed."""
    changed = []
    # What each Certificate said when last read: one already there and unchanged is not read
    # again (a steady cluster's check costs one GET per Certificate).
    states: dict[str, tuple[bool, str]] = {}
    for obj in wanted:
        name, namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
        try:
            existing = kube.get(CERTIFICATE_API, "Certificate", name, namespace)
            if existing is None:
                kube.create(obj)
                changed.append(name)
            elif not _says(existing.get("spec") or {}, obj["spec"]):
                kube.patch(CERTIFICATE_API, "Certificate", name, {"spec": obj["spec"]}, namespace)
                changed.append(name)
            else:
                states[name] = ready(existing)
        except KubeError as exc:
            # A Certificate that cannot be created for want of its kind: no cert-manager CRDs.
            if exc.not_found:
                return changed, [NOT_INSTALLED]
            raise
    deadline = clock() + wait_seconds
    while True:
        for obj in wanted:
            name, namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
            if not states.get(name, (False, ""))[0]:
                states[name] = ready(kube.get(CERTIFICATE_API, "Certificate", name, namespace))
        waiting = {name: why for name, (done, why) in states.items() if not done}
        if not waiting or clock() >= deadline:
            break
        sleep(min(interval, max(0.0, deadline - clock())))
    return changed, [
        f"spec.tls issuerRef: cert-manager has not issued Certificate {name} yet ({why})"
        for name, why in sorted(waiting.items())
    ]
