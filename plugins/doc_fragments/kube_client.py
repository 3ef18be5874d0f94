# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The Kubernetes API options of the modules (qk_kube.KUBE_CLIENT_ARGUMENT_SPEC), documented
once:

    extends_documentation_fragment:
      - quorumkeeper.etcd.kube_client
      - quorumkeeper.etcd.kube_client.api_version   # modules that read our custom resources

A module's own entry for an option is merged over the fragment's."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - A kubeconfig used for every API call. Default, under ansible-operator, its proxy
        (C(K8S_AUTH_KUBECONFIG)) for objects the operator owns and watches, and the API server
        itself for the others (C(QK_KUBECONFIG) outside the cluster, else the pod's service
        account); see qk_kube.
    type: path
  context:
    description: kubeconfig context to use with I(kubeconfig).
    type: str
"""

    API_VERSION = r"""
options:
  api_version:
    description: apiVersion of the quorumkeeper custom resources.
    type: str
    default: etcd.quorumkeeper.dev/v1alpha1
"""
