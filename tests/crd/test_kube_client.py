"""qk_kube, the small Kubernetes client of the modules, against a real kube-apiserver."""

from __future__ import annotations

import base64
import json
import time

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_health_watch import (
    WatchedObjects,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KubeClient,
    KubeConfigError,
    KubeError,
    direct_client,
)

API = "etcd.quorumkeeper.dev/v1alpha1"


@pytest.fixture
def client(kube_api):
    return KubeClient.from_kubeconfig(str(kube_api.kubeconfig))


def configmap(name, namespace, data=None):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data or {"a": "1"},
    }


def test_create_get_list_patch_delete(client, namespace):
    created = client.create(configmap("one", namespace))
    assert created["metadata"]["uid"]
    assert client.get("v1", "ConfigMap", "one", namespace)["data"] == {"a": "1"}
    assert client.get("v1", "ConfigMap", "missing", namespace) is None
    client.create(configmap("two", namespace))
    names = {c["metadata"]["name"] for c in client.list("v1", "ConfigMap", namespace)}
    assert {"one", "two"} <= names
    with pytest.raises(KubeError) as exists:
        client.create(configmap("one", namespace))
    assert exists.value.already_exists and exists.value.conflict
    patched = client.patch("v1", "ConfigMap", "one", {"data": {"b": "2"}}, namespace)
    assert patched["data"] == {"a": "1", "b": "2"}
    assert client.delete("v1", "ConfigMap", "one", namespace) is True
    assert client.delete("v1", "ConfigMap", "one", namespace) is False


def test_label_selectors_and_preconditions(client, namespace):
    labelled = configmap("l", namespace)
    labelled["metadata"]["labels"] = {"etcd.quorumkeeper.dev/cluster": "c"}
    client.create(labelled)
    client.create(configmap("other", namespace))
    found = client.list(
        "v1", "ConfigMap", namespace, label_selector="etcd.quorumkeeper.dev/cluster=c"
    )
    assert [c["metadata"]["name"] for c in found] == ["l"]
    with pytest.raises(KubeError) as wrong_uid:
        client.delete("v1", "ConfigMap", "l", namespace, uid="not-its-uid")
    assert wrong_uid.value.conflict, "a delete with someone else's UID must not happen"


def test_custom_resources_and_their_status(client, namespace):
    cluster = {
        "apiVersion": API,
        "kind": "EtcdCluster",
        "metadata": {"name": "c", "namespace": namespace},
        "spec": {"version": "3.6.16"},
    }
    stored = client.create(cluster)
    stored["status"] = {"phase": "Available", "replicas": 3}
    written = client.replace_status(stored)
    assert written["status"] == {"phase": "Available", "replicas": 3}
    client.patch(
        API, "EtcdCluster", "c", {"status": {"leader": "c-0"}}, namespace, subresource="status"
    )
    assert client.get(API, "EtcdCluster", "c", namespace)["status"]["leader"] == "c-0"
    # Kinds outside the built-in table are found through discovery.
    assert client.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition") == (
        "customresourcedefinitions",
        False,
    )
    with pytest.raises(KubeError, match="does not serve"):
        client.resource(API, "EtcdNothing")


def test_errors_carry_the_api_servers_message(client, namespace):
    bad = {
        "apiVersion": API,
        "kind": "EtcdCluster",
        "metadata": {"name": "c", "namespace": namespace},
        "spec": {"version": "v3.6.16"},
    }
    with pytest.raises(KubeError) as invalid:
        client.create(bad)
    assert invalid.value.status == 422 and "must not start with" in str(invalid.value)


def test_an_unreachable_server_is_an_error_not_a_hang(tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(
        json.dumps(
            {
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    client = KubeClient.from_kubeconfig(str(config), timeout=2)
    with pytest.raises(KubeError) as unreachable:
        client.get("v1", "ConfigMap", "x", "default")
    assert unreachable.value.status == 0


def write_config(tmp_path, cluster, user):
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


def test_kubeconfig_of_the_operators_proxy(tmp_path):
    """ansible-operator's proxy kubeconfig: plain http, the owner in the basic-auth user."""
    owner = base64.urlsafe_b64encode(b'{"kind":"EtcdCluster"}').decode()
    path = write_config(
        tmp_path,
        {"server": f"http://{owner}@localhost:8888", "insecure-skip-tls-verify": True},
        {"username": owner, "password": "unused"},
    )
    client = KubeClient.from_kubeconfig(path)
    assert (client.scheme, client.host, client.port) == ("http", "localhost", 8888)
    assert base64.b64decode(client.basic).decode() == f"{owner}:unused"


def test_kubeconfig_errors_say_what_is_wrong(tmp_path):
    with pytest.raises(KubeConfigError, match="cannot read kubeconfig"):
        KubeClient.from_kubeconfig(str(tmp_path / "nothing"))
    exec_user = write_config(tmp_path, {"server": "https://k:6443"}, {"exec": {"command": "x"}})
    with pytest.raises(KubeConfigError, match="exec and auth-provider"):
        KubeClient.from_kubeconfig(exec_user)
    with pytest.raises(KubeConfigError, match="invalid API server URL"):
        KubeClient("ftp://k")


def test_the_api_server_itself_is_never_reached_through_the_proxy(monkeypatch, tmp_path):
    for name in ("QK_KUBECONFIG", "KUBERNETES_SERVICE_HOST", "K8S_AUTH_KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    proxy = tmp_path / "proxy"
    proxy.write_text(
        json.dumps(
            {
                "clusters": [
                    {"name": "proxy-server", "cluster": {"server": "http://localhost:8888"}}
                ],
                "users": [{"name": "admin/proxy-server", "user": {"username": "x"}}],
                "contexts": [
                    {
                        "name": "p",
                        "context": {"cluster": "proxy-server", "user": "admin/proxy-server"},
                    }
                ],
                "current-context": "p",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(proxy))
    with pytest.raises(KubeConfigError, match="QK_KUBECONFIG"):
        direct_client()
    real = write_config(tmp_path, {"server": "https://k8s.example:6443"}, {"token": "t"})
    monkeypatch.setenv("KUBECONFIG", real)
    assert direct_client().host == "k8s.example"
    monkeypatch.setenv("QK_KUBECONFIG", real)
    monkeypatch.setenv("KUBECONFIG", str(proxy))
    assert direct_client().host == "k8s.example"


def test_a_watch_streams_the_changes_after_a_version_until_the_server_ends_it(client, namespace):
    client.create(configmap("before", namespace))
    listing = client.request("GET", client.path("v1", "ConfigMap", namespace))
    version = listing["metadata"]["resourceVersion"]
    client.create(configmap("w", namespace))
    client.patch("v1", "ConfigMap", "w", {"data": {"b": "2"}}, namespace)
    client.delete("v1", "ConfigMap", "w", namespace)
    path = client.path("v1", "ConfigMap", namespace)
    started = time.monotonic()
    events = [
        (e["type"], e["object"]["metadata"]["name"])
        for e in client.watch(path, {"resourceVersion": version}, seconds=2)
        if e["type"] != "BOOKMARK"
    ]
    assert events == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]
    assert time.monotonic() - started < 10
    # The client's own connection was not the watch's: it still answers.
    assert client.get("v1", "ConfigMap", "before", namespace)["data"] == {"a": "1"}
    with pytest.raises(KubeError) as refused:
        next(client.watch(client.path("v1", "NoSuchKind", namespace), {}, seconds=2))
    assert refused.value.not_found


def test_watched_objects_follow_what_their_selector_selects(kube_api, client, namespace):
    selector = "etcd.quorumkeeper.dev/cluster=c"

    def labelled(name):
        obj = configmap(name, namespace)
        obj["metadata"]["labels"] = {"etcd.quorumkeeper.dev/cluster": "c"}
        return obj

    client.create(labelled("first"))
    client.create(configmap("unlabelled", namespace))
    watched = WatchedObjects(
        lambda: KubeClient.from_kubeconfig(str(kube_api.kubeconfig)),
        "v1",
        "ConfigMap",
        (namespace,),
        selector,
        log=lambda message: None,
    )
    assert watched.items() is None  # not listed yet: the caller lists for itself

    def names():
        return sorted(o["metadata"]["name"] for o in watched.items() or [])

    watched.start()
    wait_for(lambda: names() == ["first"])
    client.create(labelled("second"))
    client.patch("v1", "ConfigMap", "first", {"data": {"b": "2"}}, namespace)
    wait_for(lambda: names() == ["first", "second"])
    wait_for(
        lambda: (
            {o["metadata"]["name"]: o["data"] for o in watched.items()}["first"]
            == {
                "a": "1",
                "b": "2",
            }
        )
    )
    client.delete("v1", "ConfigMap", "second", namespace)
    # A label removed takes the object out of what the selector selects.
    unlabel = {"metadata": {"labels": {"etcd.quorumkeeper.dev/cluster": None}}}
    client.patch("v1", "ConfigMap", "first", unlabel, namespace)
    wait_for(lambda: names() == [])


def wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.05)
