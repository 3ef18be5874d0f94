#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_snapshot
short_description: Stream a snapshot of an etcd member to S3, an S3-compatible store, GCS or a PVC
description:
  - Takes a snapshot of one member's backend and uploads it while it streams; the snapshot is
    never held whole in memory or written to disk. S3 parts (6 MiB) are sent three at a time
    while the next one is received; the module's memory is a few reused part buffers, whatever
    the snapshot's size.
  - The member is chosen among the healthy voting members, a follower before the leader (the
    snapshot costs the member disk reads and bandwidth), the one with the highest raft index
    first; with I(member_selection=endpoint) the first endpoint is used as given.
  - The SHA-256 of the bytes is computed on the way and recorded with the object once it is
    complete, without copying it - on S3 as the object's C(sha256) tag (a C(<key>.sha256) object
    where the store has no tagging or the credentials may not tag), on GCS as its C(sha256)
    metadata. A failed upload leaves no object (see qk_objectstore).
  - A C(pvc://claim/path) destination is a file in PersistentVolumeClaim C(claim) of
    I(namespace). The operator does not mount it; a helper pod running the operator image
    (I(operator_image)) mounts the claim, streams the snapshot from the chosen member to
    C(<path>.part), writes its SHA-256 to C(<path>.sha256) and renames it to C(<path>) (see
    qk_pvcstore); the module reads its result from the pod's log and deletes the pod. A claim
    that does not exist is an error. Credentials are not used.
  - The pod reaches the member with the module's connection profile (I(timeout)). Its TLS
    files and password come from Secrets the pod mounts - I(pod_tls_secret) with TLS options,
    I(pod_password_secret) with I(username) - never from the pod's spec; I(password) itself
    cannot be given to a pod.
  - Credentials come from a Secret (I(credentials_secret)), read by the module itself so that
    they never pass through Ansible variables, or from I(credentials) (no_log).
  - Always uploads (C(changed=true)); in check mode only chooses the member.
options:
  object_url:
    description:
      - Destination, C(s3://bucket/key), C(s3://bucket/key?endpoint=http://host:port&region=r),
        C(gs://bucket/key[?endpoint=http://host:port]) or C(pvc://claim/path).
    type: str
    required: true
  operator_image:
    description:
      - Image of the helper pod that writes a C(pvc://) destination; default the
        C(OPERATOR_IMAGE) environment variable, else quay.io/quorumkeeper/etcd-operator:0.1.0.
    type: str
  pod_tls_secret:
    description:
      - Secret in I(namespace) with C(ca.crt), C(tls.crt) and C(tls.key) (the client
        certificate of I(client_cert)) that the C(pvc://) writer pod mounts; needed for a
        C(pvc://) destination with TLS options.
    type: str
  pod_password_secret:
    description:
      - Secret in I(namespace) whose key C(password) is the password of I(username) (from
        I(password_file)), mounted by the C(pvc://) writer pod; needed for a C(pvc://)
        destination with I(username).
    type: str
  cluster_name:
    description:
      - Name of the EtcdCluster in I(namespace) that I(endpoints) belong to; checked to exist
        first, so that a wrong name is said as such rather than as an unreachable endpoint.
    type: str
  member_selection:
    description:
      - C(follower) (a healthy follower, else the leader) or C(endpoint) (the first endpoint).
    type: str
    choices: [follower, endpoint]
    default: follower
  credentials_secret:
    description:
      - Name of a Secret in I(namespace) with C(AWS_ACCESS_KEY_ID), C(AWS_SECRET_ACCESS_KEY)
        (optionally C(AWS_SESSION_TOKEN), C(AWS_REGION)) for S3, or C(service-account.json) for GCS.
      - Read straight from the API server with the operator's service account.
    type: str
  namespace:
    description: Namespace of I(cluster_name), I(credentials_secret) and a C(pvc://) claim.
    type: str
  credentials:
    description:
      - The same keys as the Secret, given directly.
      - Mutually exclusive with I(credentials_secret).
    type: dict
  metadata:
    description:
      - Extra object metadata (string values), e.g. the cluster's name. A C(sha256) key is
        ignored (that name is the checksum's).
    type: dict
    default: {}
  snapshot_timeout:
    description: Seconds the whole snapshot and upload may take.
    type: float
    default: 600
  reach_timeout:
    description:
      - Seconds to keep asking I(endpoints) again while none of them answers at all
        (connection refused, unreachable, timed out) before failing. The client Service of a
        cluster that has just become Available refuses connections until kube-proxy routes it
        to the ready members. An answer, even an error, is not waited out.
    type: float
    default: 20
extends_documentation_fragment:
  - quorumkeeper.etcd.etcd_connection
  - quorumkeeper.etcd.etcd_connection.endpoints
requirements: [etcd3aio, boto3, google-cloud-storage]
"""

EXAMPLES = r"""
- name: Back up my-cluster to MinIO
  etcd_snapshot:
    endpoints: ["http://my-cluster-client.default.svc:2379"]
    object_url: "s3://backups/my-cluster/snapshot.db?endpoint=http://minio.minio:9000&region=us-east-1"
    credentials_secret: minio-credentials
    namespace: default
  register: snapshot
"""

RETURN = r"""
object_url:
  description: Where the snapshot was stored.
  type: str
  returned: always
member:
  description: C({name, id}) of the member the snapshot was taken from.
  type: dict
  returned: always
endpoint:
  description: The client URL the snapshot was streamed from.
  type: str
  returned: always
revision:
  description: The member's store revision when the snapshot began (the snapshot holds at least it).
  type: int
  returned: unless check mode
keys:
  description:
    - How many keys the member held at I(revision); a restore of the snapshot must hold as many
      at that revision (backup verification checks it).
  type: int
  returned: unless check mode
etcd_version:
  description: The member's etcd version.
  type: str
  returned: when known
raft_index:
  description: The member's raft index when it was chosen.
  type: int
  returned: when known
size:
  description: Bytes uploaded.
  type: int
  returned: unless check mode
sha256:
  description: SHA-256 (hex) of the bytes uploaded.
  type: str
  returned: unless check mode
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    CONNECTION_REQUIRED_TOGETHER,
    connection_argument_spec,
    etcd_client,
    profile_from_params,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    ETCD3AIO_IMPORT_ERROR,
    HAS_ETCD3AIO,
    EtcdUnreachable,
    describe_error,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KubeConfigError,
    KubeError,
    direct_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore import (
    ObjectStoreError,
    parse_object_url,
    upload,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_pvcstore import (
    ClaimError,
    check_writer_credentials,
    read_claim,
    run_helper,
    writer_pod,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_snapshot import (
    SnapshotSourceError,
    check_cluster,
    choose_source,
    read_credentials,
)


def write_to_claim(p, kube, claim, location, endpoint, profile):
    """The snapshot streamed to a pvc:// file by a helper pod that mounts the claim and
    connects to ``endpoint`` with ``profile``: ``{"size", "sha256"}``."""
    image = (
        p["operator_image"]
        or os.environ.get("OPERATOR_IMAGE")
        or "quay.io/quorumkeeper/etcd-operator:0.1.0"
    )
    pod = writer_pod(
        location.url,
        p["namespace"],
        image,
        endpoint,
        p["snapshot_timeout"],
        profile=profile,
        tls_secret=p["pod_tls_secret"],
        password_secret=p["pod_password_secret"],
    )
    # The pod's own start (scheduling, mounting the claim) on top of the snapshot's time.
    written = run_helper(kube, pod, p["snapshot_timeout"] + 120, claim)
    if not written.get("sha256") or not written.get("size"):
        raise ClaimError(f"the pod that wrote {location.url} reported no size and SHA-256")
    return {"size": int(written["size"]), "sha256": written["sha256"]}


ARGUMENT_SPEC = {
    **connection_argument_spec(),
    "object_url": {"type": "str", "required": True},
    "cluster_name": {"type": "str"},
    "pod_tls_secret": {"type": "str", "no_log": False},
    "pod_password_secret": {"type": "str", "no_log": False},
    "member_selection": {
        "type": "str",
        "choices": ["follower", "endpoint"],
        "default": "follower",
    },
    "credentials_secret": {"type": "str", "no_log": False},
    "namespace": {"type": "str"},
    "credentials": {"type": "dict", "no_log": True},
    "metadata": {"type": "dict", "default": {}},
    "snapshot_timeout": {"type": "float", "default": 600.0},
    "reach_timeout": {"type": "float", "default": 20.0},
    "operator_image": {"type": "str"},
}


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        mutually_exclusive=[("credentials_secret", "credentials")],
        required_by={"credentials_secret": "namespace", "cluster_name": "namespace"},
        required_together=CONNECTION_REQUIRED_TOGETHER,
    )
    if not HAS_ETCD3AIO:
        module.fail_json(msg=missing_required_lib("etcd3aio"), exception=str(ETCD3AIO_IMPORT_ERROR))
    p = module.params
    try:
        profile = profile_from_params(p)
    except ValueError as exc:
        module.fail_json(msg=f"invalid etcd connection options: {exc}")
    kube = claim = None
    try:
        location = parse_object_url(p["object_url"])
        if location.scheme == "pvc":
            if not p["namespace"]:
                module.fail_json(msg="a pvc:// destination needs namespace (the claim's)")
            # Before anything runs: the writer pod reads the profile's files and password
            # from Secrets it mounts (qk_pvcstore.writer_pod).
            check_writer_credentials(profile, p["pod_tls_secret"], p["pod_password_secret"])
            kube = direct_client()
            claim = read_claim(kube, location.bucket, p["namespace"])
        if p["cluster_name"]:
            check_cluster(p["cluster_name"], p["namespace"])
        credentials = read_credentials(p["credentials"], p["credentials_secret"], p["namespace"])
    except (ObjectStoreError, SnapshotSourceError, ClaimError) as exc:
        module.fail_json(msg=str(exc))
    except (KubeError, KubeConfigError) as exc:
        module.fail_json(msg=f"cannot read the pvc:// destination's claim: {exc}")

    result = {"changed": True, "object_url": location.url}
    try:
        with etcd_client(profile) as client:
            source = choose_source(
                client, p["endpoints"], p["member_selection"], p["reach_timeout"]
            )
            result.update(source)
            if module.check_mode:
                module.exit_json(**result)
            # One read gives both, so that they describe the same point of the store.
            result["keys"], result["revision"] = client.key_count(source["endpoint"])
            started = time.monotonic()
            if claim is not None:
                result.update(write_to_claim(p, kube, claim, location, source["endpoint"], profile))
            else:
                chunks = client.snapshot(source["endpoint"], timeout=p["snapshot_timeout"])
                metadata = {str(k): str(v) for k, v in p["metadata"].items()}
                metadata["revision"] = str(result["revision"])
                result.update(upload(location, chunks, credentials, metadata))
            result["seconds"] = round(time.monotonic() - started, 3)
    except EtcdUnreachable as exc:
        module.fail_json(msg=f"cannot reach etcd to take a snapshot: {exc}", changed=False)
    except (SnapshotSourceError, ObjectStoreError, ClaimError) as exc:
        module.fail_json(msg=str(exc), changed=False)
    except KubeError as exc:
        module.fail_json(msg=f"cannot run the pod that writes {location.url}: {exc}", changed=False)
    except (ValueError, OSError) as exc:
        module.fail_json(msg=f"invalid etcd connection options: {exc}", changed=False)
    except Exception as exc:  # noqa: BLE001 - etcd's gRPC errors, said in words
        module.fail_json(msg=f"snapshot failed: {describe_error(exc)}", changed=False)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
