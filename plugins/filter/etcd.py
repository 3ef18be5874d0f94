# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Jinja2 filters over the etcd domain (module_utils/qk_domain.py): member URLs, names, images,
versions and EtcdPeer specs, for the roles.

Addresses take a ``network``: the role's ``<role>_network`` dict (cluster, namespace, domain,
client_port, peer_port and schemes, built from the shared settings of the quorumkeeper
role), so that the URL etcd learns for a member is the one its pod advertises.
"""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils import qk_domain
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_tls import (
    LISTEN_PLAIN_HTTP,
    peer_tls_spec,
    resolve,
    schemes,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    cluster_config,
    effective_options,
    grown_spec,
)

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - outside Ansible

    class AnsibleFilterError(Exception):
        pass


def _domain_rule(rule):
    """``rule`` as a filter: the domain's ValueErrors become filter errors (the task says them)."""

    def as_filter(*args, **kwargs):
        try:
            return rule(*args, **kwargs)
        except (ValueError, KeyError, TypeError) as exc:
            raise AnsibleFilterError(f"{rule.__name__}: {exc}") from exc

    as_filter.__name__ = rule.__name__
    as_filter.__doc__ = rule.__doc__
    return as_filter


def _network(network) -> qk_domain.ClusterNetwork:
    if isinstance(network, qk_domain.ClusterNetwork):
        return network
    return qk_domain.ClusterNetwork.from_settings(dict(network))


@_domain_rule
def etcd_peer_url(name, network):
    """``http://<name>.<cluster>.<namespace>.svc.<domain>:<peer port>``"""
    return _network(network).peer_url(name)


@_domain_rule
def etcd_client_url(name, network):
    """``http://<name>.<cluster>.<namespace>.svc.<domain>:<client port>``"""
    return _network(network).client_url(name)


@_domain_rule
def etcd_initial_cluster(names, network):
    """``n0=http://n0...:2380,n1=http://n1...:2380``"""
    return _network(network).initial_cluster([names] if isinstance(names, str) else names)


@_domain_rule
def etcd_ordinal(name):
    """Trailing ordinal of a member name: ``etcd-2`` -> 2."""
    ordinal = qk_domain.ordinal_of(name)
    if ordinal < 0:
        raise ValueError(f"{name!r} does not end in -<ordinal>")
    return ordinal


@_domain_rule
def etcd_image(version, repository=None):
    """``<repository>:v<version>`` (a leading ``v`` on version is accepted)."""
    return qk_domain.image_reference(version, repository)


_COMPARISONS = {
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


@_domain_rule
def etcd_version_compare(a, b, op=None):
    """Compare etcd versions (``3.5.9``, ``v3.6.0-rc.1``, ``3.5``).

    Without ``op`` returns -1, 0 or 1; with ``op`` (``<``, ``>=``, ``eq``, ...) returns a bool.
    """
    if op is not None and op not in _COMPARISONS:
        raise ValueError(f"unknown comparison {op!r}; use one of {sorted(_COMPARISONS)}")
    cmp = qk_domain.compare_versions(a, b)
    return cmp if op is None else _COMPARISONS[op](cmp)


@_domain_rule
def etcd_minor(version):
    """``3.5.9`` -> ``3.5``."""
    major, minor, _ = qk_domain.parse_version(version)
    return f"{major}.{minor}"


@_domain_rule
def etcd_peer_spec(peer, cluster_spec, state, members, naming):
    """The spec of EtcdPeer ``peer`` of a cluster whose spec is ``cluster_spec``.

    ``state`` is ``New`` (an initial member) or ``Existing`` (joins a running cluster);
    ``members`` is the static initial cluster it starts with (itself included): names, or for a
    member that joins, ``name=peer URL`` strings and etcd's member entries ``{name, peer_urls}``
    (while peer TLS is turned on or off, a member etcd lists with the other scheme is listed
    with its own); ``naming`` is the role's network (cluster, namespace, domain, ports) plus
    ``repository``: used when the cluster sets none, so that a peer keeps its image whatever the
    operator's default becomes; and ``trust``, the CA bundles a member must start with while a
    CA is rotated.
    """
    if state not in ("New", "Existing"):
        raise ValueError(f"initial cluster state {state!r} must be New or Existing")
    network = _network(naming)
    tls = peer_tls_spec(resolve(network.cluster, cluster_spec.get("tls")), naming.get("trust"))
    if tls.get("peer") and _member_scheme(peer, members) == "http":
        # Added with a plain peer URL while peer TLS is turned on: it serves its peers plain
        # HTTP until the rolling restart moves it (qk_plan_config.staged_config).
        tls["peer"][LISTEN_PLAIN_HTTP] = True
    initial = _initial_cluster(members, network, schemes(tls)["peer_scheme"])
    if peer not in [entry["name"] for entry in initial]:
        raise ValueError(f"the initial cluster of {peer} must include it: {members}")
    spec = {
        "clusterName": network.cluster,
        "version": cluster_spec["version"],
        "repository": cluster_spec.get("repository")
        or naming.get("repository")
        or qk_domain.DEFAULT_REPOSITORY,
        "bootstrap": {
            "initialClusterState": state,
            "static": {"initialCluster": initial},
        },
    }
    for key in ("storage", "podTemplate"):
        if cluster_spec.get(key):
            spec[key] = cluster_spec[key]
    if tls:
        spec["tls"] = tls
    spec["options"] = effective_options(cluster_spec)
    return spec


def _name_and_scheme(member):
    """(name, scheme of its peer URL or None) of an entry of etcd_peer_spec's ``members``."""
    if isinstance(member, dict):
        name, urls = member.get("name") or "", member.get("peer_urls") or []
    else:
        name, _, url = str(member).partition("=")
        urls = [url] if url else []
    return name, (urls[0].split("://", 1)[0] if urls and "://" in urls[0] else None)


def _member_scheme(peer, members):
    return next((s for n, s in map(_name_and_scheme, members) if n == peer), None)


def _initial_cluster(members, network, own_scheme):
    entries = []
    for name, scheme in map(_name_and_scheme, members):
        if not name:
            # A learner that has not started yet: etcd knows no name to list it by.
            continue
        entry = {"name": name, "host": network.member_host(name)}
        if scheme and scheme != own_scheme:
            entry["scheme"] = scheme
        entries.append(entry)
    return entries


def etcd_peer_member(peer, cluster_spec, state, members, naming):
    """``{name, spec}`` of EtcdPeer ``peer``, for etcd_peer's ``members`` option."""
    return {"name": peer, "spec": etcd_peer_spec(peer, cluster_spec, state, members, naming)}


@_domain_rule
def etcd_cluster_config(cluster_spec, cluster, trust=None):
    """The configuration (etcd options, pod template, TLS) every member of EtcdCluster
    ``cluster`` whose spec is ``cluster_spec`` should run: a member whose EtcdPeer says
    otherwise is restarted with it. ``trust``: status.tls.trust while a CA is rotated."""
    return cluster_config(cluster_spec, cluster, trust)


@_domain_rule
def etcd_grown_spec(cluster_spec, status):
    """An EtcdCluster's spec with the volume size the operator grew for space, when larger
    (qk_options.grown_spec)."""
    return grown_spec(cluster_spec, status)


def etcd_tls_schemes(tls_spec):
    """The network's ``client_scheme`` and ``peer_scheme`` for an EtcdCluster's ``spec.tls``."""
    return schemes(tls_spec)


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
            "etcd_tls_schemes": etcd_tls_schemes,
            "etcd_cluster_config": etcd_cluster_config,
            "etcd_grown_spec": etcd_grown_spec,
        }
