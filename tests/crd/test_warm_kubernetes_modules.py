"""hack/warm_modules.py, as the molecule scenarios run: kubernetes.core modules forked from a
warm-start server that has the kubernetes client imported give what a cold run gives, against a
real API server, and a module whose payload is not the installed collection runs cold."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_warm_start import (
    collection_payload_installed,
    runs_said,
)

ROOT = Path(__file__).resolve().parents[2]
WARM_MODULES = ROOT / "hack" / "warm_modules.py"
MODULE_PYTHON = ROOT / "bin" / "module-python"


def installed_kubernetes_core() -> Path:
    import ansible_collections.kubernetes.core as collection

    return Path(collection.__path__[0])


def ansible(
    kube_api, tmp_path, module: str, args: dict, *, warm: bool, env=None
) -> tuple[dict, str]:
    """One ad-hoc run of ``module``; its result and what the run (and its server) said."""
    interpreter = MODULE_PYTHON if warm else Path(sys.executable)
    command = [
        str(Path(sys.executable).parent / "ansible"),
        "localhost",
        "-m",
        module,
        "-a",
        json.dumps(args),
        "-e",
        f"ansible_python_interpreter={interpreter}",
    ]
    if env:  # only ansible's, not the server's
        command = ["env", *(f"{k}={v}" for k, v in env.items()), *command]
    if warm:
        command = [sys.executable, str(WARM_MODULES), *command]
    result = subprocess.run(
        command,
        cwd=tmp_path,
        env=dict(
            os.environ,
            PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
            ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
            ANSIBLE_STDOUT_CALLBACK="json",
            ANSIBLE_LOCALHOST_WARNING="0",
            K8S_AUTH_KUBECONFIG=str(kube_api.kubeconfig),
            QK_WARM_START="1",
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = json.loads(result.stdout)
    (task,) = output["plays"][0]["tasks"]
    return task["hosts"]["localhost"], result.stderr


def modules_the_server_ran(said: str) -> int:
    (runs,) = runs_said(said)
    return runs


def comparable(result: dict) -> dict:
    """A result without what differs from one run to the next."""
    return {k: v for k, v in result.items() if k not in ("_ansible_no_log", "invocation")}


def test_kubernetes_core_modules_run_warm_and_report_what_they_report_cold(
    kube_api, namespace, tmp_path
):
    kube_api.kubectl("-n", namespace, "create", "configmap", "read-me", "--from-literal=k=v")
    read = {"kind": "ConfigMap", "namespace": namespace, "name": "read-me"}
    cold, _ = ansible(kube_api, tmp_path, "kubernetes.core.k8s_info", read, warm=False)
    warm, said = ansible(kube_api, tmp_path, "kubernetes.core.k8s_info", read, warm=True)
    assert cold["resources"][0]["data"] == {"k": "v"}
    assert comparable(warm) == comparable(cold)
    assert "preloaded modules" in said and modules_the_server_ran(said) == 1

    written = {}
    for how in ("cold", "warm"):
        definition = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "written", "namespace": namespace},
            "data": {"by": "the module"},
        }
        written[how], _ = ansible(
            kube_api,
            tmp_path,
            "kubernetes.core.k8s",
            {"definition": definition},
            warm=how == "warm",
        )
    assert written["cold"]["changed"] is True  # created
    assert written["warm"]["changed"] is False  # found as it should be
    assert written["warm"]["result"]["data"] == {"by": "the module"}

    missing = {"kind": "NoSuchKind", "namespace": namespace}
    cold, _ = ansible(kube_api, tmp_path, "kubernetes.core.k8s_info", missing, warm=False)
    warm, said = ansible(kube_api, tmp_path, "kubernetes.core.k8s_info", missing, warm=True)
    assert cold.get("failed") is True or cold["resources"] == []
    assert comparable(warm) == comparable(cold)
    assert modules_the_server_ran(said) == 1


def test_a_module_whose_payload_is_not_the_installed_collection_runs_cold(kube_api, tmp_path):
    """ansible builds the module from another copy of kubernetes.core than the server imported:
    the server's fork must not run its own copy in its place."""
    collections = tmp_path / "collections"
    copy = collections / "ansible_collections" / "kubernetes" / "core"
    shutil.copytree(installed_kubernetes_core(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "plugins" / "modules" / "k8s_info.py").write_text(
        "from ansible.module_utils.basic import AnsibleModule\n"
        "from ansible_collections.kubernetes.core.plugins.module_utils.version import (\n"
        "    LooseVersion,\n"
        ")\n"
        "module = AnsibleModule(argument_spec={'kind': {}}, supports_check_mode=True)\n"
        "module.exit_json(changed=False, ran='the copy', loose=str(LooseVersion('1.2')))\n"
    )
    args = {"kind": "ConfigMap"}
    env = {"ANSIBLE_COLLECTIONS_PATH": str(collections)}
    result, said = ansible(kube_api, tmp_path, "kubernetes.core.k8s_info", args, warm=True, env=env)
    assert result.get("ran") == "the copy", result
    assert result["loose"] == "1.2"
    assert modules_the_server_ran(said) == 1  # taken, then run cold


@pytest.mark.parametrize("edit", ["module", "module utility"])
def test_a_payload_is_the_installed_collection_only_when_every_file_it_carries_is(tmp_path, edit):
    import zipfile

    installed = installed_kubernetes_core()
    carried = {
        "plugins/modules/k8s_info.py": (installed / "plugins/modules/k8s_info.py").read_bytes(),
        "plugins/module_utils/version.py": (
            installed / "plugins/module_utils/version.py"
        ).read_bytes(),
        "plugins/__init__.py": b"",  # AnsiballZ's own
    }
    payload = tmp_path / "payload.zip"

    def write(files: dict) -> None:
        with zipfile.ZipFile(payload, "w") as archive:
            archive.writestr("ansible/__init__.py", b"")
            for name, data in files.items():
                archive.writestr(f"ansible_collections/kubernetes/core/{name}", data)

    package = "ansible_collections.kubernetes.core.plugins.modules"
    write(carried)
    assert collection_payload_installed(str(payload), package)
    changed = {
        "module": "plugins/modules/k8s_info.py",
        "module utility": "plugins/module_utils/version.py",
    }[edit]
    write({**carried, changed: carried[changed] + b"\n# another copy\n"})
    assert not collection_payload_installed(str(payload), package)
    write({**carried, "plugins/module_utils/not_installed.py": b"x = 1\n"})
    assert not collection_payload_installed(str(payload), package)
