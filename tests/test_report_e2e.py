"""kmemscope compare and kmemscope report on real data.

Live: two 4 s captures on this machine, vm.defrag_mode=0 then 1 (labelled as
two kernels, the setting restored afterwards), with an allocating workload of
this test's own running alongside; parsed into one dataset; compare and report
must succeed and the HTML must hold the sections and embedded figures. The
built-in example trace (no procfs samples) checks that the report says what a
run lacks instead of failing.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kmrun
import requirements

from conftest import EXAMPLES

DEFRAG_MODE = Path("/proc/sys/vm/defrag_mode")
# Anonymous THP faults plus short-lived slab-ish buffers, under a recognisable comm.
WORKLOAD = r"""
import ctypes, mmap, sys, time
ctypes.CDLL(None).prctl(15, b"kms-report-wl", 0, 0, 0)
end = time.monotonic() + float(sys.argv[1])
keep = []
while time.monotonic() < end:
    m = mmap.mmap(-1, 32 << 20)
    m.madvise(getattr(mmap, "MADV_HUGEPAGE", 14))
    m[::4096] = b"x" * ((32 << 20) // 4096)
    keep.append(m)
    if len(keep) > 4:
        keep.pop(0).close()
    junk = [bytearray(64 << 10) for _ in range(32)]
    del junk
"""
OVERVIEW_HEADINGS = ["Runs", "Event rates over time", "Allocation orders", "Atomic allocations by order",
                     "Migratetype pollution", "HighAtomic reserve over time",
                     "Free pages and pageblocks per migratetype over time", "Hot page frames",
                     "Compaction timeline", "vmstat rates", "Lost events"]
COMPARE_HEADINGS = ["Comparison table", "Per-metric distributions", "High-atomic reserve", "Per-CPU lists",
                    "Compaction and THP"]


def kmemscope(*args, timeout=300):
    """The real command line (tests/kmrun.py); its exit status is the caller's to check."""
    return kmrun.kmemscope(*args, check=False, timeout=timeout)


def headings(html):
    return [re.sub(r"<[^>]+>|¶", "", h).strip() for h in re.findall(r"<h[12][^>]*>(.*?)</h[12]>", html, re.S)]


def assert_self_contained(html):
    assert not re.search(r"""<(script|link|img)[^>]+(src|href)=["']?(https?:)?//""", html), \
        "the report fetches something from the network"


@pytest.fixture(scope="module")
def ab_dataset(tmp_path_factory, live_tracefs):
    if not DEFRAG_MODE.exists():
        requirements.skip("tracefs", "this kernel has no vm.defrag_mode (added in 6.15)")
    tmp = tmp_path_factory.mktemp("ab")
    ds = tmp / "ds"
    original = DEFRAG_MODE.read_text().strip()
    from conftest import record_lock

    # The tracing_lock fixture is function-scoped; a module fixture takes the same lock itself.
    with record_lock():
        try:
            for mode in ("0", "1"):
                DEFRAG_MODE.write_text(mode)
                work = subprocess.Popen([sys.executable, "-c", WORKLOAD, "6"])
                try:
                    rec = kmemscope("record", "-o", tmp / f"b{mode}", "--duration", "4s",
                                    "--label", f"kernel=defrag{mode}", timeout=120)
                finally:
                    work.wait(timeout=60)
                assert rec.returncode == 0, rec.stderr
        finally:
            DEFRAG_MODE.write_text(original)
    assert DEFRAG_MODE.read_text().strip() == original
    parsed = kmemscope("parse", tmp / "b0", tmp / "b1", "-o", ds)
    assert parsed.returncode == 0, parsed.stderr
    return ds


def test_compare_by_kernel_on_two_real_captures(ab_dataset):
    out = kmemscope("compare", ab_dataset, "--by", "kernel")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "baseline defrag0" in lines[0]
    assert re.search(r"defrag0\s+defrag1", out.stdout)
    assert re.search(r"^Hmean\s+thp_fault_success_pct", out.stdout, re.M)
    assert re.search(r"^Amean\s+highatomic_pageblocks_max\s+\d+\.\d\d \(\s+0\.00%\)", out.stdout, re.M)
    assert "have one run: no stddev, and no test of significance" in out.stdout   # one capture a side

    js = kmemscope("compare", ab_dataset, "--by", "kernel", "--baseline", "defrag1", "--format", "json",
                   "--metrics", "highatomic_pageblocks_max,top5_pfn_allocs_sum")
    assert js.returncode == 0, js.stderr
    recs = json.loads(js.stdout)["rows"]
    assert {(r["side"], r["metric"]) for r in recs} == {
        (s, m) for s in ("defrag0", "defrag1") for m in ("highatomic_pageblocks_max", "top5_pfn_allocs_sum")}
    for r in recs:
        assert r["n"] == 1 and r["welch_p"] is None and r["is_baseline"] == (r["side"] == "defrag1")


def test_report_compare_kernel_is_one_self_contained_html(ab_dataset, tmp_path):
    html_path = tmp_path / "report.html"
    out = kmemscope("report", ab_dataset, "-o", html_path, "--compare", "kernel")
    assert out.returncode == 0, out.stderr
    assert "executing compare.ipynb" in out.stderr and "wrote" in out.stderr
    html = html_path.read_text()
    found = headings(html)
    for want in COMPARE_HEADINGS + OVERVIEW_HEADINGS:
        assert any(h.startswith(want) for h in found), f"no section {want!r} in {found}"
    # figures: distributions, event rates, orders, atomic orders, highatomic, free blocks,
    # hot pfns, vmstat (compaction and pollution may have nothing to show in 4 s)
    images = re.findall(r'<img[^>]+src="data:image/png;base64,', html)
    assert len(images) >= 8, len(images)
    assert "def section" not in html and "show(F." not in html      # code inputs left out
    assert "Traceback" not in html and "Error" not in re.sub(r"<style.*?</style>", "", html, flags=re.S)
    assert_self_contained(html)


def test_report_on_the_example_says_what_a_bare_trace_lacks(tmp_path):
    ds = tmp_path / "ds"
    assert kmemscope("parse", EXAMPLES / "kmem-compaction" / "trace.dat", "-o", ds, "--label", "kernel=example").returncode == 0
    html_path = tmp_path / "out" / "r.html"
    html_path.parent.mkdir()
    # Links planted where a careless writer would write: at the output's name and at the
    # temporary name such a writer would pick. The report goes past both.
    victims = [tmp_path / "victim1", tmp_path / "victim2"]
    for victim in victims:
        victim.write_text("someone else's file\n")
    html_path.symlink_to(victims[0])
    (html_path.parent / ".r.html.tmp").symlink_to(victims[1])
    out = kmemscope("report", ds, "-o", html_path)
    assert out.returncode == 0, out.stderr
    assert [v.read_text() for v in victims] == ["someone else's file\n"] * 2
    assert not html_path.is_symlink() and html_path.is_file()
    assert sorted(p.name for p in html_path.parent.iterdir()) == [".r.html.tmp", "r.html"]
    html = html_path.read_text()
    assert "No pagetypeinfo samples in these runs" in html
    assert "No vmstat samples in these runs" in html
    assert "Comparison table" not in html
    assert len(re.findall(r'<img[^>]+src="data:image/png', html)) >= 5
    assert_self_contained(html)


@pytest.mark.parametrize("args, message", [
    (["compare", "{ds}", "--by", "nosuchlabel"], "no run has a label 'nosuchlabel'"),
    (["compare", "{ds}", "--by", "kernel", "--baseline", "x"], "no run has kernel=x"),
    (["compare", "{ds}", "--by", "kernel", "--metrics", "bogus"], "unknown metric 'bogus'"),
    (["report", "{missing}", "-o", "{out}"], "does not exist"),
    (["report", "{ds}", "-o", "{out}", "--compare", "nosuchlabel"], "no run has a label 'nosuchlabel'"),
])
def test_errors_are_one_line(tmp_path, args, message):
    ds = tmp_path / "ds"
    assert kmemscope("parse", EXAMPLES / "kmem-compaction" / "trace.dat", "-o", ds, "--label", "kernel=example",
                     "--events", "mm_page_alloc").returncode == 0
    subst = {"ds": ds, "missing": tmp_path / "nope", "out": tmp_path / "r.html"}
    out = kmemscope(*[a.format(**subst) for a in args])
    assert out.returncode == 1
    assert out.stderr.startswith("kmemscope: error: ") and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "r.html").exists()
