"""Apache Spark as an engine (pip install 'kmemscope[spark]', Java 17+).

Spark is the scheduler of per-run work. A named analysis (runner.Plan) runs as
Spark tasks over groups of consecutive runs (in run_id order), cut by bytes on
disk into about TASKS_PER_CORE tasks per core, never splitting a run
(group_runs). A task runs runner.run_local, the same DuckDB path as the DuckDB
engine, once over its group: one connection, one set of views, queries/lib/
views and run facts for the whole group, building and caching the runs' derived
tables (pairing, stacks: queries/derived_tables.py) in the same task; it sends back
the rows as Arrow. The driver concatenates the groups in run_id order; every
section's ORDER BY starts with run_id and is total, so each group's rows and
their concatenation equal DuckDB's in value and order by construction. The
largest groups go out first; each task gives DuckDB the task's cores
(spark.task.cpus).

    spec = EngineSpec("spark", "spark://head:7077", {"spark.executor.memory": "2g"})
    table = runner.run_query("pfn_reuse.cross_cpu", "ds", engine=spec)   # pyarrow.Table
    engines.release(spec)

Executors need kmemscope and DuckDB (the archive of `kmemscope spark-env` passed as
spark.archives=ENV.tar.gz#environment, whose Python the executors then run, or
kmemscope installed on every node: docs/fleet.md) and the dataset at the same
path (a shared mount) or URL (s3://, read with the AWS settings of the
executors' environment). FILE parameters (at most 1 MiB) travel with the task.

Ad-hoc SQL (`kmemscope sql --engine spark`, Dataset.sql) is Spark SQL over the
whole dataset: SparkBackend translates the DuckDB text with spark_sql.py. Each
dataset table is read with basePath partition discovery and partition type
inference off, so run_id stays a string (an all-digit id would become a
number). Runs whose formats give a column different widths (gfp_flags is 32
bits on kernels up to 5.15, 64 after; datasets of format 1) are read in groups
of equal schema and widened before the union, because Spark's schema merging
refuses that. uint64 columns are DECIMAL(20,0) in Spark, exact; results give
them back as uint64 where every value fits. SparkEngine(uint64="int64") reads
them as BIGINT holding the same bits (2^64-1 as -1): faster, for experiments.
Parameters are bound by spark.sql(query, args=...), never pasted into SQL
text. An s3:// dataset is read as s3a:// through hadoop-aws: a session made
for ad-hoc SQL over one gets storage.spark_conf()'s settings under the user's
--spark-conf.
"""
import atexit
import bisect
import contextlib
import dataclasses
import functools
import itertools
import os
import shutil
import sys
import tempfile
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

from kmemscope.dataset import storage
from kmemscope.dataset.handle import DatasetRef
from kmemscope.dataset.schema import TABLE_COLUMNS
from kmemscope.common.errors import KmemscopeError, QueryError

from . import spark_env, spark_sql
from .base import PlanRows, plan_of_runs

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    # run_id=0123 must stay the string '0123'
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    # DuckDB gives NULL for x / 0 and wraps nothing: ANSI mode would raise instead
    "spark.sql.ansi.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.log.level": "ERROR",
    "spark.ui.showConsoleProgress": "false",
    # summary's plan (about 160 stages) ran out of the default 1 GiB driver heap over s3a
    "spark.driver.memory": "2g",
    # Size estimates after window functions are far off: thp's trace model had Spark
    # broadcast a table that did not fit the driver. Joins shuffle instead.
    "spark.sql.autoBroadcastJoinThreshold": "-1",
}
# Tasks per core of the session: a plan's runs are cut into this many groups per core, so
# that a task's fixed cost (a DuckDB connection, the views, the run facts) is paid per
# group, and a slow group still leaves the other cores work to take.
TASKS_PER_CORE = 3
_WIDER = ["TINYINT", "SMALLINT", "INT", "BIGINT", "DECIMAL(20,0)"]
JAVA_HINT = ("Spark needs Java 17 or later: apt-get install openjdk-17-jre-headless, "
             "or set JAVA_HOME")


def _spark_log_path():
    return Path(tempfile.gettempdir()) / f"kmemscope-spark-{os.getuid()}.log"


@functools.lru_cache(maxsize=None)
def _private_warehouse():
    """A folder of this process for Spark's catalog, removed at its exit. Spark's default
    is spark-warehouse/ in the working folder, which `sql` would leave in the user's."""
    folder = tempfile.mkdtemp(prefix="kmemscope-spark-warehouse-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _drop_private_warehouse():
    """Remove the folder once its session stopped (a process that ends without running
    atexit, a test worker, keeps none); the next session makes a new one."""
    if _private_warehouse.cache_info().currsize:
        shutil.rmtree(_private_warehouse(), ignore_errors=True)
        _private_warehouse.cache_clear()


def session(master="local[*]", conf=None, app="kmemscope"):
    """A SparkSession with kmemscope's settings; conf: {key: value} or ["k=v", ...].

    The JVM's own log lines (log4j banners, warnings) go to a log file in the
    temporary directory, not to the terminal, where results and notes go.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise QueryError("the Spark engine needs pyspark",
                         "pip install 'kmemscope[spark]' (and Java 17 or later)") from None
    settings = dict(DEFAULT_CONF)
    # Variables the JVM and its Python workers must see; they are set only while the
    # session starts (the JVM copies the environment then, pyspark reads it then), so
    # that the calling program (a notebook, a test run) keeps its own environment.
    launch_env = {}
    if master.startswith("local"):
        # Local workers run this Python, the one with kmemscope (pyspark would take the
        # first python3 on PATH). They start with `python -m` in the driver's directory;
        # in a kmemscope source tree that would put its top folder ahead of the package.
        launch_env["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON", sys.executable)
        launch_env["PYTHONSAFEPATH"] = os.environ.get("PYTHONSAFEPATH", "1")
    for k, v in _conf_items(conf):
        settings[k] = v
    if "spark.sql.warehouse.dir" not in settings:    # (made only when none is given)
        settings["spark.sql.warehouse.dir"] = _private_warehouse()
    if not settings.get("spark.pyspark.python") and not master.startswith("local"):
        # An environment archive of `kmemscope spark-env` (spark_env.py) unpacked as
        # ./environment: the executors' workers run its Python. (A local master's workers
        # start in the driver's folder, not where Spark unpacks archives: they run this
        # Python, which has kmemscope.)
        python = spark_env.executor_python(settings.get("spark.archives"))
        if python:
            settings["spark.pyspark.python"] = python
    if settings.get("spark.pyspark.python"):
        # The Python of the executors' workers (kmemscope installed there, or a venv archive
        # on spark.archives: docs/fleet.md). pyspark reads it from the environment when the
        # driver is a Python program rather than spark-submit. The driver is this Python,
        # whatever the executors run: said so for Spark too (a relative path such as
        # ./environment/bin/python exists only in an executor's folder).
        launch_env["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
        settings.setdefault("spark.pyspark.driver.python", sys.executable)
    builder = SparkSession.builder.master(master).appName(app)
    for k, v in settings.items():
        builder = builder.config(k, v)
    log = _spark_log_path()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    try:
        # The JVM inherits fds 1 and 2 when it starts, and writes warnings to both (the
        # code cache's go to stdout): point them at the log for its lifetime, so that
        # results on stdout stay clean.
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        with _environment(launch_env):
            spark = builder.getOrCreate()
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = JAVA_HINT if "JAVA" in first.upper() else f"the JVM's log: {log}"
        raise QueryError(f"could not start Spark ({master}): {first}", hint) from None
    finally:
        for target, fd in zip((1, 2), saved):
            os.dup2(fd, target)
            os.close(fd)
    spark.sparkContext.setLogLevel("ERROR")
    _quiet_pyspark_error_logs()
    return spark


@contextlib.contextmanager
def _environment(values):
    """os.environ with `values` set for the duration, then exactly as it was."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _quiet_pyspark_error_logs():
    """pyspark logs every SQL error as a page of JSON on stderr before raising it;
    kmemscope reports the error in one line itself."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True


def _conf_items(conf):
    if not conf:
        return []
    items = conf.items() if isinstance(conf, dict) else (str(c).split("=", 1) for c in conf)
    out = []
    for item in items:
        if len(item) != 2 or not str(item[0]).strip():
            raise QueryError(f"--spark-conf {'='.join(map(str, item))!r} is not KEY=VALUE",
                             "e.g. --spark-conf spark.executor.memory=8g")
        out.append((str(item[0]).strip(), str(item[1])))
    return out


def _q(name):
    """A Spark identifier, backquoted."""
    return "`" + str(name).replace("`", "``") + "`"


def _spark_type_name(dt):
    return dt.simpleString().upper()


class SparkEngine:
    """One SparkSession (made on first use) for any number of queries, one at a time."""

    name = "spark"

    def __init__(self, master="local[*]", conf=None, uint64="decimal", spark=None, tasks=None):
        """tasks: how many tasks a named analysis is cut into (None: TASKS_PER_CORE per
        core; 1: all runs in one task; a number >= the runs: one run per task)."""
        if uint64 not in spark_sql.UINT64_MODES:
            raise ValueError(f"uint64 must be one of {spark_sql.UINT64_MODES}")
        _conf_items(conf)                      # a bad --spark-conf fails before the JVM starts
        self.master, self.conf, self.uint64, self.tasks = master, conf, uint64, tasks
        self._spark, self._own = spark, spark is None
        self._s3 = False                       # a session for s3 datasets: hadoop-aws settings
        self._lock = threading.Lock()
        # (table dir, files) -> DataFrame: reading a table lists and reads footers; a
        # run's files never change (run ids are content hashes), so later queries reuse it
        self._frames = {}

    @property
    def spark(self):
        if self._own and self._spark is not None and self._spark.sparkContext._jsc is None:
            # stopped elsewhere (a session with other jars took its place): start anew
            self._spark = None
            self._frames.clear()
        if self._spark is None:
            conf = self.conf
            if self._s3:
                conf = {**storage.spark_conf(), **dict(_conf_items(self.conf))}
            self._spark = session(self.master, conf)
        return self._spark

    def _use_s3(self):
        """Make the session able to read s3a://: settings at start, else its Hadoop conf now."""
        if self._spark is None:
            self._s3 = True
            return
        if self._s3:
            return
        self._s3 = True
        hadoop = self._spark.sparkContext._jsc.hadoopConfiguration()
        mine = dict(_conf_items(self.conf))
        for k, v in storage.spark_conf().items():
            if k.startswith("spark.hadoop.") and k not in mine:
                hadoop.set(k[len("spark.hadoop."):], v)

    def run_plan(self, plan, dataset, local, threads=None, progress=None):
        """Tasks over groups of consecutive runs, each running `local` (DuckDB) once over
        its group; the driver concatenates the groups' rows in run_id order
        (engines/base.py Engine).

        threads: ignored; a task gives DuckDB the task's cores (spark.task.cpus).
        """
        import pyarrow as pa

        runs = sorted(plan.chosen)
        if not runs:
            return local(plan, str(dataset), 1, progress)
        files = _file_params(plan)
        sc = self.spark.sparkContext
        sizes = [(run, _run_bytes(plan, run)) for run in runs]
        groups = group_runs(sizes, self._task_count(sc, len(runs)))
        weight = dict(sizes)
        # largest groups first: the last tasks to start are the short ones
        items = sorted(((i, plan_of_runs(plan, g)) for i, g in enumerate(groups)),
                       key=lambda item: (-sum(weight[r] for r in item[1].chosen), item[0]))
        task = functools.partial(_run_task, local=local, dataset=str(dataset), files=files)
        if progress:
            progress(f"{plan.qname}: {len(runs)} run{'s' if len(runs) != 1 else ''} in "
                     f"{len(groups)} Spark task{'s' if len(groups) != 1 else ''}")
        try:
            sc.setJobDescription(f"kmemscope {plan.qname} over {len(runs)} runs")
            out = sc.parallelize(items, len(items)).map(task).collect()
        except Exception as exc:
            module = type(exc).__module__ or ""
            if not module.startswith(("pyspark", "py4j")):
                raise
            raise QueryError(f"query {plan.qname} failed on Spark: {_spark_reason(exc)}",
                             "every executor needs kmemscope and duckdb (kmemscope spark-env "
                             "packs them for spark.archives), and the dataset at the same path "
                             "(docs/fleet.md)") from None
        finally:
            sc.setJobDescription(None)
        by_group = {r[0]: r for r in out}
        order = range(len(groups))
        for i in order:
            err = by_group[i][4]
            if err is not None:
                cls, message, hint = err
                raise cls(message, hint)
        # groups are consecutive in run_id order and each task's rows are in its section's
        # ORDER BY, which starts with run_id: concatenated, they are DuckDB's rows in order
        tables = [pa.ipc.open_stream(by_group[i][1]).read_all() for i in order]
        table = pa.concat_tables(tables, promote_options="permissive")
        facts = sorted((f for i in order for f in by_group[i][2]), key=lambda f: f["run_id"])
        mts = [m for i in order for m in by_group[i][3]]
        return PlanRows(table, facts, mts)

    def _task_count(self, sc, nruns):
        """How many tasks a plan over `nruns` runs is cut into: self.tasks, else
        TASKS_PER_CORE per core of the session (its default parallelism)."""
        if self.tasks:
            return max(1, min(nruns, int(self.tasks)))
        return max(1, min(nruns, TASKS_PER_CORE * max(1, int(sc.defaultParallelism))))

    def open(self, dataset, chosen, parts, tables, threads=None):
        if DatasetRef.of(dataset).is_s3:
            self._use_s3()
        # Temp views are per session: one query at a time keeps them apart.
        self._lock.acquire()
        try:
            return SparkBackend(self, dataset, chosen, parts, tables)
        except BaseException:
            self._lock.release()
            raise

    def close(self):
        self._frames.clear()
        if self._own and self._spark is not None:
            self._spark.stop()
            self._spark = None
            _drop_private_warehouse()


class SparkBackend:
    """The chosen runs of a dataset as Spark temp views, for one query."""

    name = "spark"
    where = " on Spark"

    def __init__(self, engine, dataset, chosen, parts, tables):
        self.engine, self.spark, self.uint64 = engine, engine.spark, engine.uint64
        self.dataset, self.chosen, self.parts = str(dataset), list(chosen), parts
        self._registered = set()
        self._cached = []
        for name in sorted(tables):
            self._register_table(name)

    # ------------------------------------------------------------ tables

    def read_table(self, name, runs=None):
        """DataFrame of dataset table `name` over `runs` (default: the chosen runs), or None."""
        runs = self.chosen if runs is None else runs
        # by name, not through this process's pins (dataset/snapshot.py): executors may run
        # on other hosts, where its /proc/<pid>/fd means nothing
        files = [str(f) for r in runs for f in self.parts.get(name, {}).get(r, [])]
        if not files:
            return None
        return self._read_files(_base_of(files), files)

    def _read_files(self, base, files):
        key = (base if storage.is_url_file(base) else os.path.realpath(base), tuple(files),
               self.uint64)
        df = self.engine._frames.get(key)
        if df is None:
            df = self.engine._frames[key] = self._read_groups(base, files)
        return df

    def _read_groups(self, base, files):
        import pyarrow.parquet as pq
        from pyspark.sql import functions as F

        # One read per distinct file schema (a kernel era), widened, then one union.
        groups: dict = {}
        for f in files:
            groups.setdefault(str(storage.read_schema(f).remove_metadata()), []).append(f)
        if storage.is_url_file(base):
            frames = _read_s3(self.spark, base, groups.values())
        else:
            frames = [self.spark.read.option("basePath", base).parquet(*fs)
                      for fs in groups.values()]
        types: dict = {}
        for df in frames:
            for fld in df.schema.fields:
                types.setdefault(fld.name, set()).add(_spark_type_name(fld.dataType))
        target = {}
        for col, seen in types.items():
            if len(seen) > 1:
                if not seen <= set(_WIDER):
                    raise QueryError(f"{base}: column {col} has types {', '.join(sorted(seen))} "
                                     "in different runs")
                target[col] = max(seen, key=_WIDER.index)
        out: Any = None
        for df in frames:
            cols = [F.col(_q(c)).cast(target[c]).alias(c) if c in target else F.col(_q(c))
                    for c in df.columns]
            df = df.select(*cols)
            out = df if out is None else out.unionByName(df, allowMissingColumns=True)
        if self.uint64 == "int64":
            out = out.select(*[_as_int64(c, _spark_type_name(t))
                               for c, t in ((f.name, f.dataType) for f in out.schema.fields)])
        return out

    def _register_table(self, name):
        from pyspark.sql import functions as F

        df = self.read_table(name) if name in self.parts else None
        need = TABLE_COLUMNS.get(name, {})
        if df is None:
            if not need:
                return
            df = self._empty(need)
        else:
            extra = [F.lit(None).cast(spark_sql.spark_type(t, self.uint64)).alias(c)
                     for c, t in need.items() if c not in df.columns]
            if extra:
                df = df.select("*", *extra)
        self._view(name, df)

    def _empty(self, columns):
        ddl = ", ".join(["`run_id` STRING"] + [
            f"{_q(c)} {spark_sql.spark_type(t, self.uint64)}" for c, t in columns.items()])
        return self.spark.createDataFrame([], ddl)

    def _view(self, name, df):
        df.createOrReplaceTempView(name)
        self._registered.add(name)

    def register_arrow(self, name, table):
        """A temp view `name` holding the (small) Arrow `table`."""
        self._view(name, self.spark.createDataFrame(table))

    # ------------------------------------------------------------ running

    def _run_statement(self, st, bound):
        args = {p: bound[p] for p in st.params if p in bound}
        missing = [p for p in st.params if p not in bound]
        if missing:
            raise QueryError(f"parameter {missing[0]} has no value")
        for fv in st.files:
            path = bound.get(fv.param)
            if path is None:
                raise QueryError(f"file parameter {fv.param} has no value")
            ddl = ", ".join(f"{_q(c)} {t}" for c, t in fv.columns.items())
            reader = self.spark.read.schema(ddl).option("header", fv.header)
            if fv.comment:
                reader = reader.option("comment", fv.comment)
            self._view(fv.view, reader.csv(str(path)))
        if st.kind == "view":
            if args:
                raise QueryError(f"view {st.name} holds a parameter")
            # sql-safe: the name comes from kmemscope's own .sql files, backquoted
            self.spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {_q(st.name)} AS {st.sql}")
            self._registered.add(st.name)
            return None
        df = self.spark.sql(st.sql, args=args) if args else self.spark.sql(st.sql)
        if st.kind == "table":
            # computed now, as DuckDB does: no lineage to views replaced later
            self._view(st.name, df.localCheckpoint(eager=True))
            return None
        return df

    def run_script(self, sql, params):
        """Translate DuckDB `sql` and run each statement (views, temp tables)."""
        for st in spark_sql.translate(sql, self.uint64):
            self._run_statement(st, params or {})

    def query_arrow(self, sql, params):
        """Translate DuckDB `sql`; run its statements; the last one's rows as Arrow."""
        statements = spark_sql.translate(sql, self.uint64)
        if not statements or statements[-1].kind != "select":
            raise QueryError("the last statement must be a SELECT")
        for st in statements[:-1]:
            self._run_statement(st, params or {})
        return _uint64_back(self._run_statement(statements[-1], params or {}).toArrow())

    @staticmethod
    def error_text(exc):
        """One line for a Spark or translation error (None: not one, let it through)."""
        if isinstance(exc, spark_sql.TranslationError):
            return f"no exact Spark translation: {exc}"
        module = type(exc).__module__ or ""
        if module.startswith(("pyspark", "py4j")):
            text = str(exc).strip()
            return text.splitlines()[0] if text else type(exc).__name__
        return None

    def close(self):
        try:
            for name in self._registered:
                self.spark.catalog.dropTempView(name)
        finally:
            self.engine._lock.release()


def group_runs(sizes, tasks):
    """[(run, bytes)] in run_id order -> `tasks` lists of consecutive runs of about equal bytes.

    A run is never split and no group is empty (there are min(tasks, runs)
    groups). The cut after group j is the first run at which the running total
    reaches j/tasks of all bytes. Groups of consecutive runs keep every task's
    rows, and so their concatenation, in run_id order. Runs of unknown size
    (files behind a URL: 0 bytes) count as one byte each.
    """
    n = len(sizes)
    if n == 0:
        return []
    k = max(1, min(int(tasks), n))
    reached = list(itertools.accumulate(max(1, int(b)) for _r, b in sizes))
    total = reached[-1] if reached else 0
    bounds = [0]
    for j in range(1, k):
        target = -(-total * j // k)
        cut = bisect.bisect_left(reached, target) + 1        # up to the run that reaches it
        if cut >= 2 and target - reached[cut - 2] < reached[cut - 1] - target:
            cut -= 1                                         # nearer the target without it
        # at least one run in this group, and one left for each group after it
        bounds.append(min(max(cut, bounds[-1] + 1), n - (k - j)))
    bounds.append(n)
    return [[r for r, _b in sizes[a:b]] for a, b in zip(bounds, bounds[1:])]


def _run_bytes(plan, run):
    """A run's size on disk (its files' sizes when they are local; 0 for URLs)."""
    total = 0
    for files in plan.parts.values():
        for f in files.get(run, []):
            try:
                total += os.stat(f).st_size
            except (OSError, ValueError, TypeError):
                pass
    return total


def _file_params(plan):
    """{param: (file name, bytes)} of the plan's FILE parameters: a task gets their content,
    not a path that only the driver has (catalog.py bounds them to 1 MiB)."""
    out = {}
    for p in plan.analysis.params.values():
        value = plan.bound.get(p.name)
        if p.type == "FILE" and value is not None:
            out[p.name] = (Path(value).name, Path(value).read_bytes())
    return out


def _run_task(item, local, dataset, files):
    """On an executor: run the plan of one group of runs with DuckDB (one connection, one
    set of views and run facts for the group); its rows as Arrow IPC bytes.

    A KmemscopeError comes back as a value (class, message, hint), not as a task
    failure that Spark would retry and wrap: the driver raises it as it is.
    """
    import pyarrow as pa
    from pyspark import TaskContext

    group, plan = item
    ctx = TaskContext.get()
    threads = max(1, int(ctx.cpus())) if ctx is not None else 1
    try:
        with tempfile.TemporaryDirectory(prefix="kmemscope-task-") as tmp:
            if files:
                bound = dict(plan.bound)
                for name, (fname, data) in files.items():
                    path = Path(tmp) / name
                    path.mkdir()
                    (path / fname).write_bytes(data)
                    bound[name] = str(path / fname)
                plan = dataclasses.replace(plan, bound=bound)
            rows = local(plan, dataset, threads, None)
    except KmemscopeError as exc:
        return group, None, None, None, (type(exc), exc.args[0] if exc.args else str(exc), exc.hint)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.table.schema) as writer:
        writer.write_table(rows.table)
    return group, sink.getvalue().to_pybytes(), rows.facts, rows.mts, None


def _spark_reason(exc):
    """The line of a failed Spark job's error that says why (not py4j's call site)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for marker in ("Error:", "Exception:"):
        for ln in reversed(lines):
            if ln.startswith(("at ", "File ")):
                continue
            if marker in ln and not ln.startswith(("py4j", "Traceback")):
                return ln[:300]
    return lines[0][:300] if lines else type(exc).__name__


def _base_of(files):
    """The table directory of `files` (the parent of their run_id= directories): Spark's
    basePath, so that run_id comes from the path. Every file of one read shares it."""
    first = str(files[0])
    if storage.is_url_file(first):
        return first.rsplit("/", 2)[0]
    return str(Path(first).parent.parent)


def _read_s3(spark, base, groups):
    """spark.read of s3 files as s3a://; a failure (no hadoop-aws, no access) in one line."""
    try:
        return [spark.read.option("basePath", storage.spark_path(base))
                .parquet(*[storage.spark_path(f) for f in fs]) for fs in groups]
    except Exception as exc:
        module = type(exc).__module__ or ""
        if not module.startswith(("pyspark", "py4j")):
            raise
        text = " ".join(str(exc).split()) or type(exc).__name__
        hint = storage.S3_HINT
        if "S3AFileSystem" in text or "No FileSystem for scheme" in text:
            hint = (f"Spark needs hadoop-aws for s3a://: --spark-conf spark.jars.packages="
                    f"{storage.HADOOP_AWS}:{storage.hadoop_version() or '<Hadoop version>'}")
        raise QueryError(f"Spark cannot read {base}: {text[:300]}", hint) from None


def _as_int64(col, typ):
    from pyspark.sql import functions as F
    c = F.col(_q(col))
    if typ != "DECIMAL(20,0)":
        return c
    # the same 64 bits as a signed BIGINT: 2^64-1 -> -1
    wrapped = F.when(c >= F.lit(Decimal(2 ** 63)), c - F.lit(Decimal(2 ** 64))).otherwise(c)
    return wrapped.cast("bigint").alias(col)


def _uint64_back(table):
    """DECIMAL(20,0) columns (Spark's exact uint64) back to uint64 where every value fits."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for i, fld in enumerate(table.schema):
        if pa.types.is_decimal(fld.type) and fld.type.precision == 20 and fld.type.scale == 0:
            try:
                col = pc.cast(table.column(i), pa.uint64())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
            table = table.set_column(i, pa.field(fld.name, pa.uint64(), fld.nullable,
                                                 fld.metadata), col)
    return table
