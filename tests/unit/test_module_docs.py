"""The modules' documentation, as ``ansible-doc`` reads it with the project's ansible.cfg (doc
fragments merged), parses, is complete, and documents exactly the options each module takes:
the same names, and the same type, required, default, choices and list elements as its
argument spec (the module-level ``ARGUMENT_SPEC`` its ``main()`` uses)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "library"
MODULES = sorted(p.stem for p in LIBRARY.glob("*.py") if not p.name.startswith("_"))
REQUIRED_SECTIONS = ("short_description", "description", "options")
# What Ansible assumes when an option says nothing.
DEFAULT_TYPE = "str"


def ansible_doc_command():
    """The ansible-doc next to this Python (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "ansible-doc"
    return str(beside) if beside.exists() else shutil.which("ansible-doc")


@pytest.fixture(scope="module")
def ansible_doc(tmp_path_factory):
    """``ansible-doc --json`` of every module, in one run (each run costs about a second)."""
    command = ansible_doc_command()
    assert command, "ansible-doc not found (install ansible-core)"
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_HOME=str(tmp_path_factory.mktemp("ansible-home")),
        ANSIBLE_NOCOLOR="1",
    )
    proc = subprocess.run(
        [command, "-t", "module", "--json", *MODULES],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(REPO),
    )
    return proc


def read_docs(ansible_doc):
    """What ansible-doc read, by module. It stops at the first document it cannot parse, and
    its error names that module (asserted here, in the test, so that it counts as a failure)."""
    assert ansible_doc.returncode == 0, (
        f"ansible-doc failed (rc={ansible_doc.returncode}):\n{ansible_doc.stderr[-4000:]}"
    )
    return json.loads(ansible_doc.stdout)


def argument_spec(name):
    """The argument spec of ``library/<name>.py``, imported without running the module."""
    path = LIBRARY / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"qk_library_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert hasattr(module, "ARGUMENT_SPEC"), (
        f"{path.name} has no module-level ARGUMENT_SPEC (the spec its main() passes to "
        "AnsibleModule)"
    )
    return module.ARGUMENT_SPEC


def option_mismatches(documented, spec, where=""):
    """How the documented options differ from the argument spec, in words (empty: they agree).
    Suboptions are compared the same way when the spec has them."""
    problems = []
    missing = sorted(set(spec) - set(documented))
    extra = sorted(set(documented) - set(spec))
    if missing:
        problems.append(f"{where}not documented: {', '.join(missing)}")
    if extra:
        problems.append(f"{where}documented but not in the argument spec: {', '.join(extra)}")
    for option in sorted(set(spec) & set(documented)):
        says, takes = documented[option], spec[option]
        label = f"{where}{option}"
        doc_type = says.get("type", DEFAULT_TYPE)
        spec_type = takes.get("type", DEFAULT_TYPE)
        if doc_type != spec_type:
            problems.append(f"{label}: documented type {doc_type}, spec type {spec_type}")
        if bool(says.get("required")) != bool(takes.get("required")):
            problems.append(
                f"{label}: documented required={bool(says.get('required'))}, "
                f"spec required={bool(takes.get('required'))}"
            )
        # A default that the spec does not have is as wrong as a different one: users read it
        # as the value the module uses.
        if says.get("default") != takes.get("default"):
            problems.append(
                f"{label}: documented default {says.get('default')!r}, "
                f"spec default {takes.get('default')!r}"
            )
        if (says.get("choices") or None) != (takes.get("choices") or None):
            problems.append(
                f"{label}: documented choices {says.get('choices')}, "
                f"spec choices {takes.get('choices')}"
            )
        if spec_type == "list" and says.get("elements") != takes.get("elements"):
            problems.append(
                f"{label}: documented elements {says.get('elements')}, "
                f"spec elements {takes.get('elements')}"
            )
        if takes.get("options"):
            problems.extend(
                option_mismatches(says.get("suboptions") or {}, takes["options"], f"{label}.")
            )
    return problems


@pytest.mark.parametrize("name", MODULES)
def test_the_documentation_parses_and_is_complete(ansible_doc, name):
    docs = read_docs(ansible_doc)
    assert name in docs, f"ansible-doc returned nothing for {name}"
    entry = docs[name]
    doc = entry.get("doc") or {}
    for section in REQUIRED_SECTIONS:
        assert doc.get(section), f"{name}: DOCUMENTATION has no {section}"
    assert (entry.get("examples") or "").strip(), f"{name}: no EXAMPLES"
    assert entry.get("return"), f"{name}: no RETURN"


@pytest.mark.parametrize("name", MODULES)
def test_the_documented_options_are_the_argument_spec(ansible_doc, name):
    documented = ((read_docs(ansible_doc).get(name) or {}).get("doc") or {}).get("options") or {}
    problems = option_mismatches(documented, argument_spec(name))
    assert not problems, f"{name}:\n  " + "\n  ".join(problems)


def test_the_strategy_documentation_parses(tmp_path):
    # The playbooks' strategy (plugins/strategy) is documented like the modules.
    strategies = sorted(p.stem for p in (REPO / "plugins" / "strategy").glob("*.py"))
    assert strategies
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_HOME=str(tmp_path),
        ANSIBLE_NOCOLOR="1",
    )
    names = [f"quorumkeeper.etcd.{name}" for name in strategies]
    proc = subprocess.run(
        [ansible_doc_command(), "-t", "strategy", "--json", *names],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(REPO),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    docs = json.loads(proc.stdout)
    for name in names:
        doc = docs[name]["doc"]
        assert doc["short_description"] and doc["description"], name
