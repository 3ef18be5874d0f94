"""The health watch's decisions (qk_health_watch): which members it asks, what a /health answer
means, which clusters it looks at, and when it wakes a cluster's reconcile."""

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_health_watch import (
    RENUDGE_SECONDS,
    SECRETS_ANNOTATION,
    HealthWatch,
    NudgeMemory,
    annotation_value,
    apply_event,
    changed_secrets,
    health_verdict,
    member_probes,
    own_secret_versions,
    parse_response,
    plan_nudges,
    problems_summary,
    watch_namespaces,
    watched,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import KubeError


def pod(
    name, cluster="c", ip="10.0.0.1", ready=True, ports=("client",), deleting=False, v="3.6.16"
):
    meta = {
        "name": name,
        "namespace": "ns",
        "labels": {"etcd.quorumkeeper.dev/cluster": cluster, "etcd.quorumkeeper.dev/peer": name},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    numbers = {"client": 2379, "peer": 2380, "metrics": 2381}
    return {
        "metadata": meta,
        "spec": {
            "containers": [
                {
                    "name": "etcd",
                    "image": f"quay.io/coreos/etcd:v{v}",
                    "ports": [{"name": p, "containerPort": numbers[p]} for p in ports],
                }
            ]
        },
        "status": {
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def cluster(name="c", available="True", progressing="False", paused=False, deleting=False):
    meta = {"name": name, "namespace": "ns"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"paused": paused},
        "status": {
            "conditions": [
                {"type": "Available", "status": available},
                {"type": "Progressing", "status": progressing},
            ]
        },
    }


def test_only_ready_member_pods_are_asked_on_the_port_that_needs_no_certificate():
    probes = member_probes(
        [
            pod("c-0"),
            pod("c-1", ip="10.0.0.2", ports=("client", "peer", "metrics")),
            pod("c-2", ready=False),
            pod("c-3", deleting=True),
            pod("c-4", ip=""),
            pod("c-5", ip="fd00::5"),
            # etcd 3.4's /health writes a v2 request to the log, which 3.6 refuses to start on.
            pod("c-6", v="3.4.23"),
            {"metadata": {"name": "helper", "labels": {}}, "spec": {}, "status": {}},
        ]
    )
    assert [(p.member, p.url) for p in probes] == [
        ("c-0", "http://10.0.0.1:2379/health"),
        ("c-1", "http://10.0.0.2:2381/health"),
        ("c-5", "http://[fd00::5]:2379/health"),
    ]
    assert {(p.namespace, p.cluster) for p in probes} == {("ns", "c")}


def test_a_health_answer_says_why_a_member_does_not_serve():
    assert health_verdict(200, b'{"health":"true","reason":""}') == ""
    assert health_verdict(200, b'{"health":"true"}') == ""
    assert health_verdict(503, b'{"health":"false","reason":"ALARM NOSPACE"}') == "ALARM NOSPACE"
    assert health_verdict(503, b'{"health":"false","reason":"RAFT NO LEADER"}') == (
        "RAFT NO LEADER"
    )
    # etcd 3.4 may say no more than that it is not healthy.
    assert health_verdict(503, b'{"health":"false"}') == "not healthy (/health: 503)"
    assert health_verdict(500, b"<html>") == "not healthy (/health: 500)"
    assert health_verdict(200, b"[]") == "not healthy (/health: 200)"
    assert health_verdict(None, None, "TimeoutError: timed out") == (
        "no answer to /health: TimeoutError: timed out"
    )


def test_the_summary_names_failing_members_by_ordinal():
    assert problems_summary({"c-0": "", "c-1": ""}) == ""
    assert problems_summary({"c-10": "ALARM NOSPACE", "c-2": "ALARM NOSPACE", "c-1": ""}) == (
        "c-2: ALARM NOSPACE; c-10: ALARM NOSPACE"
    )


def test_only_settled_available_clusters_are_watched():
    assert watched(cluster())
    assert not watched(cluster(available="False"))
    assert not watched(cluster(available="Unknown"))
    assert not watched(cluster(progressing="True"))
    assert not watched(cluster(paused=True))
    assert not watched(cluster(deleting=True))
    assert not watched({"metadata": {"name": "new", "namespace": "ns"}, "spec": {}})


def test_a_problem_wakes_the_reconcile_at_once_and_again_only_if_status_still_disagrees():
    memory = NudgeMemory()
    verdicts = {("ns", "c"): {"c-0": "ALARM NOSPACE", "c-1": ""}}
    assert plan_nudges([cluster()], {("ns", "c"): {"c-0": ""}}, memory, 0) == []
    assert plan_nudges([cluster()], verdicts, memory, 1) == [("ns", "c", "c-0: ALARM NOSPACE")]
    # The reconcile it woke has not written its status yet: no second nudge at every probe.
    assert plan_nudges([cluster()], verdicts, memory, 6) == []
    # Still Available with the same problem long after: the reconcile is asked again.
    assert plan_nudges([cluster()], verdicts, memory, 1 + RENUDGE_SECONDS) == [
        ("ns", "c", "c-0: ALARM NOSPACE")
    ]
    # Another problem is news.
    other = {("ns", "c"): {"c-0": "ALARM NOSPACE", "c-1": "RAFT NO LEADER"}}
    assert plan_nudges([cluster()], other, memory, 2 + RENUDGE_SECONDS) == [
        ("ns", "c", "c-0: ALARM NOSPACE; c-1: RAFT NO LEADER")
    ]


def test_the_status_having_caught_up_or_health_back_ends_the_nudges_and_resets_them():
    memory = NudgeMemory()
    verdicts = {("ns", "c"): {"c-0": "ALARM NOSPACE"}}
    assert plan_nudges([cluster()], verdicts, memory, 0)
    # The reconcile reported it: no longer Available, no longer watched.
    assert plan_nudges([cluster(available="False")], verdicts, memory, 100) == []
    # Recovered, Available again; the same alarm raised later is news at once.
    assert plan_nudges([cluster()], {("ns", "c"): {"c-0": ""}}, memory, 200) == []
    assert plan_nudges([cluster()], verdicts, memory, 201)
    # A cluster with no ready member to ask is not a problem the watch reports.
    assert plan_nudges([cluster("d")], {}, memory, 300) == []


def test_every_annotation_value_is_new_and_says_what_was_seen():
    assert annotation_value("c-0: ALARM NOSPACE", "2026-11-25T05:00:00Z") == (
        "2026-11-25T05:00:00Z c-0: ALARM NOSPACE"
    )


def test_watch_namespace_is_read_as_ansible_operator_reads_it():
    assert watch_namespaces("") == ()
    assert watch_namespaces(None) == ()
    assert watch_namespaces("a, b,") == ("a", "b")


def with_own_secrets(c, recorded):
    # The operator records a resourceVersion only for Secrets it does not write itself.
    c["status"]["tls"] = {
        "certificates": [
            {"secretName": name, **({"resourceVersion": version} if version else {})}
            for name, version in recorded.items()
        ]
    }
    return c


def test_the_users_own_tls_secrets_are_compared_with_what_the_last_check_saw():
    recorded = {"srv": "10", "op": "11", "peer": "12", "c-client-ca": ""}
    assert own_secret_versions(with_own_secrets(cluster(), recorded)) == {
        "srv": "10",
        "op": "11",
        "peer": "12",
    }
    # Not watched (changing, or not Available): its reconcile checks them already.
    assert own_secret_versions(with_own_secrets(cluster(progressing="True"), recorded)) == {}
    assert own_secret_versions(cluster()) == {}
    current = {"srv": "10", "op": "20", "peer": None}
    assert changed_secrets({"srv": "10", "op": "11", "peer": "12"}, current) == ["op", "peer"]


class SecretsKube:
    """The API calls the Secret check makes: GET a Secret, PATCH the cluster's annotation."""

    def __init__(self, versions):
        self.versions, self.patches = versions, []

    def path(self, api_version, kind, namespace=None, name=None):
        return name

    def request(self, method, path, query=None):
        if self.versions.get(path) is None:
            raise KubeError(404, "NotFound", path)
        return {"metadata": {"resourceVersion": self.versions[path]}}

    def patch(self, api_version, kind, name, patch, namespace=None):
        self.patches.append((name, patch["metadata"]["annotations"][SECRETS_ANNOTATION]))


def test_a_changed_secret_annotates_its_cluster_once():
    kube = SecretsKube({"srv": "10", "op": "11", "peer": "30"})
    watch = HealthWatch(kube, log=lambda m: None)
    c = with_own_secrets(cluster(), {"srv": "10", "op": "11", "peer": "12"})
    assert watch.check_secrets([c]) == [("ns", "c", ["peer"])]
    assert kube.patches == [("c", "peer@30")]
    # The annotation already says so: not again, until the operator's check records it.
    c["metadata"]["annotations"] = {SECRETS_ANNOTATION: "peer@30"}
    assert watch.check_secrets([c]) == []
    del kube.versions["srv"]
    assert watch.check_secrets([c]) == [("ns", "c", ["peer", "srv"])]
    assert kube.patches[-1] == ("c", "peer@30, srv@deleted")


HEALTHY = b'{"health":"true","reason":""}'


def test_a_response_with_a_length_is_whole_once_its_body_arrived():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 29\r\n\r\n"
    assert parse_response(head[:20], closed=False) is None
    assert parse_response(head + HEALTHY[:10], closed=False) is None
    assert parse_response(head + HEALTHY, closed=False) == (200, HEALTHY, True)
    # The connection carries the next request unless the server says otherwise.
    closing = head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    assert parse_response(closing + HEALTHY, closed=False) == (200, HEALTHY, False)
    old = head.replace(b"HTTP/1.1", b"HTTP/1.0")
    assert parse_response(old + HEALTHY, closed=False) == (200, HEALTHY, False)


def test_a_chunked_response_is_whole_at_its_last_chunk():
    head = b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunks = b"a\r\n" + HEALTHY[:10] + b"\r\n13;ext=1\r\n" + HEALTHY[10:] + b"\r\n0\r\n\r\n"
    for cut in range(len(chunks)):
        assert parse_response(head + chunks[:cut], closed=False) is None, cut
    assert parse_response(head + chunks, closed=False) == (503, HEALTHY, True)


def test_a_response_without_length_ends_where_the_connection_does():
    data = b"HTTP/1.1 200 OK\r\n\r\n" + HEALTHY
    assert parse_response(data, closed=False) is None
    assert parse_response(data, closed=True) == (200, HEALTHY, False)


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\nContent-Le",
        b"HTTP/1.1 200 OK\r\nContent-Length: 29\r\n\r\n{",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{",
    ],
)
def test_a_response_cut_short_by_the_server_is_an_error(data):
    assert parse_response(data, closed=False) is None
    with pytest.raises(ValueError, match="closed"):
        parse_response(data, closed=True)


def test_what_is_not_http_is_an_error():
    with pytest.raises(ValueError, match="not an HTTP response"):
        parse_response(b"SSH-2.0-OpenSSH\r\n\r\n", closed=False)


def configmap(name, version, namespace="ns"):
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": version}}


def test_watch_events_keep_the_objects_current_and_an_error_asks_for_a_new_list():
    objects = {}
    assert apply_event(objects, {"type": "ADDED", "object": configmap("a", "5")}) == "5"
    assert apply_event(objects, {"type": "ADDED", "object": configmap("a", "5", "other")}) == "5"
    changed = configmap("a", "7")
    assert apply_event(objects, {"type": "MODIFIED", "object": changed}) == "7"
    assert objects == {("ns", "a"): changed, ("other", "a"): configmap("a", "5", "other")}
    assert apply_event(objects, {"type": "DELETED", "object": configmap("a", "9")}) == "9"
    assert list(objects) == [("other", "a")]
    # A bookmark moves the version on and changes nothing.
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}}
    assert apply_event(objects, bookmark) == "12"
    assert list(objects) == [("other", "a")]
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    assert apply_event(objects, gone) is None
