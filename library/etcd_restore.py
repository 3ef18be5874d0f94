#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_restore
short_description: Take one step of an EtcdRestore
description:
  - C(restore_volumes) - with I(verify), first checks the snapshot before anything is created.
    With I(sha256) (the backup's), looks the object up (it exists, is not empty, and the SHA-256
    stored with it, if any, is I(sha256)), and each restore pod's fetch checks its bytes against
    I(sha256) as it downloads them; without, streams the snapshot through SHA-256 (nothing is
    stored, so memory stays bounded) and compares it with the object's C(sha256) metadata. Then
    creates, for each of I(members) that lacks them, the member's PVC
    (exactly as the etcdcluster role renders it, plus the restore's annotation) and a restore
    pod (init container C(fetch) downloads and checks the snapshot, container C(restore) runs
    C(etcdutl snapshot restore) with the member's own flags into its data dir).
  - C(create_cluster) - creates the EtcdCluster (spec = the restore's clusterTemplate, the
    restore's annotation, no owner) and deletes the restore pods. From an EtcdBackup of a
    cluster with spec.auth, it first copies that cluster's root Secret (C(<source>-user-root))
    to C(<clusterName>-user-root) unless that exists, since the snapshot keeps the source's
    users and root password and the operator logs in to the restored cluster as that root. An
    in-place restore (C(spec.inPlace), a disaster recovery) instead sets the restore's
    annotation on the existing EtcdCluster that names it in its recovery annotation, and the
    cluster then starts its members on the restored volumes.
  - C(fail) - deletes the PVCs this restore created and its pods except I(keep_pods) (failed
    ones, kept for their logs). Never touches a PVC that does not carry this restore's UID.
  - C(complete) - reads the restored cluster's store revision through its client Service.
  - Reads the EtcdRestore and the credentials Secret itself (credentials never pass through
    Ansible variables; the fetch containers mount the Secret).
  - On failure returns C(reason), the restore's Failed reason (C(InvalidSource),
    C(CredentialsUnavailable), C(ObjectUnreadable), C(SnapshotHashMismatch), C(ClusterExists),
    C(VolumesExist), C(StepFailed), C(ClusterUnreachable)).
options:
  name:
    description: Name of the EtcdRestore.
    type: str
    required: true
  namespace:
    description: Namespace of the EtcdRestore (and of everything it creates).
    type: str
    required: true
  action:
    description: The step to take.
    type: str
    required: true
    choices: [restore_volumes, create_cluster, fail, complete]
  members:
    description:
      - With C(restore_volumes), C({name, spec}) of each member, spec as the etcdcluster role
        gives its EtcdPeers (C(etcd_peer_member) filter).
    type: list
    elements: dict
    default: []
  settings:
    description: Member settings as the etcdcluster role passes them to C(etcd_peer).
    type: dict
    default: {}
  object_url:
    description: The snapshot (C(restore_volumes)).
    type: str
  sha256:
    description: The expected SHA-256 of the snapshot, when known (the backup's).
    type: str
  credentials_secret:
    description: Secret with the store's credentials, in I(namespace).
    type: str
  checked_by_etcd:
    description:
      - The snapshot with I(sha256) already passed etcd's own integrity check (the EtcdBackup's
        verification restored it). The restore pods then run C(snapshot restore) with
        C(--skip-hash-check), since their fetch proves the bytes are the same; that saves
        reading and hashing the snapshot once more per member. Ignored without I(sha256).
    type: bool
    default: false
  verify:
    description:
      - With C(restore_volumes), check the snapshot's bytes before creating anything.
      - A C(pvc://) snapshot is checked by the restore pods' C(fetch) only (the operator cannot
        mount its claim); here only the claim's existence is.
    type: bool
    default: true
  operator_image:
    description: Image of the fetch init containers (the operator's own).
    type: str
  keep_pods:
    description: With C(fail), restore pods not to delete.
    type: list
    elements: str
    default: []
  cluster_domain:
    description: The Kubernetes cluster's DNS domain (C(complete)).
    type: str
    default: cluster.local
  client_port:
    description: etcd client port (C(complete)).
    type: int
    default: 2379
extends_documentation_fragment:
  - quorumkeeper.etcd.etcd_connection
requirements: [boto3, google-cloud-storage, etcd3aio]
"""

EXAMPLES = r"""
- name: Check the snapshot and start restoring the members
  etcd_restore:
    name: my-cluster-restore
    namespace: default
    action: restore_volumes
    members: "{{ members }}"
    object_url: "s3://etcd-backups/my-cluster.db?endpoint=http://minio.minio:9000"
    credentials_secret: s3-credentials
    operator_image: quay.io/quorumkeeper/etcd-operator:0.1.0
  register: restored
"""

RETURN = r"""
reason:
  description: On failure, the restore's Failed reason.
  type: str
  returned: on failure
checked:
  description: With C(restore_volumes) and I(verify), what the snapshot check found
    (C(size), C(sha256), C(expected), C(read)) - C(expected) is C(given), C(metadata) or
    C(none); C(read) whether the bytes were read here (else only the fetches check them).
  type: dict
  returned: when verify ran
sha256:
  description: The SHA-256 the fetch containers check (the one computed when verify ran).
  type: str
  returned: with restore_volumes
created:
  description: Names of what was created (C(PersistentVolumeClaim/x), C(Pod/y), C(EtcdCluster/z)).
  type: list
  elements: str
  returned: always
deleted:
  description: Names of what was deleted.
  type: list
  elements: str
  returned: always
patched:
  description: Names of what was patched (C(EtcdCluster/z) handed back by an in-place restore).
  type: list
  elements: str
  returned: always
revision:
  description: With C(complete), the store revision of the restored cluster.
  type: int
  returned: with complete
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_auth import (
    carry_root_password,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    CONNECTION_REQUIRED_TOGETHER,
    connection_argument_spec,
    etcd_client,
    profile_from_params,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_VERSION,
    DEFAULT_CLIENT_PORT,
    DEFAULT_DOMAIN,
    ClusterNetwork,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (
    describe_error,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KubeConfigError,
    KubeError,
    direct_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore import (
    ObjectStoreError,
    download,
    parse_object_url,
    stat,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_restore import (
    RECOVERY_KEY,
    RESTORE_KEY,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_restore_observe import (
    target_claims,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_restore_render import (
    render_restore_pod,
    render_restored_cluster,
    render_restored_pvc,
    restore_pod_name,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_snapshot import (
    SnapshotSourceError,
    read_credentials,
)


class StepError(Exception):
    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason


class Discard:
    """A file object that keeps nothing: the download is hashed on the way and dropped."""

    def write(self, data):
        return len(data)

    def flush(self):
        pass


class Restore:
    def __init__(self, module, client):
        self.module, self.p, self.client = module, module.params, client
        self.result = {"changed": False, "created": [], "deleted": [], "patched": []}
        self.restore = client.get(API_VERSION, "EtcdRestore", self.p["name"], self.p["namespace"])
        if self.restore is None:
            raise StepError("StepFailed", f"EtcdRestore {self._where(self.p['name'])} is gone")
        self.uid = self.restore["metadata"]["uid"]

    def _where(self, name):
        return f"{self.p['namespace']}/{name}"

    def _did(self, what, kind, name):
        self.result[what].append(f"{kind}/{name}")
        self.result["changed"] = True
        return not self.module.check_mode

    # -- restore_volumes ------------------------------------------------------------------
    def check_snapshot(self, location, credentials):
        """The SHA-256 every restore pod's fetch is to check, once the object is found usable.

        With the SHA-256 the backup recorded (I(sha256)), the object is only looked up: its
        size and the SHA-256 stored with it must agree. Its bytes are checked by every fetch as
        it downloads them, and a fetch that finds others fails the restore with
        SnapshotHashMismatch (the PVCs it created are deleted). Reading 1 GiB here as well cost
        3 s of a restore. Without one, the object is streamed through SHA-256 here (nothing is
        kept), compared with the SHA-256 stored with it, and every fetch checks that hash."""
        given = (self.p["sha256"] or "").lower() or None
        if given:
            return self.look_up_snapshot(location, credentials, given)
        try:
            read = download(location, Discard(), credentials)
        except ObjectStoreError as exc:
            raise StepError("ObjectUnreadable", f"cannot read the snapshot: {exc}") from exc
        expected = (read["metadata_sha256"] or "").lower() or None
        checked = {
            "size": read["size"],
            "sha256": read["sha256"],
            "expected": "metadata" if expected else "none",
            "read": True,
        }
        self.result["checked"] = checked
        if expected and expected != read["sha256"]:
            raise StepError(
                "SnapshotHashMismatch",
                f"{location.url} holds {read['size']} bytes with SHA-256 {read['sha256']}, but "
                f"the object's sha256 metadata says {expected}: the object is not the snapshot "
                "that was stored; nothing was restored",
            )
        if read["size"] == 0:
            raise StepError(
                "SnapshotHashMismatch", f"{location.url} is empty; nothing was restored"
            )
        return read["sha256"]

    def look_up_snapshot(self, location, credentials, given):
        try:
            found = stat(location, credentials)
        except ObjectStoreError as exc:
            raise StepError("ObjectUnreadable", f"cannot read the snapshot: {exc}") from exc
        if not found["exists"]:
            raise StepError(
                "ObjectUnreadable",
                f"cannot read the snapshot: {location.url} does not exist; nothing was restored",
            )
        recorded = (found["sha256"] or "").lower() or None
        if recorded and recorded != given:
            raise StepError(
                "SnapshotHashMismatch",
                f"{location.url} is stored with SHA-256 {recorded}, but the backup's is {given}: "
                "the object is not the snapshot that was backed up; nothing was restored",
            )
        if not found["size"]:
            raise StepError(
                "SnapshotHashMismatch", f"{location.url} is empty; nothing was restored"
            )
        self.result["checked"] = {
            "size": found["size"],
            "sha256": given,
            "expected": "given",
            "read": False,
        }
        return given

    def check_claim(self, location):
        claim = self.client.get("v1", "PersistentVolumeClaim", location.bucket, self.p["namespace"])
        if claim is None or claim["metadata"].get("deletionTimestamp"):
            raise StepError(
                "ObjectUnreadable",
                f"cannot read the snapshot: PersistentVolumeClaim {self._where(location.bucket)} "
                f"of {location.url} does not exist; nothing was restored",
            )

    def restore_volumes(self):
        p = self.p
        try:
            location = parse_object_url(p["object_url"] or "")
        except ObjectStoreError as exc:
            raise StepError("InvalidSource", str(exc)) from exc
        try:
            # Only to check that it can be read: the pods mount the Secret themselves.
            credentials = read_credentials(None, p["credentials_secret"], p["namespace"])
        except SnapshotSourceError as exc:
            raise StepError("CredentialsUnavailable", str(exc)) from exc
        sha256 = p["sha256"]
        if location.scheme == "pvc":
            # The operator cannot mount the claim: the restore pods' fetch checks the file (the
            # SHA-256 given, else the one recorded next to it). Refuse a claim that is not there.
            self.check_claim(location)
        elif p["verify"]:
            sha256 = self.check_snapshot(location, credentials)
        self.result["sha256"] = sha256
        for member in p["members"]:
            peer, spec = member["name"], member["spec"]
            self._ensure_pvc(peer, spec)
            self._ensure_pod(peer, spec, location.url, sha256)

    def _ensure_pvc(self, peer, spec):
        pvc = self.client.get("v1", "PersistentVolumeClaim", peer, self.p["namespace"])
        if pvc is None:
            if self._did("created", "PersistentVolumeClaim", peer):
                wanted = render_restored_pvc(self.restore, peer, spec, self.p["settings"])
                self._create(wanted)
            return
        if (pvc["metadata"].get("annotations") or {}).get(RESTORE_KEY) != self.uid:
            raise StepError(
                "VolumesExist",
                f"PVC {self._where(peer)} appeared meanwhile and was not created by this "
                "restore; nothing of it is used",
            )

    def _ensure_pod(self, peer, spec, object_url, sha256):
        name = restore_pod_name(peer, self.uid)
        if self.client.get("v1", "Pod", name, self.p["namespace"]) is not None:
            return
        if self._did("created", "Pod", name):
            pod = render_restore_pod(
                self.restore,
                peer,
                spec,
                self.p["settings"],
                self.p["operator_image"],
                object_url,
                sha256,
                self.p["credentials_secret"],
                checked_by_etcd=self.p["checked_by_etcd"],
            )
            self._create(pod)

    def _create(self, obj):
        try:
            self.client.create(obj)
        except KubeError as exc:
            if not exc.already_exists:
                raise
            # Another run created it meanwhile; the next observation judges whose it is.

    # -- create_cluster -------------------------------------------------------------------
    def create_cluster(self):
        spec = self.restore["spec"]
        name = spec["clusterName"]
        cluster = self.client.get(API_VERSION, "EtcdCluster", name, self.p["namespace"])
        if cluster is None:
            self._carry_root_password(name)
            if self._did("created", "EtcdCluster", name):
                wanted = render_restored_cluster(self.restore, name, spec["clusterTemplate"])
                self._create(wanted)
        elif (
            spec.get("inPlace")
            and (cluster["metadata"].get("annotations") or {}).get(RECOVERY_KEY) == self.p["name"]
        ):
            # Disaster recovery: the cluster exists; marking it with this restore's UID hands
            # the restored volumes back (its bootstrap step starts the members on them).
            annotations = cluster["metadata"].get("annotations") or {}
            if annotations.get(RESTORE_KEY) != self.uid and self._did(
                "patched", "EtcdCluster", name
            ):
                self.client.patch(
                    API_VERSION,
                    "EtcdCluster",
                    name,
                    {"metadata": {"annotations": {RESTORE_KEY: self.uid}}},
                    self.p["namespace"],
                )
        elif (cluster["metadata"].get("annotations") or {}).get(RESTORE_KEY) != self.uid:
            raise StepError(
                "ClusterExists",
                f"EtcdCluster {self._where(name)} appeared meanwhile and was not created by "
                "this restore",
            )
        self._delete_pods(keep=())

    def _carry_root_password(self, name):
        """Before the cluster exists (its reconcile would make a root Secret of its own): the
        snapshot of a cluster with spec.auth keeps that cluster's root password."""
        backup_name = (self.restore["spec"].get("source") or {}).get("backupName")
        if not backup_name:
            return
        backup = self.client.get(API_VERSION, "EtcdBackup", backup_name, self.p["namespace"])
        source = (((backup or {}).get("spec") or {}).get("source") or {}).get("clusterName")
        made = carry_root_password(
            self.client, self.p["namespace"], source, name, check=self.module.check_mode
        )
        if made:
            self._did("created", "Secret", made)

    def _delete_pods(self, keep):
        pods = self.client.list(
            "v1", "Pod", self.p["namespace"], label_selector=f"{RESTORE_KEY}={self.uid}"
        )
        for pod in pods:
            name = pod["metadata"]["name"]
            if name in keep or pod["metadata"].get("deletionTimestamp"):
                continue
            if self._did("deleted", "Pod", name):
                self.client.delete("v1", "Pod", name, self.p["namespace"])

    # -- fail -----------------------------------------------------------------------------
    def fail(self):
        """Delete this restore's PVCs first (a PVC still used by a running pod stays until the
        pod is gone), then its pods: an operator stopped in between finds the failed pods and
        takes this step again."""
        namespace = self.p["namespace"]
        claims = self.client.list("v1", "PersistentVolumeClaim", namespace)
        by_name = {c["metadata"]["name"]: c for c in claims}
        for claim in target_claims(claims, self.restore["spec"]["clusterName"]):
            if claim["restore_uid"] != self.uid or claim["deleting"]:
                continue
            if self._did("deleted", "PersistentVolumeClaim", claim["name"]):
                uid = by_name[claim["name"]]["metadata"]["uid"]
                self.client.delete("v1", "PersistentVolumeClaim", claim["name"], namespace, uid=uid)
        self._delete_pods(keep=set(self.p["keep_pods"]))

    # -- complete -------------------------------------------------------------------------
    def complete(self):
        p = self.p
        name = self.restore["spec"]["clusterName"]
        profile = profile_from_params(p)
        endpoint = ClusterNetwork(
            name,
            p["namespace"],
            p["cluster_domain"],
            p["client_port"],
            client_scheme=profile.client_scheme,
        ).client_service_url()
        try:
            with etcd_client(profile.with_endpoints([endpoint])) as etcd:
                self.result["revision"] = etcd.revision(endpoint)
        except Exception as exc:  # noqa: BLE001 - etcd's gRPC errors, said in words
            raise StepError(
                "ClusterUnreachable",
                f"cannot read the revision of EtcdCluster {self._where(name)} at {endpoint}: "
                f"{describe_error(exc)}",
            ) from exc


# The restored cluster is reached through its client Service: no endpoints option.
ARGUMENT_SPEC = {
    **connection_argument_spec(endpoints_required=False),
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "action": {
        "type": "str",
        "required": True,
        "choices": ["restore_volumes", "create_cluster", "fail", "complete"],
    },
    "members": {"type": "list", "elements": "dict", "default": []},
    "settings": {"type": "dict", "default": {}},
    "object_url": {"type": "str"},
    "sha256": {"type": "str"},
    "checked_by_etcd": {"type": "bool", "default": False},
    "credentials_secret": {"type": "str", "no_log": False},
    "verify": {"type": "bool", "default": True},
    "operator_image": {"type": "str"},
    "keep_pods": {"type": "list", "elements": "str", "default": []},
    "cluster_domain": {"type": "str", "default": DEFAULT_DOMAIN},
    "client_port": {"type": "int", "default": DEFAULT_CLIENT_PORT},
}


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        required_if=[("action", "restore_volumes", ("object_url", "operator_image", "members"))],
        required_together=CONNECTION_REQUIRED_TOGETHER,
    )
    p = module.params
    step = None
    try:
        step = Restore(module, direct_client())
        getattr(step, p["action"])()
    except StepError as exc:
        result = step.result if step else {"changed": False}
        module.fail_json(msg=str(exc), reason=exc.reason, **result)
    except (KubeError, KubeConfigError, ValueError, KeyError) as exc:
        result = step.result if step else {"changed": False}
        module.fail_json(
            msg=f"EtcdRestore {p['namespace']}/{p['name']}: {p['action']} failed: {exc}",
            reason="StepFailed",
            **result,
        )
    module.exit_json(**step.result)


if __name__ == "__main__":
    main()
