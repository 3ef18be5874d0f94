"""config/ (kustomize), watches.yaml, PROJECT, requirements.yml, Dockerfile and bundle/."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import qk_apiserver
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
GROUP = "etcd.quorumkeeper.dev"
NS = "quorumkeeper-system"
SA = "quorumkeeper-controller-manager"
KINDS = ["EtcdCluster", "EtcdPeer", "EtcdBackup", "EtcdBackupSchedule", "EtcdRestore"]
SKIP_DIRS = {
    ".git",
    ".venv",
    "venv",
    "node_modules",
    ".tox",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    "templates",
}


def kubectl_bin() -> str:
    return str(qk_apiserver.find_kube_binary("kubectl"))


def kustomize(path: str) -> list[dict]:
    proc = subprocess.run(
        [kubectl_bin(), "kustomize", str(ROOT / path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    if not os.access(kubectl_bin(), os.X_OK):
        pytest.fail(f"kubectl not found at {kubectl_bin()}")
    return kustomize("config/default")


def by_kind(objs, kind):
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


# -- YAML sanity -----------------------------------------------------------------------------


def yaml_files():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for name in filenames:
            if name.endswith((".yaml", ".yml")) or name == "PROJECT":
                yield Path(dirpath) / name


def test_all_yaml_files_parse():
    files = list(yaml_files())
    assert len(files) > 20
    errors = []
    for path in files:
        try:
            list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError as exc:
            errors.append(f"{path.relative_to(ROOT)}: {exc}")
    assert not errors, "\n".join(errors)


def test_no_duplicate_keys_in_our_yaml():
    """PyYAML silently keeps the last of two equal keys; catch that in files we own."""

    class Strict(yaml.SafeLoader):
        pass

    def construct_mapping(loader, node, deep=False):
        keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
        dupes = {k for k in keys if keys.count(k) > 1}
        if dupes:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate keys {dupes}", node.start_mark
            )
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    ours = [
        p
        for p in yaml_files()
        if p.relative_to(ROOT).parts[0]
        in ("config", "bundle", "watches.yaml", "requirements.yml", "PROJECT")
    ]
    for path in ours:
        list(yaml.load_all(path.read_text(), Loader=Strict))


# -- kustomize ---------------------------------------------------------------------------------


def test_default_renders_expected_objects(rendered):
    kinds = sorted({o["kind"] for o in rendered})
    assert kinds == sorted(
        [
            "Namespace",
            "CustomResourceDefinition",
            "ServiceAccount",
            "Role",
            "ClusterRole",
            "RoleBinding",
            "ClusterRoleBinding",
            "Deployment",
        ]
    )
    assert set(by_kind(rendered, "CustomResourceDefinition")) == {
        f"{k.lower()}s.{GROUP}" for k in KINDS
    }
    for obj in rendered:
        if obj["kind"] not in (
            "Namespace",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
        ):
            assert obj["metadata"]["namespace"] == NS, obj["metadata"]["name"]
        assert (
            obj["metadata"]["name"].startswith(("quorumkeeper", GROUP))
            or obj["kind"] == "CustomResourceDefinition"
        ), obj["metadata"]["name"]


def test_manager_deployment(rendered):
    dep = by_kind(rendered, "Deployment")[SA]
    assert dep["metadata"]["labels"]["control-plane"] == "controller-manager"
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["selector"]["matchLabels"] == {"control-plane": "controller-manager"}
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SA
    assert pod["terminationGracePeriodSeconds"] == 10
    c, watch = pod["containers"]
    assert c["name"] == "manager"
    assert c["image"] == "quay.io/quorumkeeper/etcd-operator:0.1.0"
    assert c["args"] == [
        "--leader-elect",
        "--max-concurrent-reconciles=4",
        "--leader-election-id=quorumkeeper",
        "--health-probe-bind-address=:6789",
        "--ansible-verbosity=0",
        "--metrics-bind-address=:8080",
    ]
    # Both metrics endpoints are named ports: config/prometheus's PodMonitor scrapes them.
    assert c["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert watch["ports"] == [{"name": "exporter", "containerPort": 8081, "protocol": "TCP"}]
    env = {e["name"]: e for e in c["env"]}
    assert env["WATCH_NAMESPACE"]["value"] == ""
    assert env["ANSIBLE_GATHERING"]["value"] == "explicit"
    assert env["ETCD_REPOSITORY"]["value"] == "quay.io/coreos/etcd"
    assert env["ANSIBLE_DEBUG_LOGS"]["value"] == "False"
    assert env["GOMAXPROCS"]["valueFrom"]["resourceFieldRef"]["resource"] == "limits.cpu"
    assert str(env["GOMAXPROCS"]["valueFrom"]["resourceFieldRef"]["divisor"]) == "1"
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 6789}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 6789}
    assert c["resources"] == {
        "requests": {"cpu": "500m", "memory": "256Mi"},
        "limits": {"cpu": "1", "memory": "2Gi"},
    }
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    # The health watch: the same image (so the same collection), its own small budget.
    assert watch["name"] == "health-watch" and watch["image"] == c["image"]
    assert watch["command"] == [
        "python3",
        "-m",
        "ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_health_watch",
    ]
    watch_env = {e["name"]: e.get("value") for e in watch["env"]}
    assert watch_env == {
        "PYTHONPATH": "/opt/ansible/collections",
        "WATCH_NAMESPACE": "",
        "QK_HEALTH_WATCH_INTERVAL": "5",
        "QK_METRICS_PORT": "8081",
        "QK_LEADER_LEASE": "quorumkeeper",
        "QK_MANAGER_PROBE_PORT": "6789",
        "POD_NAMESPACE": None,
    }
    # What it releases when the pod stops, and what it waits on first, are the manager's own.
    assert f"--leader-election-id={watch_env['QK_LEADER_LEASE']}" in c["args"]
    assert f"--health-probe-bind-address=:{watch_env['QK_MANAGER_PROBE_PORT']}" in c["args"]
    pod_namespace = next(e for e in watch["env"] if e["name"] == "POD_NAMESPACE")
    assert pod_namespace["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert watch["resources"]["limits"] == {"cpu": "200m", "memory": "128Mi"}
    assert watch["securityContext"]["allowPrivilegeEscalation"] is False


def test_rbac_least_privilege(rendered):
    role = by_kind(rendered, "ClusterRole")["quorumkeeper-manager-role"]
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "*" not in rule.get("verbs", []), rule
        assert "*" not in rule.get("resources", []), rule
        assert "*" not in rule.get("apiGroups", []), rule
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                grants.setdefault((group, res), set()).update(rule["verbs"])
    core = {res: verbs for (group, res), verbs in grants.items() if group == ""}
    # Helper pods (backup verification, restores) are created by the operator itself.
    assert core["pods"] == {"get", "list", "watch", "create", "delete"}
    assert core["pods/log"] == {"get"}
    assert core["persistentvolumeclaims"] == {"get", "list", "watch", "create", "patch", "delete"}
    # The client Service's Endpoints are watched and annotated; no one else's are changed.
    assert core["endpoints"] == {"get", "list", "watch", "create", "patch"}
    # Certificates of TLS clusters are created and renewed (patch); never deleted by the
    # operator (garbage collected with their EtcdCluster).
    assert core["secrets"] == {"create", "get", "list", "patch", "watch"}
    assert core["events"] == {"create", "get", "list", "patch"}, "Events are never cached"
    assert {"create", "delete", "get", "list", "patch", "update", "watch"} <= core["services"]
    assert "pods/exec" not in core and "configmaps" not in core
    # spec.monitoring's objects: read by name, replaced, deleted; never watched.
    for monitoring in ("podmonitors", "prometheusrules"):
        assert grants[("monitoring.coreos.com", monitoring)] == {
            "create", "delete", "get", "list", "update"
        }  # fmt: skip
    assert {"create", "delete", "get", "list", "patch", "update", "watch"} <= grants[
        ("apps", "replicasets")
    ]
    for kind in KINDS:
        plural = kind.lower() + "s"
        assert {"get", "list", "watch", "create", "delete", "patch", "update"} <= grants[
            (GROUP, plural)
        ]
        assert {"get", "patch", "update"} <= grants[(GROUP, plural + "/status")]
        assert "update" in grants[(GROUP, plural + "/finalizers")]
    election = by_kind(rendered, "Role")["quorumkeeper-leader-election-role"]
    groups = {
        (g, r) for rule in election["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert ("coordination.k8s.io", "leases") in groups and ("", "configmaps") in groups
    bindings = list(by_kind(rendered, "ClusterRoleBinding").values()) + list(
        by_kind(rendered, "RoleBinding").values()
    )
    refs = {
        (b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in bindings
        if {"kind": "ServiceAccount", "name": SA, "namespace": NS} in b["subjects"]
    }
    assert refs == {
        ("ClusterRole", "quorumkeeper-manager-role"),
        ("Role", "quorumkeeper-leader-election-role"),
    }


def test_samples_kustomization_lists_every_sample():
    kust = yaml.safe_load((ROOT / "config/samples/kustomization.yaml").read_text())
    files = sorted(p.name for p in (ROOT / "config/samples").glob("etcd_v1alpha1_*.yaml"))
    assert sorted(kust["resources"]) == files
    assert sorted(o["kind"] for o in kustomize("config/samples")) == sorted(KINDS)


def test_sample_cluster_matches_the_guide():
    obj = yaml.safe_load((ROOT / "config/samples/etcd_v1alpha1_etcdcluster.yaml").read_text())
    spec = obj["spec"]
    assert obj["metadata"]["name"] == "my-cluster"
    assert spec["replicas"] == 3 and spec["version"] == "3.6.16"
    vct = spec["storage"]["volumeClaimTemplate"]
    assert vct["storageClassName"] == "local-path"
    assert vct["resources"]["requests"]["storage"] == "1Gi"
    res = spec["podTemplate"]["resources"]
    assert res == {
        "requests": {"cpu": "200m", "memory": "200Mi"},
        "limits": {"cpu": "1", "memory": "512Mi"},
    }
    (term,) = spec["podTemplate"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    (expr,) = term["podAffinityTerm"]["labelSelector"]["matchExpressions"]
    assert expr == {
        "key": "etcd.quorumkeeper.dev/cluster",
        "operator": "In",
        "values": ["my-cluster"],
    }


# -- against the API server --------------------------------------------------------------------


def apply_rendered(api, dry_run: bool):
    manifest = subprocess.run(
        [kubectl_bin(), "kustomize", str(ROOT / "config/default")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    args = [
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=qk-config-test",
        "-f",
        "-",
    ]
    if dry_run:
        args.append("--dry-run=server")
    return api.kubectl(*args, input=manifest, check=False)


def test_default_accepted_by_dry_run(kube_api):
    kube_api.kubectl("create", "namespace", NS, check=False)
    proc = apply_rendered(kube_api, dry_run=True)
    assert proc.returncode == 0, proc.stderr
    assert (
        "deployment.apps/quorumkeeper-controller-manager serverside-applied (server dry run)"
        in proc.stdout
    )


def test_operator_service_account_permissions(kube_api):
    """Apply config/default for real and ask the authorizer what the operator may do."""
    kube_api.kubectl("create", "namespace", NS, check=False)
    proc = apply_rendered(kube_api, dry_run=False)
    assert proc.returncode == 0, proc.stderr
    who = f"--as=system:serviceaccount:{NS}:{SA}"

    def can(verb, resource, ns="some-namespace"):
        # "pods/exec" would read as TYPE/NAME (a pod named exec): ask for the subresource.
        resource, _, subresource = resource.partition("/")
        extra = [f"--subresource={subresource}"] if subresource else []
        out = kube_api.kubectl("auth", "can-i", verb, resource, *extra, "-n", ns, who, check=False)
        return out.stdout.strip() == "yes"

    allowed = [
        ("create", "etcdpeers.etcd.quorumkeeper.dev"),
        ("patch", "etcdclusters.etcd.quorumkeeper.dev/status"),
        ("watch", "etcdclusters.etcd.quorumkeeper.dev"),
        ("create", "replicasets.apps"),
        ("delete", "replicasets.apps"),
        ("delete", "pods"),
        ("watch", "pods"),
        ("create", "pods"),
        ("get", "pods/log"),
        ("create", "services"),
        ("delete", "persistentvolumeclaims"),
        ("create", "events"),
        ("get", "secrets"),
        # The certificates of TLS clusters, which the operator issues and renews.
        ("create", "secrets"),
        ("patch", "secrets"),
    ]
    denied = [
        ("create", "pods/exec"),
        ("delete", "secrets"),
        ("update", "secrets"),
        ("update", "persistentvolumeclaims"),
        ("create", "deployments.apps"),
        ("create", "configmaps"),
        ("create", "leases.coordination.k8s.io"),
        ("delete", "namespaces"),
        ("create", "clusterroles.rbac.authorization.k8s.io"),
        ("list", "nodes"),
    ]
    assert [a for a in allowed if not can(*a)] == []
    assert [d for d in denied if can(*d)] == []
    # leader election only in its own namespace
    assert can("update", "leases.coordination.k8s.io", NS)
    assert can("create", "configmaps", NS)


def test_sample_pod_fields_are_valid_pod_fields(kube_api, namespace):
    """affinity/tolerations/resources are opaque to the CRD; make sure the sample's are valid
    for a real Pod, which is where the operator will copy them."""
    spec = yaml.safe_load((ROOT / "config/samples/etcd_v1alpha1_etcdcluster.yaml").read_text())[
        "spec"
    ]
    tpl = spec["podTemplate"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "probe",
            "annotations": (tpl.get("metadata") or {}).get("annotations", {}),
            "labels": {"etcd.quorumkeeper.dev/cluster": "my-cluster"},
        },
        "spec": {
            "affinity": tpl["affinity"],
            "tolerations": tpl.get("tolerations", []),
            "nodeSelector": tpl.get("nodeSelector", {}),
            "containers": [
                {
                    "name": "etcd",
                    "image": f"quay.io/coreos/etcd:v{spec['version']}",
                    "resources": tpl["resources"],
                }
            ],
        },
    }
    # no controller-manager here to create the namespace's default ServiceAccount
    kube_api.kubectl("create", "serviceaccount", "default", "-n", namespace)
    proc = kube_api.kubectl(
        "create", "-n", namespace, "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False
    )
    assert proc.returncode == 0, proc.stderr


# -- watches / PROJECT / requirements / Dockerfile ---------------------------------------------


def test_watches():
    watches = yaml.safe_load((ROOT / "watches.yaml").read_text())
    by = {w["kind"]: w for w in watches}
    assert set(by) == {"EtcdCluster", "EtcdPeer", "EtcdBackup", "EtcdBackupSchedule", "EtcdRestore"}
    for kind, role, period, dependents in (
        ("EtcdCluster", "etcdcluster", "5m", True),
        ("EtcdPeer", "etcdpeer", "10m", True),
        ("EtcdBackup", "etcdbackup", "10m", False),
        ("EtcdBackupSchedule", "etcdbackupschedule", "1m", False),
        ("EtcdRestore", "etcdrestore", "1m", False),
    ):
        w = by[kind]
        assert (w["group"], w["version"]) == (GROUP, "v1alpha1")
        # A one-play playbook per kind that runs the role (see playbooks/etcdcluster.yml).
        assert w["playbook"] == f"playbooks/{role}.yml" and "role" not in w
        (play,) = yaml.safe_load((ROOT / w["playbook"]).read_text())
        assert play["hosts"] == "localhost" and play["gather_facts"] is False
        assert play["roles"] == [role]
        assert set(play) <= {
            "name",
            "hosts",
            "gather_facts",
            "strategy",
            "vars",
            "module_defaults",
            "roles",
        }
        # Skipped tasks and includes without a worker (plugins/strategy/linear_inline.py).
        assert play["strategy"] == "quorumkeeper.etcd.linear_inline"
        # Modules run in the operator's warm interpreter (QK_MODULE_PYTHON, the image's
        # bin/module-python), else in ansible-playbook's own: nothing else is set per play.
        assert set(play.get("vars") or {}) == {"ansible_python_interpreter"}
        interpreter = play["vars"]["ansible_python_interpreter"]
        assert "'QK_MODULE_PYTHON'" in interpreter and "ansible_playbook_python" in interpreter
        # Events and status default to the reconciled object (the roles name no other).
        # etcd modules default to the operator's client certificate of a TLS cluster, which
        # the role's etcd_cluster_tls task registers as <role>_tls, to root's password file
        # with spec.auth (<role>_auth_connection or <role>_auth.connection), and to nothing else:
        # option by option, or all of them as one variable of the role (vars/main.yml).
        for action, defaults in (play.get("module_defaults") or {}).items():
            if isinstance(defaults, str):
                assert action.startswith("etcd_"), action
                assert defaults in (
                    f"{{{{ {role}_etcd_connection }}}}",
                    f"{{{{ {role}_tls.connection | default({{}}) }}}}",
                ), (action, defaults)
                continue
            if action.startswith("etcd_"):
                certificate = {"ca_cert", "client_cert", "client_key"}
                assert certificate <= set(defaults) <= certificate | PASSWORD_OPTIONS, action
                for option, value in defaults.items():
                    source = f"{role}_tls.connection." if option in certificate else f"{role}_auth"
                    assert value.startswith(f"{{{{ {source}"), (action, option)
                    assert value.endswith(f".{option} | default(omit) }}}}"), (action, option)
                continue
            assert action in ("k8s_event", "k8s_status", "k8s_report"), action
            assert defaults["kind"] == kind and defaults["ignore_missing"] is True
            assert defaults["name"] == "{{ ansible_operator_meta.name }}"
        assert w["reconcilePeriod"] == period
        assert w["manageStatus"] is False
        assert w["watchDependentResources"] is dependents
        assert w["snakeCaseParameters"] is False, "snake-casing would mangle annotation keys"
    crd_kinds = {
        yaml.safe_load(p.read_text())["spec"]["names"]["kind"]
        for p in (ROOT / "config/crd/bases").glob("*.yaml")
    }
    assert set(by) <= crd_kinds


PASSWORD_OPTIONS = {"username", "password_file"}


def test_project_file():
    project = yaml.safe_load((ROOT / "PROJECT").read_text())
    assert project["layout"] == ["ansible.sdk.operatorframework.io/v1"]
    assert project["domain"] == "quorumkeeper.dev" and project["projectName"] == "quorumkeeper"
    assert [(r["group"], r["version"], r["kind"]) for r in project["resources"]] == [
        ("etcd", "v1alpha1", k) for k in KINDS
    ]
    for r in project["resources"]:
        assert f"{r['group']}.{r['domain']}" == GROUP and r["api"]["namespaced"] is True


def test_requirements_yml_pins_the_bundled_kubernetes_core():
    req = yaml.safe_load((ROOT / "requirements.yml").read_text())
    pins = {c["name"]: c["version"] for c in req["collections"]}
    assert set(pins) == {"kubernetes.core"}
    assert pins["kubernetes.core"].startswith("5.")
    spec = importlib.util.find_spec("ansible_collections")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the ansible package is not installed here")
    for location in spec.submodule_search_locations:
        manifest = Path(location) / "kubernetes" / "core" / "MANIFEST.json"
        if manifest.exists():
            bundled = json.loads(manifest.read_text())["collection_info"]["version"]
            assert pins["kubernetes.core"] == bundled, "pin the version ansible ships"
            return
    pytest.skip("kubernetes.core is not installed here")


def test_dockerfile():
    lines = [
        ln.strip()
        for ln in (ROOT / "Dockerfile").read_text().splitlines()
        if ln.strip() and not ln.lstrip().startswith("#")
    ]
    assert lines[0] == "FROM quay.io/operator-framework/ansible-operator:v1.42.2"
    copies = [ln.split()[1:] for ln in lines if ln.startswith("COPY")]
    sources = [c[0] for c in copies]
    assert sources == [
        "requirements.txt",
        "requirements.yml",
        "watches.yaml",
        "ansible.cfg",
        "playbooks/",
        "roles/",
        "library/",
        "plugins/",
        "collections/",
        # Where the role's files/alert-rules.yaml link points (spec.monitoring's rules).
        "config/prometheus/rules.yaml",
        "bin/",
    ]
    link = ROOT / "roles" / "etcdcluster" / "files" / "alert-rules.yaml"
    assert link.resolve() == ROOT / "config" / "prometheus" / "rules.yaml"
    for src, dest in copies:
        assert dest.startswith("${HOME}/"), dest
        if not src.endswith("/"):
            assert (ROOT / src).is_file(), src
    text = "\n".join(lines)
    assert "ansible-galaxy collection install -r ${HOME}/requirements.yml" in text
    assert "pip install --no-cache-dir -r ${HOME}/requirements.txt" in text
    req = (ROOT / "requirements.txt").read_text()
    for pkg in ("etcd3aio", "boto3", "google-cloud-storage"):
        assert pkg in req
    # Plugin paths are ansible.cfg's, the one place they are set.
    assert "ANSIBLE_CONFIG=/opt/ansible/ansible.cfg" in text
    assert not re.search(r"ANSIBLE_(ROLES_PATH|LIBRARY|MODULE_UTILS|\w+_PLUGINS)=", text)
    assert re.search(r"^USER 1001$", text, re.M), "drop back to the base image's user"


# -- bundle ------------------------------------------------------------------------------------


# `make bundle` writes bundle/ and tests/bundle checks that it is up to date and valid; these
# check what it holds.


def test_bundle_csv():
    csv = yaml.safe_load(
        (ROOT / "bundle/manifests/quorumkeeper.clusterserviceversion.yaml").read_text()
    )
    spec = csv["spec"]
    assert csv["kind"] == "ClusterServiceVersion"
    assert csv["metadata"]["name"] == f"quorumkeeper.v{spec['version']}" == "quorumkeeper.v0.1.0"
    assert spec["minKubeVersion"] == "1.30.0"
    owned = {o["name"]: o for o in spec["customresourcedefinitions"]["owned"]}
    assert set(owned) == {f"{k.lower()}s.{GROUP}" for k in KINDS}
    for entry in owned.values():
        assert entry["version"] == "v1alpha1" and entry["description"] and entry["displayName"]
        assert entry["specDescriptors"] and entry["statusDescriptors"]
        assert (ROOT / "bundle/manifests" / f"{GROUP}_{entry['name'].split('.')[0]}.yaml").exists()
    examples = json.loads(csv["metadata"]["annotations"]["alm-examples"])
    assert sorted(e["kind"] for e in examples) == sorted(KINDS)
    install = spec["install"]["spec"]
    (dep,) = install["deployments"]
    container, watch = dep["spec"]["template"]["spec"]["containers"]
    assert (
        container["image"]
        == watch["image"]
        == csv["metadata"]["annotations"]["containerImage"]
        == "quay.io/quorumkeeper/etcd-operator:0.1.0"
    )
    # Under OLM the manager and the health watch both watch the OperatorGroup's namespaces.
    for each in (container, watch):
        env = {e["name"]: e for e in each["env"]}
        assert (
            env["WATCH_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"]
            == "metadata.annotations['olm.targetNamespaces']"
        )
    role = yaml.safe_load((ROOT / "config/rbac/role.yaml").read_text())
    assert install["clusterPermissions"] == [{"serviceAccountName": SA, "rules": role["rules"]}]
    election = yaml.safe_load((ROOT / "config/rbac/leader_election_role.yaml").read_text())
    assert install["permissions"] == [{"serviceAccountName": SA, "rules": election["rules"]}]
    modes = {m["type"]: m["supported"] for m in spec["installModes"]}
    assert modes == {
        "OwnNamespace": True,
        "SingleNamespace": True,
        "MultiNamespace": False,
        "AllNamespaces": True,
    }


def test_bundle_crds_are_the_config_crds():
    for path in (ROOT / "config/crd/bases").glob("*.yaml"):
        # operator-sdk adds the kustomize labels and an empty status; the schema is the same.
        bundled = yaml.safe_load((ROOT / "bundle/manifests" / path.name).read_text())
        assert bundled["spec"] == yaml.safe_load(path.read_text())["spec"], path.name


def test_bundle_annotations_match_dockerfile_labels():
    ann = yaml.safe_load((ROOT / "bundle/metadata/annotations.yaml").read_text())["annotations"]
    labels = dict(
        re.findall(r"^LABEL (\S+)=(\S+)$", (ROOT / "bundle.Dockerfile").read_text(), re.M)
    )
    assert labels == ann
    assert ann["operators.operatorframework.io.bundle.package.v1"] == "quorumkeeper"
    assert ann["operators.operatorframework.io.bundle.mediatype.v1"] == "registry+v1"


def test_bundle_csv_deployment_accepted_by_api_server(kube_api, namespace):
    """The Deployment inside the CSV (with the OLM-specific env) is a valid Deployment."""
    csv = yaml.safe_load(
        (ROOT / "bundle/manifests/quorumkeeper.clusterserviceversion.yaml").read_text()
    )
    (dep,) = csv["spec"]["install"]["spec"]["deployments"]
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": dep["name"], "labels": dep.get("label", {})},
        "spec": dep["spec"],
    }
    proc = kube_api.kubectl(
        "create", "-n", namespace, "--dry-run=server", "-f", "-", input=json.dumps(obj), check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_every_etcd_module_of_the_cluster_role_reaches_etcd_as_the_operator():
    """An etcd module the etcdcluster role calls without the playbook's connection defaults
    would reach a TLS or auth cluster without credentials (and fail only there)."""
    connection_modules = {
        path.stem
        for path in (ROOT / "library").glob("*.py")
        if "quorumkeeper.etcd.etcd_connection\n" in path.read_text()
    }
    used = set()
    for path in (ROOT / "roles/etcdcluster/tasks").glob("*.yml"):
        for task in yaml.safe_load(path.read_text()) or []:
            for block in [task, *task.get("block", []), *task.get("rescue", [])]:
                used |= set(block) & connection_modules
    (play,) = yaml.safe_load((ROOT / "playbooks/etcdcluster.yml").read_text())
    assert used and used <= set(play["module_defaults"]), used - set(play["module_defaults"])
