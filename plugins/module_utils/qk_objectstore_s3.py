# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""s3:// objects (AWS, or an S3-compatible store such as MinIO): boto3 uploads, downloads,
stat and delete.

An upload is a multipart upload to the final key, a few parts at a time (``send_parts``): it is
invisible until completed and aborted on failure. The SHA-256, known only after the last byte,
is then recorded as the object's ``sha256`` tag (no copy of the object), or, on stores without
tagging, in a ``<key>.sha256`` sidecar object; objects stored before tags carry it in their
metadata. An object whose SHA-256 cannot be recorded is deleted: a failed upload leaves nothing.
boto3 is imported on first use (``DeferredModule``). Tested against real S3 servers (moto,
MinIO).
"""

from __future__ import annotations

import contextlib

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore_transfer import (
    DOWNLOAD_CHUNK,
    PART_SIZE,
    SHA256_METADATA_KEY,
    SHA256_TAG_KEY,
    UPLOAD_WORKERS,
    ChecksumMismatch,
    DeferredModule,
    DigestingWriter,
    ObjectStoreError,
    is_installed,
    send_parts,
    sidecar_key,
)

HAS_BOTO3 = is_installed("boto3")
boto3 = DeferredModule("boto3")
botocore = DeferredModule("botocore")

# Error codes of a store that does not implement object tagging, or credentials that may not tag.
_NO_TAGGING = {"NotImplemented", "501", "MethodNotAllowed", "405", "AccessDenied", "403"}
# Secret keys, as the AWS CLI names them.
AWS_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION")


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


def stat_s3(client, location):
    """``{"exists", "size", "sha256"}`` of the object (sha256: the one recorded at upload)."""
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


def delete_s3(client, location):
    """Delete the object and its sidecar, if any; see ``qk_objectstore.delete``."""
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
