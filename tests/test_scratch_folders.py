"""Scratch folders in /tmp (DuckDB's spill folder, the report's working folder) that a
SIGKILLed kmemscope leaves are removed by the next one; a live one's never.

Oracles: os.listdir of a private TMPDIR, and processes killed here with SIGKILL.
"""
import os
import signal
import subprocess
import sys
import tempfile

import pytest
from kmrun import kmemscope

from kmemscope.common.scratch import ScratchFolder, remove_abandoned

MAKE_AND_DIE = """
import os, signal, sys
from kmemscope.common.scratch import ScratchFolder
ScratchFolder(sys.argv[1])
from kmemscope.dataset import limits
limits.connect().execute("SELECT 1")          # the spill folder of a real connection
print("made", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _killed_maker(tmp, prefix):
    proc = subprocess.run([sys.executable, "-c", MAKE_AND_DIE, prefix], capture_output=True,
                          text=True, env={**os.environ, "TMPDIR": str(tmp)}, timeout=120)
    assert proc.returncode == -signal.SIGKILL and proc.stdout == "made\n", proc.stderr


def test_a_killed_makers_folder_goes_with_the_next_and_a_live_ones_stays(private_tmp):
    _killed_maker(private_tmp, "kmemscope-report-")
    left = sorted(os.listdir(private_tmp))
    assert sorted(n.split("-")[1] for n in left) == ["report", "spill"], left
    live = ScratchFolder("kmemscope-report-")            # this process: alive
    try:
        mine = os.path.basename(live.path)
        assert sorted(os.listdir(private_tmp)) == sorted(
            [mine] + [n for n in left if n.startswith("kmemscope-spill-")])
        assert remove_abandoned("kmemscope-report-") == []
        assert os.path.isdir(live.path)
    finally:
        live.remove()
    assert not os.path.exists(live.path)


def test_a_folder_without_a_lock_or_of_a_link_is_left_alone(private_tmp):
    (private_tmp / "kmemscope-spill-old").mkdir()              # an older kmemscope's
    (private_tmp / "kmemscope-spill-link").symlink_to(private_tmp / "kmemscope-spill-old")
    assert remove_abandoned("kmemscope-spill-") == []
    assert sorted(os.listdir(private_tmp)) == ["kmemscope-spill-link", "kmemscope-spill-old"]


def test_the_next_command_removes_a_killed_commands_spill_folder(examples_dataset, tmp_path):
    _killed_maker(tmp_path, "kmemscope-spill-")
    assert sum(n.startswith("kmemscope-spill-") for n in os.listdir(tmp_path)) == 2
    kmemscope("sql", examples_dataset, "SELECT 1", env={**os.environ, "TMPDIR": str(tmp_path)})
    assert os.listdir(tmp_path) == []
