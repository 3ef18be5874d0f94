"""The etcdcluster role's own templates, rendered by Ansible with the role's settings.

The addresses the role gives etcd are the ones its members' pods advertise, for any client and
peer port (add_member.yml, promote.yml, the endpoints in vars/main.yml), against the pod that
qk_members.render_replicaset makes of the EtcdPeer the same step creates. A port set in one
place once reached the pods but not the member etcd learned (the filters always used 2380 and
2379): etcd then waits for a peer URL nobody serves.

Every observation a round may report from asks etcd where its history is compacted to. The one
after a step did not: a reconcile that took steps until the cluster was Available (a rolling
restart on a busy machine) left status.maintenance.lastCompaction out until the next reconcile
with nothing to do, ten minutes later (CI saw it missing right after the roll)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_tls import (
    member_client_url,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import ClusterNetwork
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_members import (
    render_replicaset,
)
from ansibleenv import ansible_json_env

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "etcdcluster"
VARS_FILES = [
    REPO / "roles" / "quorumkeeper" / "defaults" / "main.yml",
    ROLE / "defaults" / "main.yml",
    ROLE / "vars" / "main.yml",
]


def _tasks(tasks):
    """Every task of a task list, those in blocks and rescues too."""
    for task in tasks:
        yield task
        for nested in ("block", "rescue", "always"):
            yield from _tasks(task.get(nested) or [])


def _task(file, module):
    for task in _tasks(yaml.safe_load((ROLE / "tasks" / file).read_text())):
        if module in task:
            return task
    raise AssertionError(f"no {module} task in {file}")


def _render(tmp_path, templates: dict, extra_vars: dict, task_vars: dict) -> dict:
    """Each template rendered by Ansible with the role's vars files, ``task_vars`` as the
    task's vars and ``extra_vars`` as -e (as watches.yaml `vars` would set them)."""
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [str(f) for f in VARS_FILES if f.exists()],
            "tasks": [
                {
                    "ansible.builtin.debug": {"msg": templates},
                    "vars": task_vars,
                }
            ],
        }
    ]
    playbook = tmp_path / "render.yml"
    playbook.write_text(yaml.safe_dump(play))
    env = ansible_json_env(tmp_path)
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            str(playbook),
            "-e",
            json.dumps(extra_vars),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    try:
        result = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError) as exc:
        raise AssertionError(f"ansible-playbook failed: {out.stdout[-3000:]}{out.stderr}") from exc
    assert not result.get("failed"), result
    return result["msg"]


def _args(replicaset) -> dict:
    (container,) = replicaset["spec"]["template"]["spec"]["containers"]
    return dict(a.removeprefix("--").split("=", 1) for a in container["args"] if "=" in a)


@pytest.mark.parametrize(("client_port", "peer_port"), [(2379, 2380), (12379, 12380)])
def test_etcd_learns_the_urls_the_pods_advertise(tmp_path, client_port, peer_port):
    join = _task("add_member.yml", "etcd_member_join")
    promote = _task("promote.yml", "etcd_member")
    members = ["c-0", "c-1", "c-2", "c-3"]
    settings = {"client_port": client_port, "peer_port": peer_port}
    extra_vars = {
        # The shared settings, and the role's own names for them before they were shared (so
        # that the test says the same of the code before the change).
        **{f"quorumkeeper_{k}": v for k, v in settings.items()},
        **{f"etcdcluster_{k}": v for k, v in settings.items()},
        "etcdcluster_name": "c",
        "etcdcluster_namespace": "ns",
        "etcdcluster_spec": {"replicas": 4, "version": "3.6.16"},
        "etcdcluster_step": {"action": "add_member", "peer": "c-3", "peers": ["c-3"]},
        # As etcd_cluster_observe reports them: plain members are reached over http.
        "etcdcluster_latest": {
            "peers": [
                {
                    "name": n,
                    "deleting": False,
                    "client_url": member_client_url(
                        ClusterNetwork("c", "ns", client_port=client_port), n, {}, False
                    ),
                }
                for n in members[:3]
            ],
            "etcd": {
                "members": [
                    {"name": n, "peer_urls": [f"http://{n}.c.ns.svc.cluster.local:{peer_port}"]}
                    for n in members[:3]
                ]
            },
        },
    }
    rendered = _render(
        tmp_path,
        {
            "joining": join["etcd_member_join"]["members"],
            "promoted_peer_url": promote["etcd_member"]["peer_urls"][0],
            "endpoints": "{{ etcdcluster_endpoints }}",
            "spec": join["etcd_member_join"]["spec"],
            "settings": join["etcd_member_join"]["settings"],
        },
        extra_vars,
        join.get("vars", {}),
    )
    pod = _args(render_replicaset("c-3", "ns", rendered["spec"], rendered["settings"]))
    assert rendered["joining"] == [f"c-3={pod['initial-advertise-peer-urls']}"]
    # etcd checks that a joining member knows every member's peer URL as the cluster has it.
    assert pod["initial-cluster"] == ",".join(
        f"{n}=http://{n}.c.ns.svc.cluster.local:{peer_port}" for n in members
    )
    assert rendered["promoted_peer_url"] == pod["initial-advertise-peer-urls"]
    assert pod["initial-advertise-peer-urls"].endswith(f":{peer_port}")
    for name, endpoint in zip(members[:3], rendered["endpoints"], strict=True):
        spec = dict(
            rendered["spec"],
            bootstrap={
                "static": {
                    "initialCluster": [{"name": name, "host": f"{name}.c.ns.svc.cluster.local"}]
                }
            },
        )
        advertised = _args(render_replicaset(name, "ns", spec, rendered["settings"]))
        assert endpoint == advertised["advertise-client-urls"]
        assert endpoint.endswith(f":{client_port}")


def test_every_observation_a_round_reports_from_asks_for_the_compaction():
    observations = {
        path.name: task["etcd_cluster_observe"]
        for path in sorted((ROLE / "tasks").glob("*.yml"))
        for task in _tasks(yaml.safe_load(path.read_text()) or [])
        if "etcd_cluster_observe" in task
    }
    assert set(observations) == {"reconcile.yml", "take_step.yml"}, observations
    for file, arguments in observations.items():
        assert "compacted_revision" in arguments, f"{file}'s observation leaves the compaction out"


@pytest.mark.parametrize(
    ("observed_before_the_step", "status", "probed_from"),
    [
        ({"compacted_revision": 42}, {"maintenance": {"lastCompaction": {"revision": 7}}}, 42),
        # The probe before the step got no answer: what the status says.
        ({}, {"maintenance": {"lastCompaction": {"revision": 7}}}, 7),
        ({}, {}, 0),
    ],
)
def test_the_observation_after_a_step_probes_from_the_revision_last_seen(
    tmp_path, observed_before_the_step, status, probed_from
):
    observe = _task("take_step.yml", "etcd_cluster_observe")["etcd_cluster_observe"]
    extra_vars = {
        "etcdcluster_latest": {"etcd": {"members": [], **observed_before_the_step}},
        "etcdcluster_current": status,
    }
    rendered = _render(tmp_path, {"known": observe["compacted_revision"]}, extra_vars, {})
    assert int(rendered["known"]) == probed_from
