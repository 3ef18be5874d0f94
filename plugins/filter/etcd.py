# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Jinja2 filters for the quorumkeeper roles (etcd names, URLs, images, versions, CPU)."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

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


_QUANTITY = re.compile(r"^([+]?[0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(1000),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
}


def cpu_quantity(value):
    """Kubernetes CPU quantity (``1500m``, ``2``, ``0.5``) as a Decimal number of cores."""
    if isinstance(value, bool):
        raise AnsibleFilterError(f"invalid CPU quantity {value!r}")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    m = _QUANTITY.match(str(value).strip())
    if not m or m.group(2) not in _SUFFIX:
        raise AnsibleFilterError(f"invalid CPU quantity {value!r} (expected e.g. 500m, 2, 1.5)")
    try:
        return Decimal(m.group(1)) * _SUFFIX[m.group(2)]
    except InvalidOperation as exc:
        raise AnsibleFilterError(f"invalid CPU quantity {value!r}") from exc


def gomaxprocs(cpu_limit, default=1):
    """GOMAXPROCS for a CPU limit: floor of the cores, at least 1. No limit -> ``default``."""
    if cpu_limit is None or (isinstance(cpu_limit, str) and not cpu_limit.strip()):
        return default
    return max(1, math.floor(cpu_quantity(cpu_limit)))


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


class FilterModule:
    def filters(self):
        return {
            "etcd_peer_url": etcd_peer_url,
            "etcd_client_url": etcd_client_url,
            "etcd_initial_cluster": etcd_initial_cluster,
            "etcd_ordinal": etcd_ordinal,
            "etcd_image": etcd_image,
            "gomaxprocs": gomaxprocs,
            "etcd_version_compare": etcd_version_compare,
            "etcd_minor": etcd_minor,
        }
