"""Make plugins/module_utils importable as ansible.module_utils.<name> (like ANSIBLE_MODULE_UTILS)
and plugins/filter/etcd.py importable as ``etcd_filters``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import ansible.module_utils

REPO = Path(__file__).resolve().parents[2]
_MU = str(REPO / "plugins" / "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

_spec = importlib.util.spec_from_file_location("etcd_filters", REPO / "plugins/filter/etcd.py")
etcd_filters = importlib.util.module_from_spec(_spec)
sys.modules["etcd_filters"] = etcd_filters
_spec.loader.exec_module(etcd_filters)
