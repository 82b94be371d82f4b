"""highatomic.blocks against the pageblock counts of real /proc/pagetypeinfo samples.

The oracle reads each bundle's procfs/pagetypeinfo here in plain Python: per sample
(its `#kmemscope-sample mono_ns=` header), the "Number of blocks type" table, one row
per node and zone, one column per migratetype. highatomic.blocks must give, per sample,
node and zone, the HighAtomic column and the sum of the row. The bundles are the
committed examples (recorded on a 6.18 VM) and, in the live tier, a recording made here
while a hugetlb squeeze (capture_helpers.SQUEEZE) moves pageblocks between migratetypes.
"""
import csv
import io
import re
import sys

import pytest

from capture_helpers import SQUEEZE
from conftest import EXAMPLES, record_lock
from kmrun import kmemscope

EXAMPLE_BUNDLES = ("kmem-compaction", "thp-faults", "memory-pressure")
_ROW = re.compile(r"^Node\s+(\d+), zone\s+(\S+)\s+([\d\s]+)$")


def pagetypeinfo_recount(path):
    """{(mono_ns, node, zone): (HighAtomic pageblocks, all pageblocks)} of a sample file."""
    out = {}
    ts, header = None, None
    for line in path.read_text().splitlines():
        if line.startswith("#kmemscope-sample "):
            ts, header = int(re.search(r"mono_ns=(\d+)", line).group(1)), None
        elif line.startswith("Number of blocks type"):
            header = line.split()[4:]
        elif header is not None and (m := _ROW.match(line)):
            counts = dict(zip(header, map(int, m.group(3).split())))
            assert len(counts) == len(header), line
            out[(ts, int(m.group(1)), m.group(2))] = (counts.get("HighAtomic", 0), sum(counts.values()))
        elif not line.strip():
            header = None
    return out


def blocks_rows(ds):
    out = kmemscope("query", "highatomic.blocks", ds, "--format", "csv").stdout
    return {(int(r["ts"]), int(r["node"]), r["zone"]):
            (int(r["highatomic_pageblocks"]), int(r["total_pageblocks"]), float(r["highatomic_pct"]))
            for r in csv.DictReader(io.StringIO(out))}


def assert_blocks_equal_the_recount(bundle, ds):
    want = pagetypeinfo_recount(bundle / "procfs" / "pagetypeinfo")
    assert len({ts for ts, _, _ in want}) >= 2, f"{bundle}: fewer than two pagetypeinfo samples"
    got = blocks_rows(ds)
    assert {k: v[:2] for k, v in got.items()} == want
    for (high, total, pct) in got.values():
        assert pct == pytest.approx(100.0 * high / total)
    return want


@pytest.mark.parametrize("name", EXAMPLE_BUNDLES)
def test_blocks_equal_the_pagetypeinfo_recount_of_a_committed_recording(name, tmp_path):
    bundle = EXAMPLES / name
    kmemscope("parse", "-q", bundle, "-o", tmp_path / "ds")
    assert_blocks_equal_the_recount(bundle, tmp_path / "ds")


def test_the_recount_reads_the_highatomic_column_by_its_name():
    """The oracle is not blind to the column it checks: a HighAtomic count planted in a copy
    of real samples is what it reads."""
    text = (EXAMPLES / "thp-faults" / "procfs" / "pagetypeinfo").read_text()
    import tempfile
    from pathlib import Path

    planted = re.sub(r"^(Node\s+0, zone\s+Normal(?:\s+\d+){3})\s+0", r"\1     7", text, count=1,
                     flags=re.M)
    assert planted != text
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "pagetypeinfo"
        p.write_text(planted)
        counts = pagetypeinfo_recount(p)
    assert sorted(h for h, _ in counts.values() if h) == [7]


def test_blocks_equal_the_recount_of_a_recording_under_a_hugetlb_squeeze(live_tracefs, tmp_path):
    """A recording made here, its pagetypeinfo sampled every 0.25 s while hugetlb pages take
    most free memory and the rest is shredded and faulted with THP."""
    squeeze = tmp_path / "squeeze.py"
    squeeze.write_text(SQUEEZE)
    bundle = tmp_path / "bundle"
    with record_lock():
        kmemscope("record", "-o", bundle, "--preset", "compaction", "--interval", "0.25s",
                  "--", sys.executable, squeeze, "1024", "256", timeout=600)
    kmemscope("parse", "-q", bundle, "-o", tmp_path / "ds")
    assert_blocks_equal_the_recount(bundle, tmp_path / "ds")
