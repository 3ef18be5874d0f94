# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""What every object store's transfers share (qk_objectstore and its stores: qk_objectstore_s3,
qk_objectstore_gcs, qk_objectstore_pvc).

``ObjectStoreError`` and ``ChecksumMismatch``; ``send_parts``, which regroups a stream of chunks
into parts sent a few at a time in a few reused buffers while the next is received, hashing on
the way; ``DigestingWriter``, which counts and hashes what is read back; where an object's
SHA-256 is recorded; and ``DeferredModule``, which imports a store's client library on first
use. Standard library only: this file must stay importable, and runnable in helper pods, without
Ansible.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import importlib
import importlib.util
import io
import queue
import threading


class DeferredModule:
    """A module imported when one of its attributes is first used (a submodule too: the
    deferred ``botocore``'s ``exceptions`` is ``botocore.exceptions``). boto3 and
    google-cloud-storage take a fifth of a second of CPU to import, which every reconcile of an
    EtcdBackup or EtcdBackupSchedule paid though most touch only one store, or none."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        module = importlib.import_module(self._name)
        try:
            return getattr(module, attr)
        except AttributeError:
            return importlib.import_module(f"{self._name}.{attr}")


def is_installed(name):
    """Whether the module ``name`` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # pragma: no cover - a parent package that is broken
        return False


# Parts sent at once while the next one is received, and their size. The module's memory grows
# by (UPLOAD_WORKERS + 1) x PART_SIZE buffers: 24 MiB. Three in flight keep a store with slow
# single requests (AWS) busy; more do not help against a local one (MinIO on two cores: receiving,
# hashing and sending share the CPU). S3 parts are at least 5 MiB (but the last) and at most
# 10,000: 6 MiB parts hold a 58 GiB snapshot, far beyond etcd's 8 GiB suggested maximum.
# GCS chunks are multiples of 256 KiB.
PART_SIZE = 6 * 1024 * 1024
UPLOAD_WORKERS = 3
# Where the SHA-256 is recorded: S3 objects carry it as a tag (or, on stores without tagging, in
# a sidecar object); GCS objects and S3 objects uploaded before tags, in their metadata.
SHA256_METADATA_KEY = "sha256"
SHA256_TAG_KEY = "sha256"
SHA256_SIDECAR_SUFFIX = ".sha256"
# How much of an object is read back at a time.
DOWNLOAD_CHUNK = 1024 * 1024


class ObjectStoreError(Exception):
    """A destination that cannot be used, or an upload that failed; the message says why."""


class ChecksumMismatch(ObjectStoreError):
    """The bytes read back are not the bytes that were stored."""


def sidecar_key(key):
    """Where the SHA-256 of ``key`` is stored on a store without object tagging."""
    return key + SHA256_SIDECAR_SUFFIX


def send_parts(chunks, send, part_size=PART_SIZE, workers=UPLOAD_WORKERS):
    """Regroup a stream of chunks of any size into parts of ``part_size`` bytes (the last
    smaller) and call ``send(number, buffer, length)`` for each, numbered from 1, on ``workers``
    threads while the next parts are received: receiving overlaps sending. The part is the first
    ``length`` bytes of ``buffer``, a bytearray of ``part_size`` bytes that is reused once
    ``send`` returns. With one worker the parts are sent in order.

    Memory stays bounded whatever the stream's size: at most ``workers + 1`` buffers exist (one
    filling, the others being sent), allocated once and reused, so that the heap is not
    fragmented by one new part-sized block per part. When all are busy, receiving waits.

    Returns ``{"size", "sha256", "parts"}`` (the SHA-256 of the stream, computed on the way).
    The first failure, of the stream or of a ``send``, is raised only once every ``send`` that
    started has ended, so that what the caller does next (abort the upload) comes after the
    last part; the parts not started yet are not sent."""
    digest, size, number = hashlib.sha256(), 0, 0
    free, created, failures = queue.SimpleQueue(), 0, []
    stop = threading.Event()
    pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="qk-upload")

    def run(number, buffer, length):
        try:
            if not stop.is_set():
                send(number, buffer, length)
        except BaseException as exc:  # noqa: BLE001 - handed to the receiving thread
            failures.append(exc)
            stop.set()
        finally:
            free.put(buffer)

    def take():
        nonlocal created
        if not failures and free.empty() and created <= workers:
            created += 1
            return bytearray(part_size)
        buffer = free.get()  # a send that fails gives its buffer back too: no deadlock
        if failures:
            raise failures[0]
        return buffer

    futures = []
    buffer, filled = None, 0
    try:
        for chunk in chunks:
            digest.update(chunk)
            size += len(chunk)
            view = memoryview(chunk)
            while view:
                if buffer is None:
                    buffer, filled = take(), 0
                n = min(len(view), part_size - filled)
                buffer[filled : filled + n] = view[:n]  # a copy into place, no resize
                filled, view = filled + n, view[n:]
                if filled == part_size:
                    number += 1
                    futures.append(pool.submit(run, number, buffer, filled))
                    buffer = None
        if buffer is not None:
            # The last part is shorter: shrinking its buffer (not reused any more) lets it be
            # sent as it is rather than copied to its size.
            with contextlib.suppress(BufferError):
                del buffer[filled:]
            number += 1
            futures.append(pool.submit(run, number, buffer, filled))
            buffer = None
        concurrent.futures.wait(futures)
        if failures:
            raise failures[0]
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return {"size": size, "sha256": digest.hexdigest(), "parts": number}


class DigestingWriter:
    """Passes writes on to a binary file object, counting and hashing them.

    Not seekable on purpose: a client that rewound to retry would make the hash describe other
    bytes than the file holds, so such a download fails instead of passing a wrong check."""

    def __init__(self, fileobj):
        self.fileobj, self.size, self._sha256 = fileobj, 0, hashlib.sha256()

    def write(self, data):
        self.size += len(data)
        self._sha256.update(data)
        self.fileobj.write(data)
        return len(data)

    def tell(self):
        return self.size

    def seekable(self):
        return False

    def seek(self, *args):
        raise io.UnsupportedOperation("a snapshot download cannot rewind")

    def flush(self):
        self.fileobj.flush()

    @property
    def sha256(self):
        return self._sha256.hexdigest()
