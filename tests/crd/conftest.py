"""Fixtures for the API and config tests.

`kube_api` (session): a real etcd + kube-apiserver on 127.0.0.1 (tests/crd/qk_apiserver.py)
with our CRDs applied and Established. Torn down at the end of the session.
`namespace`: a fresh namespace per test.
If the binaries are missing the API tests fail.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import qk_apiserver  # noqa: E402

ROOT = HERE.parent.parent
CRD_DIR = ROOT / "config" / "crd" / "bases"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def kube_api(tmp_path_factory):
    missing = qk_apiserver.missing_binaries()
    if missing:
        msg = "binaries for the local API server are missing: " + ", ".join(missing)
        pytest.fail(msg + " (run python3 hack/toolchain/install.py)")
    workdir = tmp_path_factory.mktemp("apiserver")
    with qk_apiserver.LocalAPIServer(workdir) as api:
        api.apply_crds([CRD_DIR])
        yield api


@pytest.fixture
def namespace(kube_api) -> str:
    name = "t-" + uuid.uuid4().hex[:10]
    kube_api.kubectl("create", "namespace", name)
    return name
