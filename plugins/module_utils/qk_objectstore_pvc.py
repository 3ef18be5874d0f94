# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""pvc:// files: snapshots in a PersistentVolumeClaim, for users without object storage.

The operator cannot mount arbitrary claims, so these functions run only in the helper pods that
mount the claim at PVC_MOUNT (qk_pvcstore and qk_helper_pods render them; they run
qk_objectstore's command line). A file is written as ``<file>.part``, its SHA-256 as
``<file>.sha256``, and only then renamed to ``<file>``: a write interrupted at any point leaves
nothing under the final name. Standard library only.
"""

from __future__ import annotations

import contextlib
import os

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore_transfer import (
    DOWNLOAD_CHUNK,
    DigestingWriter,
    ObjectStoreError,
    sidecar_key,
)

# Where helper pods mount the claim of a pvc:// URL (qk_helper_pods.PVC_MOUNT); its path is
# relative to it. QK_CLAIM_MOUNT moves it, for the command line's tests outside a pod.
PVC_MOUNT = os.environ.get("QK_CLAIM_MOUNT") or "/var/run/quorumkeeper/claim"


def claim_file(location, root=PVC_MOUNT):
    """The file of a pvc:// location where a helper pod mounts its claim."""
    return os.path.join(root, location.key)


def _mounted_file(location, root):
    if not os.path.isdir(root):
        raise ObjectStoreError(
            f"{location.url}: the claim {location.bucket} is not mounted at {root}; pvc:// "
            "files are only reached through a helper pod that mounts the claim"
        )
    return claim_file(location, root)


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def upload_file(location, chunks, root=PVC_MOUNT):
    """Stream ``chunks`` to the file of a pvc:// location; ``{"size", "sha256"}``.

    The bytes go to ``<file>.part`` (flushed to disk), the SHA-256 to ``<file>.sha256``, and only
    then is ``<file>.part`` renamed to ``<file>``: a write that is interrupted at any point
    leaves no file under the final name, so nothing looks complete that is not. A failed write
    removes its ``.part``."""
    path = _mounted_file(location, root)
    directory = os.path.dirname(path)
    partial = f"{path}.part"
    try:
        os.makedirs(directory, exist_ok=True)
        with open(partial, "wb") as f:
            writer = DigestingWriter(f)
            for chunk in chunks:
                writer.write(chunk)
            if not writer.size:
                raise ObjectStoreError("the snapshot stream was empty")
            f.flush()
            os.fsync(f.fileno())
        sidecar = sidecar_key(path)
        _write_synced(f"{sidecar}.part", f"{writer.sha256}\n".encode())
        os.replace(f"{sidecar}.part", sidecar)
        os.replace(partial, path)
        _fsync_dir(directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    return {"size": writer.size, "sha256": writer.sha256}


def _recorded_sha256_file(path):
    try:
        with open(sidecar_key(path), "rb") as f:
            return f.read(256).decode("utf-8", "replace").strip().lower() or None
    except FileNotFoundError:
        return None


def download_file(location, fileobj, root=PVC_MOUNT):
    """Copy the file of a pvc:// location into ``fileobj``; see ``download``."""
    path = _mounted_file(location, root)
    writer = DigestingWriter(fileobj)
    try:
        with open(path, "rb") as f:
            while chunk := f.read(DOWNLOAD_CHUNK):
                writer.write(chunk)
    except FileNotFoundError as exc:
        raise ObjectStoreError(
            f"cannot read {location.url}: no file {location.key} in claim {location.bucket}"
        ) from exc
    return {
        "size": writer.size,
        "sha256": writer.sha256,
        "metadata_sha256": _recorded_sha256_file(path),
    }


def delete_file(location, root=PVC_MOUNT):
    """Remove the file of a pvc:// location and its SHA-256; one already gone is fine."""
    path = _mounted_file(location, root)
    for name in (path, sidecar_key(path), f"{path}.part"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def stat_file(location, root=PVC_MOUNT):
    """``{"exists", "size", "sha256"}`` of the file of a pvc:// location."""
    path = _mounted_file(location, root)
    if not os.path.isfile(path):
        return {"exists": False, "size": None, "sha256": None}
    return {
        "exists": True,
        "size": os.path.getsize(path),
        "sha256": _recorded_sha256_file(path),
    }
