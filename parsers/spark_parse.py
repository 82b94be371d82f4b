"""Parse many bundles at once on Apache Spark executors (pip install 'kmemscope[spark]').

    spark = spark_backend.session(master="spark://head:7077")
    results = parse_on_spark(["/fleet/host1.tar.zst", ...], "/fleet/ds", spark=spark)

Each input is decoded in a Spark task, exactly as `kmemscope parse` decodes it
(parsers/ingest.py: a forked decoder child, untrusted input bounded), into a
directory inside the dataset. Tasks send the driver only a few numbers and that
directory's path, never table data. The driver commits each staged run with
dataset/commit.py's journal (`runs` partition last, under the dataset lock),
as the runs finish.

The dataset must therefore be on a file system that the driver and every
executor see at the same path (NFS, CephFS, Lustre, a local disk for local[N]),
with flock() working across hosts. Executors need kmemscope (its native
decoder and libtraceevent): the archive of `kmemscope spark-env` on
spark.archives, or kmemscope installed on every node; and they must be able to
read every input path.

Crash safety is that of `kmemscope parse`: the job works in one directory,
DATASET/.parse-<id>/, whose owner lock the driver holds; each task attempt
stages under its tasks/ folder. A dead driver leaves that directory without a
journal (the next parse removes it) or one commit's journal in its own
.parse-<id>/ (the next parse rolls it forward). Run ids are content hashes, so
a task that Spark retries, or the whole job run again, gives the same dataset.
"""
import json
import os
import shutil
import socket
import sys
import time
import traceback
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from kmemscope.common import errors
from kmemscope.common.errors import DatasetError, KmemscopeError
from kmemscope.dataset import commit as commit_mod
from kmemscope.dataset import format as dataset_format
from kmemscope.parsers.ingest import RunSummary, _leave_as_found, writable_dataset

TASKS = "tasks"
RESULT = "result.json"
POLL_S = 0.5
SHARED_HINT = ("put the dataset on a file system shared by the driver and every executor, "
               "at the same path")
# Test hook (a Spark local property): the first attempt of the task whose input
# ends with this string dies mid-staging, as a lost executor would.
_KILL_FIRST_ATTEMPT = "kmemscope.test.kill_first_attempt"


@dataclass
class SparkRunSummary(RunSummary):
    host: str = ""                    # the executor host that decoded it
    attempt: int = 0                  # Spark's attempt number of that task (0: first try)
    derive_seconds: float | None = None      # with derive: time its derived tables took
    derive_error: KmemscopeError | None = None


def parse_on_spark(sources, dataset, *, spark, labels=None, events=None, derive=None,
                   progress=None):
    """Parse `sources` into `dataset` on Spark; returns one entry per source, in order.

    An entry is a SparkRunSummary (a RunSummary, plus the executor host and
    the derive outcome) or the KmemscopeError that the input raised: a bad
    input is reported, the others are committed. `progress(kind, source,
    entry)`, if given, is called on the driver as each run is committed or
    fails (kind "run") and, with derive, as its derived tables are built
    (kind "derived"). Raises KmemscopeError (nothing parsed) when the dataset
    cannot be written or the executors cannot see it or import kmemscope.

    derive: None, or the function that builds a run's derived tables,
    derive(dataset, [run_id], threads=N) (queries/derived_tables.py derive_runs: what
    they hold is the query layer's), run in one Spark task per committed run.
    """
    given = [str(s) for s in sources]
    if not given:
        return []
    dataset = Path(os.path.abspath(dataset))
    created = writable_dataset(dataset)
    had_lock = os.path.lexists(dataset / commit_mod.LOCK_NAME)
    try:
        entries = _parse_on_spark(given, dataset, spark, labels, events, derive, progress)
    except BaseException:
        _leave_as_found(dataset, created, had_lock)   # a new path goes again, lock file and all
        raise
    if all(isinstance(e, KmemscopeError) for e in entries):
        _leave_as_found(dataset, created, had_lock)   # every input refused: nothing to keep
    return entries


def _parse_on_spark(given, dataset, spark, labels, events, derive, progress):
    dataset_format.read_format(dataset)     # a newer format is refused before any task runs
    labels, events = dict(labels or {}), list(events or [])
    sc = spark.sparkContext
    try:
        with commit_mod.dataset_lock(dataset):
            commit_mod.recover(dataset)
            job = commit_mod.WorkDir(dataset)
    except OSError as exc:
        raise KmemscopeError(f"writing {dataset}: {exc.strerror or exc}",
                             "check the dataset") from None
    try:
        tasks = job.path / TASKS
        tasks.mkdir()
        _probe_executors(sc, job.path)
        driver = _Driver(dataset, given, time.time_ns(), progress)
        items = [(i, os.path.abspath(s), str(dataset), str(tasks), labels, events)
                 for i, s in enumerate(given)]
        collected = _run_job(sc, items, _stage_task, tasks, driver)
        for res in (collected.get("results") or []) + _landed(tasks):
            driver.handle(res)
        if collected.get("error") is not None:
            why = _spark_reason(collected["error"])
            for i in driver.pending():
                driver.fail(i, KmemscopeError(f"{given[i]}: the Spark task failed: {why}"))
        for i in driver.pending():       # no result at all: never lose an input silently
            driver.fail(i, KmemscopeError(f"{given[i]}: no result came back from Spark"))
        if derive:
            _derive_on_spark(sc, dataset, driver, derive)
        return driver.entries
    finally:
        job.remove()


def _spark_reason(exc):
    """The line of a failed Spark job's error that says why (not py4j's call site)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in lines:
        if "SparkException:" in ln:
            return ln[ln.index("SparkException:") + len("SparkException:"):].strip()[:300]
    return _first_line(exc)


def _first_line(text):
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[0][:300] if lines else "unknown error"


# ---------------------------------------------------------------- driver

class _Driver:
    """Commits staged runs as their results arrive (from the tasks folder or from Spark)."""

    def __init__(self, dataset, given, started_ns, progress):
        self.dataset, self.given, self.started_ns = dataset, given, started_ns
        self.progress = progress
        self.entries: list = [None] * len(given)
        self.committed = {}          # run_id -> index of the input committed under it

    def pending(self):
        return [i for i, e in enumerate(self.entries) if e is None]

    def fail(self, index, exc):
        self.entries[index] = exc
        if self.progress:
            self.progress("run", self.given[index], exc)

    def handle(self, res):
        """Record one task's result, committing its staged run; repeats are ignored."""
        index = res["index"]
        attempt = Path(res["attempt"]) if res.get("attempt") else None
        if self.entries[index] is not None:
            if attempt is not None:
                shutil.rmtree(attempt, ignore_errors=True)    # a retried or speculative twin
            return
        try:
            if res["kind"] == "ok":
                self._commit(index, res, attempt)
            else:
                self.fail(index, _rebuild_error(res, self.given[index]))
        finally:
            if attempt is not None:
                shutil.rmtree(attempt, ignore_errors=True)

    def _commit(self, index, res, attempt):
        fields = dict(res["summary"], source=self.given[index], host=res.get("host", ""),
                      attempt=res.get("attempt_no", 0))
        summary = SparkRunSummary(**fields)
        staged = attempt / "stage"
        if not staged.is_dir():
            self.fail(index, DatasetError(
                f"{self.given[index]}: the task on {summary.host or 'an executor'} staged its run "
                f"in {staged}, which this driver cannot see", SHARED_HINT))
            return
        run_id = summary.run_id
        try:
            with commit_mod.dataset_lock(self.dataset):
                earlier = self.committed.get(run_id)
                if earlier is not None and earlier > index:
                    summary.concurrent = True     # a later input of this trace wins
                elif earlier is None and commit_mod.committed_since(self.dataset, run_id,
                                                                    self.started_ns):
                    summary.concurrent = True     # another parse committed this trace meanwhile
                else:
                    dataset_format.ensure_format(self.dataset)
                    work = commit_mod.WorkDir(self.dataset)
                    try:
                        work.adopt_stage(staged)
                        summary.replaced = commit_mod.commit(work, run_id)
                    except BaseException:
                        work.abandon()     # a journaled commit stays for the next parse
                        raise
                    work.remove()
                    self.committed[run_id] = index
        except OSError as exc:
            self.fail(index, KmemscopeError(f"writing {self.dataset}: {exc.strerror or exc}",
                                            "check the dataset"))
            return
        except KmemscopeError as exc:      # e.g. a dataset format this kmemscope does not write
            self.fail(index, exc)
            return
        self.entries[index] = summary
        if self.progress:
            self.progress("run", summary.source, summary)


def _rebuild_error(res, source):
    cls = getattr(errors, res.get("error_class") or "", None)
    if not (isinstance(cls, type) and issubclass(cls, KmemscopeError)):
        cls = KmemscopeError
    message = res.get("message") or f"{source}: failed on a Spark executor"
    if res["kind"] == "unshared":
        return DatasetError(message, SHARED_HINT)
    return cls(message, res.get("hint"))


def _run_job(sc, items, func, tasks, driver, poll=True):
    """Run `func` over `items`, one Spark task each; hand results to `driver` as they land.

    Tasks also write their result beside their staged run, so the driver
    commits each run when it is ready rather than when the whole job is.
    """
    from pyspark import InheritableThread

    box = {}
    group = f"kmemscope-{uuid.uuid4().hex[:8]}"

    def run():
        sc.setJobGroup(group, f"kmemscope parse: {len(items)} inputs", interruptOnCancel=True)
        try:
            box["results"] = sc.parallelize(items, numSlices=len(items)).map(func).collect()
        except Exception as exc:  # a failed job: its unfinished inputs become errors
            box["error"] = exc

    thread = InheritableThread(target=run, name="kmemscope-spark-parse", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(POLL_S)
            if poll:
                for res in _landed(tasks):
                    driver.handle(res)
    except BaseException:
        sc.cancelJobGroup(group)
        thread.join(30)
        raise
    return box


def _landed(tasks):
    """Results that task attempts wrote and the driver has not handled yet."""
    out: list = []
    try:
        attempts = list(tasks.iterdir())
    except OSError:
        return out
    for attempt in attempts:
        try:
            out.append(json.loads((attempt / RESULT).read_text()))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda r: r.get("index", 0))


def _probe_executors(sc, job):
    """Fail at once, not once per input, when executors cannot see the dataset or run kmemscope."""
    n = max(1, sc.defaultParallelism)
    try:
        found = sc.parallelize([str(job)] * n, numSlices=n).map(_probe_task).collect()
    except Exception as exc:  # the worker could not even load this module
        said = [ln for ln in str(exc).splitlines() if "Error:" in ln and "Py4J" not in ln]
        raise KmemscopeError(
            f"Spark executors cannot run kmemscope: {_first_line(said[-1] if said else exc)}",
            # sql-safe: a hint for the user, not SQL ("install" is also a DuckDB statement)
            "ship it to the executors: kmemscope spark-env -o env.tar.gz, then "
            "spark.archives=env.tar.gz#environment (docs/fleet.md); or install kmemscope on "
            f"every executor and point PYSPARK_PYTHON at that Python (for local masters: "
            f"PYSPARK_PYTHON={sys.executable})") from None
    problems = sorted({p for p in found if p})
    if problems:
        raise DatasetError(problems[0], "install kmemscope on every executor and put the "
                           "dataset on a file system they share with the driver")


def _probe_task(job):
    host = socket.gethostname()
    try:
        from kmemscope.parsers import _tracedat  # noqa: F401  (the native decoder)
    except ImportError as exc:
        return (f"executor {host} cannot import kmemscope's decoder ({exc}); "
                f"its Python is {sys.executable}")
    if not (Path(job) / "owner.lock").exists():
        return f"executor {host} cannot see {job}"
    return None


# ---------------------------------------------------------------- tasks (on executors)

class _TaskWork:
    """Where one task attempt stages (the shape of commit.WorkDir that staging uses: the
    attempt folder and its stage, made here and opened without following links)."""

    def __init__(self, path):
        from kmemscope.dataset.safefs import DIR_FLAGS, Dir

        self.path = self.scratch = path
        self.stage = path / "stage"
        path.mkdir()
        self.scratch_dir = Dir(os.open(path, DIR_FLAGS), path)
        self.stage_dir = self.scratch_dir.sub_or_make("stage", "the stage folder")

    def close(self):
        self.stage_dir.close()
        self.scratch_dir.close()


def _stage_task(item):
    """Stage one input into its own attempt folder; returns a small dict, never table data."""
    from pyspark import TaskContext

    from kmemscope.parsers.ingest import _stage_in_child

    index, source, dataset, tasks, labels, events = item
    host = socket.gethostname()
    ctx = TaskContext.get()
    attempt_no = ctx.attemptNumber() if ctx else 0
    res = {"index": index, "host": host, "attempt": None, "attempt_no": attempt_no}
    tasks = Path(tasks)
    if not tasks.is_dir():
        return dict(res, kind="unshared",
                    message=f"{source}: executor {host} cannot see the dataset {dataset}")
    attempt = tasks / f"{index}-{attempt_no}-{uuid.uuid4().hex[:8]}"
    work = _TaskWork(attempt)
    res["attempt"] = str(attempt)
    kill = ctx.getLocalProperty(_KILL_FIRST_ATTEMPT) if ctx else None
    try:
        threads = ctx.cpus() if ctx else None
        summary, child = _stage_in_child(source, work, labels, events, threads,
                                         _killer(kill, source, attempt_no))
        child.join()
        res.update(kind="ok", summary=asdict(summary))
    except KmemscopeError as exc:
        res.update(kind="error", error_class=type(exc).__name__, message=_first_line(exc),
                   hint=None)
    except OSError as exc:
        res.update(kind="error", error_class="KmemscopeError",
                   message=f"{source}: {exc.strerror or exc}"
                   + (" (free some disk space)" if exc.errno == 28 else ""))
    except Exception as exc:  # a bug: the input fails, the job goes on
        res.update(kind="error", error_class="KmemscopeError",
                   message=f"{source}: internal error on executor {host}: {exc!r}",
                   trace=traceback.format_exc())
    work.close()
    # Only the staged tables stay: an unpacked bundle is as big as its trace.
    for name in os.listdir(attempt):
        if name != "stage":
            p = attempt / name
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    if res["kind"] != "ok":
        shutil.rmtree(work.stage, ignore_errors=True)
    tmp = attempt / (RESULT + ".tmp")
    tmp.write_text(json.dumps(res))
    os.rename(tmp, attempt / RESULT)
    return res


def _killer(suffix, source, attempt_no):
    """The test hook's progress callback: dies once some of the trace is staged."""
    if not suffix or attempt_no > 0 or not source.endswith(suffix):
        return None

    def progress(msg):
        if msg[0] == "bytes":
            os._exit(1)            # the Python worker dies: Spark retries the task
    return progress


# ---------------------------------------------------------------- derived tables

def _derive_on_spark(sc, dataset, driver, derive):
    """Build each committed run's derived tables with derive(), one Spark task per run."""
    by_run: dict = {}
    for i, e in enumerate(driver.entries):
        if isinstance(e, SparkRunSummary):
            by_run.setdefault(e.run_id, []).append(i)
    if not by_run:
        return
    items = [(run_id, str(dataset), derive) for run_id in sorted(by_run)]
    box = _run_job(sc, items, _derive_task, None, None, poll=False)
    results = {r["run_id"]: r for r in box.get("results") or []}
    why = _spark_reason(box["error"]) if box.get("error") is not None else "no result"
    for run_id, indexes in by_run.items():
        r = results.get(run_id)
        for i in indexes:
            summary = driver.entries[i]
            if r is None:
                summary.derive_error = KmemscopeError(
                    f"run {run_id}: deriving its tables on Spark failed: {why}")
            elif r["kind"] == "ok":
                summary.derive_seconds = r["seconds"]
            else:
                summary.derive_error = _rebuild_error(r, summary.source)
            if driver.progress:
                driver.progress("derived", summary.source, summary)


def _derive_task(item):
    from pyspark import TaskContext

    from kmemscope.dataset.handle import DatasetRef

    run_id, dataset, derive_runs = item
    ctx = TaskContext.get()
    started = time.monotonic()
    try:
        derive_runs(DatasetRef.of(dataset), [run_id], threads=ctx.cpus() if ctx else None)
    except KmemscopeError as exc:
        return {"run_id": run_id, "kind": "error", "error_class": type(exc).__name__,
                "message": _first_line(exc), "hint": None}
    except Exception as exc:  # a bug: this run's derived tables are built on first query instead
        return {"run_id": run_id, "kind": "error", "error_class": "KmemscopeError",
                "message": f"run {run_id}: internal error while deriving on "
                           f"{socket.gethostname()}: {exc!r}", "hint": None}
    return {"run_id": run_id, "kind": "ok", "seconds": time.monotonic() - started}
