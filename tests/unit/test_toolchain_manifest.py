"""The toolchain manifest that a background build fills while tests read it
(hack/toolchain/manifest.py): concurrent writers keep each other's entries, and a reader waits for
an announced component, gets it as soon as it is recorded, and fails at once, naming the build's
log, when the build failed, died or never announced it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack" / "toolchain"))
sys.path.insert(0, str(REPO / "hack"))

import install  # noqa: E402
import manifest  # noqa: E402
import test_lanes  # noqa: E402


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "CACHE", tmp_path)
    monkeypatch.setattr(manifest, "MANIFEST", tmp_path / "toolchain.json")
    monkeypatch.setattr(manifest, "BUILDING", tmp_path / "toolchain-building.json")
    monkeypatch.setattr(manifest, "LOCKS", tmp_path / "locks")
    return tmp_path


WRITER = """
import sys
sys.path.insert(0, {toolchain!r})
import manifest
from pathlib import Path
cache = Path({cache!r})
manifest.CACHE, manifest.MANIFEST = cache, cache / "toolchain.json"
manifest.LOCKS = cache / "locks"
for i in range(40):
    manifest.update({{f"{{sys.argv[1]}}-{{i}}": i}})
"""


def test_writers_in_two_processes_keep_each_others_entries(cache):
    script = WRITER.format(toolchain=str(REPO / "hack" / "toolchain"), cache=str(cache))
    writers = [
        subprocess.Popen([sys.executable, "-c", script, name]) for name in ("first", "second")
    ]
    assert [w.wait(timeout=60) for w in writers] == [0, 0]
    entries = manifest.read()
    assert len(entries) == 80, sorted(set(entries))


def test_an_entry_there_is_returned_and_one_nobody_builds_fails_at_once():
    manifest.update({"minio": "/cache/bin/minio"})
    assert manifest.component("minio") == "/cache/bin/minio"
    started = time.monotonic()
    with pytest.raises(manifest.MissingComponent, match="has no 'opm': run `make toolchain`"):
        manifest.component("opm", timeout=30)
    assert time.monotonic() - started < 1


def test_an_announced_component_is_waited_for_and_returned_once_recorded():
    manifest.update({"prometheus": "/old/prometheus"})
    manifest.announce(["prometheus", "olm"], "/tmp/build.log")
    assert "prometheus" not in manifest.read(), "an entry being rebuilt is not handed out"
    got = {}
    reader = threading.Thread(target=lambda: got.update(olm=manifest.component("olm", 30)))
    reader.start()
    time.sleep(0.5)
    assert reader.is_alive(), "the reader did not wait for the announced component"
    manifest.update({"olm": {"olm": "/new/olm"}})
    manifest.finished()
    reader.join(timeout=10)
    assert got == {"olm": {"olm": "/new/olm"}}
    assert manifest.building() is None


def test_a_failed_or_dead_build_fails_its_readers_with_its_log():
    manifest.announce(["cert_manager"], "/tmp/build.log")
    manifest.finished(error="CalledProcessError: go build failed")
    with pytest.raises(manifest.MissingComponent, match="go build failed.*/tmp/build.log"):
        manifest.component("cert_manager", timeout=30)

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    manifest.BUILDING.write_text(
        f'{{"pid": {dead.pid}, "components": ["opm"], "log": "/tmp/b.log"}}'
    )
    with pytest.raises(manifest.MissingComponent, match="the process is gone"):
        manifest.component("opm", timeout=30)


def test_only_the_announcing_process_ends_its_announcement():
    manifest.BUILDING.write_text(f'{{"pid": {os.getpid() + 1}, "components": ["opm"]}}')
    manifest.finished()
    assert manifest.building() == {"pid": os.getpid() + 1, "components": ["opm"]}


def test_the_lanes_measure_how_busy_the_machine_was():
    before = test_lanes.machine_cpu()
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        pass
    after = test_lanes.machine_cpu()
    assert after[1] > before[1] and after[0] >= before[0]
    assert 0 < test_lanes.busy_share(before, after) <= 1
    assert test_lanes.busy_share((10, 100), (60, 200)) == 0.5


def test_the_exclusive_tests_go_first_only_once_the_tests_toolchain_is_built(monkeypatch):
    monkeypatch.delenv("QK_EXCLUSIVE_FIRST", raising=False)
    assert test_lanes.cluster_order(True) == ("cluster-exclusive", "cluster-shared")
    assert test_lanes.cluster_order(False) == ("cluster-shared", "cluster-exclusive")
    monkeypatch.setenv("QK_EXCLUSIVE_FIRST", "0")
    assert test_lanes.cluster_order(True) == ("cluster-shared", "cluster-exclusive")


def test_the_virtualenv_is_built_beside_the_go_steps_and_its_failure_fails_the_install(
    monkeypatch,
):
    go_steps_done, order = threading.Event(), []

    def fake_install(step):
        if step == "venv":
            # The Go steps go on while pip runs: they all end before this one does.
            assert go_steps_done.wait(5), "the Go steps waited for the virtualenv"
            order.append(step)
            raise SystemExit("[install] failed (1): pip install")
        order.append(step)
        if step == "etcd":
            go_steps_done.set()

    monkeypatch.setattr(install, "install", fake_install)
    with pytest.raises(SystemExit, match="pip install"):
        install.install_steps(["debian", "venv", "kubernetes", "etcd"])
    assert order == ["debian", "kubernetes", "etcd", "venv"]
    # Without a Go step there is nothing to overlap: the virtualenv is installed in turn.
    monkeypatch.setattr(install, "install", order.append)
    order.clear()
    install.install_steps(["debian", "venv"])
    assert order == ["debian", "venv"]
