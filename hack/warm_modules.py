#!/usr/bin/env python3
"""Run a command whose ansible modules start warm: `hack/warm_modules.py [--] COMMAND ...`.

The molecule scenarios' checks are kubernetes.core modules, and a module run is a process that
imports the `kubernetes` client first: about 0.6 CPU-s each, some 70 runs in `default`. This
starts one warm-start server of the operator's own (plugins/module_utils/qk_warm_start.py) for
the command, on a socket of its own, with that client and kubernetes.core's module utilities
imported (QK_WARM_START_PRELOAD), and runs the command with QK_MODULE_PYTHON naming
`bin/module-python`, which the scenarios take as their modules' interpreter. Each module then
runs in a fork of the server: about 0.03 CPU-s. A module the server cannot run as the payload
ansible built would (another kubernetes.core than the installed one) starts cold, as does every
module when no server answers. This process becomes the command (exec: its pid, signals and exit
status are the command's), and the server stops within seconds of the command's end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "plugins" / "module_utils" / "qk_warm_start.py"
MODULE_PYTHON = ROOT / "bin" / "module-python"
# What kubernetes.core's modules import (k8s_exec: the stream client).
PRELOAD = ",".join(
    [
        "kubernetes.dynamic",
        "kubernetes.stream",
        "ansible_collections.kubernetes.core.plugins.module_utils.*",
    ]
)


def main(argv: list[str]) -> int | None:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    name = f"quorumkeeper-warm-modules-{os.getpid()}"
    env = dict(
        os.environ,
        QK_WARM_START_SOCKET=name,
        QK_WARM_START_PRELOAD=PRELOAD,
        QK_MODULE_PYTHON=str(MODULE_PYTHON),
    )
    env.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
    # Owned by this pid, which the command keeps; it says what it warmed up on stderr. It binds
    # its socket before it warms up, and a module that connects meanwhile waits for it; one that
    # comes before the socket (there is none in the command's first seconds) starts cold.
    subprocess.Popen(
        [sys.executable, str(SERVER), "--owner", str(os.getpid())],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=sys.stderr,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
