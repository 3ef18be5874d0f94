"""Every etcd module the etcdcluster role calls gets the playbook's connection defaults (the
operator's client certificate, root's credentials): a module left out reaches a TLS or auth
cluster without them and fails there only."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ETCD_CONNECTION = "quorumkeeper.etcd.etcd_connection"
# etcd_cluster_tls writes the connection the others use (the operator's certificate): its task
# passes its own options.
OWN_CONNECTION = {"etcd_cluster_tls"}


def etcd_modules() -> set[str]:
    return {
        path.stem for path in (REPO / "library").glob("*.py") if ETCD_CONNECTION in path.read_text()
    }


def modules_called(tasks) -> set[str]:
    called = set()
    for task in tasks or []:
        called |= set(task)
        for key in ("block", "rescue", "always"):
            called |= modules_called(task.get(key))
    return called


def test_every_etcd_module_of_the_cluster_role_gets_the_connection_defaults():
    (play,) = yaml.safe_load((REPO / "playbooks" / "etcdcluster.yml").read_text())
    defaults = set(play["module_defaults"])
    called = set()
    for path in (REPO / "roles" / "etcdcluster" / "tasks").glob("*.yml"):
        called |= modules_called(yaml.safe_load(path.read_text()))
    used = called & etcd_modules() - OWN_CONNECTION
    assert {"etcd_member", "etcd_member_join", "etcd_member_leave"} <= used
    assert used - defaults == set()
