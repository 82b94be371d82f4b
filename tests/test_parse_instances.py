"""Events recorded into a trace instance (`trace-cmd record -B NAME`) are parsed too.

The recording puts mm_page_free in the top buffer and mm_page_alloc in an
instance buffer; per-event counts must equal `trace-cmd report`'s lines for
each, in the v7 file trace-cmd wrote and in its v6 conversion (whose instance
layout differs).
"""
import signal
import subprocess
import sys
from collections import Counter

import pytest

from capture_helpers import wait_for
from conftest import PROJECT_ROOT
from kmrun import kmemscope

WORKLOAD = PROJECT_ROOT / "benchmarks" / "workload_churn.py"


def report_counts(path):
    """Event lines per (buffer, event) as trace-cmd prints them: `NAME: comm-pid [cpu] ...`."""
    out = subprocess.run(["trace-cmd", "report", "-i", str(path)], capture_output=True, text=True,
                         check=True).stdout
    counts = Counter()
    for line in out.splitlines():
        for event in ("mm_page_alloc:", "mm_page_free:"):
            if f" {event} " in line:
                counts[(line.split(":", 1)[0] if line.startswith("kmsinst:") else "", event[:-1])] += 1
    return counts


@pytest.fixture(scope="module")
def instance_trace(live_tracefs, tracing_lock_module, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("instance")
    v7 = tmp / "inst-v7.dat"
    rec = subprocess.Popen(["trace-cmd", "record", "-d", "--no-filter", "-C", "mono",
                            "-e", "kmem:mm_page_free", "-B", "kmsinst", "-e", "kmem:mm_page_alloc",
                            "-o", str(v7)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Ready once both buffers trace: the events enabled and tracing on, top and instance.
    top, inst = live_tracefs, live_tracefs / "instances" / "kmsinst"
    ready = [top / "events/kmem/mm_page_free/enable", top / "tracing_on",
             inst / "events/kmem/mm_page_alloc/enable", inst / "tracing_on"]

    def tracing():
        try:
            return all(path.read_text().startswith("1") for path in ready)
        except OSError:          # the instance is not made yet
            return False
    try:
        assert wait_for(lambda: tracing() or rec.poll() is not None, 60) and rec.poll() is None, \
            "trace-cmd record did not start tracing in 60 s"
        subprocess.run([sys.executable, str(WORKLOAD), "0.3"], check=True)
    finally:
        rec.send_signal(signal.SIGINT)
        rec.wait(timeout=60)
    # trace-cmd leaves the instance behind when it cannot reset it on this host.
    subprocess.run(["trace-cmd", "reset", "-B", "kmsinst"], capture_output=True)
    subprocess.run(["rmdir", str(live_tracefs / "instances" / "kmsinst")], capture_output=True)
    v6 = tmp / "inst-v6.dat"
    subprocess.run(["trace-cmd", "convert", "--file-version", "6", "-i", str(v7), "-o", str(v6)],
                   check=True, capture_output=True)
    return {"v7": v7, "v6": v6}


@pytest.mark.parametrize("version", ["v7", "v6"])
def test_instance_buffer_events_are_parsed(instance_trace, version, tmp_path):
    path = instance_trace[version]
    expected = report_counts(path)
    assert expected[("kmsinst", "mm_page_alloc")] > 0, "the instance recorded nothing"
    ds = tmp_path / "ds"
    kmemscope("parse", "-q", path, "-o", ds)
    got = kmemscope("sql", ds, "SELECT (SELECT count(*) FROM mm_page_alloc) AS a, "
                    "(SELECT count(*) FROM mm_page_free) AS f", "--format", "csv").stdout.splitlines()[1]
    allocs, frees = map(int, got.split(","))
    assert allocs == expected[("kmsinst", "mm_page_alloc")] + expected[("", "mm_page_alloc")]
    assert frees == expected[("", "mm_page_free")] + expected[("kmsinst", "mm_page_free")]
