# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Where snapshots go: object URLs, their templates, and streamed uploads to S3 and GCS.

An object URL is ``s3://bucket/key`` (AWS), ``s3://bucket/key?endpoint=http://host:port&region=r``
(an S3-compatible store such as MinIO), ``gs://bucket/key``, or ``pvc://claim/path``: a file in a
PersistentVolumeClaim of the backup's namespace, for users without object storage. The operator
cannot mount arbitrary claims, so pvc:// files are only ever written, read and deleted by helper
pods that mount the claim at PVC_MOUNT and run this file as a script (``write``, ``fetch``,
``delete``; qk_pvcstore renders and runs those pods). Uploads take an iterable of
chunks and never hold the whole object: S3 through a multipart upload (a few parts sent at once
while the next is received), GCS through a resumable one; memory is a few reused part buffers.
The SHA-256 of the bytes is computed on the way and recorded with the object once it is
complete, without copying it: an S3 object's ``sha256`` tag (a ``<key>.sha256`` sidecar object on
stores without tagging; objects stored before tags carry it in their metadata), a GCS object's
``sha256`` metadata. An upload that fails leaves no object: a multipart upload is invisible until
completed and is aborted on failure, a resumable one appears only when finalized and is cancelled
on failure, and an object whose SHA-256 cannot be recorded is deleted.

Reading back (``download``, ``stat``, and the ``fetch`` command line that the verification and
restore helper pods run with the operator image) streams into a file and hashes on the way too.
This file must stay importable, and runnable as a script, without Ansible.

The parsing and rendering functions are pure and unit tested; the upload functions are tested
against real S3 and GCS servers (moto, fake-gcs-server).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import importlib
import importlib.util
import io
import json
import os
import queue
import re
import sys
import threading
import urllib.parse
from typing import NamedTuple


class _Deferred:
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


def _installed(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # pragma: no cover - a parent package that is broken
        return False


HAS_BOTO3 = _installed("boto3")
HAS_GCS = _installed("google.cloud.storage")
boto3 = _Deferred("boto3")
botocore = _Deferred("botocore")
gcs = _Deferred("google.cloud.storage")
gcs_exceptions = _Deferred("google.api_core.exceptions")
google_credentials = _Deferred("google.auth.credentials")
service_account = _Deferred("google.oauth2.service_account")

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
# Error codes of a store that does not implement object tagging, or credentials that may not tag.
_NO_TAGGING = {"NotImplemented", "501", "MethodNotAllowed", "405", "AccessDenied", "403"}
TEMPLATE_FIELDS = ("UID", "Namespace", "ClusterName", "Timestamp", "Name")
_FIELD = re.compile(r"{{\s*\.([A-Za-z]+)\s*}}")
_QUERY_KEYS = {"s3": {"endpoint", "region"}, "gs": {"endpoint"}, "pvc": set()}
# Where helper pods mount the claim of a pvc:// URL (qk_helper_pods.PVC_MOUNT); its path is
# relative to it. QK_CLAIM_MOUNT moves it, for the command line's tests outside a pod.
PVC_MOUNT = os.environ.get("QK_CLAIM_MOUNT") or "/var/run/quorumkeeper/claim"
# A PersistentVolumeClaim's name (DNS-1123 subdomain).
_CLAIM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
# Secret keys, as the AWS CLI and Google's tools name them.
AWS_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION")
GCS_KEY = "service-account.json"


class ObjectStoreError(Exception):
    """A destination that cannot be used, or an upload that failed; the message says why."""


class ObjectLocation(NamedTuple):
    scheme: str  # "s3", "gs" or "pvc"
    bucket: str  # pvc://: the claim
    key: str  # pvc://: the file's path in the claim
    endpoint: str | None
    region: str | None
    url: str


def render_object_url(template, fields):
    """Fill ``{{ .Field }}`` placeholders; an unknown field is an error, not an empty string."""
    unknown = sorted({m.group(1) for m in _FIELD.finditer(template)} - set(TEMPLATE_FIELDS))
    if unknown:
        raise ObjectStoreError(
            f"objectURLTemplate uses unknown field(s) {', '.join(unknown)}; "
            f"known: {', '.join('{{ .' + f + ' }}' for f in TEMPLATE_FIELDS)}"
        )
    return _FIELD.sub(lambda m: str(fields[m.group(1)]), template)


def parse_object_url(url):
    """An ``ObjectLocation``; raises ``ObjectStoreError`` with what is wrong with the URL."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in _QUERY_KEYS:
        raise ObjectStoreError(f"{url!r}: the scheme must be s3://, gs:// or pvc://")
    bucket, key = parsed.netloc, parsed.path.lstrip("/")
    if parsed.scheme == "pvc":
        _check_claim_path(url, bucket, key)
    if not bucket:
        raise ObjectStoreError(f"{url!r}: no bucket (expected {parsed.scheme}://bucket/key)")
    if not key or key.endswith("/"):
        raise ObjectStoreError(f"{url!r}: no object key after the bucket, or it ends with /")
    query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
    unknown = sorted(set(query) - _QUERY_KEYS[parsed.scheme])
    if unknown:
        raise ObjectStoreError(
            f"{url!r}: unknown query parameter(s) {', '.join(unknown)}; "
            f"{parsed.scheme}:// accepts {', '.join(sorted(_QUERY_KEYS[parsed.scheme]))}"
        )
    endpoint = (query.get("endpoint") or [None])[0] or None
    if endpoint and not endpoint.startswith(("http://", "https://")):
        raise ObjectStoreError(f"{url!r}: endpoint must be an http:// or https:// URL")
    region = (query.get("region") or [None])[0] or None
    return ObjectLocation(parsed.scheme, bucket, key, endpoint, region, url)


def _check_claim_path(url, claim, path):
    """A pvc:// URL names a claim and a file inside it, never a way out of it."""
    if not _CLAIM_NAME.match(claim):
        raise ObjectStoreError(
            f"{url!r}: {claim!r} is not a PersistentVolumeClaim name (expected "
            "pvc://claim/path/file, claim in lower case letters, digits, - and .)"
        )
    if not path or path.endswith("/"):
        raise ObjectStoreError(f"{url!r}: no file path after the claim, or it ends with /")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise ObjectStoreError(f"{url!r}: the path in the claim may not contain //, . or ..")
    if "?" in url or "#" in url:
        raise ObjectStoreError(f"{url!r}: pvc:// URLs take no query or fragment")


def claim_file(location, root=PVC_MOUNT):
    """The file of a pvc:// location where a helper pod mounts its claim."""
    return os.path.join(root, location.key)


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


# --------------------------------------------------------------------------------------------
# S3
# --------------------------------------------------------------------------------------------


def s3_client(location, credentials):
    """A boto3 S3 client for ``location``; ``credentials`` holds the AWS_* keys of a Secret."""
    if not HAS_BOTO3:
        raise ObjectStoreError("boto3 is required for s3:// destinations")
    credentials = credentials or {}
    s3_options = {
        # SigV4 would hash every part once more to sign it (botocore does so on http endpoints
        # unless told not to): a tenth of a backup's throughput on two cores
        # (bench/backup_local.py). The part's integrity is still checked by the store
        # (botocore's CRC32 checksum header), and the whole object's by our SHA-256, read back
        # by verification.
        "payload_signing_enabled": False,
    }
    if location.endpoint:
        # Path-style addressing works with every S3-compatible store (MinIO, moto).
        s3_options["addressing_style"] = "path"
    config = botocore.config.Config(retries={"max_attempts": 3, "mode": "standard"}, s3=s3_options)
    return boto3.session.Session().client(
        "s3",
        endpoint_url=location.endpoint,
        region_name=location.region or credentials.get("AWS_REGION") or "us-east-1",
        aws_access_key_id=credentials.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=credentials.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=credentials.get("AWS_SESSION_TOKEN"),
        config=config,
    )


def _s3_error(exc, what):
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        return ObjectStoreError(f"{what}: {error.get('Code')}: {error.get('Message')}")
    return ObjectStoreError(f"{what}: {exc}")


def _s3_code(exc):
    return str(exc.response.get("Error", {}).get("Code"))


def _s3_store_errors():
    """What a store (or botocore) raises, as opposed to a bug of ours or an interrupt."""
    if not HAS_BOTO3:
        return (ObjectStoreError,)
    return (ObjectStoreError, botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)


def upload_s3(client, location, chunks, metadata=None, part_size=PART_SIZE, workers=UPLOAD_WORKERS):
    """Stream ``chunks`` to ``location`` as a multipart upload of ``workers`` parts at a time;
    returns ``{"size", "sha256"}``.

    The parts go to the final key itself: a multipart upload is invisible until it is completed,
    and any failure before that aborts it, so no object appears. The SHA-256 is known only after
    the last byte, too late for the object's metadata (fixed when the upload starts; changing it
    afterwards is a server-side copy of the whole object): it is recorded next to the object by
    ``record_sha256_s3``. When that fails, the object is deleted: a failed upload leaves nothing.
    """
    bucket, key = location.bucket, location.key
    # An object's sha256 metadata is what the version before tags recorded: a caller's value
    # there would be taken for the checksum.
    extra = {k: v for k, v in (metadata or {}).items() if k != SHA256_METADATA_KEY}
    try:
        upload_id = client.create_multipart_upload(Bucket=bucket, Key=key, Metadata=extra)[
            "UploadId"
        ]
    except Exception as exc:  # noqa: BLE001 - reported with the store's own words
        raise _s3_error(exc, f"cannot start an upload to s3://{bucket}") from exc
    etags = {}

    def send(number, buffer, length):
        # A full part is sent from its buffer as it is; only the last one is copied, to its size.
        body = buffer if length == len(buffer) else bytes(memoryview(buffer)[:length])
        etags[number] = client.upload_part(
            Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
        )["ETag"]

    try:
        sent = send_parts(chunks, send, part_size, workers)
        if not sent["size"]:
            raise ObjectStoreError("the snapshot stream was empty")
        client.complete_multipart_upload(
            Bucket=bucket,
            Key=key,
            UploadId=upload_id,
            MultipartUpload={"Parts": [{"ETag": etags[n], "PartNumber": n} for n in sorted(etags)]},
        )
    except BaseException as exc:
        # The original failure is what matters, not one of the clean-up.
        with contextlib.suppress(Exception):
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        if isinstance(exc, _s3_store_errors()):
            raise _s3_error(exc, f"upload to {location.url} failed") from exc
        raise
    try:
        record_sha256_s3(client, location, sent["sha256"])
    except BaseException as exc:
        with contextlib.suppress(Exception):
            client.delete_object(Bucket=bucket, Key=key)
        if isinstance(exc, _s3_store_errors()):
            raise _s3_error(
                exc, f"cannot record the SHA-256 of {location.url}, so the object was deleted"
            ) from exc
        raise
    return {"size": sent["size"], "sha256": sent["sha256"]}


def sidecar_key(key):
    """Where the SHA-256 of ``key`` is stored on a store without object tagging."""
    return key + SHA256_SIDECAR_SUFFIX


def record_sha256_s3(client, location, sha256):
    """Record the SHA-256 of the object at ``location`` as its ``sha256`` tag (no copy of the
    object; the tag goes with it when it is deleted), or, where the store does not implement
    object tagging or the credentials may not tag, in a sidecar object ``<key>.sha256`` (what
    ``PutObject`` alone allows). Returns ``"tag"`` or ``"sidecar"``."""
    try:
        client.put_object_tagging(
            Bucket=location.bucket,
            Key=location.key,
            Tagging={"TagSet": [{"Key": SHA256_TAG_KEY, "Value": sha256}]},
        )
        return "tag"
    except botocore.exceptions.ClientError as exc:
        if _s3_code(exc) not in _NO_TAGGING:
            raise
    client.put_object(
        Bucket=location.bucket,
        Key=sidecar_key(location.key),
        Body=f"{sha256}\n".encode(),
        ContentType="text/plain",
    )
    return "sidecar"


def recorded_sha256_s3(client, location, metadata=None):
    """The SHA-256 recorded with the object at upload, or None: its ``sha256`` metadata (backups
    committed by a server-side copy, before tags; ``metadata`` is the object's, as just read),
    else its ``sha256`` tag, else its sidecar object. Raises the client's errors."""
    recorded = (metadata or {}).get(SHA256_METADATA_KEY)
    if recorded:
        return recorded
    try:
        tags = client.get_object_tagging(Bucket=location.bucket, Key=location.key)["TagSet"]
    except botocore.exceptions.ClientError as exc:
        if _s3_code(exc) not in _NO_TAGGING:
            raise
        tags = []
    for tag in tags:
        if tag.get("Key") == SHA256_TAG_KEY:
            return tag.get("Value")
    try:
        response = client.get_object(Bucket=location.bucket, Key=sidecar_key(location.key))
        # A sidecar is one line; more is not one and still must not pass as a match.
        text = response["Body"].read(256)
    except botocore.exceptions.ClientError as exc:
        if _s3_code(exc) in ("NoSuchKey", "404", "NotFound", *_NO_TAGGING):
            return None
        raise
    return text.decode("utf-8", "replace").strip().lower() or None


# --------------------------------------------------------------------------------------------
# GCS
# --------------------------------------------------------------------------------------------


def gcs_client(location, credentials_json=None):
    """A google-cloud-storage client; anonymous against an ``endpoint`` without credentials."""
    if not HAS_GCS:
        raise ObjectStoreError("google-cloud-storage is required for gs:// destinations")
    options = {"api_endpoint": location.endpoint} if location.endpoint else None
    if credentials_json:
        try:
            info = json.loads(credentials_json)
            creds = service_account.Credentials.from_service_account_info(info)
        except (ValueError, KeyError) as exc:
            raise ObjectStoreError(
                f"the {GCS_KEY} in the Secret is not a service account key: {exc}"
            ) from exc
        return gcs.Client(project=info.get("project_id"), credentials=creds, client_options=options)
    if location.endpoint:
        return gcs.Client(
            project="quorumkeeper",
            credentials=google_credentials.AnonymousCredentials(),
            client_options=options,
        )
    return gcs.Client(client_options=options)  # the environment's default credentials


def _abandon(writer):
    """Cancel an unfinished resumable upload for good. ``BlobWriter.close()`` uploads what the
    writer holds as the object's end, and IOBase calls it when the writer is garbage-collected:
    a failed upload would then finalize a truncated object. ``terminate()`` cancels the session
    and closes the buffer; should cancelling fail (the store unreachable), close must still never
    upload."""
    with contextlib.suppress(Exception):
        writer.terminate()
    if not writer.closed:
        writer.close = lambda: None


def upload_gcs(client, location, chunks, metadata=None, part_size=PART_SIZE):
    """Stream ``chunks`` to ``location`` with a resumable upload; returns ``{"size", "sha256"}``.

    A resumable upload takes its chunks in order, so one part is sent at a time, while the next
    one is received. The object appears only when the upload is finalized; its SHA-256, known only
    then, is added to its metadata by a patch (no copy). When the patch fails, the object is
    deleted: a failed upload leaves nothing."""
    extra = {k: v for k, v in (metadata or {}).items() if k != SHA256_METADATA_KEY}
    blob = client.bucket(location.bucket).blob(location.key, chunk_size=part_size)
    blob.metadata = extra or None
    writer = blob.open("wb", ignore_flush=True)

    def send(number, buffer, length):
        writer.write(memoryview(buffer)[:length])

    try:
        sent = send_parts(chunks, send, part_size, workers=1)
        if not sent["size"]:
            raise ObjectStoreError("the snapshot stream was empty")
        writer.close()  # finalizes the upload: the object appears, whole
    except BaseException as exc:
        _abandon(writer)
        if isinstance(exc, gcs_exceptions.GoogleAPICallError):
            raise ObjectStoreError(f"upload to {location.url} failed: {exc.message}") from exc
        raise
    try:
        blob.metadata = {**extra, SHA256_METADATA_KEY: sent["sha256"]}
        blob.patch()
    except BaseException as exc:
        with contextlib.suppress(Exception):
            blob.delete()
        if isinstance(exc, gcs_exceptions.GoogleAPICallError):
            raise ObjectStoreError(
                f"cannot record the SHA-256 of {location.url}, so the object was deleted: "
                f"{exc.message}"
            ) from exc
        raise
    return {"size": sent["size"], "sha256": sent["sha256"]}


# --------------------------------------------------------------------------------------------
# pvc://: files in a mounted claim (only in the helper pods that mount it at PVC_MOUNT)
# --------------------------------------------------------------------------------------------


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


def upload(location, chunks, credentials=None, metadata=None):
    """Stream ``chunks`` to the store of ``location``; ``credentials`` is the Secret's data."""
    credentials = credentials or {}
    if location.scheme == "pvc":
        return upload_file(location, chunks)
    if location.scheme == "s3":
        return upload_s3(s3_client(location, credentials), location, chunks, metadata)
    return upload_gcs(gcs_client(location, credentials.get(GCS_KEY)), location, chunks, metadata)


def delete(location, credentials=None):
    """Delete the object at ``location`` (what a schedule's retention prunes). An object or a
    bucket that is already gone is fine: afterwards the object does not exist either way.
    Raises ``ObjectStoreError`` with the store's words when the store refuses or cannot be
    reached, so that the caller keeps its record of the object."""
    credentials = credentials or {}
    if location.scheme == "pvc":
        return delete_file(location)
    if location.scheme == "s3":
        client = s3_client(location, credentials)
        try:
            client.delete_object(Bucket=location.bucket, Key=location.key)
        except botocore.exceptions.ClientError as exc:
            if _s3_code(exc) in ("NoSuchBucket", "NoSuchKey"):
                return
            raise _s3_error(exc, f"cannot delete {location.url}") from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise _s3_error(exc, f"cannot delete {location.url}") from exc
        # The object is gone; its sidecar (stores without tagging), if any, is only a leftover.
        with contextlib.suppress(Exception):
            client.delete_object(Bucket=location.bucket, Key=sidecar_key(location.key))
        return
    client = gcs_client(location, credentials.get(GCS_KEY))
    try:
        client.bucket(location.bucket).blob(location.key).delete()
    except gcs_exceptions.NotFound:
        return
    except gcs_exceptions.GoogleAPICallError as exc:
        raise ObjectStoreError(f"cannot delete {location.url}: {exc.message}") from exc
    except Exception as exc:  # noqa: BLE001 - transport and credential errors of the client
        raise ObjectStoreError(
            f"cannot delete {location.url}: {type(exc).__name__}: {exc}"
        ) from exc


# --------------------------------------------------------------------------------------------
# Read back: what the verification and restore helper pods run (see the CLI at the bottom)
# --------------------------------------------------------------------------------------------

DOWNLOAD_CHUNK = 1024 * 1024


class ChecksumMismatch(ObjectStoreError):
    """The bytes read back are not the bytes that were stored."""


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


def download_s3(client, location, fileobj, chunk_size=DOWNLOAD_CHUNK):
    """Stream the object into ``fileobj``; ``{"size", "sha256", "metadata_sha256"}`` (the
    SHA-256 recorded with it: ``recorded_sha256_s3``)."""
    try:
        response = client.get_object(Bucket=location.bucket, Key=location.key)
    except Exception as exc:  # noqa: BLE001 - reported with the store's own words
        raise _s3_error(exc, f"cannot read {location.url}") from exc
    writer = DigestingWriter(fileobj)
    try:
        for chunk in response["Body"].iter_chunks(chunk_size):
            writer.write(chunk)
    except botocore.exceptions.FlexibleChecksumError as exc:
        # The store's own checksum of the object (CRC32 and the like) already disagrees.
        raise ChecksumMismatch(
            f"sha256 mismatch: {location.url}: the bytes read back do not match the store's "
            f"own checksum of the object ({exc})"
        ) from exc
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise _s3_error(exc, f"reading {location.url} failed after {writer.size} bytes") from exc
    expected = response.get("ContentLength")
    if expected is not None and expected != writer.size:
        raise ObjectStoreError(
            f"reading {location.url} stopped after {writer.size} of {expected} bytes"
        )
    try:
        recorded = recorded_sha256_s3(client, location, response.get("Metadata"))
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise _s3_error(exc, f"cannot read the SHA-256 recorded with {location.url}") from exc
    return {"size": writer.size, "sha256": writer.sha256, "metadata_sha256": recorded}


def _gcs_missing(client, location):
    """Why ``location`` was not found: no bucket, or no object in it."""
    try:
        bucket_exists = client.lookup_bucket(location.bucket) is not None
    except gcs_exceptions.GoogleAPICallError:
        bucket_exists = True  # say what is sure: the object was not found
    if not bucket_exists:
        return ObjectStoreError(
            f"cannot read {location.url}: not found: the bucket {location.bucket} does not exist"
        )
    return ObjectStoreError(
        f"cannot read {location.url}: not found: no object {location.key} in bucket "
        f"{location.bucket}"
    )


def download_gcs(client, location, fileobj):
    """Stream the object into ``fileobj``; ``{"size", "sha256", "metadata_sha256"}``."""
    try:
        blob = client.bucket(location.bucket).get_blob(location.key)
    except gcs_exceptions.GoogleAPICallError as exc:
        raise ObjectStoreError(f"cannot read {location.url}: {exc.message}") from exc
    if blob is None:
        raise _gcs_missing(client, location)
    writer = DigestingWriter(fileobj)
    try:
        # raw_download: the bytes as stored (no decompressive transcoding); the generation pins
        # the download to the object whose metadata was just read.
        blob.download_to_file(writer, raw_download=True, if_generation_match=blob.generation)
    except gcs_exceptions.GoogleAPICallError as exc:
        raise ObjectStoreError(f"reading {location.url} failed: {exc.message}") from exc
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - transport and integrity errors of the client
        raise ObjectStoreError(
            f"reading {location.url} failed after {writer.size} bytes: {type(exc).__name__}: {exc}"
        ) from exc
    return {
        "size": writer.size,
        "sha256": writer.sha256,
        "metadata_sha256": (blob.metadata or {}).get(SHA256_METADATA_KEY),
    }


def download(location, fileobj, credentials=None):
    """Stream the object at ``location`` into the binary file object ``fileobj``, hashing on
    the way; ``{"size", "sha256", "metadata_sha256"}`` (the SHA-256 recorded at upload: an S3
    object's tag, sidecar or, before tags, metadata; a GCS object's metadata; or
    None). Raises ``ObjectStoreError`` with the store's words."""
    credentials = credentials or {}
    if location.scheme == "pvc":
        return download_file(location, fileobj)
    if location.scheme == "s3":
        return download_s3(s3_client(location, credentials), location, fileobj)
    return download_gcs(gcs_client(location, credentials.get(GCS_KEY)), location, fileobj)


def stat(location, credentials=None):
    """``{"exists", "size", "sha256"}`` of the object (sha256: the one recorded at upload, see
    ``download``, or None)."""
    credentials = credentials or {}
    if location.scheme == "pvc":
        path = _mounted_file(location, PVC_MOUNT)
        if not os.path.isfile(path):
            return {"exists": False, "size": None, "sha256": None}
        return {
            "exists": True,
            "size": os.path.getsize(path),
            "sha256": _recorded_sha256_file(path),
        }
    if location.scheme == "s3":
        client = s3_client(location, credentials)
        try:
            head = client.head_object(Bucket=location.bucket, Key=location.key)
        except botocore.exceptions.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code"))
            if code in ("404", "NoSuchKey", "NotFound"):
                return {"exists": False, "size": None, "sha256": None}
            raise _s3_error(exc, f"cannot stat {location.url}") from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise _s3_error(exc, f"cannot stat {location.url}") from exc
        try:
            recorded = recorded_sha256_s3(client, location, head.get("Metadata"))
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise _s3_error(exc, f"cannot stat {location.url}") from exc
        return {"exists": True, "size": head.get("ContentLength"), "sha256": recorded}
    client = gcs_client(location, credentials.get(GCS_KEY))
    try:
        blob = client.bucket(location.bucket).get_blob(location.key)
    except gcs_exceptions.GoogleAPICallError as exc:
        raise ObjectStoreError(f"cannot stat {location.url}: {exc.message}") from exc
    if blob is None:
        return {"exists": False, "size": None, "sha256": None}
    return {
        "exists": True,
        "size": blob.size,
        "sha256": (blob.metadata or {}).get(SHA256_METADATA_KEY),
    }


def read_credentials_dir(path):
    """A mounted Secret as credentials: each regular file is one key. None when there is no
    directory or no key in it (the store's defaults are used)."""
    if not path:
        return None
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        raise ObjectStoreError(f"cannot read the credentials in {path}: {exc.strerror}") from exc
    credentials = {}
    for name in names:
        full = os.path.join(path, name)
        # A Secret volume also holds ..data and ..<timestamp> entries (the atomic-update links).
        if name.startswith(".") or not os.path.isfile(full):
            continue
        with open(full, encoding="utf-8") as f:
            credentials[name] = f.read()
    return credentials or None


def fetch(url, dest, expected_sha256=None, credentials=None):
    """Download ``url`` to ``dest`` (through ``dest.partial``, renamed only when the bytes are
    right). The expected SHA-256 is ``expected_sha256``, else the one recorded with the object.
    ``{"size", "sha256"}``; raises ``ChecksumMismatch`` or ``ObjectStoreError``."""
    location = parse_object_url(url)
    partial = f"{dest}.partial"
    try:
        with open(partial, "wb") as f:
            result = download(location, f, credentials)
            f.flush()
            os.fsync(f.fileno())
        expected = (expected_sha256 or result["metadata_sha256"] or "").lower() or None
        if expected and expected != result["sha256"]:
            source = "expected" if expected_sha256 else "recorded with the object"
            raise ChecksumMismatch(
                f"sha256 mismatch: {location.url} holds {result['size']} bytes with sha256 "
                f"{result['sha256']}, {source}: {expected}; the stored object is not the "
                "snapshot that was uploaded"
            )
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    os.replace(partial, dest)
    return {"size": result["size"], "sha256": result["sha256"]}


def write_snapshot(url, endpoint, timeout=None, environ=None):
    """Stream a snapshot of the etcd member at ``endpoint`` to the pvc:// ``url`` (what the
    backup's writer pod runs); ``{"size", "sha256"}``. The pod is told how to connect (timeout
    of the etcd calls, TLS, credentials) by the profile in its environment (``environ``,
    default ``os.environ``; qk_connection.profile_env). The etcd client is imported here: the
    pods that only read or delete do not need it, and Ansible modules never call this."""
    location = parse_object_url(url)
    if location.scheme != "pvc":
        raise ObjectStoreError(f"{url!r}: write serves pvc:// URLs only (the operator uploads)")
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils import qk_etcd  # noqa: PLC0415
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (  # noqa: PLC0415
        etcd_client,
        profile_from_env,
    )

    with etcd_client(profile_from_env(endpoints=[endpoint], environ=environ)) as client:
        try:
            return upload_file(location, client.snapshot(endpoint, timeout=timeout))
        except (ObjectStoreError, OSError):
            raise
        except Exception as exc:  # noqa: BLE001 - etcd's gRPC errors, said in words
            raise ObjectStoreError(
                f"snapshot of {endpoint} failed: {qk_etcd.describe_error(exc)}"
            ) from exc


def main(argv=None):
    """``qk_objectstore.py fetch --url URL --dest PATH [--sha256 HEX] [--credentials-dir DIR]``:
    exit 0 with ``{"size", "sha256"}`` on stdout, 3 when the bytes do not match the SHA-256, 2
    for anything else (missing object, credentials, unreachable store), with why on stderr.

    ``write --url pvc://claim/path --endpoint URL`` streams a snapshot of that etcd member to
    the file, ``delete --url URL`` deletes an object or pvc:// file; both exit 0 (``write`` with
    ``{"size", "sha256"}`` on stdout) or 2 with why on stderr."""
    parser = argparse.ArgumentParser(
        prog="qk_objectstore.py", description="Read snapshots back from S3, GCS or a claim."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    fetch_cmd = commands.add_parser("fetch", help="download an object and check its SHA-256")
    fetch_cmd.add_argument("--url", required=True, help="s3://, gs:// or pvc:// object URL")
    fetch_cmd.add_argument("--dest", required=True, help="file to write")
    fetch_cmd.add_argument("--sha256", help="expected SHA-256 (default: the one recorded with it)")
    fetch_cmd.add_argument("--credentials-dir", help="a mounted Secret: one file per key")
    write_cmd = commands.add_parser("write", help="stream an etcd snapshot to a pvc:// file")
    write_cmd.add_argument("--url", required=True, help="pvc://claim/path")
    write_cmd.add_argument("--endpoint", required=True, help="client URL of the member")
    write_cmd.add_argument("--timeout", type=float, help="seconds the snapshot may take")
    delete_cmd = commands.add_parser("delete", help="delete an object or a pvc:// file")
    delete_cmd.add_argument("--url", required=True, help="s3://, gs:// or pvc:// object URL")
    delete_cmd.add_argument("--credentials-dir", help="a mounted Secret: one file per key")
    args = parser.parse_args(argv)
    try:
        if args.command == "write":
            result = write_snapshot(args.url, args.endpoint, args.timeout)
        elif args.command == "delete":
            delete(parse_object_url(args.url), read_credentials_dir(args.credentials_dir))
            result = {"deleted": args.url}
        else:
            credentials = read_credentials_dir(args.credentials_dir)
            result = fetch(args.url, args.dest, args.sha256, credentials)
    except ChecksumMismatch as exc:
        print(exc, file=sys.stderr)
        return 3
    except ObjectStoreError as exc:
        print(exc, file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"cannot {args.command} {args.url}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
