# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Kubernetes helpers for k8s_status / k8s_event: client loading and the pure merge logic."""

from __future__ import annotations

import copy
import os
from datetime import UTC, datetime

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import (
        ApiException,
        ConflictError,
        NotFoundError,
        ResourceNotFoundError,
    )

    HAS_K8S = True
    K8S_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover
    HAS_K8S = False
    K8S_IMPORT_ERROR = exc

CONDITION_STATUSES = ("True", "False", "Unknown")


def now_rfc3339(now=None):
    now = now or datetime.now(UTC)
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------------
# Pure logic
# ---------------------------------------------------------------------------------------------


def normalize_condition_status(value):
    if isinstance(value, bool):
        return "True" if value else "False"
    text = str(value).strip()
    for s in CONDITION_STATUSES:
        if text.lower() == s.lower():
            return s
    raise ValueError(f"condition status {value!r} must be one of True, False, Unknown")


def merge_conditions(existing, updates, generation=None, now=None):
    """Merge ``updates`` into ``existing`` conditions by ``type``.

    ``lastTransitionTime`` is kept when a condition's status is unchanged and set to ``now``
    when it changes (or the condition is new). ``observedGeneration`` is set on every updated
    condition when ``generation`` is given. Conditions not mentioned are kept as they are;
    order is preserved, new types are appended.
    """
    stamp = now_rfc3339(now) if not isinstance(now, str) else now
    result = [copy.deepcopy(c) for c in (existing or [])]
    index = {c.get("type"): i for i, c in enumerate(result)}
    for upd in updates or []:
        ctype = upd.get("type")
        if not ctype:
            raise ValueError(f"condition {upd!r} has no type")
        status = normalize_condition_status(upd.get("status"))
        new = {
            "type": ctype,
            "status": status,
            "reason": upd.get("reason") or "",
            "message": upd.get("message") or "",
        }
        old = result[index[ctype]] if ctype in index else None
        if old is not None and old.get("status") == status and old.get("lastTransitionTime"):
            new["lastTransitionTime"] = old["lastTransitionTime"]
        else:
            new["lastTransitionTime"] = stamp
        if generation is not None:
            new["observedGeneration"] = int(generation)
        elif old is not None and "observedGeneration" in old:
            new["observedGeneration"] = old["observedGeneration"]
        if old is not None:
            # keep unknown extra fields someone else set
            merged = {k: v for k, v in old.items() if k not in new}
            merged.update(new)
            result[index[ctype]] = merged
        else:
            index[ctype] = len(result)
            result.append(new)
    return result


def deep_merge(base, patch):
    """Recursively merge ``patch`` into a copy of ``base``; a ``None`` value deletes the key."""
    out = copy.deepcopy(base) if isinstance(base, dict) else {}
    for key, value in (patch or {}).items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def compute_status(existing, status_patch, conditions, generation, now=None):
    """The new ``status``: ``status_patch`` merged in, ``conditions`` merged by type."""
    new = deep_merge(existing or {}, status_patch or {})
    if conditions:
        new["conditions"] = merge_conditions(
            (existing or {}).get("conditions") or [], conditions, generation, now
        )
    return new


def event_matches(event, uid, reason, message, event_type, component):
    """Whether an existing core/v1 Event (dict) is the same event (client-go correlator key)."""
    inv = event.get("involvedObject") or {}
    source = event.get("source") or {}
    return (
        inv.get("uid") == uid
        and event.get("reason") == reason
        and event.get("message") == message
        and event.get("type") == event_type
        and (source.get("component") or event.get("reportingComponent")) == component
    )


# ---------------------------------------------------------------------------------------------
# Client
# ---------------------------------------------------------------------------------------------


def kubeconfig_path(option=None, environ=None):
    """The kubeconfig to use: option, K8S_AUTH_KUBECONFIG, KUBECONFIG; None means in-cluster."""
    env = os.environ if environ is None else environ
    for value in (option, env.get("K8S_AUTH_KUBECONFIG"), env.get("KUBECONFIG")):
        if value:
            # KUBECONFIG may be a list; the python client takes the first file
            return os.path.expanduser(value.split(os.pathsep)[0])
    return None


def dynamic_client(kubeconfig=None, context=None):
    path = kubeconfig_path(kubeconfig)
    configuration = k8s_client.Configuration()
    if path:
        k8s_config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration
        )
    else:
        k8s_config.load_incluster_config(client_configuration=configuration)
    return DynamicClient(k8s_client.ApiClient(configuration))


def k8s_argument_spec():
    return {
        "kubeconfig": {"type": "path"},
        "context": {"type": "str"},
    }


def api_error_text(exc):
    body = getattr(exc, "body", None)
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if body:
        try:
            import json

            msg = json.loads(body).get("message")
            if msg:
                return f"{status} {reason}: {msg}"
        except (ValueError, AttributeError):
            pass
    return f"{status} {reason}" if status else str(exc)


__all__ = [
    "ApiException",
    "ConflictError",
    "NotFoundError",
    "ResourceNotFoundError",
    "HAS_K8S",
    "K8S_IMPORT_ERROR",
]
