# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The options through which every etcd module connects (qk_connection.connection_argument_spec),
documented once. Modules that are given the endpoints use both fragments:

    extends_documentation_fragment:
      - quorumkeeper.etcd.etcd_connection
      - quorumkeeper.etcd.etcd_connection.endpoints

modules that find the endpoints themselves use the first only. A module's own entry for an
option (a more precise description, another default) is merged over the fragment's."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  timeout:
    description: Per-call timeout of etcd calls, in seconds.
    type: float
    default: 5
  ca_cert:
    description:
      - CA bundle (PEM) that verifies the etcd members' serving certificates. Given, every
        endpoint is dialled with TLS; C(https://) endpoints are dialled with TLS in any case,
        verified against the system's CAs when I(ca_cert) is not given.
    type: path
  client_cert:
    description:
      - Client certificate (PEM) for mutual TLS (etcd's C(--client-cert-auth)).
      - Requires I(client_key).
    type: path
  client_key:
    description: Private key (PEM) of I(client_cert).
    type: path
  username:
    description:
      - etcd user to authenticate as, when the cluster has authentication enabled. A cluster
        whose authentication is not enabled (yet) is used without a user.
      - Requires I(password) or I(password_file). With I(client_cert) and etcd's
        C(--client-cert-auth), the certificate's common name is the user and no password is
        needed.
    type: str
  password:
    description: Password of I(username).
    type: str
  password_file:
    description:
      - File holding the password of I(username) (its whole content, a trailing newline
        ignored), so that the password never appears in a task's arguments.
      - Mutually exclusive with I(password).
    type: path
"""

    ENDPOINTS = r"""
options:
  endpoints:
    description: etcd client URLs (C(http://host:2379), C(https://host:2379)); tried in order.
    type: list
    elements: str
    required: true
"""
