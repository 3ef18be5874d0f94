#!/usr/bin/env python3
"""Raise the dependencies the toolchain's Go modules share to one version each.

Go's build cache keys a compiled package by its source and by the exact versions of everything it
imports, so golang.org/x/net compiled for MinIO is compiled again for Prometheus when one of them
resolves x/sys one patch release apart, and with it every package above it. Across the wrapper
modules (hack/toolchain/*, the node agent, the soak checker) 242 of the 598 MB of Go source built
cold are the same package at the same version in several modules, and only 97 MB of it was
reused: the rest differed in something below it.

This script sets every module that two wrappers share to the highest version any of them
resolves, with `go get`, until nothing changes. The etcd wrappers are left as etcd releases
them. Held back: the module each wrapper exists to
build and the families whose minor versions change APIs (Kubernetes, controller-runtime,
operator-framework, etcd); a raise that would move a held module, or needs a newer Go, is left
out. Within one Kubernetes minor, though (the wrappers that resolve the same k8s.io/apimachinery),
Kubernetes' own modules are raised to one version as well: the API and client packages those
wrappers build are the same source, compiled again for each wrapper as long as one library below
them (klog, structured-merge-diff) is one release apart; k8s.io/api and client-go were 40% of the
Go source a cold toolchain compiled. Run it after changing a pin (then `make toolchain`, which
rebuilds what changed); tests/unit/test_toolchain_align.py fails while the wrappers are not
aligned.

Usage: python3 hack/toolchain/align.py [--check]
Stdlib only, like install.py.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from install import ROOT, TOOLCHAIN, run  # beside this file

# The etcd servers are what the operator is tested against, so they are built with the
# dependencies their release resolves, not raised ones: etcd 3.5 does not even compile against
# today's otelgrpc, and a raised grpc would be an etcd no user runs. They cost about 2 of the 31
# minutes a cold toolchain takes.
WRAPPERS = sorted(
    p.parent for p in TOOLCHAIN.glob("*/go.mod") if not p.parent.name.startswith("etcd-")
) + [
    ROOT / "hack" / "nodeagent",
    ROOT / "hack" / "soak" / "checker",
]
# Module path prefixes not raised to what other wrappers resolve: their minor versions change the
# APIs the wrappers' subjects are written against, and each wrapper pins its own (Kubernetes' own
# modules are raised within one Kubernetes minor only: FAMILY_PREFIXES).
HELD_PREFIXES = (
    "k8s.io/",
    "sigs.k8s.io/",
    # kube-openapi, held with Kubernetes, is written against one gnostic-models' YAML package
    # (0.6 uses gopkg.in/yaml.v3, 0.7 go.yaml.in/yaml/v3).
    "github.com/google/gnostic-models",
    "github.com/operator-framework/",
    "go.etcd.io/",
    "github.com/coredns/",
    "github.com/minio/minio",
    "github.com/prometheus/prometheus",
    "github.com/prometheus-operator/",
    "github.com/cert-manager/",
    "github.com/virtual-kubelet/",
)
# The tools.go files import the wrappers' commands under "tools"; the rest are install.py's tags.
BUILD_TAGS = "tools,json1,containers_image_openpgp,remove_all_sd,enable_kubernetes_sd"
# Resolving and raising never downloads another Go release.
GO_ENV = {"GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}

_SEMVER = re.compile(r"^v(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def version_key(version: str) -> tuple:
    """Semantic-version precedence (pseudo-versions are pre-releases, as Go orders them)."""
    match = _SEMVER.match(version)
    if not match:
        return ((-1,), ())
    major, minor, patch, pre = match.groups()
    release = (int(major), int(minor), int(patch))
    if pre is None:
        return (release, (1,))
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (release, (0, parts))


# Raised to one version among the wrappers of one Kubernetes minor, which FAMILY_MODULE's version
# names (Kubernetes' own modules: their APIs change from one minor to the next, not within one).
FAMILY_MODULE = "k8s.io/apimachinery"
FAMILY_PREFIXES = ("k8s.io/", "sigs.k8s.io/", "github.com/google/gnostic-models")


def held(module: str) -> bool:
    return module.startswith(HELD_PREFIXES)


def build_list(wrapper: Path) -> dict[str, str]:
    """module -> version, for the modules that supply a package the wrapper builds."""
    listed = run(
        [
            "go",
            "list",
            "-e",
            "-deps",
            "-tags",
            BUILD_TAGS,
            "-f",
            "{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}",
            "./...",
        ],
        cwd=wrapper,
        env=GO_ENV,
    )
    return dict(line.split(" ", 1) for line in sorted(set(listed.splitlines())) if line)


def targets(lists: dict[Path, dict[str, str]]) -> dict[Path, dict[str, str]]:
    """Per wrapper: every shared module it resolves -> the version to raise it to. A module that
    is not held: the highest version any wrapper resolves; one of Kubernetes' own
    (FAMILY_PREFIXES): the highest the wrappers of its Kubernetes minor resolve."""
    seen: dict[str, list[str]] = {}
    in_family: dict[tuple[str, str], list[str]] = {}
    for modules in lists.values():
        family = modules.get(FAMILY_MODULE)
        for module, version in modules.items():
            seen.setdefault(module, []).append(version)
            if family and module.startswith(FAMILY_PREFIXES):
                in_family.setdefault((family, module), []).append(version)
    shared = {
        module: max(versions, key=version_key)
        for module, versions in seen.items()
        if len(versions) > 1 and not held(module)
    }
    wanted: dict[Path, dict[str, str]] = {}
    for wrapper, modules in lists.items():
        family = modules.get(FAMILY_MODULE)
        wanted[wrapper] = {}
        for module in modules:
            in_minor = in_family.get((family, module), [])
            if len(in_minor) > 1:
                wanted[wrapper][module] = max(in_minor, key=version_key)
            elif module in shared:
                wanted[wrapper][module] = shared[module]
    return wanted


def behind(modules: dict[str, str], wanted: dict[str, str]) -> dict[str, str]:
    return {
        m: v for m, v in wanted.items() if m in modules and version_key(modules[m]) < version_key(v)
    }


def go_get(wrapper: Path, raises: dict[str, str]) -> bool:
    """Raise these modules in the wrapper; undo and say no if that moves another held module or
    fails."""
    saved = {name: (wrapper / name).read_bytes() for name in ("go.mod", "go.sum")}
    before = build_list(wrapper)
    args = [f"{module}@{version}" for module, version in sorted(raises.items())]
    result = subprocess.run(
        ["go", "get", *args], cwd=wrapper, env=dict(os.environ, **GO_ENV), capture_output=True
    )
    if result.returncode == 0:
        after = build_list(wrapper)
        if all(after.get(m) == raises.get(m, v) for m, v in before.items() if held(m)):
            return True
    for name, content in saved.items():
        (wrapper / name).write_bytes(content)
    return False


def raise_wrapper(wrapper: Path, raises: dict[str, str]) -> list[str]:
    """Raise what can be raised, all at once if possible, else one module at a time; return the
    modules left behind."""
    if go_get(wrapper, raises):
        return []
    left = []
    for module, version in sorted(raises.items()):
        if not go_get(wrapper, {module: version}):
            left.append(f"{module}@{version}")
    return left


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; fail if a wrapper can be raised"
    )
    args = parser.parse_args()
    for round_number in range(1, 8):
        lists = {wrapper: build_list(wrapper) for wrapper in WRAPPERS}
        wanted = targets(lists)
        todo = {w: r for w, modules in lists.items() if (r := behind(modules, wanted[w]))}
        if not todo:
            shared = len({m for modules in wanted.values() for m in modules})
            print(f"[align] aligned: {shared} shared modules", flush=True)
            return 0
        if args.check:
            for wrapper, raises in todo.items():
                names = ", ".join(f"{m} {lists[wrapper][m]} -> {v}" for m, v in raises.items())
                print(f"[align] {wrapper.relative_to(ROOT)}: {names}")
            print("[align] not aligned: run python3 hack/toolchain/align.py", flush=True)
            return 1
        left = []
        for wrapper, raises in todo.items():
            print(
                f"[align] round {round_number}: {wrapper.relative_to(ROOT)} raises "
                f"{len(raises)} modules",
                flush=True,
            )
            left += [f"{wrapper.relative_to(ROOT)}: {m}" for m in raise_wrapper(wrapper, raises)]
        if left:
            print(
                "[align] these cannot be raised (they would move a held module, need a newer Go "
                "or do not resolve); hold them in HELD_PREFIXES:\n  " + "\n  ".join(left)
            )
            return 1
    print("[align] still changing after 7 rounds", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
