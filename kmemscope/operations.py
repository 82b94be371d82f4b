"""Operations on datasets and engines: what the command line's verbs do, as functions.

    from kmemscope import operations as ops
    ops.parse_one("bundle", "ds", labels={"kernel": "patched"})
    tables, notes = ops.run_sql("ds", ops.sql_statements("SELECT count(*) FROM runs"))
    print(ops.verify("ds").ok)

kmemscope.api is the analyst's surface (open a dataset, query, compare); this
module is the rest of the public API: parse one input or many on Spark, derive,
verify, describe a dataset, import benchmark results, run SQL text, and start or
stop engines. docs/python.md documents both. Nothing here prints.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from kmemscope.common.errors import KmemscopeError

if TYPE_CHECKING:       # loaded by the functions that use them: parse needs neither
    from kmemscope.queries.engines import ConfArg, EngineSpec


def dataset_ref(dataset):
    """The handle of `dataset` (a path, an s3:// URL, or a handle, returned as it is) that a
    command makes once and passes to every call: where it lives, local or s3, and one
    listing of its runs, taken on first use (kmemscope.dataset.handle.DatasetRef)."""
    from kmemscope.dataset.handle import DatasetRef

    return DatasetRef.of(dataset)


def expand_inputs(sources: Sequence) -> list:
    """The inputs to parse: a flight directory (record --flight) becomes its bundles."""
    from kmemscope.parsers.sources import expand_inputs as _expand

    return _expand(list(sources))


def parse_one(source, dataset, labels: Mapping[str, str] | None = None, *,
              events: Sequence[str] | None = None, threads: int | None = None,
              progress: Callable | None = None, whole_bundle: bool = False):
    """Parse one trace.dat or bundle into `dataset` -> RunSummary.

    progress(("total", bytes)) then progress(("advance", bytes)) as the trace is decoded.
    A flight recorder's bundle keeps only its window's events unless whole_bundle."""
    from kmemscope.parsers.ingest import ingest

    return ingest(source, dataset, labels=dict(labels or {}), events=list(events or []),
                  threads=threads, progress=progress, whole_bundle=whole_bundle)


def parse_on_spark(sources: Sequence, dataset, *, engine: EngineSpec | str = "spark",
                   labels: Mapping[str, str] | None = None, events: Sequence[str] | None = None,
                   derive: bool = False, progress: Callable | None = None) -> list:
    """Parse inputs in Spark tasks, one per input; the driver commits each run.

    Returns one RunSummary or KmemscopeError per input. progress(kind, source, entry)
    hears of each run as it is committed ("run") and derived ("derived")."""
    from kmemscope.parsers.spark_parse import parse_on_spark as _parse
    from kmemscope.queries.engines import EngineSpec, engine_for

    spark = getattr(engine_for(EngineSpec.of(engine)), "spark", None)
    if spark is None:
        raise KmemscopeError("parsing on Spark needs the spark engine")
    return _parse(list(sources), dataset, spark=spark, labels=dict(labels or {}),
                  events=list(events or []), derive=derive, progress=progress)


def derive(dataset, run_ids: Sequence[str] | None = None, threads: int | None = None) -> None:
    """Build the runs' derived tables (free/alloc pairing, stacks) now, not on first query."""
    from kmemscope.dataset.derived import derive_runs

    derive_runs(dataset, list(run_ids) if run_ids is not None else None, threads=threads)


def import_metrics(dataset, path, fmt: str | None = None) -> dict:
    """Import a metrics file (CSV or JSON) into a local dataset -> {run_id: [metric names]}."""
    from kmemscope.parsers.benchmark_results import import_metrics as _import
    from kmemscope.queries.metrics import SUMMARY

    return _import(dataset, path, fmt, reserved=frozenset(SUMMARY))


def sql_statements(text: str) -> list[str]:
    """The statements of SQL `text`, cut at DuckDB's own `;` tokens; none (empty, comments
    only) is an error.

    duckdb.tokenize() needs no database: duckdb.extract_statements() would start
    DuckDB's default in-memory database for this alone (60-150 ms of `kmemscope sql`).
    A statement that does not parse is reported when it runs, in DuckDB's words.
    """
    import duckdb

    from kmemscope.dataset.reader import sql_error_text

    try:
        tokens = duckdb.tokenize(text)
    except duckdb.Error as exc:
        raise KmemscopeError(f"SQL failed: {sql_error_text(exc)}") from None
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
        raise KmemscopeError("the SQL holds no statement (it is empty or only comments)",
                             "give a query such as \"SELECT count(*) FROM runs\"")
    return statements


def read_sql_file(path) -> str:
    """A file of SQL: a regular file of bounded size, read without following a link."""
    from kmemscope.parsers.benchmark_results import read_text_file

    return read_text_file(path, "SQL file")


def run_sql(dataset, statements: Sequence[str], *, engine: EngineSpec | str | None = None,
            read_only: bool = False, timeout: float | None = None,
            memory_limit: str | None = None, plain_rows: bool = False) -> tuple[list, list[str]]:
    """Run SQL statements one after the other over a dataset -> (one pyarrow.Table or None
    per statement, notes). plain_rows (DuckDB): results of plain scalar columns as
    tables.Rows, which format_table prints without importing pyarrow.

    Every table is a view of its own name, beside the analyses' shared views. On DuckDB:
    read_only allows SELECTs that read the dataset only; timeout (seconds) and memory_limit
    ("2GB") bound the work, by default 300 s and a quarter of the memory when read_only;
    spills go to a private directory removed at the end. On Spark the SQL is translated."""
    from kmemscope.api import _run_sql
    from kmemscope.common.errors import QueryError
    from kmemscope.queries.engines import EngineSpec
    from kmemscope.queries.runner import backend_errors, open_runs

    spec = EngineSpec.of(engine)
    dataset = dataset_ref(dataset)
    notes: list[str] = []
    if spec.is_spark:
        if read_only or timeout or memory_limit:
            raise QueryError("read-only, timeout and memory limit are for the DuckDB engine: "
                             "Spark SQL can read any path the cluster can")
        backend = open_runs(dataset, engine=spec)[0]
        try:
            with backend_errors(backend, "SQL"):
                return [backend.query_arrow(q, None) for q in statements], notes
        finally:
            backend.close()
    # runs whose schema does not fit are left out, with a note
    return _run_sql(dataset, statements, read_only=read_only, timeout=timeout,
                    memory_limit=memory_limit, notes=notes, plain_rows=plain_rows), notes


DEFAULT_TIMEOUT = 3600.0      # seconds a reading command may take unless told (limits.py)


def bounded(memory_limit: str | int | None = None, timeout: float | None = DEFAULT_TIMEOUT):
    """A context in which a command runs within `memory_limit` (DuckDB's limit of every
    connection, e.g. "4GB"; default a quarter of this machine's memory) and `timeout`
    seconds (opening the dataset included): past it, one QueryError."""
    from kmemscope.dataset.limits import bounded as _bounded

    return _bounded(memory_limit, timeout)


def interrupted_commits(dataset) -> list[str]:
    """Notes on what readers leave out: commits that killed parses left unfinished (the next
    parse finishes them) and folders of names kmemscope does not write."""
    return dataset_ref(dataset).reader_notes()


def verify(dataset, deep: bool = False):
    """Check every file of a local dataset (derived caches too) against the sha256 recorded
    when its run was committed -> kmemscope.dataset.verify.Verification (.ok, .runs, .files,
    .problems: [(kind, path)] with kind missing, changed, extra or unrecorded). deep: also
    derive every recorded derived cache again and compare its rows (an analysis' kept rows:
    run the analysis on the run again)."""
    import functools

    from kmemscope.dataset.verify import verify as _verify
    from kmemscope.queries import result_cache, runner

    check = functools.partial(result_cache.same_as_recomputed, rows_of_run=runner.rows_of_run)
    return _verify(dataset, deep=deep, recompute={result_cache.PREFIX: check})


def dataset_info(dataset) -> dict:
    """{"runs": Result or None, "tables": Result, "rows_per_run": Result, "notes": [...]}
    of a dataset (notes: runs whose runs file cannot be listed with the others).

    Row counts come from the runs' own records where they state them, else from the
    Parquet footers (local or s3): no table is scanned."""
    from kmemscope.api import Result
    from kmemscope.dataset.reader import connect, query_arrow, sql_error_text, unfit_runs
    from kmemscope.dataset.storage import parquet_rows
    from kmemscope.common.errors import DatasetError, QueryError

    def rows(f):
        if f in recorded:
            return recorded[f][1]
        try:
            return parquet_rows(f)
        except KmemscopeError:
            raise
        except Exception as exc:      # a truncated or foreign file: name it
            raise DatasetError(f"cannot read the footer of {f}: {str(exc).splitlines()[0]}",
                               "kmemscope verify DATASET lists what changed") from None

    ref = dataset_ref(dataset)
    parts = ref.listing
    recorded = ref.footers()
    # A run whose runs file cannot be read with the others (or declares a 512 MiB host) is
    # counted but its row is left out of `runs`, with a note.
    unfit = unfit_runs(parts, {"runs"})
    notes = [f"run {r} is left out of the runs listed: {why}" for r, why in sorted(unfit.items())]
    per_run = [(run, name, sum(rows(f) for f in files))
               for name, runs in sorted(parts.items()) for run, files in sorted(runs.items())]
    totals: dict = {}
    for _run, name, rows in per_run:
        total, runs = totals.get(name, (0, 0))
        totals[name] = (total + rows, runs + 1)
    order = sorted(totals, key=lambda n: (-totals[n][0], n))
    runs_table = None
    import duckdb

    listed = [r for r in parts.get("runs", {}) if r not in unfit]
    con = (connect(ref.location, tables=["runs"], parts=parts, run_ids=listed, remote=ref.is_s3)
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
            noted = query_arrow(con, f"SELECT count(*) AS n FROM runs WHERE {note} IS NOT NULL"
                                ).column(0)[0].as_py()
            runs_table = query_arrow(con, f"""
                SELECT run_id, host, kernel_release, arch, cpus, trace_clock, events, lost_events,
                       round((last_ts - first_ts) / 1e9, 3) AS seconds,
                       file_version, compression, labels, source
                       {f", {note} AS flight_window" if noted else ""}
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
    from kmemscope.dataset.reader import query_arrow
    from kmemscope.dataset.reader import quote_ident as _quote

    # sql-safe: names are the constants of the callers, quoted; types are DuckDB type names
    select = ", ".join(f"unnest(CAST(? AS {t}[])) AS {_quote(c)}" for c, t, _v in columns)
    return query_arrow(con, f"SELECT {select}", [v for _c, _t, v in columns])


def quote_ident(name: str) -> str:
    """`name` as a quoted SQL identifier (table names come from traces: never paste them)."""
    from kmemscope.dataset.reader import quote_ident as _quote

    return _quote(name)


def engine_spec(engine: EngineSpec | str | None, master: str | None = None,
                conf: ConfArg = None) -> EngineSpec:
    """EngineSpec.of(engine, master, conf), without loading kmemscope.api (a parse needs
    none of it). QueryError names a bad engine, master or setting."""
    from kmemscope.queries.engines import EngineSpec

    return EngineSpec.of(engine, master, conf)


def start_engine(spec: EngineSpec | str) -> None:
    """Start `spec`'s engine session now (a Spark JVM takes seconds to a minute), not on first use.

    Not for an s3:// dataset: its Spark session needs the storage settings (hadoop-aws)
    when the JVM starts, and the first query over it starts the session with them."""
    from kmemscope.queries.engines import EngineSpec, engine_for

    engine = engine_for(EngineSpec.of(spec))
    getattr(engine, "spark", None)          # SparkEngine starts its session on first access


def is_remote(dataset) -> bool:
    """True for a dataset in an object store (s3://bucket/prefix)."""
    return dataset_ref(dataset).is_s3


def stop_engines() -> None:
    """Stop every Spark session this process started (the command line does, as a verb ends)."""
    from kmemscope.queries import engines

    engines.shutdown()
