"""Unit tests import the operator's code by its collection name
(``ansible_collections.quorumkeeper.etcd.plugins...``): ``collections/`` is on pytest's
``pythonpath`` (pyproject.toml)."""
