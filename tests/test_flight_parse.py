"""`kmemscope parse DIR` on a flight directory: one run per bundle, labelled with its trigger.

The flight directory is laid out as `record --flight` writes it (flight.json, one
folder per trigger, a .partial- folder still being written), with the real
6.18 bundles of examples/ as its bundles and each manifest's trigger set here.
tests/test_flight.py records a real one.
"""
import json
import shutil
from pathlib import Path

from kmrun import kmemscope

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
