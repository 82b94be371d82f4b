"""A full disk during `kmemscope parse`: one line on stderr, and the dataset as it was.

The dataset lives on a small tmpfs that holds a first, small run (the
compaction events only) but not the full example; needs root to mount.
"""
import hashlib
import os
import subprocess

import pytest

import requirements

from conftest import EXAMPLES
from kmrun import kmemscope
from oracle_compare import work_dirs_left

EXAMPLE = EXAMPLES / "kmem-compaction"


def tree_digest(root):
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            h.update(path.encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


@pytest.fixture
def small_fs(tmp_path):
    if os.geteuid() != 0:
        requirements.skip("tracefs", "mounting a small tmpfs needs root")
    if not EXAMPLE.is_dir():
        requirements.skip("setup", f"the committed example {EXAMPLE} is missing")
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                             capture_output=True, text=True)
    if mounted.returncode:
        requirements.skip("tracefs", f"cannot mount a tmpfs as root: {mounted.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_full_disk_gives_one_line_and_leaves_the_dataset_unchanged(small_fs):
    ds = small_fs / "ds"
    first = kmemscope("parse", "-q", EXAMPLE / "trace.dat", "-o", ds, "--events", "compaction:*")
    assert first.returncode == 0
    before = tree_digest(ds)

    out = kmemscope("parse", "-q", EXAMPLE, "-o", ds, check=False)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kmemscope: error: "), out.stderr
    assert "No space left on device" in lines[0]
    assert tree_digest(ds) == before
    assert not work_dirs_left(ds), "work directory left behind"
