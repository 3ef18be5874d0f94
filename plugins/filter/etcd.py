# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Jinja2 filters for the quorumkeeper roles (etcd names, URLs, images, versions, peer specs)."""

from __future__ import annotations

import re

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - outside Ansible

    class AnsibleFilterError(Exception):
        pass


DEFAULT_DOMAIN = "cluster.local"
DEFAULT_REPOSITORY = "quay.io/coreos/etcd"
PEER_PORT = 2380
CLIENT_PORT = 2379


def _host(name, cluster, namespace, domain):
    for label, value in (("name", name), ("cluster", cluster), ("namespace", namespace)):
        if not value:
            raise AnsibleFilterError(f"etcd URL filters need a non-empty {label}")
    return f"{name}.{cluster}.{namespace}.svc.{domain or DEFAULT_DOMAIN}"


def etcd_peer_url(name, cluster, namespace, domain=DEFAULT_DOMAIN, scheme="http"):
    """``http://<name>.<cluster>.<namespace>.svc.<domain>:2380``"""
    return f"{scheme}://{_host(name, cluster, namespace, domain)}:{PEER_PORT}"


def etcd_client_url(name, cluster, namespace, domain=DEFAULT_DOMAIN, scheme="http"):
    """``http://<name>.<cluster>.<namespace>.svc.<domain>:2379``"""
    return f"{scheme}://{_host(name, cluster, namespace, domain)}:{CLIENT_PORT}"


def etcd_initial_cluster(names, cluster, namespace, domain=DEFAULT_DOMAIN, scheme="http"):
    """``n0=http://n0...:2380,n1=http://n1...:2380``"""
    if isinstance(names, str):
        names = [names]
    return ",".join(f"{n}={etcd_peer_url(n, cluster, namespace, domain, scheme)}" for n in names)


def etcd_ordinal(name):
    """Trailing ordinal of a StatefulSet-style name: ``etcd-2`` -> 2."""
    m = re.search(r"-(\d+)$", str(name))
    if not m:
        raise AnsibleFilterError(f"{name!r} does not end in -<ordinal>")
    return int(m.group(1))


def etcd_image(version, repository=DEFAULT_REPOSITORY):
    """``<repository>:v<version>`` (a leading ``v`` on version is accepted)."""
    v = str(version).strip()
    if not v:
        raise AnsibleFilterError("etcd_image needs a version")
    if v.startswith("v"):
        v = v[1:]
    return f"{repository or DEFAULT_REPOSITORY}:v{v}"


_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-([0-9A-Za-z.-]+))?(?:\+.*)?$")


def _version_key(v):
    m = _VERSION.match(str(v).strip())
    if not m:
        raise AnsibleFilterError(f"invalid etcd version {v!r}")
    nums = tuple(int(x or 0) for x in m.group(1, 2, 3))
    pre = m.group(4)
    # a release sorts after its pre-releases
    pre_key = (1, ()) if pre is None else (0, tuple(_pre_part(p) for p in pre.split(".")))
    return nums, pre_key


def _pre_part(p):
    return (0, int(p), "") if p.isdigit() else (1, 0, p)


_OPS = {
    "<": lambda c: c < 0,
    "lt": lambda c: c < 0,
    "<=": lambda c: c <= 0,
    "le": lambda c: c <= 0,
    "==": lambda c: c == 0,
    "=": lambda c: c == 0,
    "eq": lambda c: c == 0,
    "!=": lambda c: c != 0,
    "ne": lambda c: c != 0,
    ">=": lambda c: c >= 0,
    "ge": lambda c: c >= 0,
    ">": lambda c: c > 0,
    "gt": lambda c: c > 0,
}


def etcd_version_compare(a, b, op=None):
    """Compare etcd versions (``3.5.9``, ``v3.6.0-rc.1``, ``3.5``).

    Without ``op`` returns -1, 0 or 1; with ``op`` (``<``, ``>=``, ``eq``, ...) returns a bool.
    """
    ka, kb = _version_key(a), _version_key(b)
    cmp = (ka > kb) - (ka < kb)
    if op is None:
        return cmp
    if op not in _OPS:
        raise AnsibleFilterError(f"unknown comparison {op!r}; use one of {sorted(_OPS)}")
    return _OPS[op](cmp)


def etcd_minor(version):
    """``3.5.9`` -> ``3.5``."""
    nums, _ = _version_key(version)
    return f"{nums[0]}.{nums[1]}"


def etcd_peer_spec(peer, cluster_spec, state, members, naming):
    """The spec of EtcdPeer ``peer`` of a cluster whose spec is ``cluster_spec``.

    ``state`` is ``New`` (an initial member) or ``Existing`` (joins a running cluster);
    ``members`` names the static initial cluster it starts with (itself included); ``naming``
    is ``{cluster, namespace, domain, repository}`` (repository: used when the cluster sets
    none, so that a peer keeps its image whatever the operator's default becomes later).
    """
    if state not in ("New", "Existing"):
        raise AnsibleFilterError(f"initial cluster state {state!r} must be New or Existing")
    if peer not in members:
        raise AnsibleFilterError(f"the initial cluster of {peer} must include it: {members}")
    spec = {
        "clusterName": naming["cluster"],
        "version": cluster_spec["version"],
        "repository": cluster_spec.get("repository")
        or naming.get("repository")
        or DEFAULT_REPOSITORY,
        "bootstrap": {
            "initialClusterState": state,
            "static": {
                "initialCluster": [
                    {
                        "name": n,
                        "host": _host(
                            n, naming["cluster"], naming["namespace"], naming.get("domain")
                        ),
                    }
                    for n in members
                ]
            },
        },
    }
    for key in ("storage", "podTemplate"):
        if cluster_spec.get(key):
            spec[key] = cluster_spec[key]
    return spec


def etcd_peer_member(peer, cluster_spec, state, members, naming):
    """``{name, spec}`` of EtcdPeer ``peer``, for etcd_peer's ``members`` option."""
    return {"name": peer, "spec": etcd_peer_spec(peer, cluster_spec, state, members, naming)}


class FilterModule:
    def filters(self):
        return {
            "etcd_peer_url": etcd_peer_url,
            "etcd_client_url": etcd_client_url,
            "etcd_initial_cluster": etcd_initial_cluster,
            "etcd_ordinal": etcd_ordinal,
            "etcd_image": etcd_image,
            "etcd_peer_spec": etcd_peer_spec,
            "etcd_peer_member": etcd_peer_member,
            "etcd_version_compare": etcd_version_compare,
            "etcd_minor": etcd_minor,
        }
