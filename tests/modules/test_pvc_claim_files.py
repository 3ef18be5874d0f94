"""pvc:// destinations as the helper pods run them: ``qk_objectstore.py write`` streams a real
etcd member's snapshot into a directory standing for the mounted claim, ``fetch`` copies and
checks it as the verification and restore pods do, ``delete`` removes it; etcd's own tools
accept the file."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_connection import (
    ConnectionProfile,
    etcd_client,
)

import etcdharness

# As helper pods run it: a module of the collection, with the collections on PYTHONPATH.
CLI = ["-m", "ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_objectstore"]
COLLECTIONS = str(etcdharness.REPO / "collections")


def run(claim_root, *args):
    return subprocess.run(
        [sys.executable, *CLI, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": os.environ["PATH"],
            "PYTHONPATH": COLLECTIONS,
            "HOME": str(claim_root),
            "QK_CLAIM_MOUNT": str(claim_root),
        },
    )


def test_write_fetch_and_delete_a_snapshot_in_a_claim(etcd_factory, etcd_version, tmp_path):
    claim = tmp_path / "claim"
    claim.mkdir()
    cluster = etcd_factory(1)
    endpoint = cluster.running_endpoints()[0]
    with etcd_client(ConnectionProfile([endpoint], timeout=5)) as client:
        for i in range(25):
            client.put(f"/pvc/{i:03d}", f"value-{i}")
    url = "pvc://etcd-backups/c1/snap.db"

    res = run(claim, "write", "--url", url, "--endpoint", endpoint, "--timeout", "60")
    assert res.returncode == 0, res.stderr
    written = json.loads(res.stdout.strip().splitlines()[-1])
    data = (claim / "c1" / "snap.db").read_bytes()
    assert written == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert (claim / "c1" / "snap.db.sha256").read_text() == written["sha256"] + "\n"
    assert sorted(p.name for p in (claim / "c1").iterdir()) == ["snap.db", "snap.db.sha256"]
    assert etcdharness.snapshot_status(etcd_version, claim / "c1" / "snap.db")["totalKey"] >= 25

    dest = tmp_path / "fetched.db"
    res = run(claim, "fetch", "--url", url, "--dest", str(dest))
    assert res.returncode == 0, res.stderr
    assert dest.read_bytes() == data

    # A flipped bit in the claim: the SHA-256 recorded next to the file refuses it (exit 3).
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0xFF
    (claim / "c1" / "snap.db").write_bytes(bytes(damaged))
    res = run(claim, "fetch", "--url", url, "--dest", str(tmp_path / "bad.db"))
    assert res.returncode == 3, res.stderr
    assert res.stderr.startswith("sha256 mismatch: ")
    assert not (tmp_path / "bad.db").exists()

    res = run(claim, "delete", "--url", url)
    assert res.returncode == 0, res.stderr
    assert list((claim / "c1").iterdir()) == []
    assert run(claim, "delete", "--url", url).returncode == 0, "already gone is fine"
    res = run(claim, "fetch", "--url", url, "--dest", str(dest.with_suffix(".2")))
    assert res.returncode == 2
    assert "no file c1/snap.db in claim etcd-backups" in res.stderr


def test_a_failed_write_leaves_nothing_that_looks_complete(tmp_path):
    claim = tmp_path / "claim"
    claim.mkdir()
    url = "pvc://etcd-backups/snap.db"
    # Nothing listens there: the stream fails before the first byte.
    res = run(claim, "write", "--url", url, "--endpoint", "http://127.0.0.1:1", "--timeout", "5")
    assert res.returncode == 2
    assert "snapshot of http://127.0.0.1:1 failed" in res.stderr
    assert list(claim.iterdir()) == []


def test_an_unmounted_claim_is_said_as_such(tmp_path):
    res = run(tmp_path / "missing", "delete", "--url", "pvc://etcd-backups/snap.db")
    assert res.returncode == 2
    assert "the claim etcd-backups is not mounted" in res.stderr
