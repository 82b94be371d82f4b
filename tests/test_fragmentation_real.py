"""The fragmentation analysis against the kernel's own debugfs readings, on a real recording.

`kmemscope record` runs a hugetlb squeeze (tests/capture_helpers.py SQUEEZE:
vm.nr_hugepages takes all but a few GiB, 4 KiB pages fill most of the rest
and a quarter of them is freed again in 64 KiB pieces, then THP faults
compact), sampling /proc/buddyinfo and debugfs extfrag/unusable_index and
extfrag/extfrag_index every 0.2 s. The oracle is the kernel: the debugfs
files as it printed them, read here with a parser of this test's own. Where a
debugfs sample carries the timestamps of a buddyinfo sample, the sampler saw
the same free lists before and after reading it, and the analysis's indices
(computed from that buddyinfo sample) must equal the kernel's integers
exactly, for every node, zone and order.
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest

import requirements
from capture_helpers import SQUEEZE, manifest, run_record
from kmrun import kmemscope

DEBUGFS = Path("/sys/kernel/debug")
EXTFRAG = DEBUGFS / "extfrag"
HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")
INTERVAL_S = 0.2


@pytest.fixture(scope="module")
def debugfs():
    """debugfs with the extfrag files, mounted here (and unmounted after) when it was not."""
    mounted_here = False
    if not EXTFRAG.is_dir():
        done = subprocess.run(["mount", "-t", "debugfs", "none", str(DEBUGFS)],
                              capture_output=True, text=True)
        mounted_here = done.returncode == 0
    if not (EXTFRAG / "unusable_index").is_file():
        if mounted_here:
            subprocess.run(["umount", str(DEBUGFS)], capture_output=True)
        requirements.skip("tracefs", "no debugfs extfrag files (a kernel without CONFIG_DEBUG_FS "
                          "or CONFIG_COMPACTION)")
    yield EXTFRAG
    if mounted_here:
        subprocess.run(["umount", str(DEBUGFS)], capture_output=True)


@pytest.fixture(scope="module")
def recording(live_tracefs, tracing_lock_module, debugfs, tmp_path_factory):
    """A bundle recorded under the squeeze, and its dataset; vm.nr_hugepages put back."""
    tmp = tmp_path_factory.mktemp("frag-real")
    squeeze = tmp / "squeeze.py"
    squeeze.write_text(SQUEEZE)
    old = HUGEPAGES.read_text().strip()
    try:
        done = run_record("-o", tmp / "bundle", "-e", "compaction:mm_compaction_end",
                          "--interval", "%gs" % INTERVAL_S, "--",
                          sys.executable, squeeze, "3072", "256", timeout=900)
    finally:
        if HUGEPAGES.read_text().strip() != old:
            HUGEPAGES.write_text(old)
    assert done.returncode == 0, done.stderr
    assert HUGEPAGES.read_text().strip() == old
    kmemscope("parse", "-q", tmp / "bundle", "-o", tmp / "ds", timeout=600)
    return tmp / "bundle", tmp / "ds"


HEADER = re.compile(r"^#kmemscope-sample mono_ns=(\d+) realtime_ns=\d+$", re.M)


def debugfs_samples(path):
    """{mono_ns: {(node, zone, order): thousandths}} of a bundle's debugfs sample file.

    The kernel prints each index with "%d.%03d" of index / 1000 and index % 1000
    (C ints, truncated toward zero), so the two numbers around the dot add up.
    """
    text = Path(path).read_text()
    heads = list(HEADER.finditer(text))
    out = {}
    for k, head in enumerate(heads):
        body = text[head.end():heads[k + 1].start() if k + 1 < len(heads) else len(text)]
        values = {}
        for line in body.strip().splitlines():
            words = line.replace(",", " ").split()
            node, zone = int(words[1]), words[3]
            for order, token in enumerate(words[4:]):
                whole, _, rem = token.partition(".")
                values[(node, zone, order)] = int(whole) * 1000 + int(rem)
        out[int(head.group(1))] = values
    return out


def test_indices_equal_the_kernels_debugfs_readings_of_the_same_free_lists(recording):
    import kmemscope as km

    bundle, ds = recording
    assert manifest(bundle)["status"] == "complete"
    rows = km.open(ds).query("fragmentation").rows()
    computed = {}
    for r in rows:
        computed.setdefault(r["ts"], {})[(r["node"], r["zone"], r["order"])] = (
            r["unusable_index_permille"], r["fragmentation_index_permille"])
    unusable = debugfs_samples(bundle / "procfs" / "unusable_index")
    fragmentation = debugfs_samples(bundle / "procfs" / "extfrag_index")
    assert set(unusable) == set(fragmentation) and len(unusable) >= 10

    same = sorted(set(unusable) & set(computed))
    # Most passes saw buddyinfo unchanged across the reads (the others carry their own time).
    assert len(same) >= max(5, len(unusable) // 3), (len(same), len(unusable))
    assert manifest(bundle)["extfrag"] == {"samples_with_buddyinfo": len(same),
                                           "samples_on_their_own": len(unusable) - len(same)}
    checked = []
    for ts in same:
        kernel = {key: (unusable[ts][key], fragmentation[ts][key]) for key in unusable[ts]}
        assert set(kernel) == set(computed[ts]), ts
        for key, value in kernel.items():
            assert computed[ts][key] == value, (ts, key)
        checked += kernel.values()
    # The squeeze made the comparison worth something: both formulas' interesting branches.
    assert any(0 < u < 1000 for u, _f in checked)
    assert any(f == -1000 for _u, f in checked)
    assert any(f >= 0 and u == 1000 for u, f in checked), "no order would fail in any sample"


def test_extfrag_tables_hold_the_debugfs_readings(recording):
    import kmemscope as km

    bundle, ds = recording
    data = km.open(ds)
    for table, column, source in (("extfrag_unusable_index", "unusable_index_permille", "unusable_index"),
                                  ("extfrag_index", "fragmentation_index_permille", "extfrag_index")):
        got = {}
        for r in data.sql(f'SELECT ts, node, zone, "order", {column} AS v FROM {table}').rows():
            got.setdefault(r["ts"], {})[(r["node"], r["zone"], r["order"])] = r["v"]
        assert got == debugfs_samples(bundle / "procfs" / source)


def test_free_pageblocks_per_migratetype_recount_the_pagetypeinfo_sample(recording):
    """pageblocks section: the bundle's /proc/pagetypeinfo text recounted with plain splits."""
    import kmemscope as km

    bundle, ds = recording
    rows = km.open(ds).query("fragmentation.pageblocks").rows()
    text = (bundle / "procfs" / "pagetypeinfo").read_text()
    first = text.split("#kmemscope-sample ")[1]
    ts = int(re.match(r"mono_ns=(\d+)", first).group(1))
    order_of_block = int(re.search(r"Page block order: (\d+)", first).group(1))
    orders, free, blocks, types = None, {}, {}, None
    for line in first.splitlines():
        words = line.replace(",", " ").split()
        if line.startswith("Free pages count per migrate type at order"):
            orders = [int(w) for w in words[8:]]
        elif line.startswith("Number of blocks type"):
            types = words[4:]
        elif words[:1] == ["Node"] and "type" in words:
            counts = [int(w.lstrip(">")) for w in words[6:]]
            free[(int(words[1]), words[3], words[5])] = (
                sum(c << o for o, c in zip(orders, counts)),
                sum(c << (o - order_of_block) for o, c in zip(orders, counts) if o >= order_of_block))
        elif words[:1] == ["Node"] and types:
            for name, n in zip(types, words[4:]):
                blocks[(int(words[1]), words[3], name)] = int(n)
    mine = {(r["node"], r["zone"], r["migratetype"]): r for r in rows if r["ts"] == ts}
    assert set(mine) == set(blocks)
    for key, n in blocks.items():
        assert mine[key]["pageblocks"] == n
        assert (mine[key]["free_pages"], mine[key]["free_pageblocks"]) == free.get(key, (None, None)), key
        assert mine[key]["pageblock_order"] == order_of_block
