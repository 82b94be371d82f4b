"""The fragmentation analysis's indices against a plain-Python recount of mm/vmstat.c's formulas.

The buddyinfo texts are real samples of this project's 6.18 test VM
(tests/data/procfs/linux-6.18) plus a few lines written here for the edge
cases no capture produces on demand (a zone with nothing free, one lone
free block, counts in the millions); they are split here with str.split and
written into a synthetic dataset (tests/kmdata.py). The recount follows the
kernel's definitions with exact rational numbers and an explicit floor, not
the analysis's SQL: free_blocks_suitable counts, for each free block of order
k >= j, the 2^(k-j) blocks of order j it holds.
"""
import math
from fractions import Fraction
from pathlib import Path

import pytest

from kmemscope.parsers import procfs
from kmemscope.queries import runner

import kmdata as K

LIVE = Path(__file__).parent / "data" / "procfs" / "linux-6.18"
RUN = "00000000000f4a90"

# Edge cases: no free page at all (F = T = 0), one free block of order 2 (the
# fragmentation index goes below 0 at orders 3+), a zone where everything is
# order 10, and counts large enough that F * 1000 needs 64 bits.
EDGE = """\
Node 0, zone      DMA      0      0      0      0      0      0      0      0      0      0      0
Node 0, zone    DMA32      0      0      1      0      0      0      0      0      0      0      0
Node 0, zone   Normal      0      0      0      0      0      0      0      0      0      0   4000
Node 1, zone   Normal 9000000 7000000 123456 0      1      0      0      0      0      0      0
Node 1, zone  Movable      3      5      7     11     13     17     19     23     29      1      0
"""


def buddyinfo_texts():
    return {"live": (LIVE / "buddyinfo").read_text(),
            "fragmented": (LIVE / "buddyinfo-fragmented").read_text(),
            "edge": EDGE}


def split_buddyinfo(text):
    """{(node, zone): [n_0, n_1, ...]} by plain splitting."""
    zones = {}
    for line in text.splitlines():
        words = line.replace(",", " ").split()
        if len(words) > 4 and words[0] == "Node" and words[2] == "zone":
            zones[(int(words[1]), words[3])] = [int(w) for w in words[4:]]
    return zones


def floor_div(a, b):
    return math.floor(Fraction(a, b))


def kernel_indices(counts, j):
    """(unusable, fragmentation) in thousandths, recounted from the definitions."""
    free_pages = sum(n * 2 ** k for k, n in enumerate(counts))
    total_blocks = sum(counts)
    suitable = sum(n * 2 ** k // 2 ** j for k, n in enumerate(counts) if k >= j)
    if free_pages == 0:
        unusable = 1000
    else:
        unusable = floor_div((free_pages - suitable * 2 ** j) * 1000, free_pages)
    if total_blocks == 0:
        frag = 0
    elif suitable > 0:
        frag = -1000
    else:
        frag = 1000 - floor_div(1000 + floor_div(free_pages * 1000, 2 ** j), total_blocks)
    return unusable, frag


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("frag")
    rows, ts = [], {}
    for i, (name, text) in enumerate(sorted(buddyinfo_texts().items())):
        ts[name] = (i + 1) * 10 ** 9
        for (node, zone), counts in split_buddyinfo(text).items():
            rows += [dict(ts=ts[name], node=node, zone=zone, order=k, count=n)
                     for k, n in enumerate(counts)]
    # Forged samples no kernel prints (synthetic on purpose): an order of 100, a negative count
    # and 2^62 blocks. Each zone's sample is left out whole; the analysis still answers.
    forged = [dict(ts=90 * 10 ** 9, node=0, zone="Normal", order=100, count=1),
              dict(ts=90 * 10 ** 9, node=0, zone="Normal", order=0, count=5),
              dict(ts=91 * 10 ** 9, node=0, zone="Normal", order=0, count=-1),
              dict(ts=92 * 10 ** 9, node=0, zone="Normal", order=3, count=2 ** 62)]
    K.write_run(root, RUN, first_ts=0, last_ts=10 ** 10)
    K.write_other(root, "buddyinfo", RUN, rows + forged)
    return root, ts


def test_indices_equal_a_recount_of_the_kernel_formulas_order_by_order(dataset):
    root, ts = dataset
    got = {(r["ts"], r["node"], r["zone"], r["order"]): r
           for r in runner.run_query("fragmentation", root).to_pylist()}
    expected = {}
    for name, text in buddyinfo_texts().items():
        for (node, zone), counts in split_buddyinfo(text).items():
            for j in range(len(counts)):
                expected[(ts[name], node, zone, j)] = (counts[j],) + kernel_indices(counts, j)
    assert set(got) == set(expected)
    for key, (blocks, unusable, frag) in expected.items():
        row = got[key]
        assert (row["free_blocks"], row["unusable_index_permille"],
                row["fragmentation_index_permille"]) == (blocks, unusable, frag), key
    # The cases the edge lines are for were reached: each branch of both formulas.
    values = [(u, f) for _b, u, f in expected.values()]
    assert any(u == 1000 and f == 0 for u, f in values)             # F = T = 0
    assert any(f == -1000 for _u, f in values)                       # would succeed
    assert any(-1000 < f < 0 for _u, f in values)                    # the formula below 0
    assert any(0 < f < 1000 and u == 1000 for u, f in values)        # would fail: fragmented
    assert any(0 < u < 1000 for u, _f in values)


def test_sections_over_time_and_per_run_follow_orders_3_and_9(dataset):
    root, ts = dataset
    orders = runner.run_query("fragmentation", root).to_pylist()
    at = {(r["ts"], r["node"], r["zone"], r["order"]): r for r in orders}
    over_time = runner.run_query("fragmentation.over_time", root).to_pylist()
    assert len(over_time) == len({k[:3] for k in at})
    for r in over_time:
        for j in (3, 9):
            o = at[(r["ts"], r["node"], r["zone"], j)]
            assert r[f"unusable_index_order{j}_permille"] == o["unusable_index_permille"]
            assert r[f"fragmentation_index_order{j}_permille"] == o["fragmentation_index_permille"]

    per_zone = runner.run_query("fragmentation.per_run", root).to_pylist()
    for r in per_zone:
        mine = [o for k, o in at.items() if k[1:3] == (r["node"], r["zone"])]
        for j in (3, 9):
            unusable = [o["unusable_index_permille"] for o in mine if o["order"] == j]
            failing = [o["fragmentation_index_permille"] for o in mine
                       if o["order"] == j and o["fragmentation_index_permille"] != -1000]
            assert r[f"unusable_index_order{j}_max"] == max(unusable)
            assert r[f"unusable_index_order{j}_mean"] == pytest.approx(sum(unusable) / len(unusable))
            assert r[f"order{j}_fail_pct"] == pytest.approx(100.0 * len(failing) / len(unusable))
            assert r[f"fragmentation_index_order{j}_max"] == (max(failing) if failing else None)

    # The metrics follow each node's highest zone: Normal on node 0, Movable on node 1.
    (m,) = runner.run_query("fragmentation.metrics", root).to_pylist()
    assert m["zones"] == ["0:Normal", "1:Movable"]
    chosen = [o for k, o in at.items() if (k[1], k[2]) in ((0, "Normal"), (1, "Movable"))]
    nine = [o["unusable_index_permille"] for o in chosen if o["order"] == 9]
    assert m["unusable_index_order9_max"] == max(nine)
    assert m["unusable_index_order9_mean"] == pytest.approx(sum(nine) / len(nine))
    assert m["samples"] == len(ts)


@pytest.mark.parametrize("text, expected", [
    ("Node 0, zone   Normal  0.000 0.027 1.000\n", [0, 27, 1000]),
    ("Node 0, zone   Normal -1.000  0.903  0.-500 -1.-250\n", [-1000, 903, -500, -1250]),
    ("Node 1, zone    DMA32  0.-05\n", [-5]),
])
def test_extfrag_text_reads_back_as_the_kernels_integers(text, expected):
    """The debugfs files print index / 1000 and index % 1000 as C ints ("%d.%03d")."""
    rows = procfs.parse_extfrag(text)
    assert [r[3] for r in rows] == expected
    assert [r[2] for r in rows] == list(range(len(expected)))
    # The reverse: C's printf of each value gives the text back.
    for value, token in zip(expected, text.split()[4:]):
        whole, rem = int(value / 1000), value - int(value / 1000) * 1000
        assert "%d.%03d" % (whole, rem) == token


def test_extfrag_lines_that_are_not_indices_are_skipped_whole():
    text = ("Node 0, zone   Normal  0.000 0.02\n"      # cut short
            "Node 0, zone    DMA32  1.-500 0.100\n"     # no C int pair prints 1.-500
            "Node 0, zone      DMA  0.066 0.200\n")
    assert procfs.parse_extfrag(text) == [(0, "DMA", 0, 66), (0, "DMA", 1, 200)]


# ---------------------------------------------------------------- frag.* metrics in compare

def scaled(text, factor_high):
    """The live sample with the Normal zone's blocks of order >= 9 multiplied by factor_high."""
    out = []
    for line in text.splitlines():
        words = line.split()
        if "Normal" in words:
            counts = [int(w) for w in words[4:]]
            counts = counts[:9] + [c * factor_high // 4 for c in counts[9:]]
            line = " ".join(words[:4] + [str(c) for c in counts])
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    """Four runs, two a side; side b's Normal zone keeps fewer free blocks of order 9 and 10."""
    root = tmp_path_factory.mktemp("frag-sides")
    live = (LIVE / "buddyinfo").read_text()
    runs = {}
    for i, (side, factors) in enumerate([("a", (4, 3)), ("a", (4, 4)), ("b", (1, 2)), ("b", (0, 1))]):
        run_id = "%016x" % (0xf4a0 + i)
        texts = [scaled(live, f) for f in factors]
        rows = []
        for k, text in enumerate(texts):
            for (node, zone), counts in split_buddyinfo(text).items():
                rows += [dict(ts=(k + 1) * 10 ** 9, node=node, zone=zone, order=o, count=n)
                         for o, n in enumerate(counts)]
        K.write_run(root, run_id, first_ts=0, last_ts=3 * 10 ** 9, labels={"kernel": side})
        K.write_other(root, "buddyinfo", run_id, rows)
        runs[run_id] = (side, [split_buddyinfo(t)[(0, "Normal")] for t in texts])
    return root, runs


def test_frag_metrics_compare_as_the_recount_per_run(sides):
    import json
    import statistics
    import subprocess
    import sys

    root, runs = sides
    proc = subprocess.run([sys.executable, "-m", "kmemscope", "compare", str(root), "--by", "kernel",
                           "--metrics", "frag.unusable_index_order9_max,frag.order9_fail_pct",
                           "--format", "json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    by = {(r["metric"], r["side"]): r for r in doc["rows"]}
    for side in ("a", "b"):
        per_run = [max(kernel_indices(c, 9)[0] for c in samples)
                   for s, samples in runs.values() if s == side]
        fail = [100.0 * sum(kernel_indices(c, 9)[1] != -1000 for c in samples) / len(samples)
                for s, samples in runs.values() if s == side]
        r = by[("frag.unusable_index_order9_max", side)]
        assert r["kind"] == "frag" and r["direction"] == "lower" and r["unit"] == "/1000"
        assert r["statistic"] == "Amean" and r["n"] == 2
        assert r["value"] == pytest.approx(statistics.fmean(per_run))
        assert r["min"] == min(per_run) and r["max"] == max(per_run)
        assert by[("frag.order9_fail_pct", side)]["value"] == pytest.approx(statistics.fmean(fail))
    # side b has fewer order-9 blocks: more of its free memory is unusable at order 9
    assert by[("frag.unusable_index_order9_max", "b")]["value"] > \
        by[("frag.unusable_index_order9_max", "a")]["value"]


def test_frag_group_and_mmtests_block(sides):
    import kmemscope as km

    root, _runs = sides
    cmp = km.open(root).compare("kernel", metrics=["frag"])
    names = list(dict.fromkeys(cmp.df()["metric"]))
    assert names and all(n.startswith("frag.") for n in names)
    assert "frag.fragmentation_index_order3_mean" in names
    text = cmp.mmtests()
    assert "\nfragmentation (" in text and "frag.unusable_index_order9_max" in text


@pytest.mark.parametrize("metric", ["frag.nope", "frag."])
def test_a_bad_frag_metric_is_one_error_line(sides, metric):
    import subprocess
    import sys

    root, _runs = sides
    proc = subprocess.run([sys.executable, "-m", "kmemscope", "compare", str(root), "--by", "kernel",
                           "--metrics", metric], capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("kmemscope: error: bad fragmentation metric"), lines


def test_frag_metrics_of_runs_without_buddyinfo_are_one_error_line(tmp_path):
    """Synthetic: two runs as a bare trace.dat gives them, with no procfs tables."""
    import subprocess
    import sys

    for i, side in enumerate("ab"):
        K.write_run(tmp_path, "%016x" % (0xf4b0 + i), labels={"kernel": side})
    proc = subprocess.run([sys.executable, "-m", "kmemscope", "compare", str(tmp_path), "--by", "kernel",
                           "--metrics", "frag.order9_fail_pct"], capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert "no selected run has buddyinfo samples" in lines[0], lines
