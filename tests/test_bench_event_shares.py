"""benchmarks/capture_overhead.py --presets: each preset's events by name and their shares.

The bench counts a trace.dat's events per name from `trace-cmd report -R`; the oracle is
kmemscope's own parse of the same committed example (its native decoder: one table per
event), counted here from the Parquet files with pyarrow.
"""
import importlib.util
import json
import shutil

import pyarrow.parquet as pq

import requirements
from conftest import EXAMPLES
from project import ROOT


def bench():
    spec = importlib.util.spec_from_file_location("capture_overhead",
                                                  ROOT / "benchmarks" / "capture_overhead.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_events_by_name_match_the_parsed_tables(examples_dataset):
    if shutil.which("trace-cmd") is None:
        requirements.skip("setup", "trace-cmd is not installed")
    counts = bench().events_by_name(EXAMPLES / "kmem-compaction" / "trace.dat")
    runs = pq.read_table(examples_dataset / "runs").to_pylist()
    (run,) = [r["run_id"] for r in runs if "kmem-compaction" in (r.get("source") or "")]
    parsed = {}
    for table in sorted(p.name for p in examples_dataset.iterdir() if p.name.startswith("mm_")):
        part = examples_dataset / table / ("run_id=" + run)
        if part.is_dir():
            parsed[table] = pq.read_table(part).num_rows
    assert parsed and counts == {name: n for name, n in parsed.items() if n}
    # the example's manifest counts the same events in all
    manifest = json.loads((EXAMPLES / "kmem-compaction" / "manifest.json").read_text())
    assert sum(counts.values()) == manifest["events_recorded"]


def test_event_shares_are_largest_first_and_sum_to_the_whole():
    lines = bench().event_shares({"mm_page_free": 300, "mm_page_alloc": 600, "x": 100})
    assert [l.split()[0] for l in lines] == ["mm_page_alloc", "mm_page_free", "x"]
    assert [l.split()[2] for l in lines] == ["60.00%", "30.00%", "10.00%"]
    assert bench().event_shares({}) == ["  (no event recorded)"]


def test_the_presets_bench_measures_standard_between_light_and_default():
    b = bench()
    assert b.BENCH_PRESETS == ("light", "standard", "default")
    # every preset's flight recorder and trace-cmd record sit between two untraced runs
    modes = [m for m, _ in b.ROUND]
    assert modes[0::3] == ["none"] * 4
    assert modes[1::3] == ["flight-light", "flight-standard", "flight-default"]
    assert modes[2::3] == ["trace-cmd-light", "trace-cmd-standard", "trace-cmd-default"]
