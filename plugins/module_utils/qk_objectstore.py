# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Where snapshots go: object URLs, their templates, and streamed uploads to S3 and GCS.

An object URL is ``s3://bucket/key`` (AWS), ``s3://bucket/key?endpoint=http://host:port&region=r``
(an S3-compatible store such as MinIO), or ``gs://bucket/key``. Uploads take an iterable of
chunks and never hold the whole object: S3 through a multipart upload, GCS through a resumable
one. The SHA-256 of the bytes is computed on the way. An upload that fails leaves no object that
looks complete: on S3 the parts go to a temporary key that is copied to the final key (with the
SHA-256 as metadata) only once every byte is stored, and the multipart upload is aborted on
failure; on GCS the object appears only when the resumable upload is finalized.

The parsing and rendering functions are pure and unit tested; the upload functions are tested
against real S3 and GCS servers (moto, fake-gcs-server).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import urllib.parse
import uuid
from typing import NamedTuple

try:
    import boto3
    import botocore.config
    import botocore.exceptions

    HAS_BOTO3 = True
except ImportError:  # pragma: no cover - exercised only on a broken install
    HAS_BOTO3 = False

try:
    from google.api_core import exceptions as gcs_exceptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs
    from google.oauth2 import service_account

    HAS_GCS = True
except ImportError:  # pragma: no cover - exercised only on a broken install
    HAS_GCS = False

# S3 parts must be at least 5 MiB (but the last); 8 MiB keeps memory small and requests few.
PART_SIZE = 8 * 1024 * 1024
SHA256_METADATA_KEY = "sha256"
TEMPLATE_FIELDS = ("UID", "Namespace", "ClusterName", "Timestamp", "Name")
_FIELD = re.compile(r"{{\s*\.([A-Za-z]+)\s*}}")
_QUERY_KEYS = {"s3": {"endpoint", "region"}, "gs": {"endpoint"}}
# Secret keys, as the AWS CLI and Google's tools name them.
AWS_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION")
GCS_KEY = "service-account.json"


class ObjectStoreError(Exception):
    """A destination that cannot be used, or an upload that failed; the message says why."""


class ObjectLocation(NamedTuple):
    scheme: str  # "s3" or "gs"
    bucket: str
    key: str
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
        raise ObjectStoreError(f"{url!r}: the scheme must be s3:// or gs://")
    bucket, key = parsed.netloc, parsed.path.lstrip("/")
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


class DigestingReader:
    """Counts and hashes the chunks of a stream while passing them on."""

    def __init__(self, chunks):
        self.chunks, self.size, self._sha256 = chunks, 0, hashlib.sha256()

    def __iter__(self):
        for chunk in self.chunks:
            self.size += len(chunk)
            self._sha256.update(chunk)
            yield chunk

    @property
    def sha256(self):
        return self._sha256.hexdigest()


def _parts(chunks, size):
    """Regroup a stream of chunks of any size into parts of ``size`` bytes (the last smaller)."""
    buffer = bytearray()
    for chunk in chunks:
        buffer += chunk
        while len(buffer) >= size:
            yield bytes(buffer[:size])
            del buffer[:size]
    if buffer:
        yield bytes(buffer)


# --------------------------------------------------------------------------------------------
# S3
# --------------------------------------------------------------------------------------------


def s3_client(location, credentials):
    """A boto3 S3 client for ``location``; ``credentials`` holds the AWS_* keys of a Secret."""
    if not HAS_BOTO3:
        raise ObjectStoreError("boto3 is required for s3:// destinations")
    credentials = credentials or {}
    config = botocore.config.Config(
        retries={"max_attempts": 3, "mode": "standard"},
        # Path-style addressing works with every S3-compatible store (MinIO, moto).
        s3={"addressing_style": "path"} if location.endpoint else None,
    )
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


def upload_s3(client, location, chunks, metadata=None, part_size=PART_SIZE):
    """Stream ``chunks`` to ``location``; returns ``{"size", "sha256"}``."""
    reader = DigestingReader(chunks)
    staging = f"{location.key}.partial-{uuid.uuid4().hex[:12]}"
    where = f"s3://{location.bucket}/{staging}"
    try:
        upload_id = client.create_multipart_upload(Bucket=location.bucket, Key=staging)["UploadId"]
    except Exception as exc:  # noqa: BLE001 - reported with the store's own words
        raise _s3_error(exc, f"cannot start an upload to s3://{location.bucket}") from exc
    parts = []
    try:
        for number, body in enumerate(_parts(reader, part_size), start=1):
            etag = client.upload_part(
                Bucket=location.bucket,
                Key=staging,
                UploadId=upload_id,
                PartNumber=number,
                Body=body,
            )["ETag"]
            parts.append({"ETag": etag, "PartNumber": number})
        if not parts:
            raise ObjectStoreError("the snapshot stream was empty")
        client.complete_multipart_upload(
            Bucket=location.bucket,
            Key=staging,
            UploadId=upload_id,
            MultipartUpload={"Parts": parts},
        )
    except BaseException as exc:
        # The original failure is what matters, not one of the clean-up.
        with contextlib.suppress(Exception):
            client.abort_multipart_upload(Bucket=location.bucket, Key=staging, UploadId=upload_id)
        store_errors = (
            ObjectStoreError,
            botocore.exceptions.BotoCoreError,
            botocore.exceptions.ClientError,
        )
        if isinstance(exc, store_errors):
            raise _s3_error(exc, f"upload to {where} failed") from exc
        raise
    try:
        # The final key appears only now, whole, with its checksum.
        client.copy(
            {"Bucket": location.bucket, "Key": staging},
            location.bucket,
            location.key,
            ExtraArgs={
                "Metadata": {**(metadata or {}), SHA256_METADATA_KEY: reader.sha256},
                "MetadataDirective": "REPLACE",
            },
        )
    except Exception as exc:  # noqa: BLE001 - reported with the store's own words
        raise _s3_error(exc, f"cannot commit {where} to {location.url}") from exc
    finally:
        with contextlib.suppress(Exception):  # a leftover staging object is harmless
            client.delete_object(Bucket=location.bucket, Key=staging)
    return {"size": reader.size, "sha256": reader.sha256}


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
            project="quorumkeeper", credentials=AnonymousCredentials(), client_options=options
        )
    return gcs.Client(client_options=options)  # the environment's default credentials


def upload_gcs(client, location, chunks, metadata=None, part_size=PART_SIZE):
    """Stream ``chunks`` to ``location`` with a resumable upload; returns ``{"size", "sha256"}``."""
    reader = DigestingReader(chunks)
    blob = client.bucket(location.bucket).blob(location.key, chunk_size=part_size)
    try:
        # Only close() finalizes the resumable upload: on any failure before it, the session
        # expires unfinished and no object appears.
        writer = blob.open("wb", ignore_flush=True)
        for chunk in reader:
            writer.write(chunk)
        if reader.size == 0:
            raise ObjectStoreError("the snapshot stream was empty")
        writer.close()
        blob.metadata = {**(metadata or {}), SHA256_METADATA_KEY: reader.sha256}
        blob.patch()
    except gcs_exceptions.GoogleAPICallError as exc:
        raise ObjectStoreError(f"upload to {location.url} failed: {exc.message}") from exc
    return {"size": reader.size, "sha256": reader.sha256}


def upload(location, chunks, credentials=None, metadata=None):
    """Stream ``chunks`` to the store of ``location``; ``credentials`` is the Secret's data."""
    credentials = credentials or {}
    if location.scheme == "s3":
        return upload_s3(s3_client(location, credentials), location, chunks, metadata)
    return upload_gcs(gcs_client(location, credentials.get(GCS_KEY)), location, chunks, metadata)
