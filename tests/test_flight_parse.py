"""`kmemscope parse DIR` on a flight directory: one run per bundle, labelled with its trigger.

The flight directory is laid out as `record --flight` writes it (flight.json, one
folder per trigger, a .partial- folder still being written), with the real
6.18 bundles of examples/ as its bundles and each manifest's trigger set here.
tests/test_flight.py records a real one.
"""
import json
import re
import shutil
import subprocess
from pathlib import Path

from kmrun import kmemscope, rows_of

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def make_bundle(src, dest, reason, when):
    dest.mkdir()
    shutil.copy(src / "trace.dat", dest / "trace.dat")
    shutil.copytree(src / "procfs", dest / "procfs")
    manifest = json.loads((src / "manifest.json").read_text())
    manifest.setdefault("labels", {})["trigger"] = reason
    manifest["trigger"] = {"reason": reason, "time": {"wall": when}, "value": 42.0}
    (dest / "manifest.json").write_text(json.dumps(manifest))


def flight_dir(tmp_path):
    flight = tmp_path / "flight"
    flight.mkdir()
    (flight / "flight.json").write_text(json.dumps({"kind": "kmemscope flight directory"}))
    make_bundle(EXAMPLES / "memory-pressure", flight / "20261124T050223Z-manual", "manual",
                "2026-11-24T05:02:23Z")
    make_bundle(EXAMPLES / "thp-faults", flight / "20261124T050229Z-vmstat.compact_stall",
                "vmstat.compact_stall", "2026-11-24T05:02:29Z")
    # Not bundles: one still being written, and a link to a bundle elsewhere.
    make_bundle(EXAMPLES / "kmem-compaction", flight / ".partial-20261124T050300Z-manual", "manual",
                "2026-11-24T05:03:00Z")
    make_bundle(EXAMPLES / "kmem-compaction", tmp_path / "elsewhere", "manual", "x")
    (flight / "20261124T050301Z-linked").symlink_to(tmp_path / "elsewhere")
    return flight


def test_parse_adds_each_bundle_of_a_flight_directory_as_a_run_labelled_with_its_trigger(tmp_path):
    flight = flight_dir(tmp_path)
    ds = tmp_path / "ds"
    out = kmemscope("parse", flight, "-o", ds)
    assert out.stderr.count(" added: ") == 2, out.stderr
    info = json.loads(kmemscope("info", ds, "--format", "json").stdout)
    runs = {Path(r["source"]).name: r for r in info["runs"]}
    assert set(runs) == {"20261124T050223Z-manual", "20261124T050229Z-vmstat.compact_stall"}
    labels = {name: dict(r["labels"]) if not isinstance(r["labels"], dict) else r["labels"]
              for name, r in runs.items()}
    assert labels["20261124T050223Z-manual"]["trigger"] == "manual"
    assert labels["20261124T050229Z-vmstat.compact_stall"]["trigger"] == "vmstat.compact_stall"
    # Each run is its bundle's own: the same as parsing that bundle alone.
    for name, example in (("20261124T050223Z-manual", "memory-pressure"),
                          ("20261124T050229Z-vmstat.compact_stall", "thp-faults")):
        alone = tmp_path / ("alone-" + example)
        kmemscope("parse", EXAMPLES / example, "-o", alone)
        (run,) = json.loads(kmemscope("info", alone, "--format", "json").stdout)["runs"]
        assert (runs[name]["run_id"], runs[name]["events"]) == (run["run_id"], run["events"])


def test_a_flight_directory_without_bundles_is_one_error(tmp_path):
    flight = tmp_path / "flight"
    flight.mkdir()
    (flight / "flight.json").write_text("{}")
    out = kmemscope("parse", flight, "-o", tmp_path / "ds", check=False)
    assert out.returncode == 1
    lines = [l for l in out.stderr.splitlines() if l.strip()]
    assert lines == ["kmemscope: error: %s: flight directory without a bundle yet (a flight recorder "
                     "writes one when a trigger fires (kill -USR1 it))" % flight], out.stderr
    assert not (tmp_path / "ds").exists()


# ---------------------------------------------------------------- the window of a bundle

def report_times(trace_dat):
    """[(cpu, ts ns)] of every event line of `trace-cmd report` (the independent decoder)."""
    out = subprocess.run(["trace-cmd", "report", "-i", str(trace_dat)], capture_output=True,
                         text=True, check=True).stdout
    return [(int(c), int(s) * 10**9 + int(f.ljust(9, "0")))
            for c, s, f in re.findall(r"\[(\d+)\]\s+(\d+)\.(\d+):", out)]


def windowed_bundle(tmp_path, src, keep_s, after_s, covered_from=None):
    """A copy of `src` whose manifest is a flight bundle's: trigger in the middle of the trace."""
    times = sorted(ts for _, ts in report_times(src / "trace.dat"))
    trigger = (times[0] + times[-1]) // 2
    dest = tmp_path / "bundle"
    shutil.copytree(src, dest)
    m = json.loads((src / "manifest.json").read_text())
    m["labels"] = {"trigger": "manual"}
    m["trigger"] = {"reason": "manual", "time": {"mono_ns": trigger}}
    m["window"] = {"keep_s": keep_s, "after_s": after_s, "trigger_mono_ns": trigger,
                   "start_mono_ns": trigger - int(keep_s * 1e9),
                   "end_mono_ns": trigger + int(after_s * 1e9) + 5_000_000,
                   "tracing_since_mono_ns": times[0] - 1}
    if covered_from is not None:
        m["window"]["covered_from_mono_ns"] = covered_from
    (dest / "manifest.json").write_text(json.dumps(m))
    return dest, trigger, times


def event_span(ds):
    """(first, last) ts over every event table of the dataset, by SQL over the Parquet."""
    tables = rows_of(kmemscope("sql", ds, 'SELECT "table" FROM event_tables WHERE rows > 0',
                               "--format", "json"))
    union = " UNION ALL ".join('SELECT ts FROM "%s"' % t["table"] for t in tables)
    (row,) = rows_of(kmemscope("sql", ds, "SELECT min(ts) AS lo, max(ts) AS hi FROM (%s)" % union,
                               "--format", "json"))
    return row["lo"], row["hi"]


def run_of(ds):
    (run,) = json.loads(kmemscope("info", ds, "--format", "json").stdout)["runs"]
    return run


def test_a_flight_bundle_keeps_the_events_of_its_window_and_counts_the_rest_as_trimmed(tmp_path):
    src = EXAMPLES / "memory-pressure"
    span_s = (lambda t: (t[-1] - t[0]) / 1e9)(sorted(ts for _, ts in report_times(src / "trace.dat")))
    keep, after = span_s / 4, span_s / 8
    bundle, trigger, times = windowed_bundle(tmp_path, src, keep, after)
    start, end = trigger - int(keep * 1e9), trigger + int(after * 1e9)
    inside = sum(start <= ts <= end for ts in times)
    assert 0 < inside < len(times)
    out = kmemscope("parse", bundle, "-o", tmp_path / "ds")
    run = run_of(tmp_path / "ds")
    assert run["events"] == inside
    assert "%s outside the flight window trimmed" % format(len(times) - inside, ",") in out.stderr
    first, last = event_span(tmp_path / "ds")
    assert start <= first and last <= end and (last - first) / 1e9 <= keep + after
    # --whole-bundle keeps all of it
    kmemscope("parse", bundle, "-o", tmp_path / "whole", "--whole-bundle")
    assert run_of(tmp_path / "whole")["events"] == len(times)


def test_the_window_starts_where_every_cpu_has_events(tmp_path):
    """covered_from (the newest of the CPUs' oldest events in the ring buffer) later than
    trigger - keep: what lies before it is trimmed too."""
    src = EXAMPLES / "memory-pressure"
    events = report_times(src / "trace.dat")
    times = sorted(ts for _, ts in events)
    trigger = (times[0] + times[-1]) // 2
    covered = (times[0] + trigger) // 2
    bundle, _, _ = windowed_bundle(tmp_path, src, (trigger - times[0]) / 1e9, 0.0, covered)
    kmemscope("parse", bundle, "-o", tmp_path / "ds")
    assert run_of(tmp_path / "ds")["events"] == sum(covered <= ts <= trigger for ts in times)


def test_a_bad_window_is_one_error(tmp_path):
    bundle, _, _ = windowed_bundle(tmp_path, EXAMPLES / "memory-pressure", 1.0, 1.0)
    m = json.loads((bundle / "manifest.json").read_text())
    m["window"]["trigger_mono_ns"] = "soon"
    (bundle / "manifest.json").write_text(json.dumps(m))
    out = kmemscope("parse", bundle, "-o", tmp_path / "ds", check=False)
    assert out.returncode == 1
    lines = [l for l in out.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "no valid window.trigger_mono_ns" in lines[0], out.stderr
    assert "--whole-bundle" in lines[0]


def test_only_markers_of_later_pages_inside_the_window_are_lost():
    """Markers [(buffer, cpu, page ts, missed)], numbers written out by hand: each CPU's first
    top-level page carries what was overwritten before its data (before the window)."""
    from kmemscope.parsers.flight_window import Window, lost_in_window
    w = Window(start_ns=1000, end_ns=2000, trigger_ns=1500)
    markers = [("", 0, 1000, 500),        # cpu 0's first page, at the window's start: before it
               ("", 0, 1200, 7),          # a later page of cpu 0 inside: lost in the window
               ("", 1, 400, 90),          # cpu 1's first page, long before
               ("", 1, 2500, 3),          # after the window
               ("kmemscope-flight-after", 1, 1600, 4)]   # the --after buffer, inside
    assert lost_in_window(markers, w) == [("", 0, 1200, 7), ("kmemscope-flight-after", 1, 1600, 4)]


def test_the_window_comes_from_the_manifest_and_other_bundles_have_none():
    from kmemscope.parsers.flight_window import window_of
    m = {"trigger": {"reason": "manual"},
         "window": {"trigger_mono_ns": 10_000_000_000, "keep_s": 4, "after_s": 1.5,
                    "covered_from_mono_ns": 7_000_000_000, "tracing_since_mono_ns": 1}}
    w = window_of(m, "b")
    assert (w.start_ns, w.end_ns) == (7_000_000_000, 11_500_000_000)   # covered_from is later
    m["window"]["covered_from_mono_ns"] = 5_000_000_000
    assert window_of(m, "b").start_ns == 6_000_000_000                 # trigger - keep is later
    assert window_of({"labels": {}}, "b") is None                      # a single recording
    assert window_of(None, "b") is None                                # a bare trace.dat
