"""kmemscope on a real Spark standalone cluster: a master and two workers on this machine.

Each is its own JVM (spark-class ...deploy.master.Master / ...deploy.worker.Worker,
spark://127.0.0.1:PORT), small (one core, 1 GiB per worker, 256 MiB daemon
heaps): other people run tests on the same two cores. A driver process of its
own (one SparkContext per process; the pytest run's shared local session is
another) parses three bundles on the cluster, runs every section of every
analysis on the mixed dataset (parity_data.py) and `compare --by kernel`; the
test then checks them against DuckDB in this process: same rows, same order,
same notes. It runs two applications: one on a single worker
(spark.cores.max=1: one one-core executor) that parses and compares, and one on
both workers that also runs every section, and checks how many executors each
had; the parse, summary and comparison must not depend on it (a test of equal results, not of speed:
benchmarks/fleet_bench.py measures speed). Executors get kmemscope, its native decoder, DuckDB and
pyarrow the way a fleet's do (docs/fleet.md): from the archive `kmemscope spark-env` packs
(once per test run, from the newest dist/kmemscope-*.whl or a wheel built here), passed as
spark.archives; the one-worker application also names spark.pyspark.python=./environment/bin/python,
the two-worker one leaves it to the engine. A task on each application reports where its
Python found kmemscope and the decoder: inside the unpacked archive, with nothing of the
checkout or its .venv on the path. Every JVM is stopped at the end, also on failure.
"""
import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import EXAMPLES, PROJECT_ROOT, built_once, die_with_this_process, skip_without_spark

skip_without_spark(allow_module_level=True)
# The cluster's driver runs every section in one fixture (its own bound: 1200 s).
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1500)]

from kmrun import popen as popen_cli  # noqa: E402
from parity_data import every_section  # noqa: E402
from test_determinism import _assert_same_rows, _norm, _same  # noqa: E402

SECTIONS = every_section()
BUNDLES = [EXAMPLES / "kmem-compaction", EXAMPLES / "thp-faults", EXAMPLES / "memory-pressure"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_home():
    import pyspark
    return Path(pyspark.__file__).parent


def _start(cmd, log, env):
    """A daemon JVM in a process group of its own (spark-class execs java)."""
    out = open(log, "w")
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, preexec_fn=die_with_this_process), out


def _stop(procs):
    """SIGTERM each group we started (a worker's executors and their Python workers are in
    its group), then SIGKILL what is left after 20 s."""
    for proc, _log in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 20
    for proc, log in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        log.close()


def _alive_workers(ui_port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
            return json.load(r).get("aliveworkers", 0)
    except OSError:
        return 0


def _pack_env(folder):
    """The executors' environment: `kmemscope spark-env` over the newest built wheel, or one
    built here from the checkout (pip wheel: the native decoder linked to this machine's
    libtraceevent, which the workers on this machine have)."""
    (folder / "tmp").mkdir()          # TMPDIR of what runs here: a stopped run leaves it here
    env = dict(os.environ, TMPDIR=str(folder / "tmp"))
    wheels = sorted(PROJECT_ROOT.glob("dist/kmemscope-*.whl"), key=lambda p: p.stat().st_mtime)
    if wheels:
        wheel = wheels[-1]
    else:
        build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                                "--disable-pip-version-check", "-w", str(folder), str(PROJECT_ROOT)],
                               capture_output=True, text=True, timeout=600, env=env)
        assert build.returncode == 0, f"pip wheel failed:\n{build.stderr[-2000:]}"
        (wheel,) = folder.glob("kmemscope-*.whl")
    archive = folder / "kmemscope-env.tar.gz"
    proc = popen_cli("spark-env", "-q", "--wheel", wheel, "-o", archive, env=env,
                     start_new_session=True,
                     preexec_fn=die_with_this_process)
    try:
        _out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:          # the test run was stopped: so is the packing, which
            os.killpg(proc.pid, signal.SIGTERM)      # removes its temporary venv and pip
            proc.wait(60)
    assert proc.returncode == 0, f"kmemscope spark-env failed: {err}"
    return archive


@pytest.fixture(scope="module")
def packed_env(tmp_path_factory):
    """The archive of `kmemscope spark-env`, made once per test run."""
    return built_once(tmp_path_factory, "spark-env", _pack_env)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(spark://127.0.0.1:PORT, the workers' folders): two workers; every JVM stopped when
    the module ends."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        skip_without_spark()
    tmp = tmp_path_factory.mktemp("cluster")
    home = _spark_home()
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_DAEMON_MEMORY="256m",
               SPARK_LOG_DIR=str(tmp), SPARK_NO_DAEMONIZE="1",
               SPARK_LOCAL_IP="127.0.0.1", PYTHONSAFEPATH="1")
    # the workers' executors see nothing of the test run's Python: they run the archive's
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON"):
        env.pop(name, None)
    port, ui = _free_port(), _free_port()
    master = f"spark://127.0.0.1:{port}"
    spark_class = str(home / "bin" / "spark-class")
    procs = []
    try:
        procs.append(_start([spark_class, "org.apache.spark.deploy.master.Master",
                             "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
                            tmp / "master.log", env))
        for i in (1, 2):
            wdir = tmp / f"worker{i}"
            wdir.mkdir()
            procs.append(_start([spark_class, "org.apache.spark.deploy.worker.Worker",
                                 "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                                 "--webui-port", str(_free_port()), "--work-dir", str(wdir),
                                 master], tmp / f"worker{i}.log", env))
        deadline = time.monotonic() + 120
        while _alive_workers(ui) < 2:
            dead = [p for p, _ in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join((tmp / n).read_text()[-800:] for n in
                                 ("master.log", "worker1.log", "worker2.log") if (tmp / n).exists())
                pytest.fail(f"the standalone cluster did not come up:\n{logs}")
            time.sleep(1)
        yield master, [tmp / "worker1", tmp / "worker2"]
    finally:
        _stop(procs)
    leftover = [p.pid for p, _ in procs if p.poll() is None]
    assert not leftover, f"JVMs still running: {leftover}"


DRIVER = r'''
import json, pickle, sys, dataclasses
from pathlib import Path
import pyarrow as pa
from kmemscope.parsers.spark_parse import parse_on_spark
from kmemscope.queries import engines, runner, sides as sd
from kmemscope.queries.comparison_model import compare_table

master, mixed, parsed_base, out_base, conf = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), json.loads(sys.argv[5])
counts = json.loads(sys.argv[6])
bundles = sys.argv[7:]


def where(_rows):
    """On an executor: where its Python found kmemscope and the native decoder."""
    import os, sys, kmemscope
    from kmemscope.parsers import _tracedat
    yield {"kmemscope": kmemscope.__file__, "decoder": _tracedat.__file__,
           "python": sys.executable, "prefix": sys.prefix, "cwd": os.getcwd(), "path": sys.path}


for workers in counts:          # one application per count of one-core workers, in turn
    out, parsed = out_base / str(workers), f"{parsed_base}-{workers}"
    app = dict(conf[str(workers)], **{"spark.cores.max": str(workers)})
    spec = engines.EngineSpec("spark", master, app)
    eng = engines.engine_for(spec)
    try:
        sc = eng.spark.sparkContext
        (out / "executor-python.json").write_text(json.dumps(
            {"driver": sc.pythonExec,
             "tasks": sc.parallelize(range(2 * workers), 2 * workers).mapPartitions(where).collect()}))
        entries = parse_on_spark(bundles, parsed, spark=eng.spark, labels={"fleet": "cluster"})
        (out / "parse.json").write_text(json.dumps(
            [{"error": str(e)} if isinstance(e, Exception) else {"run_id": e.run_id, "host": e.host}
             for e in entries]))
        t = runner.run_query("summary", parsed, engine=spec)
        with pa.OSFile(str(out / "parsed-summary.arrow"), "wb") as f, pa.ipc.new_file(f, t.schema) as w:
            w.write_table(t)
        # Every section once, on both workers: the local session's parity tests run each on
        # Spark already; here the point is the executors' shuffles across two JVMs.
        for qname in json.loads((out_base / "sections.json").read_text()) if workers == 2 else ():
            try:
                t = runner.run_query(qname, mixed, engine=spec)
            except Exception as exc:
                (out / f"{qname}.error").write_text(str(exc))
                continue
            with pa.OSFile(str(out / f"{qname}.arrow"), "wb") as f, pa.ipc.new_file(f, t.schema) as w:
                w.write_table(t)
        s = sd.load_sides(mixed, by="kernel", engine=spec)
        records = compare_table(s).records
        (out / "compare.pickle").write_bytes(pickle.dumps(
            (s.sides, s.runs, s.summary, s.notes, [dataclasses.asdict(r) for r in records])))
        # the block managers of the executors that joined (the driver has one too)
        (out / "executors.json").write_text(json.dumps(
            eng.spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1))
    finally:
        engines.shutdown()
'''
WORKER_COUNTS = (1, 2)


@pytest.fixture(scope="module")
def cluster_runs(mixed_dataset, cluster, packed_env, tmp_path_factory):
    """What the cluster's driver wrote, once per module: an application on one one-core
    worker, then one on both, in one driver process (a driver start and the dataset's
    parse are paid once, not once per count)."""
    tmp = tmp_path_factory.mktemp("cluster-driver")
    out = tmp / "out"
    for workers in WORKER_COUNTS:
        (out / str(workers)).mkdir(parents=True)
    (out / "sections.json").write_text(json.dumps([q for q, _a, _s in SECTIONS]))
    script = tmp / "driver.py"
    script.write_text(DRIVER)
    common = {"spark.driver.memory": "1g", "spark.executor.memory": "512m",
              "spark.executor.cores": "1",
              "spark.archives": f"{packed_env}#environment",
              "spark.executorEnv.PYTHONSAFEPATH": "1",
              "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
              "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    # the executors' Python named as the PySpark docs do, and (two workers) left to the engine
    conf = {"1": dict(common, **{"spark.pyspark.python": "./environment/bin/python"}), "2": common}
    parsed = tmp / "parsed"
    master, _workers = cluster
    proc = subprocess.run([sys.executable, script, master, str(mixed_dataset), str(parsed),
                           str(out), json.dumps(conf), json.dumps(WORKER_COUNTS),
                           *map(str, BUNDLES)],
                          capture_output=True, text=True, timeout=1800, cwd=tmp)
    assert proc.returncode == 0, f"the cluster's driver failed:\n{proc.stderr[-3000:]}"
    return out, parsed


@pytest.fixture(scope="module", params=WORKER_COUNTS, ids=["one-worker", "two-workers"])
def cluster_results(cluster_runs, request):
    """(what the driver wrote, the dataset it parsed, the count of one-core workers)."""
    out, parsed = cluster_runs
    return out / str(request.param), Path(f"{parsed}-{request.param}"), request.param


def test_executors_import_kmemscope_from_the_packed_environment(cluster_results, cluster):
    """Each task's Python is the archive's, unpacked in an executor's folder under a worker's
    work dir; kmemscope and its native decoder come from there, and nothing of the checkout
    (nor its .venv, where the driver's editable install lives) is on the executor's path."""
    out, _parsed, workers = cluster_results
    _master, worker_dirs = cluster
    seen = json.loads((out / "executor-python.json").read_text())
    assert seen["driver"] == "./environment/bin/python"       # what the executors run
    assert len(seen["tasks"]) == 2 * workers
    for task in seen["tasks"]:
        cwd = Path(task["cwd"])
        assert any(cwd.is_relative_to(w) for w in worker_dirs), task
        env = cwd / "environment"
        assert Path(task["prefix"]) == env, task
        for name in ("kmemscope", "decoder"):
            assert Path(task[name]).is_relative_to(env / "lib"), (name, task)
        assert Path(task["decoder"]).name.startswith("_tracedat.") and task["decoder"].endswith(".so")
        for entry in task["path"]:
            # the cluster's own Spark (pyspark.zip, py4j: here pip's pyspark in the .venv) is
            # on every executor's path; nothing else of the checkout or its .venv
            entry = (cwd / entry).resolve()
            assert entry.is_relative_to(_spark_home()) or not entry.is_relative_to(PROJECT_ROOT), \
                (str(entry), task)


def test_the_packed_environment_holds_the_decoder_and_no_pyspark(packed_env):
    """What the executors above ran with: the archive has kmemscope's native decoder and
    duckdb's and pyarrow's modules, and no pyspark (Spark gives the executors its own) nor
    pip or venv-pack (nothing installs there)."""
    import tarfile
    with tarfile.open(packed_env) as tar:
        names = tar.getnames()
    packages = {n.split("/")[3] for n in names if n.startswith("lib/python3") and n.count("/") >= 4}
    assert any("/kmemscope/parsers/_tracedat." in n and n.endswith(".so") for n in names)
    assert {"kmemscope", "duckdb", "pyarrow"} <= packages, sorted(packages)
    assert not packages & {"pyspark", "py4j", "pip", "venv_pack"}, sorted(packages)
    assert "bin/python" in names


def test_the_driver_had_one_executor_per_worker(cluster_results):
    out, _parsed, workers = cluster_results
    assert json.loads((out / "executors.json").read_text()) == workers


def test_parse_on_the_cluster_commits_every_bundle(cluster_results):
    import kmemscope
    out, parsed, _workers = cluster_results
    entries = json.loads((out / "parse.json").read_text())
    assert [e.get("error") for e in entries] == [None] * len(BUNDLES), entries
    runs = kmemscope.open(parsed).sql("SELECT run_id FROM runs ORDER BY run_id").rows()
    assert sorted(e["run_id"] for e in entries) == [r["run_id"] for r in runs]


def test_summary_of_the_cluster_parsed_dataset_equals_duckdb(cluster_results):
    import pyarrow as pa
    from kmemscope.queries import runner
    out, parsed, _workers = cluster_results
    on_cluster = pa.ipc.open_file(str(out / "parsed-summary.arrow")).read_all()
    duck = runner.run_query("summary", parsed)
    _assert_same_rows(duck, on_cluster, "summary, DuckDB vs the cluster")
    assert runner.notes_of(on_cluster) == runner.notes_of(duck)
    assert on_cluster.schema.metadata[b"kmemscope.engine"] == b"spark"


def test_compare_on_the_cluster_equals_duckdb(cluster_results, mixed_dataset):
    import dataclasses
    from kmemscope.queries import sides as sd
    out, _parsed, _workers = cluster_results
    c_sides, c_runs, c_summary, c_notes, c_rows = pickle.loads((out / "compare.pickle").read_bytes())
    s = sd.load_sides(mixed_dataset, by="kernel")
    from kmemscope.queries.comparison_model import compare_table

    rows = [dataclasses.asdict(r) for r in compare_table(s).records]
    assert (c_sides, c_runs, c_notes) == (s.sides, s.runs, s.notes)
    assert _same(_norm(c_summary), _norm(s.summary))
    assert rows, "compare gave no rows"
    assert _same(_norm(c_rows), _norm(rows))


@pytest.mark.parametrize("qname,a,section", SECTIONS, ids=[s[0] for s in SECTIONS])
def test_section_on_the_cluster_equals_duckdb(qname, a, section, cluster_runs, mixed_dataset):
    import pyarrow as pa
    from kmemscope.queries import runner
    out = cluster_runs[0] / "2"          # the application on both workers
    duck = runner.run_query(qname, mixed_dataset)      # every section runs on this dataset
    assert not (out / f"{qname}.error").exists(), (out / f"{qname}.error").read_text()
    on_cluster = pa.ipc.open_file(str(out / f"{qname}.arrow")).read_all()
    _assert_same_rows(duck, on_cluster, f"{qname}, DuckDB vs the cluster")
    assert runner.notes_of(on_cluster) == runner.notes_of(duck)
