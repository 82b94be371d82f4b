"""Parsing on Spark executors (parsers/spark_parse.py) against the serial parse.

Oracle: the same inputs parsed one by one with kmemscope.parse into another
dataset. Both must hold the same runs and, run by run, the same rows in every
table (compared in full, sorted); a bad input fails alike in both and does not
stop the others; `kmemscope info` prints the same. Then: a second Spark job
over the same inputs leaves the dataset as it was; a task whose Python worker
dies mid-staging is retried by Spark and leaves no debris; derive=derive_runs builds
the same derived tables as dataset/derived.py on the serial dataset.

The pytest run's shared Spark session serves most tests. A second driver, in
a subprocess on local[2,2] (a failed task gets a second attempt), runs the
retry test and then dies mid-commit for the crash test.
"""
import json
import shutil
import sys
import time

import pytest

from conftest import EXAMPLES, SPARK_TEST_CONF, skip_without_spark

skip_without_spark(allow_module_level=True)
pytestmark = pytest.mark.spark

import pyarrow.parquet as pq  # noqa: E402

import kmemscope  # noqa: E402
from kmemscope.common.errors import DatasetError, KmemscopeError, TraceFileError  # noqa: E402
from kmemscope.parsers import spark_parse  # noqa: E402
from kmrun import kmemscope as run_cli  # noqa: E402
from kmemscope.dataset.handle import DatasetRef

GOOD = [EXAMPLES / "kmem-compaction", EXAMPLES / "thp-faults", EXAMPLES / "memory-pressure"]


@pytest.fixture(scope="module")
def spark(spark_engine):
    return spark_engine.spark


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The three example bundles, a truncated bundle, a missing path and a packed copy."""
    tmp = tmp_path_factory.mktemp("inputs")
    bad = tmp / "truncated"
    shutil.copytree(EXAMPLES / "memory-pressure", bad)
    data = (EXAMPLES / "memory-pressure" / "trace.dat").read_bytes()
    (bad / "trace.dat").write_bytes(data[:500_000])
    # A distinct run: the thp-faults trace with bytes appended (a new content hash),
    # packed as `record --pack gz` does.
    import tarfile
    copy = tmp / "thp-copy"
    shutil.copytree(EXAMPLES / "thp-faults", copy)
    with open(copy / "trace.dat", "ab") as f:
        f.write(b"kmemscope-test-copy")
    packed = tmp / "thp-copy.tar.gz"
    with tarfile.open(packed, "w:gz") as tar:
        tar.add(copy, arcname="thp-copy")
    return [str(p) for p in (GOOD[0], bad, GOOD[1], tmp / "missing", packed, GOOD[2])]


@pytest.fixture(scope="module")
def serial(inputs, tmp_path_factory):
    ds = tmp_path_factory.mktemp("serial") / "ds"
    return ds, kmemscope.parse(inputs, str(ds), labels={"fleet": "test"}, on_error="skip")


@pytest.fixture(scope="module")
def on_spark(spark, inputs, tmp_path_factory):
    ds = tmp_path_factory.mktemp("spark") / "ds"
    seen = []
    out = spark_parse.parse_on_spark(inputs, ds, spark=spark, labels={"fleet": "test"},
                                     progress=lambda kind, source, entry: seen.append(
                                         (kind, source, entry)))
    return ds, out, seen


def _debris(ds):
    return sorted(p.name for p in ds.iterdir() if p.name.startswith(".parse-"))


def _table_rows(ds):
    """{(table, run_id): rows} over every partition of the dataset."""
    out = {}
    tables = (p for p in ds.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    for table in sorted(tables):
        for part in table.iterdir():
            run = part.name.split("=", 1)[1]
            out[(table.name, run)] = sum(pq.ParquetFile(f).metadata.num_rows
                                         for f in part.glob("*.parquet"))
    return out


def _sorted_rows(path, drop=()):
    """A partition's (or file's) rows as sorted tuples: an order-free full comparison."""
    t = pq.read_table(path)
    t = t.drop_columns([c for c in drop if c in t.column_names])
    rows = [tuple(repr(v) for v in r.values()) for r in t.to_pylist()]
    return t.schema.remove_metadata(), sorted(rows)


def _assert_same_dataset(a, b, runs):
    """Dataset `a` holds exactly `runs`, each equal to its namesake in `b`, table by table."""
    rows_a, rows_b = _table_rows(a), _table_rows(b)
    assert {r for _, r in rows_a} == set(runs)
    assert rows_a == {k: n for k, n in rows_b.items() if k[1] in runs}
    for (table, run) in rows_a:
        part = f"{table}/run_id={run}"
        # A packed bundle's source_file names where the parse unpacked it, a
        # temporary path that differs from one parse to the next, serial or not.
        drop = ("source_file",) if table == "runs" else ()
        assert _sorted_rows(a / part, drop) == _sorted_rows(b / part, drop), part


def test_runs_and_errors_match_the_serial_parse(serial, on_spark, inputs):
    ser_ds, ser = serial
    ds, out, seen = on_spark
    assert len(out) == len(inputs)
    for s, o in zip(ser, out):
        if isinstance(s, KmemscopeError):
            assert type(o) is type(s), (s, o)
            assert str(o) == str(s).splitlines()[0]
        else:
            assert isinstance(o, spark_parse.SparkRunSummary), o
            assert (o.run_id, o.events, o.tables, o.lost_events) == \
                (s.run_id, s.events, s.tables, s.lost_events)
            assert not o.replaced and not o.concurrent
    assert [type(e) for e in out].count(TraceFileError) == 2      # truncated, missing
    assert "truncated or corrupt" in str(out[1])
    # One progress call per input, each with the entry returned for it.
    assert sorted((src, id(e)) for kind, src, e in seen if kind == "run") == \
        sorted((src, id(e)) for src, e in zip(inputs, out))
    runs = [s.run_id for s in ser if not isinstance(s, KmemscopeError)]
    assert len(set(runs)) == 4
    _assert_same_dataset(ds, ser_ds, runs)
    assert _debris(ds) == [] and not list((ds).glob("*/.parse-*"))
    info_spark = run_cli("info", ds).stdout
    assert info_spark == run_cli("info", ser_ds).stdout
    assert "fleet=test" in info_spark


def test_second_job_gives_the_same_dataset(spark, on_spark, inputs, serial):
    ds, first, _ = on_spark
    before = {str(p.relative_to(ds)) for p in ds.rglob("*.parquet")}
    info = run_cli("info", ds).stdout
    again = spark_parse.parse_on_spark(inputs, ds, spark=spark, labels={"fleet": "test"})
    for a, b in zip(first, again):
        if isinstance(a, KmemscopeError):
            assert str(a) == str(b)
        else:
            assert b.run_id == a.run_id and b.replaced and not b.concurrent
    assert {str(p.relative_to(ds)) for p in ds.rglob("*.parquet")} == before
    assert run_cli("info", ds).stdout == info
    _assert_same_dataset(ds, serial[0], [a.run_id for a in first
                                         if not isinstance(a, KmemscopeError)])
    assert _debris(ds) == []


def test_failed_job_reports_its_inputs_and_leaves_no_debris(spark, tmp_path):
    """On local[2] a task gets one attempt: its dead worker aborts the job. The inputs not
    committed by then fail with Spark's reason; nothing is left in the dataset."""
    ds = tmp_path / "ds"
    sc = spark.sparkContext
    sc.setLocalProperty(spark_parse._KILL_FIRST_ATTEMPT, "kmem-compaction")
    try:
        out = spark_parse.parse_on_spark([str(GOOD[2]), str(GOOD[0])], ds, spark=spark)
    finally:
        sc.setLocalProperty(spark_parse._KILL_FIRST_ATTEMPT, None)
    assert isinstance(out[1], KmemscopeError), out
    assert "the Spark task failed" in str(out[1]) and "Python worker" in str(out[1])
    assert _debris(ds) == []
    committed = {e.run_id for e in out if isinstance(e, spark_parse.SparkRunSummary)}
    assert {p.name.split("=", 1)[1] for p in (ds / "runs").glob("run_id=*")} == committed


def test_driver_says_when_it_cannot_see_what_a_task_wrote(tmp_path):
    ds = tmp_path / "ds"
    ds.mkdir()
    driver = spark_parse._Driver(ds, ["host7.tar.zst"], time.time_ns(), None)
    driver.handle({"index": 0, "kind": "ok", "host": "exec-3", "attempt": "/nowhere/0-0-ab",
                   "summary": {"run_id": "0123456789abcdef", "source": "x", "events": 1}})
    err = driver.entries[0]
    assert isinstance(err, DatasetError)
    assert "exec-3" in str(err) and "cannot see" in str(err) and "shared" in str(err)


def test_executors_that_cannot_see_the_dataset_stop_the_job_early(spark, tmp_path):
    with pytest.raises(DatasetError, match="cannot see"):
        spark_parse._probe_executors(spark.sparkContext, tmp_path / "not-shared")



SECOND_DRIVER = """
import json, sys
from kmemscope.dataset import commit
from kmemscope.parsers import spark_parse
from kmemscope.queries.derived_tables import derive_runs
from kmemscope.queries.engines import spark_engine
retry_ds, crash_ds, compaction, thp, pressure = sys.argv[1:]
conf = json.loads(%r)
# This driver dies without its atexit (below): its catalog folder goes with the test's own.
conf["spark.sql.warehouse.dir"] = retry_ds + "-warehouse"
spark = spark_engine.session("local[2,2]", conf)
sc = spark.sparkContext
# 1. The first attempt of the kmem-compaction task dies mid-trace; Spark retries it.
sc.setLocalProperty(spark_parse._KILL_FIRST_ATTEMPT, "kmem-compaction")
out = spark_parse.parse_on_spark([compaction, pressure], retry_ds, spark=spark,
                                 labels={"fleet": "test"}, derive=derive_runs)
sc.setLocalProperty(spark_parse._KILL_FIRST_ATTEMPT, None)
print(json.dumps([{"type": type(e).__name__, "run_id": getattr(e, "run_id", None),
                   "attempt": getattr(e, "attempt", None),
                   "derive_seconds": getattr(e, "derive_seconds", None),
                   "derive_error": str(getattr(e, "derive_error", None) or "") or None,
                   "error": str(e) if isinstance(e, Exception) else None} for e in out]),
      flush=True)
# 2. This driver dies after the third rename of its first commit.
commit._CRASH_AFTER = "3"
spark_parse.parse_on_spark([thp, pressure], crash_ds, spark=spark)
""" % json.dumps(SPARK_TEST_CONF)


@pytest.fixture(scope="module", autouse=True)
def _second_driver_started(tmp_path_factory):
    """Started with the module's first test: its JVM starts while the other tests run."""
    import subprocess

    tmp = tmp_path_factory.mktemp("driver2")
    script = tmp / "driver.py"
    script.write_text(SECOND_DRIVER)
    retry_ds, crash_ds = tmp / "retry", tmp / "crash"
    proc = subprocess.Popen([sys.executable, script, retry_ds, crash_ds, *GOOD],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield proc, retry_ds, crash_ds
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def second_driver(_second_driver_started):
    import subprocess

    proc, retry_ds, crash_ds = _second_driver_started
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), retry_ds, crash_ds


def test_lost_task_is_retried_and_derive_matches(second_driver, serial):
    """The first attempt's Python worker dies mid-trace; Spark's retry commits the run."""
    from kmemscope.dataset.derived import DERIVED_DIR
    from kmemscope.queries.derived_tables import derive_runs, family_of

    proc, ds, _ = second_driver
    assert proc.stdout.strip(), proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[0])
    assert [e["type"] for e in out] == ["SparkRunSummary"] * 2, out
    assert out[0]["attempt"] == 1 and out[1]["attempt"] == 0       # the first was retried
    assert out[0]["derive_error"] is None and out[0]["derive_seconds"] > 0
    assert _debris(ds) == []
    ser_ds = serial[0]
    runs = [out[0]["run_id"], out[1]["run_id"]]
    _assert_same_dataset(ds, ser_ds, runs)
    derive_runs(DatasetRef.of(ser_ds), runs[:1])
    for name in family_of("page_pairs").tables:     # the example bundles have no stacks
        part = f"{DERIVED_DIR}/{name}/run_id={runs[0]}"
        assert _sorted_rows(ds / part)[1] == _sorted_rows(ser_ds / part)[1], part
        assert len(_sorted_rows(ds / part)[1]) > 1000


def test_driver_killed_mid_commit_is_rolled_forward(second_driver, serial):
    """A driver that dies between two renames of a commit leaves a journal; the next
    `kmemscope parse` finishes that commit and removes the job's work directory."""
    proc, _, ds = second_driver
    assert proc.returncode == 99, proc.stderr[-3000:]
    left = _debris(ds)
    assert len(left) == 2, left              # the job's folder and the journaled commit
    assert sum((ds / d / "commit.json").exists() for d in left) == 1
    assert not (ds / "runs").is_dir() or not any((ds / "runs").iterdir())
    run_cli("parse", GOOD[0], "-o", ds)     # any later parse recovers first
    assert _debris(ds) == []
    ser = {s.source: s.run_id for s in serial[1] if not isinstance(s, KmemscopeError)}
    done = {p.name.split("=", 1)[1] for p in (ds / "runs").iterdir()}
    crashed = done - {ser[str(GOOD[0])]}
    assert len(crashed) == 1 and crashed <= {ser[str(GOOD[1])], ser[str(GOOD[2])]}
    # The rolled-forward run is whole: every table equal to the serial parse's
    # (labels aside: that run's parse here had none).
    rows = {k: n for k, n in _table_rows(ds).items() if k[1] in crashed}
    assert rows == {k: n for k, n in _table_rows(serial[0]).items() if k[1] in crashed}
