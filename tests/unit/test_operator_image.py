"""`make deploy` on the local cluster runs what the Dockerfile builds: the same files at the same
places under /opt/ansible, the same Ansible environment, the same ansible-operator.

The local cluster has no image builder: hack/cluster/localcluster.py copies the files into a
directory the operator image's pods mount (build_operator_image) and names the environment in
its image map. Both are compared here with the Dockerfile, without a cluster.
"""

from __future__ import annotations

import filecmp
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack" / "cluster"))
sys.path.insert(0, str(REPO / "hack" / "toolchain"))

import install  # noqa: E402
import localcluster  # noqa: E402

HOME = "/opt/ansible"  # the ansible-operator base image's HOME, where ${HOME} points
# Installed into the image's Python rather than read at run time; the local image's Python is
# the toolchain venv, built from the same file (requirements-dev.txt includes it).
INSTALLED_NOT_RUN = {"requirements.txt"}


def dockerfile() -> tuple[str, list[tuple[str, str]], dict[str, str]]:
    """FROM image, COPY (source, destination) pairs and ENV of the Dockerfile."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    (base,) = [ln.split()[1] for ln in lines if ln.startswith("FROM ")]
    copies = [tuple(ln.split()[1:]) for ln in lines if ln.startswith("COPY ")]
    env = {}
    for ln in (ln for ln in lines if ln.startswith("ENV ")):
        env.update(dict(pair.split("=", 1) for pair in ln.split()[1:]))
    return base, copies, env


def image_relative(destination: str) -> str:
    assert destination.startswith("${HOME}/"), destination
    return destination.removeprefix("${HOME}/").rstrip("/")


def operator_entry(tmp_path: Path) -> dict:
    tools = localcluster.toolchain()
    images = localcluster.image_map(tools, tmp_path / "opt-ansible", tmp_path / "entrypoint.sh")
    (entry,) = [i for i in images["images"] if i["image"] == localcluster.OPERATOR_IMAGE]
    return entry


def test_local_image_holds_exactly_what_the_dockerfile_copies(tmp_path):
    _, copies, _ = dockerfile()
    cluster = localcluster.LocalCluster(layout=localcluster.Layout(state=tmp_path))
    # `up` writes the image map (and so this directory) before any deploy.
    (tmp_path / "images/operator/opt-ansible").mkdir(parents=True)
    root = cluster.build_operator_image()
    expected = {image_relative(dst): src for src, dst in copies if src not in INSTALLED_NOT_RUN}
    held = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert {top for top in (Path(r).parts[0] for r in held)} == {Path(r).parts[0] for r in expected}
    assert [r for r in held if not any(r == e or r.startswith(e + "/") for e in expected)] == []
    for relative, source in expected.items():
        src, dst = REPO / source, root / relative
        if src.is_dir():
            compare = filecmp.dircmp(src, dst, ignore=["__pycache__"])
            pending = [compare]
            while pending:
                c = pending.pop()
                assert not (c.left_only or c.right_only or c.diff_files or c.funny_files), (
                    relative,
                    c.left_only,
                    c.right_only,
                    c.diff_files,
                )
                pending.extend(c.subdirs.values())
        else:
            assert filecmp.cmp(src, dst, shallow=False), relative


def test_local_image_runs_with_the_dockerfile_environment(tmp_path):
    _, _, env = dockerfile()
    entry = operator_entry(tmp_path)
    assert entry["env"]["HOME"] == HOME
    assert entry["binds"]["/opt/ansible"] == str(tmp_path / "opt-ansible")
    manager = [
        d
        for d in yaml.safe_load_all((REPO / "config/manager/manager.yaml").read_text())
        if d and d["kind"] == "Deployment"
    ][0]
    container = manager["spec"]["template"]["spec"]["containers"][0]
    deployment_env = {e["name"]: e.get("value") for e in container["env"]}
    for name, value in env.items():
        # A variable the image sets, the pod may set again (the same value), as for
        # ETCD_REPOSITORY, which config/manager names for the users who change it.
        got = entry["env"].get(name, deployment_env.get(name))
        value = value.replace("${HOME}", HOME)
        if name == "PATH":
            # Prepended to the base image's PATH; the local image's continues with the
            # toolchain's Python (the base image's is its system Python).
            prepended = value.removesuffix("${PATH}")
            assert value.endswith(":${PATH}") and got.startswith(prepended), (value, got)
            continue
        assert got == value, f"{name}: the Dockerfile sets {value!r}, the local image {got!r}"


def test_local_image_runs_the_dockerfile_base_ansible_operator(tmp_path):
    base, _, _ = dockerfile()
    repository, tag = base.rsplit(":", 1)
    assert repository == "quay.io/operator-framework/ansible-operator"
    wrapper = install.TOOLCHAIN / "ansible-operator"
    assert tag == install.module_version(
        wrapper, "github.com/operator-framework/ansible-operator-plugins"
    )
    entry = operator_entry(tmp_path)
    binary = Path(entry["binds"]["/usr/local/bin/ansible-operator"])
    assert binary.parent.name == f"ansible-operator-{tag}"
    assert entry["entrypoint"][:2] == ["/usr/local/bin/ansible-operator", "run"]
    assert f"--watches-file={HOME}/watches.yaml" in entry["entrypoint"]
