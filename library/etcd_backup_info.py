#!/usr/bin/python
# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_backup_info
short_description: Read an EtcdBackup and say what it asks for
description:
  - Reads the EtcdBackup from the API server and returns its phase, the endpoints to take the
    snapshot from and the object URL (its template filled in, or the URL recorded by a run that
    was interrupted).
  - For a backup of an EtcdCluster still to take, also reads the cluster, to say whether the
    operator's client certificate and root's password must be read first (RV(cluster_tls),
    RV(cluster_auth)).
  - The role cannot read the object passed by ansible-operator for this, because Ansible would
    evaluate the C({{ .UID }}) placeholders of spec.destination.objectURLTemplate as Jinja;
    module results are never evaluated.
  - Never changes anything.
options:
  name:
    description: Name of the EtcdBackup.
    type: str
    required: true
  namespace:
    description: Namespace of the EtcdBackup.
    type: str
    required: true
  cluster_domain:
    description: The Kubernetes cluster's DNS domain.
    type: str
    default: cluster.local
  client_port:
    description: etcd client port of an EtcdCluster's client Service.
    type: int
    default: 2379
requirements: [PyYAML]
"""

EXAMPLES = r"""
- name: Read the EtcdBackup
  etcd_backup_info:
    name: nightly
    namespace: default
  register: backup
"""

RETURN = r"""
exists:
  description: Whether the EtcdBackup exists.
  type: bool
  returned: always
phase:
  description: Its status.phase (Pending when none yet).
  type: str
  returned: when it exists
deleting:
  description: Whether it is being deleted.
  type: bool
  returned: when it exists
source:
  description: C(EtcdCluster <name>) or the client URL, for messages.
  type: str
  returned: when it exists
endpoints:
  description: Client URLs to take the snapshot from.
  type: list
  elements: str
  returned: when it exists
cluster_name:
  description: spec.source.clusterName, or null.
  type: str
  returned: when it exists
member_selection:
  description: C(follower) for an EtcdCluster, C(endpoint) for a client URL.
  type: str
  returned: when it exists
object_url:
  description: Where the snapshot goes.
  type: str
  returned: when it exists and I(error) is null
credentials_secret:
  description: spec.destination.credentialsSecret, or null.
  type: str
  returned: when it exists
error:
  description: What is wrong with the spec, or null.
  type: str
  returned: when it exists
verify:
  description: Whether spec.verify asks for a verification of the completed backup (default true).
  type: bool
  returned: when it exists
verified:
  description: Status of the Verified condition (C(True), C(False), C(Unknown)), null when none.
  type: str
  returned: when it exists
verification_reason:
  description: Reason of the Verified condition, null when none.
  type: str
  returned: when it exists
cluster_tls:
  description:
    - Whether the EtcdCluster to back up has C(spec.tls), so that the operator's client certificate
      must be read before the snapshot. False for a client URL, a cluster that does not exist, or
      a completed backup.
  type: bool
  returned: when it exists
cluster_auth:
  description:
    - Whether the EtcdCluster to back up has C(spec.auth) or authentication still enabled in
      etcd (C(status.auth.enabled)), so that root's password must be read before the snapshot.
      False for a client URL, a cluster that does not exist, or a completed backup.
  type: bool
  returned: when it exists
verification_due:
  description:
    - Whether a verification should run now; Completed, verify asked for, and not verified yet
      or last failed for a reason worth trying again (not an integrity failure).
  type: bool
  returned: when it exists
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_VERSION,
    DEFAULT_CLIENT_PORT,
    DEFAULT_DOMAIN,
    cluster_security,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KubeConfigError,
    KubeError,
    direct_client,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_snapshot import plan_backup
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_verify import verification_state

ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str", "required": True},
    "cluster_domain": {"type": "str", "default": DEFAULT_DOMAIN},
    "client_port": {"type": "int", "default": DEFAULT_CLIENT_PORT},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        client = direct_client()
        backup = client.get(API_VERSION, "EtcdBackup", p["name"], p["namespace"])
    except (KubeError, KubeConfigError) as exc:
        module.fail_json(msg=f"cannot read EtcdBackup {p['namespace']}/{p['name']}: {exc}")
    if backup is None:
        module.exit_json(changed=False, exists=False)
    plan = plan_backup(backup, p["cluster_domain"], p["client_port"])
    plan.update(verification_state(backup))
    cluster = None
    if plan["cluster_name"] and plan["phase"] != "Completed" and not plan["deleting"]:
        try:
            cluster = client.get(API_VERSION, "EtcdCluster", plan["cluster_name"], p["namespace"])
        except KubeError as exc:
            module.fail_json(
                msg=f"cannot read EtcdCluster {p['namespace']}/{plan['cluster_name']}: {exc}"
            )
    plan.update(cluster_security(cluster))
    module.exit_json(changed=False, exists=True, **plan)


if __name__ == "__main__":
    main()
