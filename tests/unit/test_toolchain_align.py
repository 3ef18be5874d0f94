"""The toolchain's Go modules resolve one version of every dependency they share (align.py), so
that Go's build cache compiles a shared package once for all of them; and a Go build is stamped
with what it was built from, so that a raised dependency rebuilds it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack" / "toolchain"))

import align  # noqa: E402
import install  # noqa: E402


def test_versions_are_ordered_as_go_orders_them():
    ordered = [
        "v0.0.0-20210331224755-41bb18bfe9da",
        "v0.0.0-20241129210726-2c02b8208cf8",
        "v1.1.1",
        "v1.1.2-0.20180830191138-d8f796af33cc",
        "v1.1.2",
        "v1.36.12-0.20260120151049-f2248ac996af",
        "v1.36.12",
        "v2.0.0+incompatible",
        "v10.0.0",
    ]
    assert sorted(reversed(ordered), key=align.version_key) == ordered


def test_only_shared_modules_that_are_not_held_get_a_target():
    lists = {
        Path("a"): {"golang.org/x/sys": "v0.40.0", "k8s.io/api": "v0.33.9", "only.a/x": "v1.0.0"},
        Path("b"): {"golang.org/x/sys": "v0.45.0", "k8s.io/api": "v0.35.4"},
    }
    wanted = align.targets(lists)
    assert wanted == {
        Path("a"): {"golang.org/x/sys": "v0.45.0"},
        Path("b"): {"golang.org/x/sys": "v0.45.0"},
    }
    assert align.behind(lists[Path("a")], wanted[Path("a")]) == {"golang.org/x/sys": "v0.45.0"}


def test_kubernetes_own_modules_are_raised_within_one_kubernetes_minor_only():
    """klog one release apart made each wrapper of Kubernetes 1.35 compile k8s.io/api and
    client-go again; across minors they stay as each wrapper pins them."""
    minor_35 = {"k8s.io/apimachinery": "v0.35.4", "k8s.io/api": "v0.35.4"}
    lists = {
        Path("kubernetes"): {**minor_35, "k8s.io/klog/v2": "v2.130.1"},
        Path("nodeagent"): {
            **minor_35,
            "k8s.io/klog/v2": "v2.140.0",
            "github.com/virtual-kubelet/virtual-kubelet": "v1.13.0",
        },
        Path("operator"): {"k8s.io/apimachinery": "v0.33.9", "k8s.io/klog/v2": "v2.150.0"},
        Path("minio"): {"github.com/minio/minio": "v0.0.0-20260212201848-7aac2a2c5b7c"},
    }
    wanted = align.targets(lists)
    raises = {w: align.behind(lists[w], wanted[w]) for w in lists}
    assert raises == {
        Path("kubernetes"): {"k8s.io/klog/v2": "v2.140.0"},
        Path("nodeagent"): {},
        Path("operator"): {},
        Path("minio"): {},
    }
    assert "k8s.io/klog/v2" not in wanted[Path("operator")]


def test_a_build_stamp_changes_with_its_flags():
    targets = {"etcd": "go.etcd.io/etcd/server/v3"}
    assert install.build_digest(targets, "-s -w", "") == install.build_digest(targets, "-s -w", "")
    assert install.build_digest(targets, "-s -w", "") != install.build_digest(targets, "", "")
    assert install.build_digest(targets, "", "") != install.build_digest(targets, "", "json1")


def test_a_wrappers_programs_are_built_by_one_go_command_under_the_names_asked_for(tmp_path):
    wrapper = tmp_path / "wrapper"
    wrapper.mkdir()
    (wrapper / "go.mod").write_text("module example.com/wrapper\n\ngo 1.22\n")
    for directory in ("cmd/alpha", "tool/v2"):
        (wrapper / directory).mkdir(parents=True)
        (wrapper / directory / "main.go").write_text(
            f'package main\n\nfunc main() {{ println("{directory}") }}\n'
        )
    out = tmp_path / "bin"
    targets = {"first": "example.com/wrapper/cmd/alpha", "second": "example.com/wrapper/tool/v2"}
    install.go_build(wrapper, out, targets, "-s -w")
    assert sorted(p.name for p in out.iterdir()) == [install.COMPLETE, "first", "second"]
    for name, directory in (("first", "cmd/alpha"), ("second", "tool/v2")):
        ran = subprocess.run([out / name], capture_output=True, text=True, timeout=30)
        assert ran.stderr == f"{directory}\n"


# The check reads every wrapper's packages from the Go module cache, complete once the last Go
# step of the tests' part (OLM) is built.
@pytest.mark.toolchain("olm")
def test_the_wrapper_modules_are_aligned():
    install.manifest.component("olm")
    result = subprocess.run(
        [sys.executable, str(REPO / "hack" / "toolchain" / "align.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_etcd_under_test_keeps_the_dependencies_of_its_release():
    assert align.WRAPPERS and not [w for w in align.WRAPPERS if w.name.startswith("etcd-")]
    assert align.held("github.com/google/gnostic-models")  # moves with kube-openapi
