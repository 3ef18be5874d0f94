# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Status and Event operations shared by the k8s_status / k8s_event modules and action plugins.

The pure parts (condition merging, event matching) are unit tested; ``write_status`` and
``record_event`` take a ``qk_kube.KubeClient`` and raise ``OperationError`` with a message a
human can act on.
"""

from __future__ import annotations

import copy
import socket
import time

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_kube import (
    KUBE_CLIENT_ARGUMENT_SPEC,
    KubeError,
    now_rfc3339,
)

CONDITION_STATUSES = ("True", "False", "Unknown")
MAX_CONFLICT_RETRIES = 5

# The object a status or an Event is about, and how to reach its API server.
OBJECT_OPTIONS = {
    **KUBE_CLIENT_ARGUMENT_SPEC,
    "ignore_missing": {"type": "bool", "default": False},
    "api_version": {"type": "str", "required": True},
    "kind": {"type": "str", "required": True},
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str"},
}
STATUS_ARGUMENT_SPEC = {
    **OBJECT_OPTIONS,
    "status": {"type": "dict", "default": {}},
    "conditions": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {
            "type": {"type": "str", "required": True},
            "status": {"type": "raw", "required": True},
            "reason": {"type": "str", "required": True},
            "message": {"type": "str", "default": ""},
        },
    },
}
_CONDITION_OPTIONS = STATUS_ARGUMENT_SPEC["conditions"]
EVENT_ARGUMENT_SPEC = {
    **OBJECT_OPTIONS,
    "uid": {"type": "str"},
    "reason": {"type": "str", "required": True},
    "message": {"type": "str", "required": True},
    "type": {"type": "str", "choices": ["Normal", "Warning"], "default": "Normal"},
    "component": {"type": "str", "default": "quorumkeeper"},
}
# Events about the object (each as k8s_event takes one), the statuses of related objects (same
# apiVersion and namespace) and the object's own status, written by one task (k8s_report).
REPORT_ARGUMENT_SPEC = {
    **STATUS_ARGUMENT_SPEC,
    "events": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {key: EVENT_ARGUMENT_SPEC[key] for key in ("reason", "message", "type")},
    },
    "related_statuses": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {
            "kind": {"type": "str", "required": True},
            "name": {"type": "str", "required": True},
            "status": {"type": "dict", "default": {}},
            "conditions": _CONDITION_OPTIONS,
        },
    },
    "component": EVENT_ARGUMENT_SPEC["component"],
    "known": {
        "type": "dict",
        "options": {
            "status": {"type": "dict", "default": {}},
            "generation": {"type": "int", "required": True},
        },
    },
}


class OperationError(Exception):
    """A failure to report to the user as the task's ``msg``."""


# What the API server says when an object is created in a namespace that is being deleted.
NAMESPACE_TERMINATING = "because it is being terminated"


def _gone(params, what):
    """The result for an object that no longer exists, or an error unless that is expected."""
    if params.get("ignore_missing"):
        return {"changed": False, "gone": True}
    raise OperationError(what)


def _read(client, params, what):
    """The object the task is about, fresh from the API server; None when it does not exist."""
    p = params
    try:
        return client.get(p["api_version"], p["kind"], p["name"], p["namespace"])
    except KubeError as exc:
        raise OperationError(f"cannot read {what}: {exc}") from exc


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


def describe(kind, name, namespace=None):
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


# ---------------------------------------------------------------------------------------------
# Operations
# ---------------------------------------------------------------------------------------------


def write_status(client, params, check_mode=False):
    """Merge ``params['status']`` and ``params['conditions']`` into the object's status.

    Reads the object, computes the new status and writes the status subresource only when it
    differs, with the object's resourceVersion (retrying on conflicts). Returns the module
    result (``changed``, ``status`` and, after a write, ``result``).
    """
    p = params
    what = describe(p["kind"], p["name"], p["namespace"])
    for _attempt in range(MAX_CONFLICT_RETRIES):
        obj = _read(client, p, what)
        if obj is None:
            return _gone(p, f"{what} not found")
        current = obj.get("status") or {}
        generation = obj.get("metadata", {}).get("generation")
        try:
            new = compute_status(current, p["status"], p["conditions"], generation)
        except ValueError as exc:
            raise OperationError(str(exc)) from exc
        if new == current:
            return {"changed": False, "status": current}
        if check_mode:
            return {"changed": True, "status": new}
        obj["status"] = new
        try:
            written = client.replace_status(obj)
        except KubeError as exc:
            if exc.conflict:
                continue
            if exc.not_found:
                if _read(client, p, what) is None:
                    return _gone(p, f"{what} disappeared while its status was being written")
                raise OperationError(
                    f"{p['kind']} ({p['api_version']}) has no status subresource; enable "
                    "subresources.status in its CustomResourceDefinition"
                ) from exc
            raise OperationError(f"cannot write the status of {what}: {exc}") from exc
        return {"changed": True, "status": written.get("status") or {}, "result": written}
    raise OperationError(
        f"cannot write the status of {what}: it kept changing "
        f"({MAX_CONFLICT_RETRIES} conflicting updates in a row)"
    )


def record_event(client, params, check_mode=False):
    """Create a core/v1 Event about an object, or count one more of an identical recent one."""
    p = params
    namespace = p["namespace"] or "default"
    what = describe(p["kind"], p["name"], p["namespace"])
    uid, resource_version = p.get("uid"), None
    if not uid:
        obj = _read(client, p, what)
        if obj is None:
            return _gone(p, f"cannot record an event about {what}: it does not exist")
        uid = obj["metadata"]["uid"]
        resource_version = obj["metadata"].get("resourceVersion")

    now = now_rfc3339()
    try:
        existing = client.list(
            "v1",
            "Event",
            namespace,
            field_selector=f"involvedObject.uid={uid},reason={p['reason']}",
        )
    except KubeError as exc:
        raise OperationError(f"cannot list events in {namespace}: {exc}") from exc
    match = None
    for ev in existing:
        if not event_matches(ev, uid, p["reason"], p["message"], p["type"], p["component"]):
            continue
        if match is None or (ev.get("lastTimestamp") or "") > (match.get("lastTimestamp") or ""):
            match = ev

    if match is not None:
        patch = {"count": int(match.get("count") or 1) + 1, "lastTimestamp": now}
        if check_mode:
            match.update(patch)
            return {"changed": True, "event": match}
        try:
            written = client.patch("v1", "Event", match["metadata"]["name"], patch, namespace)
        except KubeError as exc:
            raise OperationError(f"cannot update event {match['metadata']['name']}: {exc}") from exc
        return {"changed": True, "event": written}

    involved = {"apiVersion": p["api_version"], "kind": p["kind"], "name": p["name"], "uid": uid}
    if p["namespace"]:
        involved["namespace"] = p["namespace"]
    if resource_version:
        involved["resourceVersion"] = resource_version
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{p['name']}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": involved,
        "reason": p["reason"],
        "message": p["message"],
        "type": p["type"],
        "source": {"component": p["component"]},
        "reportingComponent": p["component"],
        "reportingInstance": socket.gethostname(),
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    if check_mode:
        return {"changed": True, "event": body}
    try:
        written = client.create(body)
    except KubeError as exc:
        if exc.status == 403 and NAMESPACE_TERMINATING in exc.message:
            return _gone(p, f"cannot create an event in {namespace}: {exc}")
        if not exc.conflict:
            raise OperationError(f"cannot create an event in {namespace}: {exc}") from exc
        body["metadata"]["name"] = f"{p['name']}.{time.time_ns():x}"
        try:
            written = client.create(body)
        except KubeError as exc2:
            raise OperationError(f"cannot create an event in {namespace}: {exc2}") from exc2
    return {"changed": True, "event": written}


def write_report(client, params, check_mode=False):
    """What one pass of a controller found, in the order a reader should see it: the Events
    about the object, then the status of each related object (``related_statuses``: same
    apiVersion and namespace, e.g. a cluster's members), then the object's own status.

    Each write is ``record_event`` / ``write_status``'s, with ``ignore_missing`` applied to
    every object. Returns ``changed``, the object's ``status`` (or ``gone``), ``events``
    recorded and the names of the ``related_changed`` objects whose status was written.
    """
    p = params
    known = p.get("known")
    if known is not None and not p["events"] and not p["related_statuses"]:
        # The caller read the object in this pass and wrote nothing since: when that status
        # already says everything, there is nothing to read or write.
        try:
            unchanged = (
                compute_status(known["status"], p["status"], p["conditions"], known["generation"])
                == known["status"]
            )
        except ValueError:
            unchanged = False  # write_status below says what is wrong
        if unchanged:
            return {"changed": False, "status": known["status"], "events": 0, "related_changed": []}
    about = {key: p[key] for key in OBJECT_OPTIONS}
    recorded = 0
    # The object is read for its uid by the first Event only.
    uid = None
    for event in p["events"]:
        outcome = record_event(
            client, {**about, "uid": uid, "component": p["component"], **event}, check_mode
        )
        if outcome.get("gone"):
            break
        recorded += 1
        uid = outcome["event"]["involvedObject"]["uid"]
    related_changed = []
    for related in p["related_statuses"]:
        outcome = write_status(client, {**about, **related}, check_mode)
        if outcome.get("changed"):
            related_changed.append(related["name"])
    own = write_status(
        client, {**about, "status": p["status"], "conditions": p["conditions"]}, check_mode
    )
    own.pop("result", None)
    return {
        **own,
        "changed": bool(own.get("changed") or recorded or related_changed),
        "events": recorded,
        "related_changed": related_changed,
    }
