"""kmemscope from Python: the same datasets, analyses and comparisons as the command line.

    import kmemscope
    kmemscope.parse(["bundle-a", "bundle-b"], "ds", labels={"kernel": "patched"})
    ds = kmemscope.open("ds")
    ds.runs.df()                                   # one row per run, labels as a dict
    ds.query("hot_pfns", top_n=10).df()            # a named analysis, parameters bound
    ds.sql("SELECT count(*) FROM mm_page_alloc").arrow()
    ds.compare(by="kernel", baseline="vanilla").text()
    kmemscope.verify("ds").ok                      # the files as they were committed

This module is the one public API: the command line (kmemscope.cli) is a client of
it and uses nothing else of kmemscope's (the helpers for front ends at its end: engines,
limits, SQL text of several statements printed as rows). Every call returns data; nothing prints.
Errors are kmemscope.KmemscopeError subclasses with a one-line message, as on the
command line. Importing it loads neither pyarrow nor duckdb nor the engines: a parse
needs none of them.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from kmemscope.common.errors import KmemscopeError

if TYPE_CHECKING:
    from kmemscope.queries.comparison_model import ComparisonRecord, ComparisonTable, MetricRow
    from kmemscope.queries.engines import ConfArg, EngineSpec
    from kmemscope.queries.sides import SideSet

LabelsArg = Mapping[str, "str | Sequence[str]"] | Sequence[str] | str | None
Progress = Callable[[str], None] | None


def __getattr__(name):
    # kmemscope.api.EngineSpec, loaded on first use: a parse needs no engine
    if name == "EngineSpec":
        from kmemscope.queries.engines import EngineSpec

        return EngineSpec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Labels(dict):
    """A run's labels: a dict that is also hashable and ordered, so pandas can group by it."""

    def _key(self):
        return tuple(sorted(self.items()))

    def __hash__(self):  # type: ignore[override]  # labels are immutable once read
        return hash(self._key())

    def __lt__(self, other):
        return self._key() < (other._key() if isinstance(other, Labels) else tuple(sorted(other.items())))

    def __repr__(self):
        return ",".join(f"{k}={v}" for k, v in sorted(self.items())) or "{}"

    def __setitem__(self, key, value):
        raise TypeError("labels are read-only")


def _labels_value(value):
    if isinstance(value, list) and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return Labels(value)
    return value


class Result:
    """A query's rows as Arrow, with conversions and the notes (caveats) that came with them."""

    def __init__(self, table, notes: Sequence[str] = ()):
        self._table = table
        self.notes = list(notes)
        self._asked: Any = None      # (dataset, analysis, run, label, params) of Dataset.query: for .plot

    def plot(self, *, by: str | None = None, baseline: str | None = None):
        """The figure of the analysis this result came from, over the same runs and parameters
        (`ds.query("stalls.each").plot(by="kernel")` is `kmemscope.plots.stall_cdf(ds,
        by="kernel")`); kmemscope.plots.ANALYSES lists which analyses have one."""
        from kmemscope.common.errors import QueryError

        if self._asked is None:
            raise QueryError("only the result of Dataset.query has a figure",
                             "draw SQL results with matplotlib from .df()")
        from kmemscope import plots

        import inspect

        ds, name, run, label, params = self._asked
        draw: Any = plots.ANALYSES.get(name)
        if draw is None:
            raise QueryError(f"no figure draws {name}",
                             f"figures draw: {', '.join(sorted(plots.ANALYSES))}")
        takes = set(inspect.signature(draw).parameters)
        if set(params) - takes:
            raise QueryError(f"the figure of {name} draws the analysis with its default parameters",
                             f"query it without {', '.join(sorted(set(params) - takes))} to plot it")
        return draw(ds, by=by, baseline=baseline, run=run, label=label, **params)

    def arrow(self):
        """The rows as a pyarrow.Table (labels stay an Arrow MAP)."""
        return self._table

    def df(self):
        """The rows as a pandas DataFrame; a `labels` column holds Labels dicts."""
        try:
            import pandas  # noqa: F401  (pyarrow's to_pandas imports it)
        except ImportError:
            raise KmemscopeError("Result.df() needs pandas",
                                 "install the report extra: pip install 'kmemscope[report]'") from None
        frame = self._table.to_pandas()
        for name in frame.columns:
            if name == "labels" or name.endswith("_labels"):
                frame[name] = frame[name].map(_labels_value)
        return frame

    def pl(self):
        """The rows as a polars DataFrame (the polars extra: pip install 'kmemscope[polars]')."""
        try:
            import polars
        except ImportError:
            raise KmemscopeError("Result.pl() needs polars",
                                 "install the polars extra: pip install 'kmemscope[polars]'") from None
        return polars.from_arrow(self._table)

    def rows(self) -> list[dict]:
        """The rows as a list of dicts (labels as Labels)."""
        return [{k: _labels_value(v) for k, v in row.items()} for row in self._table.to_pylist()]

    @property
    def columns(self) -> list[str]:
        return self._table.column_names

    def __len__(self):
        return self._table.num_rows

    SHOWN = 50     # rows a result shows in text and in HTML; .df() and .arrow() have them all

    def _shown(self) -> str:
        """The sentence under a result shown in part, the same in text and HTML ('' if whole)."""
        n = self._table.num_rows
        if n <= self.SHOWN:
            return ""
        return (f"showing {self.SHOWN:,} of {n:,} rows: .df() or .arrow() has all, "
                f"result.page(N) shows page N")

    def page(self, number: int = 0) -> "Result":
        """Rows [number * 50, number * 50 + 50) as a Result (the notes with them), to look further
        into a large result in a notebook."""
        if number < 0 or (number * self.SHOWN >= self._table.num_rows and number):
            raise ValueError(f"page {number} is out of range: {self._table.num_rows:,} rows make "
                             f"{-(-self._table.num_rows // self.SHOWN)} pages")
        return Result(self._table.slice(number * self.SHOWN, self.SHOWN), self.notes)

    def __repr__(self):
        from kmemscope.render.tables import format_table

        notes = "".join(f"note: {n}\n" for n in self.notes)
        shown = self._shown()
        return notes + format_table(self._table.slice(0, self.SHOWN)) + (f"{shown}\n" if shown else "")

    def _repr_html_(self):
        import html

        from kmemscope.render.tables import format_html

        shown = self._shown()
        head = f"<p>{html.escape(shown)}</p>" if shown else ""
        notes = "".join(f"<li>{html.escape(x)}</li>" for x in self.notes)
        notes = f"<p>Notes:</p><ul>{notes}</ul>" if notes else ""
        return head + format_html(self._table.slice(0, self.SHOWN)) + notes


@dataclass
class Comparison:
    """The sides of a label compared metric by metric (what `kmemscope compare` prints).

    `records`: one ComparisonRecord per metric and side (queries/comparison_model.py), the
    model every output renders; `df()` the same as a DataFrame. `rows`: one MetricRow per
    metric (its Metric, the per-side values, `records[side]`)."""

    sides: SideSet
    table: ComparisonTable
    dataset: object = None          # where the sides came from: trends read it again
    engine: EngineSpec | None = None

    @property
    def rows(self) -> list[MetricRow]:
        return self.table.rows

    @property
    def records(self) -> list[ComparisonRecord]:
        return self.table.records

    @property
    def test(self) -> str:
        return self.table.test

    @property
    def alpha(self) -> float:
        return self.table.alpha

    @property
    def notes(self) -> list[str]:
        from kmemscope.queries.sides import condense_notes, missing_notes

        return (condense_notes(self.sides.notes) + missing_notes(self.sides, self.rows)
                + list(self.table.notes))

    def result(self) -> Result:
        """One row per metric and side: every field of the records (the csv/json rows of compare)."""
        import pyarrow as pa

        from kmemscope.render.comparison import records

        return Result(pa.Table.from_pylist(records(self.sides, self.table)), self.notes)

    def df(self):
        return self.result().df()

    def text(self) -> str:
        """The per-metric table, the verdicts with their intervals and p-values, the notes."""
        from kmemscope.render.comparison import format_text

        return format_text(self.sides, self.table, self.notes)

    def mmtests(self, test: str | None = None) -> str:
        """mmtests compare-kernels' layout, ready to paste into a patch; `test`: the one whose
        verdicts mark *x%* (default: this comparison's; "band" prints what `compare --format
        mmtests` prints)."""
        from kmemscope.render.comparison import format_mmtests

        return format_mmtests(self.sides, self.table.retested(self.sides, test or self.test),
                              self.notes)

    def markdown(self) -> str:
        from kmemscope.render.comparison import format_markdown

        return format_markdown(self.sides, self.table, self.notes)

    def trend(self, over: str, metrics: Sequence[str] | None = None) -> "Trend":
        """Each metric's values over the sides' runs in recording order (over="run") or over
        the minutes of the captures (over="minute", vmstat metrics), averaged per side."""
        from kmemscope.render.comparison import over_rows
        from kmemscope.queries.comparison_model import resolve_metrics
        from kmemscope.queries.metrics import minute_series
        from kmemscope.queries.sides import condense_notes

        if over not in ("run", "minute"):
            raise ValueError("over is 'run' or 'minute'")
        # groups (cost, mthp, vmstat, ...) stand for their metrics, as in the comparison
        names = [m.name for m in resolve_metrics(self.sides, list(metrics) if metrics else None)]
        notes = condense_notes(self.sides.notes)
        series: dict = {}
        if over == "minute":
            series, more, names = minute_series(self.dataset, self.sides, names, engine=self.engine)
            notes += more
        titles = {n: m.title for n, m in self.sides.metrics.items()}
        return Trend(self.sides, names, over, over_rows(self.sides, names, over, series),
                     titles, notes)

    def open(self) -> "Dataset":
        """The dataset the sides were read from, as the comparison saw it (its figures read it)."""
        return Dataset(self.dataset, self.engine or "duckdb")

    def plot(self, metric: str):
        """One metric's figure: a point per run in its side's colour, each side's statistic as a
        bar with its 95% interval (cut to what the quantity can take), sides in this comparison's
        order. Returns a kmemscope.plots.Figure (kmemscope.plots.comparison draws several)."""
        from kmemscope import plots

        return plots.comparison(self, [metric])

    def __repr__(self):
        return self.text()

    def _repr_html_(self):
        import html

        return f"<pre>{html.escape(self.mmtests())}</pre>"


@dataclass
class Trend:
    """Metrics over runs or minutes, per side (`kmemscope compare --over`)."""

    sides: SideSet
    metrics: list
    over: str
    rows: list
    titles: dict
    notes: list

    def text(self) -> str:
        from kmemscope.render.comparison import format_over

        return format_over(self.sides, self.metrics, self.over, self.rows, self.titles, self.notes)

    def result(self) -> Result:
        import pyarrow as pa

        return Result(pa.Table.from_pylist(self.rows), self.notes)

    def __repr__(self):
        return self.text()


# A call whose snapshot a parse changed while it was read is read again (Dataset._on_a_snapshot).
REREAD_NOTE = ("the dataset changed while it was read (a parse replaced or removed runs): "
               "the answer is from the runs committed since")


class Dataset:
    """A kmemscope dataset opened for queries, on DuckDB in this process or on Spark."""

    def __init__(self, path, engine: str | EngineSpec = "duckdb", spark_master=None,
                 spark_conf=None):
        from kmemscope.dataset.handle import DatasetRef
        from kmemscope.queries.engines import EngineSpec

        ref = DatasetRef.of(path)
        self.path = ref.location           # a local Path, or an s3:// URL as text
        tables = ref.listing               # a missing or empty dataset fails here, in one line
        # A handle given here (a command's) is the snapshot of every call; for a path, the
        # listing taken to check it serves the first call, and later calls list again, so a
        # Dataset kept open in a notebook sees the runs parsed since.
        self._pinned = ref if isinstance(path, DatasetRef) else None
        self._ref = self._fresh = self._last = ref
        if "runs" not in tables:
            from kmemscope.common.errors import DatasetError

            raise DatasetError(f"{path} is not a kmemscope dataset (it has no runs table)",
                               "open the directory that `kmemscope parse -o` wrote")
        self.spec = EngineSpec.of(engine, spark_master, spark_conf)

    def _handle(self):
        """The dataset's handle for one call (its listing is that call's snapshot)."""
        if self._pinned is not None:
            return self._pinned
        ref, self._fresh = self._fresh, None
        if ref is None:
            # the last call's snapshot while nothing changed in the dataset's folders since,
            # else a new listing (where it lives and local or s3 as decided at the open)
            ref = self._last.again()
        self._last = ref
        return ref

    def _on_a_snapshot(self, work):
        """work(handle) on this call's snapshot -> (its answer, a note or None). When a parse
        replaced or removed runs since the snapshot was taken, a file it names is gone
        (ListedFileGone, raised where footers are read, before rows are): the work runs once
        more on a new snapshot, and the note says so. Any other failure is the answer: a
        timeout, a memory limit or the user's SQL is not run twice."""
        from kmemscope.dataset.reader import ListedFileGone

        ref = self._handle()
        try:
            return work(ref), None
        except ListedFileGone:
            if not ref.outdated():      # listed again, the file is still named: no use
                raise
        return work(ref.renewed()), REREAD_NOTE

    def __repr__(self):
        extra = f", engine={str(self.spec)!r}" if self.spec.is_spark else ""
        return f"kmemscope.Dataset({str(self.path)!r}{extra})"

    def close(self) -> None:
        """Stop the Spark session this dataset used (DuckDB holds nothing open between calls).

        Datasets opened with equal Spark settings share one session: closing one stops it
        for all (the next query starts a new one)."""
        if self.spec.is_spark:
            from kmemscope.queries import engines

            engines.release(self.spec)

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def tables(self) -> list[str]:
        return sorted(self._handle().listing)

    @property
    def runs(self) -> Result:
        """One row per run: host, kernel, clock, timestamps, events, labels, source..."""
        return self.sql("SELECT * EXCLUDE (manifest) FROM runs ORDER BY run_id")

    def sql(self, query: str, params: Sequence | Mapping | None = None, *,
            run: str | Sequence[str] | None = None, label: LabelsArg = None,
            read_only: bool = False, timeout: float | None = None,
            memory_limit: str | None = None) -> Result:
        """Run SQL over the dataset, every table a view of its own name; params are bound.

        The shared helper views of the analyses (flag names, allocation classes,
        migratetype names...) are there too. run/label restrict every view to
        those runs. Several statements run one after the other (params bound to the
        last); the result is the last one's. read_only=True allows SELECTs that
        read the dataset only, for SQL from elsewhere. timeout (seconds) and
        memory_limit ("2GB") bound the work, opening the dataset included (as
        `kmemscope sql`). On Spark the same DuckDB SQL is translated (spark_sql.py);
        what has no exact form is refused.
        """
        notes: list[str] = []
        runs = [run] if isinstance(run, str) else run
        statements = sql_statements(query)

        def work(ref):
            del notes[:]
            return run_sql(ref, statements, engine=self.spec, runs=runs, label=label,
                           params=params, read_only=read_only, timeout=timeout,
                           memory_limit=memory_limit, notes=notes,
                           caller_frames=not read_only)[-1]

        table, reread = self._on_a_snapshot(work)
        notes += [reread] if reread else []
        if table is None:
            import pyarrow as pa

            table = pa.table({})
        return Result(table, notes)

    def query(self, name: str, *, run: str | Sequence[str] | None = None,
              label: LabelsArg = None, progress: Progress = None, **params) -> Result:
        """Run the named analysis `name` (see kmemscope.analyses()) over some or all runs.

        progress(message) hears about slow one-time work (building a run's derived
        tables) before it starts."""
        from kmemscope.queries.runner import notes_of, run_query

        text_params = {k: str(v) if not isinstance(v, str) else v for k, v in params.items()}
        table, reread = self._on_a_snapshot(
            lambda ref: run_query(name, ref, run_ids=[run] if isinstance(run, str) else run,
                                  labels=label, params=text_params or None,
                                  progress=progress, engine=self.spec))
        from kmemscope.queries.sides import condense_notes

        # one line per caveat, not per run: 60 hosts without procfs samples are one note
        result = Result(table, condense_notes(notes_of(table)) + ([reread] if reread else []))
        result._asked = (self, name, run, label, params)
        return result

    def compare(self, by: str, baseline: str | None = None, *, metrics: Iterable[str] | None = None,
                test: str = "welch", alpha: float = 0.05, run=None, label: LabelsArg = None,
                correction: str = "bh", sides: Sequence[str] | None = None,
                unit: str | None = None, stat: str | None = None, detect: float | None = None,
                directions: dict | None = None, progress: Progress = None) -> Comparison:
        """Compare the sides of label `by`: per metric and side a ComparisonRecord.

        metrics: summary columns, "vmstat.NAME" (a counter's increase over the
        capture), "vmstat.NAME/min", "stalls.KIND.STAT" or imported metric
        names; None for the default set (see `kmemscope compare --help`).
        test: welch (default), mannwhitney or band (mmtests'); correction: bh
        (Benjamini-Hochberg), holm or none, across the table's tests; sides: the
        sides in order, baseline first; unit: a label (e.g. "host") whose runs are
        summarised into one value each, so n counts units; stat: amean, hmean or
        median for higher-is-better rows, or sum (every row: the total across the
        side's runs, or units with `unit`, of each one's value); detect: a change in % for which rows
        without a significant one get the runs per side needed at 80% power;
        directions: {metric: "higher"|"lower"} for metrics without a direction.
        progress(message): each analysis the comparison runs, as it starts ("summary over
        40 runs"), and each run's one-time work ("run ID: pairing ...").
        """
        from kmemscope.queries.comparison_model import compare_table
        from kmemscope.queries.runner import reporting

        names = [metrics] if isinstance(metrics, str) else (list(metrics) if metrics else None)
        with reporting(progress):
            (found, ref), reread = self._compared(by, baseline, run, label, names, sides, unit)
        if reread:
            found.notes.append(reread)
        table = compare_table(found, names, test, alpha, correction, stat, detect, directions)
        # the comparison keeps its snapshot: a trend over it reads the same runs
        return Comparison(found, table, ref, self.spec)

    def _compared(self, by, baseline, run, label, names, sides, unit):
        from kmemscope.queries.sides import load_sides

        return self._on_a_snapshot(
            lambda ref: (load_sides(ref, by, baseline,
                                    run_ids=[run] if isinstance(run, str) else run,
                                    labels=label, engine=self.spec, metrics=names,
                                    order=list(sides) if sides else None, unit=unit), ref))

    def describe(self, name: str) -> AnalysisDoc:
        """The documentation of analysis `name` (see kmemscope.describe)."""
        return describe(name)

    def run_ids(self, run: str | Sequence[str] | None = None, label: LabelsArg = None) -> list[str]:
        """The ids of the runs that `run` (ids or unique prefixes) and `label` select."""
        from kmemscope.queries.selection import select_runs

        runs = [run] if isinstance(run, str) else run
        labels = [label] if isinstance(label, str) else label
        ref = self._handle()
        return select_runs(ref, ref.listing, runs or None, labels or None)

    def table_runs(self) -> dict[str, set[str]]:
        """{table: the ids of the runs that have it}."""
        return {name: set(runs) for name, runs in self._handle().listing.items()}

    def prune(self, *, older_than: str | float | None = None,
              run: str | Sequence[str] | None = None, label: LabelsArg = None,
              dry_run: bool = False):
        """Remove runs from this (local) dataset: see kmemscope.prune."""
        return prune(self.path, older_than=older_than, run=run, label=label, dry_run=dry_run)

    def import_metrics(self, path, fmt: str | None = None) -> dict:
        """Import benchmark results (CSV or JSON: run,metric,value,unit,better) for the runs.

        Returns {run_id: [metric names written]}; a bad row imports nothing.
        """
        from kmemscope.parsers.benchmark_results import import_metrics
        from kmemscope.queries.metrics import SUMMARY

        ref = self._handle()
        if ref.is_s3:
            raise KmemscopeError("metrics are imported into a local dataset, not an s3:// one")
        # the comparison's own metric names are refused: one name, two different rows
        return import_metrics(ref, path, fmt, reserved=frozenset(SUMMARY))


def run_sql(dataset, statements: Sequence[str], *, engine: EngineSpec | str | None = None,
             runs=None, label: LabelsArg = None, params=None, read_only: bool = False,
             timeout: float | None = None, memory_limit: str | None = None,
             notes: list | None = None, caller_frames: bool = False,
             plain_rows: bool = False, max_rows: int | None = None, on_result=None) -> list:
    """THE way kmemscope runs SQL statements over a dataset (Dataset.sql and `kmemscope
    sql`) -> one pyarrow.Table or None per statement (plain_rows: a result of plain scalar
    columns as tables.Rows instead, for a text table printed without pyarrow; with it,
    max_rows: no more rows of each result than that are fetched). Each statement is bound
    only the parameters it names (DuckDB refuses one it does not use).

    on_result(batches): each statement's result streamed instead of kept, while the query
    runs under its limits: a pyarrow.RecordBatchReader that fetches from DuckDB as it is
    read (None for a statement without rows); the list holds what on_result returns. Only
    a batch at a time is held in Python, so memory_limit bounds a result of any size.

    On Spark (engine) the SQL is translated, statement by statement; read_only, timeout
    and memory_limit are DuckDB's and refused there, and parameters are named.

    Opening the dataset (listing, footers, views) and every statement run under one
    memory limit and one time limit (dataset/limits.py): read_only SQL gets 300 s and a
    quarter of the memory unless told otherwise, SELECTs over the dataset's files only
    (reader.confine); DuckDB spills into a private directory; SIGINT/SIGTERM/SIGHUP stop a
    statement at once. Runs whose schema does not fit are left out with a note in `notes`.
    caller_frames: the caller's pandas/polars/Arrow objects are tables by their name.
    Only the views the SQL names are made at first (runner.adhoc_scope: `SELECT 1` opens
    no table); a statement that names one that is not there gets them all and runs again.
    """
    from kmemscope.common.errors import QueryError
    from kmemscope.dataset.handle import DatasetRef
    from kmemscope.queries.engines import EngineSpec

    ref = DatasetRef.of(dataset)
    if not statements:       # the text was cut by sql_statements, which refuses none
        raise ValueError("run_sql runs one statement or more")
    spec = EngineSpec.of(engine)
    if spec.is_spark:
        from kmemscope.queries.runner import backend_errors, open_runs

        if read_only or timeout or memory_limit:
            raise QueryError("read-only, timeout and memory limit are for the DuckDB engine: "
                             "Spark SQL can read any path the cluster can")
        if params is not None and not isinstance(params, Mapping):
            raise QueryError("on Spark, parameters are named: pass a mapping for $name")
        backend = open_runs(ref, runs, label, engine=spec)[0]
        try:
            with backend_errors(backend, "SQL"):
                tables = [backend.query_arrow(q, dict(_params_of(q, statements, params) or {}))
                          for q in statements]
        finally:
            backend.close()
        if on_result is not None:     # Spark hands results over whole: stream them from here
            tables = [on_result(None if t is None else t.to_reader()) for t in tables]
        return tables
    import duckdb

    from kmemscope.dataset import limits, reader
    from kmemscope.queries.runner import adhoc_scope, open_runs, widen

    if timeout is None and read_only:
        timeout = 300.0
    if memory_limit is None and read_only:
        memory_limit = str(limits.default_memory_limit())
    tables = []
    with limits.bounded(memory_limit, timeout):
        scope = adhoc_scope("\n".join(statements), ref.listing)
        try:
            backend, chosen, parts, _facts, _mts = open_runs(ref, runs, label, notes=notes,
                                                             scope=scope)
        except duckdb.Error as exc:
            raise QueryError(f"SQL failed: {reader.sql_error_text(exc)}") from None
        with reader.sql_session(backend.con, limits.memory_limit()) as con:
            if read_only:
                reader.confine(con, ref, "\n;\n".join(statements))
            elif caller_frames:
                con.execute("SET python_scan_all_frames = true")
            with reader.guarded(con, timeout):
                def fetch(con, q, p):
                    if on_result is not None:
                        return on_result(reader.query_batches(con, q, p))
                    if plain_rows:
                        return reader.query_rows(con, q, p, max_rows=max_rows)
                    return reader.query_arrow(con, q, p)

                for q in statements:
                    try:
                        try:
                            tables.append(fetch(con, q, _params_of(q, statements, params)))
                        except duckdb.CatalogException:
                            if scope is None:
                                raise
                            # a name the scan of the text missed, or none at all: DuckDB
                            # answers (or suggests a name) from every view, as it always did
                            scope = widen(backend, chosen, parts, scope)
                            tables.append(fetch(con, q, _params_of(q, statements, params)))
                    except duckdb.Error as exc:
                        raise QueryError(f"SQL failed: {reader.sql_error_text(exc)}",
                                         "`kmemscope info DATASET` lists the tables; "
                                         "quote \"order\"") from None
    return tables


def _params_of(statement, statements, params):
    """The parameters one of several statements gets: named ones ($name), those it refers
    to (DuckDB refuses a statement given one it does not use); positional ones (?), the
    last statement only, whose result is the answer. One statement gets them all (an
    unused one is an error, as in Dataset.sql)."""
    if len(statements) < 2 or params is None:
        return params
    if not isinstance(params, Mapping):
        return params if statement is statements[-1] else None
    from kmemscope.queries.runner import _used

    return _used(statement, params) or None


def open(path, engine: str = "duckdb", spark_master: str | None = None,  # noqa: A001
         spark_conf: Mapping[str, str] | Sequence[str] | None = None) -> Dataset:
    """Open the dataset at `path` (written by kmemscope parse).

    engine="spark" runs queries on Apache Spark (pip install 'kmemscope[spark]',
    Java 17+): spark_master "local[*]" by default, spark_conf {key: value}.
    The session is made on first use and shared by datasets opened alike.
    """
    return Dataset(path, engine, spark_master, spark_conf)


class AnalysisDoc(dict):
    """An analysis's documentation (`kmemscope queries NAME`): a dict that renders in notebooks."""

    def text(self) -> str:
        from kmemscope.queries.catalog import format_description

        return format_description(self)

    def columns(self) -> Result:
        """One row per output column: section, column, type, unit, meaning."""
        import pyarrow as pa

        from kmemscope.queries.catalog import column_rows

        return Result(pa.Table.from_pylist(column_rows(self)))

    def __repr__(self):
        return self.text()

    def _repr_html_(self):
        import html

        return f"<pre>{html.escape(self.text())}</pre>"


def describe(name: str) -> AnalysisDoc:
    """The documentation of analysis `name` (or `name.section`): question, parameters, columns."""
    from kmemscope.queries.catalog import describe as _describe

    return AnalysisDoc(_describe(name))


def analyses() -> Result:
    """The named analyses: name and question."""
    import io
    import json

    import pyarrow as pa
    import pyarrow.json as pajson

    from kmemscope.queries.catalog import list_queries

    schema = pa.schema([("name", pa.string()), ("question", pa.string())])
    rows = list_queries()
    if not rows:
        return Result(schema.empty_table())
    # Read as JSON lines: pa.table() of Python lists would import pandas (a quarter of a
    # second of `kmemscope queries`) for pyarrow's check of pandas objects.
    lines = "\n".join(json.dumps({"name": n, "question": q}) for n, q, *_ in rows)
    return Result(pajson.read_json(io.BytesIO(lines.encode()),
                                   parse_options=pajson.ParseOptions(explicit_schema=schema)))


def parse(inputs, dataset, labels: Mapping[str, str] | None = None, *,
          events: Sequence[str] | None = None, threads: int | None = None,
          derive: bool = False, on_error: str = "raise", progress: Callable | None = None,
          whole_bundle: bool = False, procfs_start=None, procfs_end=None,
          procfs_times: tuple | None = None, force: bool = False) -> list:
    """Parse trace.dat files or bundles into `dataset`; returns one RunSummary per run.

    A flight directory (record --flight) is one run per bundle, each keeping only its
    window's events unless whole_bundle; a folder of bundles is each of its bundles. An
    input the dataset holds already, parsed with the same labels and options, is not
    decoded again: its summary says `skipped` (force=True parses it again, replacing
    its run). derive=True builds each run's derived tables
    now, not on first query. on_error="skip" goes on past a bad input (its exception is
    in the returned list in its place); "raise" stops at the first. progress(("total",
    bytes)) then progress(("advance", bytes)) as each trace is decoded.
    procfs_start, procfs_end: folders of /proc copies taken before and after a bare
    trace.dat, taken at procfs_times ((start, end) Unix seconds; default their files'
    mtimes): they become the run's samples (parsers/snapshots.py).
    An s3:// dataset is written with conditional writes, safe beside other ingesters
    (dataset/s3_commit.py): a run already there is skipped (its RunSummary's skipped is
    True) unless force.
    """
    from kmemscope.dataset.handle import DatasetRef
    from kmemscope.parsers.ingest import ingest

    if on_error not in ("raise", "skip"):
        raise ValueError("on_error must be 'raise' or 'skip'")
    sources = expand_inputs([inputs] if isinstance(inputs, (str, Path)) else inputs)
    snapshots = None
    if procfs_start is not None or procfs_end is not None:
        from kmemscope.parsers.snapshots import read_snapshots, refuse_a_bundle

        if procfs_start is None or procfs_end is None:
            raise KmemscopeError("snapshots of /proc need both --procfs-start and --procfs-end")
        if len(sources) != 1:
            raise KmemscopeError("snapshots of /proc belong to one trace.dat",
                                 "parse the other inputs in a command of their own")
        refuse_a_bundle(sources[0])
        snapshots = read_snapshots(procfs_start, procfs_end, procfs_times)
    ref = DatasetRef.of(dataset)            # local or s3, decided once for every input
    write: Callable = ingest
    if ref.is_s3:                           # conditional writes, not rename and flock
        from kmemscope.parsers.ingest_s3 import ingest_s3

        check_parse_target(dataset, derive=derive)
        write = ingest_s3
    out: list = []
    for source in sources:
        try:
            summary = write(source, ref.location, labels=dict(labels or {}),
                             events=list(events or []), threads=threads, progress=progress,
                             whole_bundle=whole_bundle, snapshots=snapshots, force=force)
            if derive and not summary.skipped:
                from kmemscope.queries.derived_tables import derive_runs

                derive_runs(ref.renewed(), [summary.run_id])    # the listing with the new run
            out.append(summary)
        except KmemscopeError as exc:
            if on_error == "raise":
                raise
            out.append(exc)
    return out


def is_object_store(dataset) -> bool:
    """True when `dataset` names an object-store dataset (s3:// or s3a://), not a folder."""
    from kmemscope.dataset.storage import is_url

    return is_url(str(dataset))


def check_parse_target(dataset, *, derive: bool = False) -> None:
    """Raise KmemscopeError, before any input is decoded, for parse options `dataset` cannot
    take (an s3:// dataset builds its derived tables per query, not at parse)."""
    if derive and is_object_store(dataset):
        from kmemscope.dataset.s3_commit import refuse_derive

        refuse_derive(derive)


def parse_on_spark(inputs: Sequence, dataset, *, engine: EngineSpec | str = "spark",
                   labels: Mapping[str, str] | None = None, events: Sequence[str] | None = None,
                   derive: bool = False, progress: Callable | None = None) -> list:
    """Parse inputs in Spark tasks, one per input; the driver commits each run.

    Returns one RunSummary or KmemscopeError per input. progress(kind, source, entry)
    hears of each run as it is committed ("run") and derived ("derived")."""
    from kmemscope.parsers.spark_parse import parse_on_spark as _parse
    from kmemscope.queries.derived_tables import derive_runs
    from kmemscope.queries.engines import EngineSpec, engine_for

    from kmemscope.dataset.storage import is_url

    if is_url(str(dataset)):
        raise KmemscopeError("parsing on Spark commits to a file system; parse into an s3:// "
                             "dataset with parse()")
    spark = getattr(engine_for(EngineSpec.of(engine)), "spark", None)
    if spark is None:
        raise KmemscopeError("parsing on Spark needs the spark engine")
    return _parse(list(inputs), dataset, spark=spark, labels=dict(labels or {}),
                  events=list(events or []), derive=derive_runs if derive else None,
                  progress=progress)


def prune(dataset, *, older_than: str | float | None = None, run: str | Sequence[str] | None = None,
          label: LabelsArg = None, dry_run: bool = False, now: float | None = None):
    """Remove runs from a local dataset, whole: every table's partition and every derived
    cache of each -> kmemscope.dataset.retention.Pruned (.runs: [PrunedRun(run_id,
    started_ns, labels, paths)], .kept, .notes). The runs are those that every criterion
    given selects: older_than (an age such as "30d", "12h", or seconds: runs whose recorded
    start is longer ago than that before `now`, Unix seconds, default this moment), run
    (ids or unique prefixes), label (as for queries). dry_run: say what would go, remove
    nothing. Runs under the commit lock; readers mid-answer keep what they listed."""
    from kmemscope.dataset.retention import parse_age, prune as _prune
    from kmemscope.queries.selection import select_runs

    if older_than is None and not run and not label:
        raise KmemscopeError("prune needs to be told which runs: an age, run ids or labels",
                             "give --older-than AGE, --run ID or --label KEY=VALUE")
    age = parse_age(older_than) if older_than is not None else None
    runs = [run] if isinstance(run, str) else run
    labels = [label] if isinstance(label, str) else label

    def choose(ref):
        return select_runs(ref, ref.listing, runs or None, labels or None)

    return _prune(dataset, choose, older_than=age, dry_run=dry_run, now=now)


def derive(dataset, run_ids: Sequence[str] | None = None, threads: int | None = None) -> None:
    """Build the runs' derived tables (free/alloc pairing, stacks) now, not on first query."""
    from kmemscope.dataset.handle import DatasetRef
    from kmemscope.queries.derived_tables import derive_runs

    derive_runs(DatasetRef.of(dataset), list(run_ids) if run_ids is not None else None,
                threads=threads)


def verify(dataset, deep: bool = False):
    """Check every file of a local dataset (derived caches too) against the sha256 recorded
    when its run was committed -> kmemscope.dataset.verify.Verification (.ok, .runs, .files,
    .problems: [(kind, path)] with kind missing, changed, extra or unrecorded). deep: also
    derive every recorded derived cache again and compare its rows (an analysis' kept rows:
    run the analysis on the run again)."""
    import functools

    from kmemscope.dataset.verify import verify as _verify
    from kmemscope.queries import derived_tables, result_cache, runner

    check = functools.partial(result_cache.same_as_recomputed, rows_of_run=runner.rows_of_run)
    recompute = {result_cache.PREFIX: check,
                 **dict.fromkeys(derived_tables.DERIVED_TABLES, derived_tables.same_as_rederived)}
    return _verify(dataset, deep=deep, recompute=recompute)


def info(dataset) -> dict:
    """{"runs": Result or None, "tables": Result, "rows_per_run": Result, "notes": [...]}
    of a dataset (notes: runs whose runs file cannot be listed with the others).

    Row counts come from the runs' own records where they state them, else from the
    Parquet footers (local or s3): no table is scanned."""
    import duckdb

    from kmemscope.common.errors import QueryError
    from kmemscope.dataset.handle import DatasetRef
    from kmemscope.dataset.reader import connect, query_arrow, sql_error_text, unfit_runs
    from kmemscope.dataset.storage import parquet_rows

    unreadable: dict = {}     # run -> why its rows are not counted

    def rows(run, f):
        if f in recorded:
            return recorded[f][1]
        try:
            return parquet_rows(f)
        except Exception as exc:      # a truncated or foreign file: that run is noted
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            unreadable.setdefault(run, f"cannot read the footer of {f}: {text}")
            return 0

    ref = DatasetRef.of(dataset)
    parts = ref.listing
    recorded = ref.footers()
    # A run whose runs file cannot be read with the others (or declares a 512 MiB host) is
    # counted but its row is left out of `runs`, with a note.
    unfit = unfit_runs(parts, {"runs"})
    notes = [f"run {r} is left out of the runs listed: {why}" for r, why in sorted(unfit.items())]
    per_run = [(run, name, sum(rows(run, f) for f in files))
               for name, runs in sorted(parts.items()) for run, files in sorted(runs.items())]
    per_run = [p for p in per_run if p[0] not in unreadable]
    notes += [f"run {r} is left out of the row counts: {why} (`kmemscope verify DATASET` "
              "lists what changed)" for r, why in sorted(unreadable.items())]
    totals: dict = {}
    for _run, name, count in per_run:
        total, runs = totals.get(name, (0, 0))
        totals[name] = (total + count, runs + 1)
    order = sorted(totals, key=lambda n: (-totals[n][0], n))
    runs_table = None
    listed = [r for r in parts.get("runs", {}) if r not in unfit]
    con = (connect(ref, tables=["runs"], parts=parts, run_ids=listed)
           if listed
           else duckdb.connect())
    try:
        long = _arrow_columns(con, (("run_id", "VARCHAR", [r[0] for r in per_run]),
                                    ("table", "VARCHAR", [r[1] for r in per_run]),
                                    ("rows", "BIGINT", [r[2] for r in per_run])))
        tables = _arrow_columns(con, (("table", "VARCHAR", order),
                                      ("rows", "BIGINT", [totals[n][0] for n in order]),
                                      ("runs", "BIGINT", [totals[n][1] for n in order])))
        if listed:
            # a flight bundle's window that is not whole (parsers/flight_window.py): a column
            # only when some run has one
            note = "json_extract_string(manifest, '$.parse_window.note')"
            # sql-safe: note is the constant above
            noted = query_arrow(con, f"SELECT count(*) AS n FROM runs WHERE {note} IS NOT NULL"
                                ).column(0)[0].as_py()
            window = f", {note} AS flight_window" if noted else ""
            # sql-safe: window is empty or the constant note above
            runs_table = query_arrow(con, f"""
                SELECT run_id, host, kernel_release, arch, cpus, trace_clock, events, lost_events,
                       round((last_ts - first_ts) / 1e9, 3) AS seconds,
                       file_version, compression, labels, source{window}
                FROM runs ORDER BY source""")
    except duckdb.Error as exc:
        raise QueryError(f"cannot read the runs table: {sql_error_text(exc)}") from None
    finally:
        con.close()
    return {"runs": Result(runs_table, notes) if runs_table is not None else None,
            "tables": Result(tables), "rows_per_run": Result(long), "notes": notes}


def _arrow_columns(con, columns):
    """A pyarrow.Table of ((name, DuckDB type, values), ...), made by DuckDB connection `con`
    from bound lists: pyarrow builds Arrow from Python values only after importing pandas
    (to ask whether it was given a DataFrame), half a second of a command."""
    from kmemscope.common.text import quote_ident
    from kmemscope.dataset.reader import query_arrow

    # sql-safe: names are the constants of the callers, quoted; types are DuckDB type names
    select = ", ".join(f"unnest(CAST(? AS {t}[])) AS {quote_ident(c)}" for c, t, _v in columns)
    # sql-safe: select is built above from quoted names and type names
    return query_arrow(con, f"SELECT {select}", [v for _c, _t, v in columns])


DEFAULT_TIMEOUT = 3600.0      # seconds a reading command may take unless told (limits.py)


def bounded(memory_limit: str | int | None = None, timeout: float | None = DEFAULT_TIMEOUT):
    """A context in which calls run within `memory_limit` (DuckDB's limit of every
    connection, e.g. "4GB"; default a quarter of this machine's memory) and `timeout`
    seconds (opening the dataset included): past it, one QueryError."""
    from kmemscope.dataset.limits import bounded as _bounded

    return _bounded(memory_limit, timeout)


# ---------------------------------------------------------------- for front ends
# What a front end (kmemscope.cli, a service of one's own) needs beside the calls above:
# one dataset handle per command, inputs and SQL text taken apart as the command line
# takes them, engines started and stopped. docs/python.md lists them.

def dataset_handle(dataset):
    """The handle of `dataset` (a path, an s3:// URL, or a handle, returned as it is) that a
    command makes once and passes to every call: where it lives, local or s3, and one
    listing of its runs, taken on first use (kmemscope.dataset.handle.DatasetRef)."""
    from kmemscope.dataset.handle import DatasetRef

    return DatasetRef.of(dataset)


@contextmanager
def shared_with_children(ref):
    """While in the block, processes started from this one (the report's notebook kernels,
    which inherit the environment) read `ref`'s dataset as `ref` listed it: every call
    of theirs, whatever a parse commits meanwhile (kmemscope.dataset.snapshot). Nothing
    is shared for an s3 dataset (nothing writes one)."""
    from kmemscope.dataset import snapshot

    if ref.snapshot is None:
        yield
        return
    saved = os.environ.get(snapshot.ENV)
    exported = os.environ[snapshot.ENV] = snapshot.export(ref.snapshot, ref.listing)
    try:
        yield
    finally:
        snapshot.forget_adopted(exported)      # this process's own listings in the block
        if saved is None:
            os.environ.pop(snapshot.ENV, None)
        else:
            os.environ[snapshot.ENV] = saved


def expand_inputs(sources: Iterable) -> list:
    """The inputs to parse: a flight directory (record --flight) becomes its bundles."""
    from kmemscope.parsers import sources as inputs

    return inputs.expand_inputs(list(sources))


def sql_statements(text: str) -> list[str]:
    """The statements of SQL `text`, cut at DuckDB's own `;` tokens (the one splitter of
    Dataset.sql and `kmemscope sql`); none (empty, comments only) is an error.

    duckdb.tokenize() needs no database: duckdb.extract_statements() would start
    DuckDB's default in-memory database for this alone (60-150 ms of `kmemscope sql`).
    A statement that does not parse is reported when it runs, in DuckDB's words.
    """
    import duckdb

    from kmemscope.common.errors import QueryError
    from kmemscope.dataset.reader import sql_error_text

    if not isinstance(text, str):
        raise QueryError(f"SQL is text, not {type(text).__name__}")
    try:
        tokens = duckdb.tokenize(text)
    except duckdb.Error as exc:
        raise QueryError(f"SQL failed: {sql_error_text(exc)}") from None
    statements, start, words = [], 0, False
    for pos, kind in tokens:
        if kind == duckdb.token_type.operator and text.startswith(";", pos):
            if words:
                statements.append(text[start:pos])
            start, words = pos + 1, False
        elif kind != duckdb.token_type.comment:
            words = True
    if words:
        statements.append(text[start:])
    if not statements:
        raise QueryError("the SQL holds no statement (it is empty or only comments)",
                         "give a query such as \"SELECT count(*) FROM runs\"")
    return statements


def read_sql_file(path) -> str:
    """A file of SQL: a regular file of bounded size, read without following a link."""
    from kmemscope.parsers.benchmark_results import read_text_file

    return read_text_file(path, "SQL file")


def reader_notes(dataset) -> list[str]:
    """Notes on what readers leave out: commits that killed parses left unfinished (the next
    parse finishes them) and folders of names kmemscope does not write."""
    return dataset_handle(dataset).reader_notes()


def engine_spec(engine: EngineSpec | str | None, master: str | None = None,
                 conf: ConfArg = None) -> EngineSpec:
    """EngineSpec.of(engine, master, conf). QueryError names a bad engine, master or setting."""
    from kmemscope.queries.engines import EngineSpec

    return EngineSpec.of(engine, master, conf)


def start_engine(spec: EngineSpec | str) -> None:
    """Start `spec`'s engine session now (a Spark JVM takes seconds to a minute), not on first use.

    Not for an s3:// dataset: its Spark session needs the storage settings (hadoop-aws)
    when the JVM starts, and the first query over it starts the session with them."""
    from kmemscope.queries.engines import EngineSpec, engine_for

    engine = engine_for(EngineSpec.of(spec))
    getattr(engine, "spark", None)          # SparkEngine starts its session on first access


def stop_engines() -> None:
    """Stop every Spark session this process started (the command line does, as a verb ends)."""
    from kmemscope.queries import engines

    engines.shutdown()


def pack_spark_env(output, wheel=None, extras: Sequence[str] = (), python_prefix=None,
                   progress: Progress = None):
    """Pack the Spark executors' Python environment (kmemscope with its native decoder, duckdb,
    pyarrow) into the archive `output` for spark.archives; -> PackedEnv (.path, .size, .conf:
    the two Spark settings that use it). wheel: the kmemscope wheel (None: the one this
    kmemscope was installed from). SparkEnvError (a KmemscopeError) says why it could not."""
    from kmemscope.queries.engines import spark_env

    return spark_env.pack(output, wheel, extras, python_prefix, progress)


def snapshot_times(text: str) -> tuple:
    """`START,END` Unix seconds (parse --procfs-times) -> (start, end); ValueError otherwise."""
    from kmemscope.parsers.snapshots import parse_times

    return parse_times(text)
