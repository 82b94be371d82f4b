"""Benchmark results beside the trace: `metrics import`, a bundle's metrics.json, record --metrics.

Oracles: the values written into the files here, read back through plain
pyarrow (the Parquet partition) and through SQL; a bad file must leave the
dataset's bytes exactly as they were (a hash of every file before and after).
"""
import hashlib
import json
import os
import shutil
import time

import pyarrow.parquet as pq
import pytest
from conftest import EXAMPLES
from kmrun import kmemscope, rows_of


def snapshot(root):
    """{relative path: sha256} of every file under `root` (debris and changes show)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name == ".kmemscope.lock":
                continue
            p = os.path.join(dirpath, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    base = tmp_path_factory.mktemp("runmetrics")
    ds = base / "ds"
    kmemscope("parse", "-q", EXAMPLES / "kmem-compaction", "-o", ds, "--label", "kernel=a")
    kmemscope("parse", "-q", EXAMPLES / "thp-faults", "-o", ds, "--label", "kernel=b")
    runs = rows_of(kmemscope("sql", ds, "SELECT run_id, host FROM runs ORDER BY run_id",
                             "--format", "json"))
    return base, [r["run_id"] for r in runs]


@pytest.fixture
def ds(parsed, tmp_path):
    """A fresh copy of the parsed dataset for each test."""
    base, runs = parsed
    dest = tmp_path / "ds"
    shutil.copytree(base / "ds", dest)
    return dest, runs


def partition(ds, run):
    files = sorted((ds / "run_metrics" / f"run_id={run}").glob("*.parquet"))
    return sorted(tuple(r.values()) for f in files for r in pq.read_table(f).to_pylist())


def run_cli(*args):
    return kmemscope(*args, check=False, timeout=300)


def test_csv_and_json_import_and_reimport_replaces_that_metric(ds, tmp_path):
    ds, (a, b) = ds
    f = tmp_path / "m.csv"
    f.write_text(f"run,metric,value,unit,better\n{a},tps,1234.5,tps,higher\n"
                 f"{b[:10]},tps,1100,tps,higher\n{a},p99_ms,3.25,ms,lower\n")
    proc = run_cli("metrics", "import", ds, f)
    assert proc.returncode == 0, proc.stderr
    assert "imported 3 values of 2 metrics for 2 runs" in proc.stderr
    assert partition(ds, a) == [("p99_ms", 3.25, "ms", "lower", "import"),
                                ("tps", 1234.5, "tps", "higher", "import")]
    j = tmp_path / "m.json"
    j.write_text(json.dumps({"metrics": [{"run": a, "metric": "tps", "value": 999,
                                          "unit": "tps", "better": "higher"}]}))
    assert run_cli("metrics", "import", ds, j).returncode == 0
    assert partition(ds, a) == [("p99_ms", 3.25, "ms", "lower", "import"),
                                ("tps", 999.0, "tps", "higher", "import")]
    assert partition(ds, b) == [("tps", 1100.0, "tps", "higher", "import")]
    listed = rows_of(kmemscope("metrics", "list", ds, "--format", "json"))
    assert [(r["run_id"], r["metric"], r["value"]) for r in listed] == [
        (a, "p99_ms", 3.25), (a, "tps", 999.0), (b, "tps", 1100.0)]
    assert {r["labels"]["kernel"] for r in listed} == {"a", "b"}


def test_a_run_is_named_by_its_host_when_the_host_has_one_run(tmp_path):
    ds = tmp_path / "ds"
    kmemscope("parse", "-q", EXAMPLES / "thp-faults", "-o", ds)
    host = rows_of(kmemscope("sql", ds, "SELECT host FROM runs", "--format", "json"))[0]["host"]
    f = tmp_path / "m.csv"
    f.write_text(f"run,metric,value,unit,better\n{host},tps,5,,higher\n")
    assert run_cli("metrics", "import", ds, f).returncode == 0
    rows = rows_of(kmemscope("sql", ds, "SELECT value, unit FROM run_metrics", "--format", "json"))
    assert rows == [{"value": 5.0, "unit": ""}]


BAD = [
    ("no_run.csv", "run,metric,value,unit,better\nnosuchrun,tps,1,,higher\n", "no run 'nosuchrun'"),
    ("ambiguous.csv", "run,metric,value,unit,better\nvm,tps,1,,higher\n", "host 'vm' has 2 runs"),
    ("nan.csv", "run,metric,value,unit,better\n{a},tps,nan,,higher\n", "finite number"),
    ("text.csv", "run,metric,value,unit,better\n{a},tps,fast,,higher\n", "is not a number"),
    ("better.csv", "run,metric,value,unit,better\n{a},tps,1,,more\n", "better must be 'higher' or 'lower'"),
    ("header.csv", "run,metric,value\n{a},tps,1\n", "lacks better"),
    ("twice.csv", "run,metric,value,unit,better\n{a},tps,1,,higher\n{a},tps,2,,higher\n",
     "has metric 'tps' already"),
    ("reserved.csv", "run,metric,value,unit,better\n{a},vmstat.compact_stall,1,,lower\n",
     "prefix kmemscope uses"),
    ("control.csv", "run,metric,value,unit,better\n{a},\"t\x1bps\",1,,higher\n", "control characters"),
    ("cost.csv", "run,metric,value,unit,better\n{a},cost.kswapd_cpu_s,1,s,lower\n",
     "prefix kmemscope uses"),
    ("mthp.csv", "run,metric,value,unit,better\n{a},mthp.2048kB.anon_fault_alloc,1,,higher\n",
     "prefix kmemscope uses"),
    ("group.csv", "run,metric,value,unit,better\n{a},mthp,1,,higher\n", "name of a group"),
    ("underscore.csv", "run,metric,value,unit,better\n{a},tps,1_000,,higher\n", "is not a number"),
    ("arabic.csv", "run,metric,value,unit,better\n{a},tps,\u0661\u0662,,higher\n", "is not a number"),
    ("fullwidth.csv", "run,metric,value,unit,better\n{a},tps,\uff11\uff12,,higher\n",
     "is not a number"),
    ("huge.json", '[{{"run": "{a}", "metric": "x", "value": 10000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000, "better": "higher"}}]',
     "finite number"),
    ("empty.csv", "", "lacks run"),
    ("bool.json", '[{{"run": "{a}", "metric": "x", "value": true, "unit": "", "better": "higher"}}]',
     "value must be a number"),
    ("shape.json", '{{"rows": []}}', "expected a list"),
    ("extra.json", '[{{"run": "{a}", "metric": "x", "value": 1, "better": "higher", "oops": 1}}]',
     "unknown field 'oops'"),
    ("deep.json", "[" * 100000 + "]" * 100000, "nested too deeply"),
]


@pytest.mark.parametrize("name, text, says", BAD, ids=[b[0] for b in BAD])
def test_a_bad_metrics_file_is_one_line_and_imports_nothing(ds, tmp_path, name, text, says):
    ds, (a, b) = ds
    good = tmp_path / "good.csv"
    good.write_text(f"run,metric,value,unit,better\n{b},tps,7,,higher\n")
    assert run_cli("metrics", "import", ds, good).returncode == 0
    before = snapshot(ds)
    f = tmp_path / name
    # one good row first: a file with any bad row imports nothing at all
    body = text.replace("{a}", a).replace("{{", "{").replace("}}", "}")
    if name.endswith(".csv") and body.count("\n") > 1 and "ambiguous" not in name:
        head, rest = body.split("\n", 1)
        if "better" in head:
            body = f"{head}\n{a},other,1,,higher\n{rest}"
    f.write_text(body)
    proc = run_cli("metrics", "import", ds, f)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kmemscope: error: ") and says in lines[0], proc.stderr
    assert snapshot(ds) == before


@pytest.mark.parametrize("kind", ["missing", "fifo", "symlink", "directory"])
def test_a_metrics_file_that_is_not_a_regular_file_is_refused(ds, tmp_path, kind):
    ds, (a, _b) = ds
    real = tmp_path / "real.csv"
    real.write_text(f"run,metric,value,unit,better\n{a},tps,1,,higher\n")
    f = tmp_path / "m.csv"
    if kind == "fifo":
        os.mkfifo(f)
    elif kind == "symlink":
        f.symlink_to(real)
    elif kind == "directory":
        f.mkdir()
    before = snapshot(ds)
    proc = run_cli("metrics", "import", ds, f)
    assert proc.returncode in (1, 2) and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "kmemscope: error:" in proc.stderr
    assert snapshot(ds) == before


def bundle_copy(tmp_path, name="thp-faults"):
    dest = tmp_path / name
    shutil.copytree(EXAMPLES / name, dest)
    return dest


def test_bundle_metrics_json_is_loaded_at_parse_and_imports_survive_a_reparse(tmp_path):
    bundle = bundle_copy(tmp_path)
    (bundle / "metrics.json").write_text(json.dumps({"metrics": [
        {"metric": "fault_ms", "value": 12.5, "unit": "ms", "better": "lower"},
        {"metric": "tps", "value": 10, "unit": "tps", "better": "higher"}]}))
    ds = tmp_path / "ds"
    kmemscope("parse", "-q", bundle, "-o", ds)
    run = rows_of(kmemscope("sql", ds, "SELECT run_id FROM runs", "--format", "json"))[0]["run_id"]
    assert partition(ds, run) == [("fault_ms", 12.5, "ms", "lower", "bundle"),
                                  ("tps", 10.0, "tps", "higher", "bundle")]
    f = tmp_path / "m.csv"
    f.write_text(f"run,metric,value,unit,better\n{run},tps,11,tps,higher\n{run},extra,1,,lower\n")
    assert run_cli("metrics", "import", ds, f).returncode == 0
    # the bundle changes its own value; the imported ones stay, an import wins over the bundle
    (bundle / "metrics.json").write_text(json.dumps([
        {"metric": "fault_ms", "value": 13.0, "unit": "ms", "better": "lower"},
        {"metric": "tps", "value": 12, "unit": "tps", "better": "higher"}]))
    kmemscope("parse", "-q", bundle, "-o", ds)
    assert partition(ds, run) == [("extra", 1.0, "", "lower", "import"),
                                  ("fault_ms", 13.0, "ms", "lower", "bundle"),
                                  ("tps", 11.0, "tps", "higher", "import")]


def test_a_bad_bundle_metrics_json_fails_parse_in_one_line_before_decoding(tmp_path):
    bundle = bundle_copy(tmp_path)
    (bundle / "metrics.json").write_text('[{"metric": "x", "value": "slow", "better": "higher"}]')
    proc = run_cli("parse", bundle, "-o", tmp_path / "ds")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "metrics.json entry 1: value 'slow' is not a number" in lines[0]
    assert not (tmp_path / "ds" / "runs").exists()


def test_a_packed_bundle_keeps_its_metrics_json(tmp_path):
    import tarfile

    bundle = bundle_copy(tmp_path)
    (bundle / "metrics.json").write_text('[{"metric": "x", "value": 1, "better": "higher"}]')
    archive = tmp_path / "b.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(bundle, arcname="thp-faults")
    ds = tmp_path / "ds"
    kmemscope("parse", "-q", archive, "-o", ds)
    assert "x" in kmemscope("sql", ds, "SELECT metric FROM run_metrics").stdout


# ---------------------------------------------------------------- record --metrics

def test_record_metrics_copies_only_a_file_written_during_the_recording(tmp_path):
    from kmemscope.capture import bench_metrics
    from kmemscope.common.errors import CaptureError

    said = []
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    stale = tmp_path / "stale.json"
    stale.write_text('{"metrics": []}')
    old = time.time() - 3600
    os.utime(stale, (old, old))
    exp = bench_metrics.Expected(str(stale), ["true"])
    assert os.environ[bench_metrics.ENV] == str(stale)
    with pytest.raises(CaptureError, match="not written during this recording"):
        exp.copy_into(str(bundle), said.append)
    fresh = tmp_path / "fresh.json"
    exp = bench_metrics.Expected(str(fresh), ["true"])
    with pytest.raises(CaptureError, match="did not write"):
        exp.copy_into(str(bundle), said.append)
    fresh.write_text("not json")
    with pytest.raises(CaptureError, match="not readable JSON"):
        exp.copy_into(str(bundle), said.append)
    fresh.write_text(json.dumps({"metrics": [{"metric": "t", "value": 1, "better": "higher"}]}))
    exp.copy_into(str(bundle), said.append)
    assert json.loads((bundle / "metrics.json").read_text())["metrics"][0]["metric"] == "t"
    assert (bundle / "metrics.json").stat().st_mode & 0o777 == 0o600
    assert said == ["added metrics.json: 1 metric from %s" % fresh]
    with pytest.raises(CaptureError, match="needs a COMMAND"):
        bench_metrics.Expected(str(fresh), [])


def test_record_metrics_end_to_end(live_tracefs, tracing_lock, tmp_path):
    """A real recording whose command writes its results to $KMEMSCOPE_METRICS_OUT."""
    out = tmp_path / "m.json"
    bundle = tmp_path / "b"
    script = ("import json, os; json.dump({'metrics': [{'metric': 'loop_s', 'value': 0.5, "
              "'unit': 's', 'better': 'lower'}]}, open(os.environ['KMEMSCOPE_METRICS_OUT'], 'w'))")
    proc = run_cli("record", "-o", bundle, "--preset", "light", "--metrics", out, "--",
                   "python3", "-c", script)
    assert proc.returncode == 0, proc.stderr
    assert "added metrics.json: 1 metric" in proc.stderr
    ds = tmp_path / "ds"
    kmemscope("parse", "-q", bundle, "-o", ds)
    rows = rows_of(kmemscope("metrics", "list", ds, "--format", "json"))
    assert [(r["metric"], r["value"], r["source"]) for r in rows] == [("loop_s", 0.5, "bundle")]


def test_import_does_not_write_through_a_linked_table_folder(ds, tmp_path):
    ds, (a, _b) = ds
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(ds / "run_metrics", ignore_errors=True)
    (ds / "run_metrics").symlink_to(outside)
    f = tmp_path / "m.csv"
    f.write_text(f"run,metric,value,unit,better\n{a},tps,1,,higher\n")
    proc = run_cli("metrics", "import", ds, f)
    line = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(line) == 1 and "run_metrics" in line[0], proc.stderr
    assert not any(outside.iterdir())


def test_every_group_and_prefix_of_the_comparison_is_reserved():
    """An imported metric may take no name of kmemscope's own groups or rows (oracle: the
    comparison's own table of groups, queries/metrics.py GROUPS)."""
    from kmemscope.parsers.benchmark_results import RESERVED_NAMES, RESERVED_PREFIXES
    from kmemscope.queries.metrics import GROUPS

    assert set(GROUPS) <= set(RESERVED_NAMES)
    own = {g for g, kind in GROUPS.items() if kind not in ("summary", "imported")}
    assert {f"{g}." for g in own} <= set(RESERVED_PREFIXES)
