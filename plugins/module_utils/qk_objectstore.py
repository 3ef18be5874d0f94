# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Where snapshots go: object URLs, their templates, and the store that serves each URL.

An object URL is ``s3://bucket/key`` (AWS), ``s3://bucket/key?endpoint=http://host:port&region=r``
(an S3-compatible store such as MinIO), ``gs://bucket/key``, or ``pvc://claim/path``: a file in a
PersistentVolumeClaim of the backup's namespace, for users without object storage. The operator
cannot mount arbitrary claims, so pvc:// files are only ever written, read and deleted by helper
pods that mount the claim at PVC_MOUNT and run this module (``write``, ``fetch``, ``delete``;
qk_pvcstore renders and runs those pods).

``upload``, ``download``, ``stat`` and ``delete`` hand a location to its store: qk_objectstore_s3,
qk_objectstore_gcs or qk_objectstore_pvc, which share qk_objectstore_transfer (the errors, and
streaming in parts with the SHA-256 computed on the way). Uploads take an iterable of chunks
and never hold the whole object; the SHA-256 is recorded with the object once it is complete,
and an upload that fails leaves no object. Reading back (``download``, ``stat``, and the
``fetch`` command line that the verification and restore helper pods run with the operator
image) streams into a file and hashes on the way too. ``ObjectStoreError`` is imported from
here by the modules and planners that use object URLs.

This module and its stores must stay importable, and runnable as
``python3 -m ...qk_objectstore``, without Ansible. The parsing and rendering functions are
pure and unit tested; the stores are tested against real S3 and GCS servers (moto,
fake-gcs-server).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import urllib.parse
from typing import NamedTuple

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore_gcs import (
    GCS_KEY,
    delete_gcs,
    download_gcs,
    gcs_client,
    stat_gcs,
    upload_gcs,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore_pvc import (
    delete_file,
    download_file,
    stat_file,
    upload_file,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore_s3 import (
    delete_s3,
    download_s3,
    s3_client,
    stat_s3,
    upload_s3,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore_transfer import (
    ChecksumMismatch,
    ObjectStoreError,
)

TEMPLATE_FIELDS = ("UID", "Namespace", "ClusterName", "Timestamp", "Name")
_FIELD = re.compile(r"{{\s*\.([A-Za-z]+)\s*}}")
_QUERY_KEYS = {"s3": {"endpoint", "region"}, "gs": {"endpoint"}, "pvc": set()}
# A PersistentVolumeClaim's name (DNS-1123 subdomain).
_CLAIM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


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
        return delete_s3(s3_client(location, credentials), location)
    return delete_gcs(gcs_client(location, credentials.get(GCS_KEY)), location)


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
        return stat_file(location)
    if location.scheme == "s3":
        return stat_s3(s3_client(location, credentials), location)
    return stat_gcs(gcs_client(location, credentials.get(GCS_KEY)), location)


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
    ``{"size", "sha256"}``; raises ``ChecksumMismatch`` or ``ObjectStoreError``.

    The file is not synced to disk: it is a pod's scratch copy (an emptyDir), read by the
    pod's next container from the page cache and gone with the pod, and a node that crashes
    fails the pod anyway. Syncing 1 GiB took seconds per restore pod, three at a time."""
    location = parse_object_url(url)
    partial = f"{dest}.partial"
    try:
        with open(partial, "wb") as f:
            result = download(location, f, credentials)
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
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (  # noqa: PLC0415
        etcd_client,
        profile_from_env,
    )
    from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_etcd_errors import (  # noqa: PLC0415
        describe_error,
    )

    with etcd_client(profile_from_env(endpoints=[endpoint], environ=environ)) as client:
        try:
            return upload_file(location, client.snapshot(endpoint, timeout=timeout))
        except (ObjectStoreError, OSError):
            raise
        except Exception as exc:  # noqa: BLE001 - etcd's gRPC errors, said in words
            raise ObjectStoreError(f"snapshot of {endpoint} failed: {describe_error(exc)}") from exc


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
