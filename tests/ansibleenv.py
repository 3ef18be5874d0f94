"""How the tests run `ansible` and `ansible-playbook` as the project configures them."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def ansible_json_env(home) -> dict:
    """The environment of an ``ansible``/``ansible-playbook`` run configured by the project's
    ansible.cfg, printing JSON (the ansible.posix.json callback), with its state under home."""
    return dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
        ANSIBLE_HOME=str(home),
    )
