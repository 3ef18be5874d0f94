# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""gs:// objects (Google Cloud Storage, or a fake-gcs-server): google-cloud-storage uploads,
downloads, stat and delete.

An upload is a resumable one, one part at a time while the next is received (``send_parts``):
the object appears only when it is finalized, and the upload is cancelled on failure. Its
SHA-256, known only then, is added to its ``sha256`` metadata by a patch (no copy); an object
whose patch fails is deleted: a failed upload leaves nothing. google-cloud-storage is imported
on first use (``DeferredModule``). Tested against a real GCS server (fake-gcs-server).
"""

from __future__ import annotations

import contextlib
import json

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore_transfer import (
    PART_SIZE,
    SHA256_METADATA_KEY,
    DeferredModule,
    DigestingWriter,
    ObjectStoreError,
    is_installed,
    send_parts,
)

HAS_GCS = is_installed("google.cloud.storage")
gcs = DeferredModule("google.cloud.storage")
gcs_exceptions = DeferredModule("google.api_core.exceptions")
google_credentials = DeferredModule("google.auth.credentials")
service_account = DeferredModule("google.oauth2.service_account")
# The Secret key of a service account's credentials, as Google's tools name it.
GCS_KEY = "service-account.json"


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


def stat_gcs(client, location):
    """``{"exists", "size", "sha256"}`` of the object (sha256: the one recorded at upload)."""
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


def delete_gcs(client, location):
    """Delete the object; see ``qk_objectstore.delete``."""
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
