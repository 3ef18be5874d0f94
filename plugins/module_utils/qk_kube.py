# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""A small, fast Kubernetes API client for the quorumkeeper modules and action plugins.

Why not the ``kubernetes`` package: importing it costs about 0.5 CPU-seconds (it loads every API
model), and under ansible-operator every module run is a new interpreter, so that import was
most of what a reconcile cost (see docs/reconcile-cost.md). The operator needs a handful of
calls on a few kinds; this client does them with the standard library (http.client, ssl, json)
and reads kubeconfig files with PyYAML, which Ansible already depends on.

Two ways to reach the API server, both used on purpose:
- ``proxy_client()``: the kubeconfig ansible-operator hands to every run (``K8S_AUTH_KUBECONFIG``):
  its proxy serves reads from the operator's informer cache, adds an owner reference to what
  it creates and starts watching that kind, so changes to it trigger a reconcile.
- ``direct_client()``: the API server itself, for objects that must *not* get an owner
  reference (a member's PersistentVolumeClaim: its data must outlive the cluster).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
import time
import urllib.parse
from datetime import UTC, datetime

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    API_VERSION,
    format_timestamp,
)

DEFAULT_TIMEOUT = 10.0
# The options through which a module reaches the API server (documented once by the doc fragment
# quorumkeeper.etcd.kube_client).
KUBE_CLIENT_ARGUMENT_SPEC = {"kubeconfig": {"type": "path"}, "context": {"type": "str"}}
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Outside a cluster (``make run``, molecule) the real API server's kubeconfig, since
# ansible-operator points KUBECONFIG at its proxy.
DIRECT_KUBECONFIG_ENV = "QK_KUBECONFIG"

# kind -> (plural, namespaced) for the kinds the operator uses, so that no discovery call is
# needed for them. Other kinds are looked up once per client through discovery.
KNOWN_RESOURCES = {
    ("v1", "Pod"): ("pods", True),
    ("v1", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("v1", "Service"): ("services", True),
    ("v1", "Endpoints"): ("endpoints", True),
    ("v1", "Event"): ("events", True),
    ("v1", "Secret"): ("secrets", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "Node"): ("nodes", False),
    ("apps/v1", "ReplicaSet"): ("replicasets", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("policy/v1", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    # Not always served: a list of a kind the API server does not serve answers 404.
    ("monitoring.coreos.com/v1", "PodMonitor"): ("podmonitors", True),
    ("cert-manager.io/v1", "Certificate"): ("certificates", True),
    ("monitoring.coreos.com/v1", "PrometheusRule"): ("prometheusrules", True),
    **{
        (API_VERSION, kind): (kind.lower() + "s", True)
        for kind in ("EtcdCluster", "EtcdPeer", "EtcdBackup", "EtcdBackupSchedule", "EtcdRestore")
    },
}

# A 429 (Too Many Requests) is tried again this many times, after the Retry-After the server
# gives (at most MAX_RETRY_AFTER seconds each).
THROTTLED_RETRIES = 3
MAX_RETRY_AFTER = 2.0
# How long a watch lasts before the server ends it and it is started again.
WATCH_SECONDS = 300


def _retry_after(response) -> float:
    try:
        return min(max(float(response.getheader("Retry-After") or 1), 0.1), MAX_RETRY_AFTER)
    except ValueError:
        return 1.0


PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


def _error(response, data):
    """The KubeError of an answer >= 400: the Status object's reason and message."""
    reason, message = response.reason, data.decode("utf-8", "replace").strip()
    try:
        status = json.loads(data)
        reason = status.get("reason") or reason
        message = status.get("message") or message
    except ValueError:
        pass
    return KubeError(response.status, reason, message)


class KubeError(Exception):
    """The API server answered with an error status, or could not be reached (status 0)."""

    def __init__(self, status, reason, message):
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}" if status else message)

    @property
    def not_found(self):
        return self.status == 404

    @property
    def conflict(self):
        return self.status == 409

    @property
    def already_exists(self):
        return self.status == 409 and self.reason == "AlreadyExists"


class KubeConfigError(Exception):
    pass


def now_rfc3339(now=None):
    return format_timestamp(now or datetime.now(UTC))


def split_api_version(api_version):
    """``apps/v1`` -> (``apps``, ``v1``); ``v1`` -> (``""``, ``v1``)."""
    if "/" in api_version:
        group, version = api_version.split("/", 1)
        return group, version
    return "", api_version


def api_prefix(api_version):
    group, version = split_api_version(api_version)
    return f"/api/{version}" if not group else f"/apis/{group}/{version}"


def secret_data(secret):
    """The decoded ``data`` of a Secret object, as text; ValueError naming a key that is not
    base64-encoded UTF-8."""
    data = {}
    for key, value in ((secret or {}).get("data") or {}).items():
        try:
            data[key] = base64.b64decode(value).decode("utf-8")
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"key {key} of the Secret is not base64 UTF-8 text") from exc
    return data


def _data_or_file(entry, key):
    """The bytes of ``<key>-data`` (base64) or of the file ``<key>``, or None."""
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        with open(os.path.expanduser(entry[key]), "rb") as f:
            return f.read()
    return None


class KubeClient:
    """Blocking client for one API server; reuses one connection."""

    def __init__(
        self,
        server,
        ca_data=None,
        insecure=False,
        cert_data=None,
        key_data=None,
        token=None,
        token_file=None,
        username=None,
        password=None,
        timeout=DEFAULT_TIMEOUT,
    ):
        parsed = urllib.parse.urlsplit(server)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise KubeConfigError(f"invalid API server URL {server!r}")
        self.server = server
        self.scheme = parsed.scheme
        self.host = parsed.hostname
        self.port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self.base_path = parsed.path.rstrip("/")
        # ansible-operator's proxy kubeconfig carries the owner in the URL's user part too.
        username = username or (urllib.parse.unquote(parsed.username) if parsed.username else None)
        self.timeout = float(timeout)
        self.token = token
        self.token_file = token_file
        self.basic = None
        if username:
            raw = f"{username}:{password or ''}".encode()
            self.basic = base64.b64encode(raw).decode()
        self._ssl = None
        if self.scheme == "https":
            self._ssl = self._ssl_context(ca_data, insecure, cert_data, key_data)
        self._conn = None
        self._resources = {}

    # -- construction ----------------------------------------------------------------------
    @staticmethod
    def _ssl_context(ca_data, insecure, cert_data, key_data):
        # With the cluster's CA, only that CA: loading the system's trust store as well costs a
        # module about 60 ms and trusts nothing the API server's certificate needs.
        cadata = ca_data.decode("ascii") if ca_data and not insecure else None
        ctx = ssl.create_default_context(cadata=cadata)
        if insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cert_data and key_data:
            # ssl loads client certificates from files only.
            with tempfile.TemporaryDirectory(prefix="qk-kube-") as tmp:
                cert_path = os.path.join(tmp, "cert.pem")
                key_path = os.path.join(tmp, "key.pem")
                for path, data in ((cert_path, cert_data), (key_path, key_data)):
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                ctx.load_cert_chain(cert_path, key_path)
        return ctx

    @classmethod
    def from_kubeconfig(cls, path, context=None, timeout=DEFAULT_TIMEOUT):
        import yaml

        path = os.path.expanduser(path)
        try:
            with open(path) as f:
                config = yaml.safe_load(f)
        except OSError as exc:
            raise KubeConfigError(f"cannot read kubeconfig {path}: {exc.strerror}") from exc
        if not isinstance(config, dict):
            raise KubeConfigError(f"kubeconfig {path} is empty or not a mapping")
        name = context or config.get("current-context")
        contexts = {c["name"]: c.get("context") or {} for c in config.get("contexts") or []}
        if name not in contexts:
            raise KubeConfigError(f"kubeconfig {path} has no context {name!r}")
        ctx = contexts[name]
        clusters = {c["name"]: c.get("cluster") or {} for c in config.get("clusters") or []}
        users = {u["name"]: u.get("user") or {} for u in config.get("users") or []}
        cluster = clusters.get(ctx.get("cluster"))
        if cluster is None or not cluster.get("server"):
            raise KubeConfigError(f"kubeconfig {path}: context {name!r} has no cluster server")
        user = users.get(ctx.get("user"), {})
        if user.get("exec") or user.get("auth-provider"):
            raise KubeConfigError(
                f"kubeconfig {path}: exec and auth-provider credentials are not supported; "
                "use a token or a client certificate"
            )
        return cls(
            cluster["server"],
            ca_data=_data_or_file(cluster, "certificate-authority"),
            insecure=bool(cluster.get("insecure-skip-tls-verify")),
            cert_data=_data_or_file(user, "client-certificate"),
            key_data=_data_or_file(user, "client-key"),
            token=user.get("token"),
            token_file=user.get("tokenFile"),
            username=user.get("username"),
            password=user.get("password"),
            timeout=timeout,
        )

    @classmethod
    def in_cluster(cls, timeout=DEFAULT_TIMEOUT, sa_dir=SERVICE_ACCOUNT_DIR):
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise KubeConfigError(
                "not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST is not set)"
            )
        if ":" in host:
            host = f"[{host}]"
        with open(os.path.join(sa_dir, "ca.crt"), "rb") as f:
            ca = f.read()
        return cls(
            f"https://{host}:{port}",
            ca_data=ca,
            token_file=os.path.join(sa_dir, "token"),
            timeout=timeout,
        )

    # -- transport ------------------------------------------------------------------------
    def _connection(self):
        if self._conn is None:
            self._conn = self._new_connection(self.timeout)
        return self._conn

    def _new_connection(self, timeout):
        if self.scheme == "https":
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=self._ssl
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _headers(self, content_type, accept="application/json"):
        headers = {"Accept": accept, "User-Agent": "quorumkeeper"}
        if content_type:
            headers["Content-Type"] = content_type
        token = self.token
        if self.token_file:
            # Projected tokens rotate: read the file on every request.
            with open(self.token_file) as f:
                token = f.read().strip()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        elif self.basic:
            headers["Authorization"] = f"Basic {self.basic}"
        return headers

    def request(
        self, method, path, body=None, query=None, content_type="application/json", text=False
    ):
        """Send one request; return the decoded JSON body (None when empty), or with ``text``
        the body as text."""
        url = self._url(path, query)
        payload = None if body is None else json.dumps(body).encode()
        headers = self._headers(
            content_type if payload is not None else None, "*/*" if text else "application/json"
        )
        for throttled in range(THROTTLED_RETRIES + 1):
            response, data = self._send(method, url, payload, headers)
            if response.status != 429 or throttled == THROTTLED_RETRIES:
                break
            # Asked to come back (API priority and fairness, a resource whose storage is still
            # initializing just after its CRD was created): as the server says, briefly.
            time.sleep(_retry_after(response))
        if response.status >= 400:
            raise _error(response, data)
        if text:
            return data.decode("utf-8", "replace")
        if not data:
            return None
        return json.loads(data)

    def _url(self, path, query):
        url = self.base_path + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        return url

    def _send(self, method, url, payload, headers):
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, url, body=payload, headers=headers)
                response = conn.getresponse()
                return response, response.read()
            except (http.client.HTTPException, ConnectionError) as exc:
                # A kept-alive connection the server closed: retry once on a fresh one.
                self.close()
                if attempt == 2:
                    raise KubeError(0, "Unreachable", f"{self.server}: {exc}") from exc
            except OSError as exc:
                self.close()
                raise KubeError(0, "Unreachable", f"{self.server}: {exc}") from exc
        raise AssertionError("unreachable")

    def watch(self, path, query, seconds=WATCH_SECONDS):
        """The events of a watch of the list at ``path`` (``query`` names the resourceVersion
        to start from), each ``{"type": ..., "object": ...}``, until the server ends the watch
        after ``seconds``. On a connection of its own, so that the client's other requests go
        on meanwhile (from the same thread). KubeError when the watch cannot start or its
        stream breaks, OSError when its connection does, ValueError for an event that is not
        JSON."""
        query = {**query, "watch": "true", "timeoutSeconds": str(int(seconds))}
        query.setdefault("allowWatchBookmarks", "true")
        url = self._url(path, query)
        # A read waits for the next event: as long as the watch lasts, and a margin.
        connection = self._new_connection(seconds + self.timeout)
        try:
            try:
                connection.request("GET", url, headers=self._headers(None))
                response = connection.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                raise KubeError(0, "Unreachable", f"{self.server}: {exc}") from exc
            if response.status >= 400:
                raise _error(response, response.read())
            try:
                while line := response.readline():
                    if line.strip():
                        yield json.loads(line)
            except http.client.HTTPException as exc:  # a chunk cut short: IncompleteRead
                raise KubeError(0, "Unreachable", f"{self.server}: watch broken: {exc}") from exc
        finally:
            connection.close()

    # -- resources ------------------------------------------------------------------------
    def resource(self, api_version, kind):
        """(plural, namespaced) of a kind, from the built-in table or discovery."""
        key = (api_version, kind)
        if key in KNOWN_RESOURCES:
            return KNOWN_RESOURCES[key]
        if key not in self._resources:
            listing = self.request("GET", api_prefix(api_version))
            for res in listing.get("resources") or []:
                if res.get("kind") == kind and "/" not in res.get("name", ""):
                    self._resources[key] = (res["name"], bool(res.get("namespaced")))
                    break
            else:
                raise KubeError(
                    404, "NotFound", f"the API server does not serve {kind} in {api_version}"
                )
        return self._resources[key]

    def path(self, api_version, kind, namespace=None, name=None, subresource=None):
        plural, namespaced = self.resource(api_version, kind)
        segments = []
        if namespaced and namespace:
            segments += ["namespaces", urllib.parse.quote(namespace, safe="")]
        segments.append(plural)
        if name:
            segments.append(urllib.parse.quote(name, safe=""))
        if subresource:
            segments.append(subresource)
        return api_prefix(api_version) + "/" + "/".join(segments)

    def get(self, api_version, kind, name, namespace=None):
        """The object, or None when it does not exist."""
        try:
            return self.request("GET", self.path(api_version, kind, namespace, name))
        except KubeError as exc:
            if exc.not_found:
                return None
            raise

    def list(self, api_version, kind, namespace=None, label_selector=None, field_selector=None):
        result = self.request(
            "GET",
            self.path(api_version, kind, namespace),
            query={"labelSelector": label_selector, "fieldSelector": field_selector},
        )
        return (result or {}).get("items") or []

    def create(self, obj, namespace=None):
        namespace = namespace or obj.get("metadata", {}).get("namespace")
        return self.request("POST", self.path(obj["apiVersion"], obj["kind"], namespace), body=obj)

    def patch(
        self, api_version, kind, name, patch, namespace=None, patch_type="merge", subresource=None
    ):
        return self.request(
            "PATCH",
            self.path(api_version, kind, namespace, name, subresource),
            body=patch,
            content_type=PATCH_TYPES[patch_type],
        )

    def replace_status(self, obj):
        meta = obj["metadata"]
        return self.request(
            "PUT",
            self.path(
                obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"], "status"
            ),
            body=obj,
        )

    def pod_log(self, name, namespace, container=None, tail_lines=None, previous=False):
        """The log of one container of a pod, as text (its last ``tail_lines`` lines)."""
        query = {"container": container, "tailLines": tail_lines}
        if previous:
            query["previous"] = "true"
        return self.request(
            "GET", self.path("v1", "Pod", namespace, name, "log"), query=query, text=True
        )

    def delete(
        self, api_version, kind, name, namespace=None, propagation=None, uid=None, grace=None
    ):
        """Delete; True when a delete was issued, False when the object was already gone.
        ``grace``: a pod's grace period in seconds (a pod already terminating is given the
        shorter of its own and this one)."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation:
            body["propagationPolicy"] = propagation
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        try:
            self.request("DELETE", self.path(api_version, kind, namespace, name), body=body)
        except KubeError as exc:
            if exc.not_found:
                return False
            raise
        return True


def kubeconfig_path(option=None, environ=None):
    """The kubeconfig to use: option, K8S_AUTH_KUBECONFIG, KUBECONFIG; None means in-cluster."""
    env = os.environ if environ is None else environ
    for value in (option, env.get("K8S_AUTH_KUBECONFIG"), env.get("KUBECONFIG")):
        if value:
            return os.path.expanduser(value.split(os.pathsep)[0])
    return None


def proxy_client(kubeconfig=None, context=None, timeout=DEFAULT_TIMEOUT):
    """The client a run normally uses: under ansible-operator, the operator's proxy."""
    path = kubeconfig_path(kubeconfig)
    if path:
        return KubeClient.from_kubeconfig(path, context, timeout)
    return KubeClient.in_cluster(timeout)


def direct_client(timeout=DEFAULT_TIMEOUT):
    """The API server itself, bypassing ansible-operator's proxy (no owner references added)."""
    path = os.environ.get(DIRECT_KUBECONFIG_ENV)
    if path:
        return KubeClient.from_kubeconfig(path, timeout=timeout)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return KubeClient.in_cluster(timeout)
    path = kubeconfig_path()
    if path and not _is_proxy_kubeconfig(path):
        return KubeClient.from_kubeconfig(path, timeout=timeout)
    raise KubeConfigError(
        "cannot reach the API server without ansible-operator's proxy: run in a pod, or set "
        f"{DIRECT_KUBECONFIG_ENV} to a kubeconfig of the cluster"
    )


def _is_proxy_kubeconfig(path):
    """Whether ``path`` is the kubeconfig ansible-operator writes for its proxy (its cluster
    is named ``proxy-server``)."""
    import yaml

    try:
        with open(path) as f:
            config = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError):
        return False
    return any(c.get("name") == "proxy-server" for c in config.get("clusters") or [])


def operator_clients(params, timeout=DEFAULT_TIMEOUT):
    """(through the proxy, to the API server itself) for a module run; both from the task's
    ``kubeconfig`` when it gives one."""
    if params.get("kubeconfig"):
        client = KubeClient.from_kubeconfig(params["kubeconfig"], params.get("context"), timeout)
        return client, client
    return proxy_client(timeout=timeout), direct_client(timeout)


def api_client(params, fresh=False, timeout=DEFAULT_TIMEOUT):
    """The client for a task: its ``kubeconfig`` option when given, else the proxy (reads from
    the operator's cache) or, with ``fresh``, the API server itself (reads what is stored now)."""
    if params.get("kubeconfig"):
        return KubeClient.from_kubeconfig(params["kubeconfig"], params.get("context"), timeout)
    return direct_client(timeout) if fresh else proxy_client(timeout=timeout)
