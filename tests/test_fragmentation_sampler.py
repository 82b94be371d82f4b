"""The sampler's debugfs extfrag addition, over stand-in /proc and debugfs folders.

Stand-ins because the cases are about timing and failure (buddyinfo changing
between two reads, debugfs vanishing mid-capture) that a live kernel does not
produce on demand; tests/test_fragmentation_real.py covers the live files.
The oracle is the bundle's text, split here with a regex of the test's own.
"""
import re

from kmemscope.capture.sampler import ProcfsSampler

BUDDY = "Node 0, zone   Normal      1      2      3\n"
UNUSABLE = "Node 0, zone   Normal 0.000 0.090 0.407 \n"
EXTFRAG = "Node 0, zone   Normal -1.000 -1.000 -1.000 \n"
HEADER = re.compile(r"^#kmemscope-sample mono_ns=(\d+) realtime_ns=(\d+)$", re.M)


def stand_ins(tmp_path, debugfs=True):
    proc = tmp_path / "proc"
    proc.mkdir()
    for name in ("vmstat", "pagetypeinfo"):
        (proc / name).write_text("x 1\n")
    (proc / "buddyinfo").write_text(BUDDY)
    extfrag = tmp_path / "debug" / "extfrag"
    if debugfs:
        extfrag.mkdir(parents=True)
        (extfrag / "unusable_index").write_text(UNUSABLE)
        (extfrag / "extfrag_index").write_text(EXTFRAG)
    return proc, extfrag


def sampler(tmp_path, proc, extfrag, cls=ProcfsSampler):
    s = cls(str(tmp_path / "out"), 1, proc=str(proc), sys=str(tmp_path / "sys"))
    s.extfrag_dir = str(extfrag)
    s.open()
    return s


def headers(path):
    return [(int(a), int(b)) for a, b in HEADER.findall(path.read_text())]


def test_readings_of_unchanged_free_lists_carry_the_buddyinfo_samples_timestamps(tmp_path):
    proc, extfrag = stand_ins(tmp_path)
    s = sampler(tmp_path, proc, extfrag)
    for _ in range(3):
        s.sample()
    s.close()
    out = tmp_path / "out"
    assert headers(out / "unusable_index") == headers(out / "buddyinfo") == headers(out / "extfrag_index")
    assert len(headers(out / "buddyinfo")) == 3
    assert (out / "unusable_index").read_text().split("\n", 1)[1].startswith(UNUSABLE)
    assert (s.extfrag_samples, s.extfrag_unmatched, s.extfrag_error) == (3, 0, None)


class ChangingSampler(ProcfsSampler):
    """The free lists change (buddyinfo is rewritten) right after each pass's buddyinfo sample."""

    def _sample_extfrag(self):
        path = self.proc + "/buddyinfo"
        with open(path, "a") as f:
            f.write("Node 1, zone   Normal      0      0      1\n")
        super()._sample_extfrag()


def test_readings_taken_while_buddyinfo_changed_carry_their_own_time(tmp_path):
    proc, extfrag = stand_ins(tmp_path)
    s = sampler(tmp_path, proc, extfrag, ChangingSampler)
    s.sample()
    s.sample()
    s.close()
    out = tmp_path / "out"
    buddy, unusable = headers(out / "buddyinfo"), headers(out / "unusable_index")
    assert len(buddy) == len(unusable) == 2
    assert not set(buddy) & set(unusable)
    assert all(b[0] < u[0] for b, u in zip(buddy, unusable))      # read after buddyinfo
    assert (s.extfrag_samples, s.extfrag_unmatched) == (0, 2)


def test_without_debugfs_nothing_extra_is_written(tmp_path):
    proc, extfrag = stand_ins(tmp_path, debugfs=False)
    s = sampler(tmp_path, proc, extfrag)
    s.sample()
    s.close()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["buddyinfo", "pagetypeinfo", "vmstat"]


def test_debugfs_vanishing_stops_the_extfrag_samples_and_not_the_capture(tmp_path):
    proc, extfrag = stand_ins(tmp_path)
    s = sampler(tmp_path, proc, extfrag)
    s.sample()
    (extfrag / "extfrag_index").unlink()
    s.sample()                     # no exception: the capture goes on
    s.sample()
    s.close()
    out = tmp_path / "out"
    assert len(headers(out / "buddyinfo")) == 3 and s.samples == 3
    assert len(headers(out / "unusable_index")) == 1
    assert isinstance(s.extfrag_error, FileNotFoundError)
