"""The `kmemscope` command line: a thin layer over the library's functions.

Every verb that prints rows takes the same --format/-o options. Errors are one
line on stderr, `kmemscope: error: <what> (<what to do>)`, with a non-zero exit;
`kmemscope --debug VERB` shows the traceback instead. Heavy imports (pyarrow,
duckdb) happen inside the verbs that need them, so `record` and `--help` start fast.
"""
import os
import sys
from typing import Any

import click

from kmemscope.common.version import __version__
from kmemscope.common.errors import KmemscopeError
from kmemscope.common.text import printable
from kmemscope.render import formats

def utf8_path(ctx, param, value):
    """Refuse paths that are not valid UTF-8: Arrow and DuckDB cannot open them."""
    values = value if isinstance(value, tuple) else (value,)
    for v in values:
        if v is None:
            continue
        try:
            os.fsencode(v).decode("utf-8")
        except UnicodeDecodeError:
            shown = os.fsencode(v).decode("utf-8", errors="backslashreplace")
            raise click.BadParameter(f"'{shown}' is not valid UTF-8 (rename it)") from None
    return value


LABEL_FILTER_HELP = ("Only runs with this label. Repeatable: runs must match every key, and "
                     "any of the values given for one key.")
FORMAT_OPTION = click.option("--format", "fmt", type=click.Choice(formats.names("rows")),
                             default=None, help="Output format (default: from -o's extension, "
                                                "else table).")
OUTPUT_OPTION = click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True),
                             callback=utf8_path,
                             help="Write the result to FILE instead of stdout.")
NOTES_OPTION = click.option("--notes", "notes_file", type=click.Path(dir_okay=False, writable=True),
                            callback=utf8_path,
                            help="Also write the output's notes, with its schema_version and "
                                 "kind, to FILE as JSON (for programs reading csv or jsonl, "
                                 "which hold rows only).")


PROGRESS_OPTION = click.option("--progress", is_flag=True,
                               help="A line on stderr per step of the answer (each analysis "
                                    "it runs) and per run whose derived tables it builds, "
                                    "with the time so far: for a log. On a terminal the "
                                    "steps show on one line without it.")


def selection_options(f):
    """--run, --label: the runs a reading command reads (all when neither is given)."""
    f = click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
                     help=LABEL_FILTER_HELP)(f)
    return click.option("--run", "runs", multiple=True, metavar="ID",
                        help="Only this run. Repeatable.")(f)


def limit_options(f):
    """--memory-limit, --timeout: every reading command is bounded, opening the dataset too."""
    f = click.option("--timeout", type=click.FloatRange(0, min_open=True), default=3600.0,
                     show_default=True, metavar="SECONDS",
                     help="Stop the command once it has run this long.")(f)
    return click.option("--memory-limit", metavar="SIZE",
                        help="DuckDB's memory limit, e.g. 4GB (default: a quarter of this "
                             "machine's memory).")(f)


def _limits(memory_limit, timeout):
    from kmemscope.api import bounded

    return bounded(memory_limit, timeout)


def engine_options(f):
    """--engine, --spark-master, --spark-conf: which engine runs the SQL."""
    f = click.option("--spark-conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
                     help="A Spark setting, e.g. spark.executor.memory=8g. Repeatable.")(f)
    f = click.option("--spark-master", metavar="URL",
                     help="Spark master with --engine spark (default local[*]; "
                          "spark://host:7077, yarn, k8s://...).")(f)
    return click.option("--engine", type=click.Choice(["duckdb", "spark"]), default="duckdb",
                        show_default=True,
                        help="Run on DuckDB in this process, or on Apache Spark "
                             "(pip install 'kmemscope[spark]', Java 17+).")(f)


class _engine:
    """The options' EngineSpec; every engine session the verb started is stopped when it ends."""

    def __init__(self, engine, master, conf, dataset=None):
        from kmemscope.common.errors import QueryError
        from kmemscope.api import engine_spec

        self.dataset = dataset
        try:
            self.spec = engine_spec(engine, master, conf)
        except QueryError as exc:
            raise click.BadParameter(str(exc), param_hint="--engine") from None

    def __enter__(self):
        from kmemscope.api import dataset_handle, start_engine

        if self.spec.is_spark and not (self.dataset and dataset_handle(self.dataset).is_s3):
            where = self.spec.master or "local[*]"
            with _status(f"starting Spark ({where})") as status:
                start_engine(self.spec)
                status.done(f"Spark started ({where})")
        return self.spec

    def __exit__(self, *exc):
        if self.spec.is_spark:
            from kmemscope.api import stop_engines

            stop_engines()


def _shown(text):
    """Text for the terminal: control characters escaped, and no rich markup taken from it."""
    from rich.markup import escape

    from kmemscope.common.text import printable

    return escape(printable(text))


class _status:
    """Slow one-time work shown while it runs: a spinner with elapsed time on a terminal,
    one line per message elsewhere (a log keeps them all)."""

    def __init__(self, message, quiet=False):
        self.message, self.quiet = message, quiet
        self.live = None

    def __enter__(self):
        import time

        self.started = time.monotonic()
        if self.quiet:
            return self
        if sys.stderr.isatty():
            from rich.console import Console

            self.live = Console(stderr=True).status(f"kmemscope: {_shown(self.message)} ...",)
            self.live.start()
        else:
            click.echo(f"kmemscope: {_shown(self.message)} ...", err=True)
        return self

    def update(self, message, count=None):
        """A new step (a run's derived tables): the spinner shows it (and `count`, what is
        done so far); a log gets a line."""
        if self.quiet:
            return
        if self.live is not None:
            self.live.update(f"kmemscope: {_shown(message)}" + (f" ({count})" if count else ""))
        else:
            click.echo(f"kmemscope: {_shown(message)}", err=True)

    def done(self, message):
        import time

        if self.live is not None:
            self.live.stop()
            self.live = None
        if not self.quiet:
            click.echo(f"kmemscope: {message} in {time.monotonic() - self.started:.1f} s", err=True)

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.stop()
        return False


class _Steps:
    """The progress callback of a query: the first slow step (building a run's derived
    tables) opens a _status; later steps update it; it closes with the time they took.
    On a terminal the spinner also counts the runs built so far."""

    def __init__(self, quiet=False):
        self.status, self.quiet = None, quiet
        self.built = 0

    def __call__(self, message):
        if message.startswith("run "):
            self.built += 1
        if self.status is None:
            self.status = _status(message, self.quiet).__enter__()
        else:
            self.status.update(message, f"{self.built} run(s) built")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if self.status is not None:
            if exc_type is None:
                self.status.done("derived tables built")
            self.status.__exit__(exc_type, *exc)
        return False


class _LongAnswer:
    """The progress of a long answer (compare, a report's comparison): each analysis it
    runs is a step, each run whose one-time work is done is a run built. On a terminal, a
    spinner line with both that goes when the answer is there (as parse's bar does); with
    --progress, a line per step and per run on stderr, for a log; nothing otherwise
    (quiet, or stderr not a terminal)."""

    def __init__(self, what, quiet=False, lines=False):
        import time

        self.what, self.lines = what, lines
        self.live = None
        self.on_terminal = not lines and not quiet and sys.stderr.isatty()
        self.steps = self.built = 0
        self.started = time.monotonic()

    def __call__(self, message):
        if message.startswith("run "):
            self.built += 1
        else:
            self.steps += 1
        if self.lines:
            click.echo(f"kmemscope: {self.what}: {self._elapsed()} {_shown(message)}", err=True)
        elif self.on_terminal:
            text = (f"kmemscope: {self.what}: step {self.steps}, {self.built} run(s) built: "
                    f"{_shown(message)}")
            if self.live is None:
                from rich.console import Console

                self.live = Console(stderr=True).status(text)
                self.live.start()
            else:
                self.live.update(text)

    def _elapsed(self):
        import time

        return f"[{time.monotonic() - self.started:6.1f} s]"

    def close(self, done=True):
        if self.live is not None:
            self.live.stop()
            self.live = None
        if self.lines and done and self.steps:
            click.echo(f"kmemscope: {self.what}: {self._elapsed()} done: {self.steps} step(s), "
                       f"{self.built} run(s) built", err=True)
        self.lines = self.on_terminal = False

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.close(done=exc_type is None)
        return False


def _key_values(values, what):
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=what)
        out[key] = value
    return out


def _procfs_times(_ctx, _param, value):
    """--procfs-times START,END -> (start, end) Unix seconds."""
    if value is None:
        return None
    from kmemscope.api import snapshot_times

    try:
        return snapshot_times(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not START,END in Unix seconds") from None


class _PipeClosed(Exception):
    """stdout's reader went away (`kmemscope sql ... | head`): not an OSError, so that
    neither click's own EPIPE exit (status 1) nor the one-line error catches it."""


class _Verbs(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            raise _PipeClosed() from exc


@click.group(cls=_Verbs, context_settings={"help_option_names": ["-h", "--help"]},
             invoke_without_command=True)
@click.version_option(__version__, prog_name="kmemscope")
@click.option("--debug", is_flag=True, help="Show tracebacks of errors.")
@click.pass_context
def cli(ctx, debug):
    """Record page-allocator traces and answer questions about them in SQL."""
    ctx.obj = {"debug": debug}
    if ctx.invoked_subcommand is None:          # bare `kmemscope`: the help, not an error
        click.echo(ctx.get_help())
        ctx.exit(0)


# ---------------------------------------------------------------- parse

@cli.command()
@click.argument("sources", nargs=-1, required=True, metavar="TRACE_OR_BUNDLE...", callback=utf8_path)
@click.option("-o", "--output", "dataset", required=True, metavar="DATASET", callback=utf8_path,
              help="Dataset directory to write (created if missing), or s3://bucket/prefix.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="Label the run(s), e.g. --label kernel=patched. Repeatable.")
@click.option("--events", "events", multiple=True, metavar="PATTERN",
              help="Only events matching this glob (`kmem:*`, `mm_page_alloc`). Repeatable.")
@click.option("--threads", type=click.IntRange(1, 256), default=None,
              help="Decoder threads (default: one per core).")
@click.option("--derive", is_flag=True,
              help="Also pair frees with reallocations now (hot_pfns and pfn_reuse need it; "
                   "otherwise their first query does it).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no summary.")
@click.option("--force", is_flag=True,
              help="Parse inputs again that the dataset holds already (same content, labels "
                   "and options), replacing their runs; by default they are skipped.")
@click.option("--whole-bundle", is_flag=True,
              help="Keep every event of a flight bundle, also those outside its trigger's window "
                   "(by default they are trimmed and counted).")
@click.option("--procfs-start", type=click.Path(file_okay=False), callback=utf8_path, metavar="DIR",
              help="A folder of /proc copies (vmstat, pagetypeinfo, buddyinfo) taken just before "
                   "a bare trace.dat was recorded; with --procfs-end, the run gets them as its "
                   "samples (vmstat rows: the increases between the two).")
@click.option("--procfs-end", type=click.Path(file_okay=False), callback=utf8_path, metavar="DIR",
              help="The same /proc copies taken just after the trace.")
@click.option("--procfs-times", metavar="START,END", callback=_procfs_times,
              help="When the --procfs-start and --procfs-end copies were taken, in Unix seconds "
                   "(`date +%s.%N`); default: their files' modification times.")
@engine_options
@click.pass_context
def parse(ctx, sources, dataset, labels, events, threads, derive, quiet, force, whole_bundle,
          procfs_start, procfs_end, procfs_times, engine, spark_master, spark_conf):
    """Parse trace.dat files or bundles into a Parquet dataset.

    Each input becomes one run, named by a hash of its trace.dat. An input the
    dataset holds already (the same files, labels and options) is skipped
    without decoding ("already in the dataset"; --force parses it again); the
    same trace with other labels or samples replaces its run. A run appears
    only when complete. A folder of bundles gives each bundle in it. A
    flight directory (record --flight) gives one run per bundle, each labelled
    trigger=<reason>, holding the events of its window: from --keep before the
    trigger (or from when every CPU has events) to --after after it.

    With --engine spark each input is decoded in a Spark task and the driver
    commits the runs; the dataset must be on a file system that the driver and
    every executor see at the same path.

    A bare trace.dat with /proc copies taken before and after it (mmtests'
    monitors, hand captures): --procfs-start DIR --procfs-end DIR.

    -o s3://bucket/prefix writes into an object store, safe beside other
    ingesters: a trace whose run is already there is skipped unless --force.
    """
    from kmemscope.api import (check_parse_target, expand_inputs, is_object_store,
                               parse as parse_inputs)

    labels = _key_values(labels, "--label")
    snapshots = {"procfs_start": procfs_start, "procfs_end": procfs_end,
                 "procfs_times": procfs_times}
    if (procfs_start is None) != (procfs_end is None):
        raise click.UsageError("--procfs-start and --procfs-end go together")
    if procfs_times is not None and procfs_start is None:
        raise click.UsageError("--procfs-times is for --procfs-start and --procfs-end")
    if procfs_start is not None and (len(sources) != 1 or engine == "spark"):
        raise click.UsageError("--procfs-start and --procfs-end go with one trace.dat, parsed "
                               "locally")
    patterns = [p for item in events for p in item.split(",") if p]
    try:  # a flight directory (record --flight) is one run per bundle
        sources = expand_inputs(sources)
    except KmemscopeError as exc:
        _report_error(ctx, exc)
        sys.exit(1)
    if engine == "spark":
        if is_object_store(dataset):
            raise click.UsageError("parse --engine spark commits to a file system; parse into "
                                   "an s3:// dataset without it")
        if threads:
            raise click.BadParameter("--threads is for the local decoder; Spark runs one "
                                     "task per input", param_hint="--threads")
        with _engine(engine, spark_master, spark_conf, dataset) as eng:
            failures = _parse_on_spark(ctx, sources, dataset, labels, patterns, derive, quiet,
                                       eng)
        if failures:
            sys.exit(1)
        return
    _engine(engine, spark_master, spark_conf)
    show_progress = not quiet and sys.stderr.isatty()
    failures = added = skipped = 0
    try:
        check_parse_target(dataset, derive=derive)     # once, not once per input
    except KmemscopeError as exc:
        _report_error(ctx, exc)
        sys.exit(1)
    for source in sources:
        try:
            with _progress(source, show_progress) as progress:
                [summary] = parse_inputs(source, dataset, labels=labels, events=patterns,
                                         threads=threads, progress=progress,
                                         whole_bundle=whole_bundle, force=force, **snapshots)
        except KmemscopeError as exc:
            _report_error(ctx, exc)
            failures += 1
            continue
        # another parse's commit of the same trace is in the dataset, not this one's
        skipped += summary.skipped or summary.concurrent
        added += not (summary.skipped or summary.concurrent)
        if summary.skipped:
            if not quiet:
                click.echo(f"{printable(source)}: already in the dataset (run {summary.run_id}); "
                           "skipped", err=True)
        elif summary.concurrent:
            click.echo(f"{printable(source)}: run {summary.run_id} was committed by another parse "
                       "of the same trace while this one ran; kept that one", err=True)
        elif not quiet:
            verb = "replaced" if summary.replaced else "added"
            rate = summary.events / summary.seconds / 1e6 if summary.seconds else 0
            click.echo(f"{printable(source)}: run {summary.run_id} {verb}: "
                       f"{summary.events:,} events in {summary.seconds:.2f} s ({rate:.1f} M events/s), "
                       f"{summary.lost_events:,} lost"
                       + (f", {summary.trimmed_events:,} outside the flight window trimmed"
                          if getattr(summary, "trimmed_events", 0) else ""), err=True)
        for line in getattr(summary, "recovered", None) or []:
            # a finished or refused recovery is news; a removed empty work folder is not (a
            # parse running beside this one leaves one for a moment as it cleans up)
            if not line.startswith("removed "):
                click.echo(f"kmemscope: note: {printable(dataset)}: {printable(line)}", err=True)
        for line in getattr(summary, "notes", None) or []:
            click.echo(f"kmemscope: note: {printable(source)}: {printable(line)}", err=True)
        for key, was, now in summary.label_overrides:
            click.echo(printable(f"kmemscope: note: {source}: --label {key}={now} replaces the "
                                 f"bundle's own label {key}={was}"), err=True)
        if derive and not summary.skipped:
            _derive(ctx, dataset, summary.run_id, quiet)
        if summary.unknown_events:
            # A tracer that died can leave events enabled that the next trace
            # records without their format: say so rather than drop them quietly.
            click.echo(f"kmemscope: warning: {printable(source)}: "
                       f"{summary.unknown_events:,} records of event types whose format the file lacks were skipped", err=True)
    if not quiet and len(sources) > 1:
        click.echo(f"kmemscope: added {added}, skipped {skipped}, refused {failures}", err=True)
    if failures:
        sys.exit(1)


def _parse_on_spark(ctx, sources, dataset, labels, patterns, derive, quiet, eng):
    """`parse --engine spark`: one Spark task per input; a line per run as the driver commits it."""
    from kmemscope.api import parse_on_spark

    def progress(kind, source, entry):
        if isinstance(entry, KmemscopeError):
            _report_error(ctx, entry)
        elif kind == "run" and not quiet:
            verb = "replaced" if entry.replaced else "added"
            if entry.concurrent:
                verb = "already committed by another parse; kept"
            click.echo(f"{printable(source)}: run {entry.run_id} {verb}: {entry.events:,} events in "
                       f"{entry.seconds:.2f} s on {printable(entry.host)}, {entry.lost_events:,} lost",
                       err=True)
        elif kind == "derived" and not quiet:
            if entry.derive_error is not None:
                _report_error(ctx, entry.derive_error)
            else:
                click.echo(f"run {entry.run_id}: derived tables built in "
                           f"{entry.derive_seconds:.2f} s", err=True)

    if not quiet:
        click.echo(f"kmemscope: parsing {len(sources)} input(s) on Spark "
                   f"({eng.master or 'local[*]'})", err=True)
    entries = parse_on_spark(sources, dataset, engine=eng, labels=labels, events=patterns,
                             derive=derive, progress=progress)
    failures = sum(isinstance(e, KmemscopeError) for e in entries)
    if not quiet:
        click.echo(f"kmemscope: {len(entries) - failures} of {len(entries)} input(s) parsed"
                   + (f", {failures} failed" if failures else ""), err=True)
    return failures


def _derive(ctx, dataset, run_id, quiet):
    """Build a run's derived pairing tables (queries/derived_tables.py) right after parsing it."""
    import time

    from kmemscope.api import derive

    started = time.monotonic()
    try:
        derive(dataset, [run_id])
    except KmemscopeError as exc:
        _report_error(ctx, exc)
        return
    if not quiet:
        click.echo(f"run {run_id}: derived tables built in {time.monotonic() - started:.2f} s",
                   err=True)


class _progress:
    """A rich progress bar over bytes of trace data, on stderr, only on a terminal."""

    def __init__(self, source, enabled):
        self.source, self.enabled = source, enabled
        self.bar: Any = None
        self.task = None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn
        from rich.console import Console

        self.bar = Progress("[progress.description]{task.description}", BarColumn(),
                            DownloadColumn(), TimeRemainingColumn(),
                            console=Console(stderr=True), transient=True)
        self.bar.start()
        self.task = self.bar.add_task(os.path.basename(str(self.source)), total=None)
        return self.update

    def update(self, message):
        kind, n = message
        if kind == "total":
            self.bar.update(self.task, total=n)
        else:
            self.bar.advance(self.task, n)

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()
        return False


# ---------------------------------------------------------------- sql / info

@cli.command()
@click.argument("dataset", type=click.Path(), callback=utf8_path)
@click.argument("query", required=False)
@click.option("-f", "--file", "sql_file", type=click.Path(dir_okay=False), callback=utf8_path,
              help="Read the SQL from FILE (QUERY `-` reads it from stdin).")
@click.option("--read-only", is_flag=True,
              help="Allow only SELECT statements that read the dataset: no other files, "
                   "no writes, no extensions.")
@click.option("--timeout", type=click.FloatRange(0, min_open=True), default=None,
              metavar="SECONDS",
              help="Stop the command once it has run this long, opening the dataset included "
                   "(default: 300 with --read-only, else 3600).")
@click.option("--memory-limit", metavar="SIZE",
              help="DuckDB's memory limit, e.g. 2GB (default: a quarter of this machine's "
                   "memory).")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="A value for $KEY in the SQL, bound (never pasted). Repeatable.")
@selection_options
@FORMAT_OPTION
@OUTPUT_OPTION
@NOTES_OPTION
@engine_options
def sql(dataset, query, sql_file, read_only, timeout, memory_limit, params, runs, labels, fmt,
        output, notes_file, engine, spark_master, spark_conf):
    """Run SQL over DATASET; every table is a view of its own name.

    This is DuckDB's full SQL, which can read and write any file the user
    can: use --read-only for SQL from elsewhere. Several statements run one
    after the other, and each one's result is shown.

    \b
    kmemscope sql ds "SELECT \\"order\\", count(*) FROM mm_page_alloc GROUP BY 1"
    kmemscope sql ds -f question.sql
    echo "SELECT count(*) FROM runs" | kmemscope sql ds -

    With --engine spark the same DuckDB SQL is translated to Spark SQL (the
    analyses' rules); what has no exact translation is refused.

    csv, json, jsonl and parquet stream the rows as DuckDB makes them, so
    --memory-limit bounds a result of any size; a table shows its first
    10,000 rows. json writes one object {schema_version, kmemscope_version,
    kind, rows, notes}.
    """
    from kmemscope.api import dataset_handle, run_sql, sql_statements
    from kmemscope.render.writers import TABLE_MAX_ROWS, Document

    dataset = dataset_handle(dataset)       # one handle, listed once, for the whole command
    statements = sql_statements(_sql_text(query, sql_file))
    fmt = formats.resolve(fmt, output)
    bound = _key_values(params, "--param")
    if engine == "spark" and read_only:
        raise click.BadParameter("--read-only is for the DuckDB engine: Spark SQL can "
                                 "read any path the cluster can", param_hint="--read-only")
    spark = engine == "spark"
    if timeout is None and not spark:
        timeout = 300.0 if read_only else 3600.0
    table = fmt == "table"
    notes: list[str] = []       # json and parquet hold them, and --notes FILE: stderr's notes

    def stream(batches):
        # the dataset is listed by now: what its readers left out is known before the rows
        _add_reader_notes(notes, dataset)
        writer.stream(batches)

    with formats.result_writer(fmt, output, kind="sql", notes=notes) as writer:
        with _engine(engine, spark_master, spark_conf, dataset) as spec, \
                _limits(None if spark else memory_limit, None if spark else timeout):
            # a text table is made of its first rows only, printed from Python rows when its
            # columns are plain (no pyarrow to import); other formats stream every row
            tables = run_sql(dataset, statements, engine=spec, runs=list(runs) or None,
                              label=list(labels) or None, params=bound or None,
                              read_only=read_only, timeout=None if spark else timeout,
                              memory_limit=None if spark else memory_limit, notes=notes,
                              plain_rows=table, max_rows=TABLE_MAX_ROWS + 1,
                              on_result=None if table else stream)
            _add_reader_notes(notes, dataset)     # the query ran: the caveat, not a second error
            for note in notes:
                _note(note)
        for result in tables if table else ():
            writer.table(result)
    if notes_file:
        formats.write_notes(notes_file, Document("sql", None, notes=notes), fmt)


def _interrupted_notes(dataset):
    """Commits that killed parses left: readers leave them to the next parse, and say so."""
    from kmemscope.api import reader_notes

    for note in reader_notes(dataset):
        _note(note)


def _add_reader_notes(notes, dataset):
    """The notes of _interrupted_notes (and of folders the readers left out) added to `notes`,
    each once."""
    from kmemscope.api import reader_notes

    notes += [note for note in reader_notes(dataset) if note not in notes]


def _note(note):
    """One note on stderr, control characters escaped (names and labels come from datasets)."""
    from kmemscope.common.text import printable

    click.echo(f"kmemscope: note: {printable(note)}", err=True)


def _sql_text(query, sql_file):
    """The SQL from QUERY, `-` (stdin) or -f FILE; exactly one of them."""
    if sql_file and query is not None:
        raise click.UsageError("give the SQL either as QUERY or with -f FILE, not both")
    if sql_file:
        from kmemscope.api import read_sql_file

        return read_sql_file(sql_file)          # regular, bounded, no link followed
    if query is None:
        raise click.UsageError("no SQL: give QUERY, `-` to read stdin, or -f FILE")
    if query == "-":
        if sys.stdin.isatty():
            raise click.UsageError("`-` reads the SQL from stdin, which is a terminal")
        return sys.stdin.read()
    return query


@cli.command()
@click.argument("dataset", type=click.Path(), callback=utf8_path)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing when every file matches.")
@click.option("--deep", is_flag=True,
              help="Also derive every recorded derived cache again and compare its rows.")
@limit_options
def verify(dataset, quiet, deep, memory_limit, timeout):
    """Check every file of DATASET against the sha256 recorded when its run was committed.

    Prints one line per file that is missing, changed or extra (and runs
    committed without digests: unrecorded), and exits 1 if there is any.
    Derived caches (DATASET/_derived) are checked against the digests their
    run recorded for them; --deep also derives them again from the run's files.

    \b
    kmemscope verify ds
    """
    from kmemscope.api import verify
    from kmemscope.common.text import printable

    with _limits(memory_limit, timeout):
        result = verify(dataset, deep=deep)
    for kind, path in result.problems:
        click.echo(f"{kind}\t{printable(path)}")
    if result.problems:
        raise KmemscopeError(f"{len(result.problems)} problem(s) in {result.files} file(s) of "
                             f"{result.runs} run(s): the dataset is not as it was committed",
                             "parse the runs' traces again, or restore the files from a copy")
    if not quiet:
        click.echo(f"kmemscope: {result.files} file(s) of {result.runs} run(s) match what was "
                   "committed", err=True)


@cli.command()
@click.argument("dataset", type=click.Path(), callback=utf8_path)
@click.option("--older-than", metavar="AGE",
              help="Runs that started longer ago than AGE (30d, 12h, 90m, 3600s, 2w), by the "
                   "start their bundle recorded.")
@click.option("--run", "runs", multiple=True, metavar="ID", help="This run. Repeatable.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help=LABEL_FILTER_HELP)
@click.option("--dry-run", is_flag=True, help="List the runs that would go; remove nothing.")
@click.option("-q", "--quiet", is_flag=True, help="No summary on stderr.")
def prune(dataset, older_than, runs, labels, dry_run, quiet):
    """Remove runs from DATASET, whole: their data and every derived cache.

    The runs removed are those every option given selects (--older-than 7d
    --label kernel=old: the old runs of that kernel). One line per run on
    stdout: its id, recorded start and labels. Removal holds the dataset's
    commit lock; a command reading meanwhile answers for what it listed.

    \b
    kmemscope prune ds --older-than 30d --dry-run
    kmemscope prune ds --older-than 30d
    """
    import datetime

    from kmemscope.api import prune as prune_runs

    result = prune_runs(dataset, older_than=older_than, run=list(runs), label=list(labels),
                        dry_run=dry_run)
    for r in result.runs:
        started = ("-" if r.started_ns is None else datetime.datetime.fromtimestamp(
            r.started_ns / 1e9, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
        shown = ",".join(f"{k}={v}" for k, v in sorted(r.labels.items())) or "-"
        click.echo(printable(f"{r.run_id}  {started}  {shown}"))
    for note in result.notes:
        _note(note)
    if not quiet:
        verb = "would remove" if dry_run else "removed"
        click.echo(f"kmemscope: {verb} {len(result.runs)} run(s) ({len(result.paths)} "
                   f"folder(s)), kept {result.kept}" + ("; nothing removed (--dry-run)"
                                                        if dry_run else ""), err=True)


@cli.command()
@click.argument("dataset", type=click.Path(), callback=utf8_path)
@click.option("--per-run", is_flag=True, help="Also list every table's rows in every run.")
@FORMAT_OPTION
@OUTPUT_OPTION
@NOTES_OPTION
@limit_options
def info(dataset, per_run, fmt, output, notes_file, memory_limit, timeout):
    """Show the runs of DATASET and the rows of each table.

    json writes one object {schema_version, kmemscope_version, kind, runs,
    tables, rows_per_run, notes}; csv, jsonl and parquet write the rows of
    every table in every run (run_id, table, rows).
    """
    from kmemscope import api
    from kmemscope.render.writers import Document, write_document

    dataset = api.dataset_handle(dataset)       # one handle, listed once, for the whole command

    fmt = formats.resolve(fmt, output)
    with _limits(memory_limit, timeout):
        facts = api.info(dataset)
        for note in facts["notes"]:
            _note(note)
        _interrupted_notes(dataset)
    document = {}
    if facts["runs"] is not None:
        document["runs"] = facts["runs"].arrow()
    document["tables"] = facts["tables"].arrow()
    if per_run or formats.is_machine(fmt):
        document["rows_per_run"] = facts["rows_per_run"].arrow()
    doc = Document("info", document.get("rows_per_run"), notes=list(facts["notes"]),
                   parts=document)
    if notes_file:
        formats.write_notes(notes_file, doc, fmt)
    if formats.is_machine(fmt):
        # json holds every table by name; the tabular formats the rows of every table per run
        formats.write(fmt, doc, output)
        return
    write_document(document, output)


# ---------------------------------------------------------------- record

@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                               "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def record(args):
    """Record a bundle on this host (`kmemscope record --help`)."""
    from kmemscope.capture.command import main as record_main

    sys.exit(record_main(list(args)))


# ---------------------------------------------------------------- named analyses

@cli.command()
@click.argument("name", required=False)
@FORMAT_OPTION
@OUTPUT_OPTION
def queries(name, fmt, output):
    """List the named analyses, one line each; with NAME, document that one.

    NAME (or NAME.SECTION) prints the analysis's question, parameters (type,
    default, choices or range), sections, output columns with units, and
    caveats, from its header. --format json gives the same as one object;
    csv, jsonl and parquet give one row per output column.
    """
    from kmemscope.api import analyses, describe
    from kmemscope.render.writers import Document

    fmt = formats.resolve(fmt, output)
    if name is None:
        formats.write(fmt, Document("analyses", analyses().arrow()), output, max_cell=None)
        return
    doc = describe(name)
    if fmt in ("table", "json"):
        import json

        text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n" if fmt == "json" else doc.text()
        _write_text(text, output)
        return
    formats.write(fmt, Document("analysis_columns", doc.columns().arrow(), meta={"query": name}),
                  output, max_cell=None)


@cli.command()
@click.argument("name")
@click.argument("dataset", type=click.Path(), callback=utf8_path)
@selection_options
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="A query parameter.")
@click.option("--format", "fmt", type=click.Choice(formats.names("query")),
              default=None, help="Output format (default: from -o's extension, else table); "
                                 "json: one object {schema_version, kmemscope_version, kind, "
                                 "query, rows, notes}; folded: flame-graph lines, for "
                                 "alloc_origins.folded.")
@click.option("-q", "--quiet", is_flag=True, help="No notes and no progress on stderr.")
@OUTPUT_OPTION
@NOTES_OPTION
@limit_options
@engine_options
def query(name, dataset, runs, labels, params, fmt, quiet, output, notes_file, memory_limit,
          timeout, engine, spark_master, spark_conf):
    """Run the named analysis NAME over DATASET.

    `kmemscope queries` lists the analyses; `kmemscope queries NAME` shows one's
    parameters, sections and output columns with units.
    """
    import kmemscope
    from kmemscope.render.writers import Document
    from kmemscope.api import dataset_handle

    dataset = dataset_handle(dataset)       # one handle, listed once, for the whole command

    fmt = formats.resolve(fmt, output, kind="query")
    with _engine(engine, spark_master, spark_conf, dataset) as spec, _Steps(quiet) as steps, \
            _limits(memory_limit, timeout):
        result = kmemscope.open(dataset, spec).query(
            name, run=list(runs) or None, label=list(labels) or None, progress=steps,
            **_key_values(params, "--param"))
    # Caveats (a run without procfs samples, an assumed pageblock order) go to
    # stderr so that csv/json on stdout stay clean; one line per caveat, not per run.
    if not quiet:
        for note in result.notes:
            _note(note)
    doc = Document("query", result.arrow(), meta={"query": name}, notes=list(result.notes))
    if notes_file:
        formats.write_notes(notes_file, doc, fmt)
    formats.write(fmt, doc, output)


# ---------------------------------------------------------------- compare / report

def _compare_format(fmt, output):
    try:
        return formats.resolve(fmt, output, kind="comparison", default="text")
    except formats.OutputError as exc:
        raise click.BadParameter(str(exc), param_hint="-o") from None


METRICS_HELP = ("Only these metrics, in this order (default: the headline metrics, the vmstat "
                "rows of a kernel A/B table, stall latencies and every imported metric). A metric "
                "is a `summary` column, vmstat.NAME (a counter's increase over the capture), "
                "vmstat.NAME/min (its rate), stalls.KIND.STAT, cost.NAME (pressure, CPU and "
                "time in the allocation path), mthp.SIZEkB.COUNTER, frag.NAME, or an imported "
                "metric's name; headline, vmstat, stalls, cost, mthp, frag and benchmark name "
                "those groups.")


@cli.command()
@click.argument("dataset", type=click.Path(), callback=utf8_path)
@click.option("--by", "by", required=True, metavar="LABEL",
              help="Label whose values are the sides, e.g. --by kernel.")
@click.option("--baseline", metavar="VALUE", help="The side to compare against (default: the first value).")
@click.option("--metrics", metavar="M1,M2", help=METRICS_HELP)
@click.option("--test", type=click.Choice(["welch", "mannwhitney", "band"]), default=None,
              help="The test whose verdict marks a change *x%*: welch (the default), the "
                   "permutation test of the means, exact up to 20,000 splits of the pooled "
                   "values, else 100,000 random ones; mannwhitney, the same test of the ranks; "
                   "band, mmtests' test (the default with --format mmtests).")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="Level of the verdict: adjusted p < alpha.")
@click.option("--correction", type=click.Choice(["bh", "holm", "none"]), default="bh",
              show_default=True,
              help="Across the table's tests: bh (Benjamini-Hochberg, false discovery rate), "
                   "holm (family-wise error rate) or none.")
@click.option("--sides", "side_order", metavar="BASE,V1,V2",
              help="Only these sides, in this order, the first the baseline.")
@click.option("--unit", metavar="LABEL",
              help="Summarise each side's runs per value of LABEL first (e.g. host: one value "
                   "per host, the mean of its runs), so n counts hosts, not runs.")
@click.option("--detect", metavar="PCT%", callback=lambda _c, _p, v: _percent(v),
              help="For rows without a significant change: the runs (or --unit values) per side "
                   "that would detect a change of PCT% of the baseline at 80% power.")
@click.option("--stat", type=click.Choice(["hmean", "amean", "median", "sum"]), default=None,
              help="The centre of higher-is-better rows (default: hmean, as mmtests); sum: "
                   "every row's total across the side's runs, or with --unit host across its "
                   "hosts of each host's value (fleet totals).")
@click.option("--direction", "directions", multiple=True, metavar="METRIC=higher|lower",
              help="State which way is better for a metric (one without a direction, such as "
                   "top5_pfn_allocs_sum or stalls.kcompactd.runs, or against kmemscope's own); "
                   "the row's reason says it was stated. Repeatable.")
@click.option("--over", type=click.Choice(["run", "minute"]),
              help="Show each metric over the side's runs in recording order, or over the "
                   "minutes of the capture (vmstat metrics), instead of the statistics.")
@selection_options
@click.option("--format", "fmt", type=click.Choice(formats.names("comparison")), default=None,
              help="Output format (default: from -o's extension, else text). mmtests: the "
                   "compare-kernels layout to paste into a patch.")
@click.option("-q", "--quiet", is_flag=True,
              help="No notes on stderr (text, markdown, json and parquet keep them inside; "
                   "--notes FILE writes them for programs), and no progress.")
@PROGRESS_OPTION
@OUTPUT_OPTION
@NOTES_OPTION
@limit_options
@engine_options
def compare(dataset, by, baseline, metrics, test, alpha, correction, side_order, unit, detect, stat,
            directions, over, runs, labels, fmt, quiet, progress, output, notes_file, memory_limit,
            timeout, engine, spark_master, spark_conf):
    """Compare the metrics of the sides of label LABEL (mmtests style).

    Every run is one value per metric; each side is summarised (Min, Hmean or
    Amean, Stddev, CoeffVar, Max, BHmean-95) and compared with the baseline:
    the change with its 95% interval, the permutation test's p-value adjusted
    across the table (Benjamini-Hochberg), and the verdict, better or worse
    only where significant. Three or more sides are each compared with the
    baseline.

    \b
    kmemscope compare ds --by kernel --baseline vanilla --format mmtests
    kmemscope compare ds --by kernel --unit host --detect 5%
    kmemscope compare ds --by kernel --sides vanilla,v1,v2 --metrics vmstat.compact_stall,tps
    kmemscope compare ds --by kernel --metrics vmstat.thp_fault_alloc --over run
    """
    import kmemscope
    from kmemscope.render import comparison as co
    from kmemscope.render.writers import Document
    from kmemscope.api import dataset_handle

    dataset = dataset_handle(dataset)       # one handle, listed once, for the whole command

    fmt = _compare_format(fmt, output)
    names = _metric_names(metrics)
    test = test or ("band" if fmt == "mmtests" else "welch")
    order = _side_names(side_order)
    with _engine(engine, spark_master, spark_conf, dataset) as spec, \
            _limits(memory_limit, timeout):
        with _LongAnswer("compare", quiet, progress) as steps:
            c = kmemscope.open(dataset, spec).compare(
                by, baseline, metrics=names, test=test, alpha=alpha, run=list(runs) or None,
                label=list(labels) or None, correction=correction, sides=order, unit=unit,
                stat=stat, detect=detect, directions=_directions(directions), progress=steps)
        if over:
            _compare_over(c, names, over, fmt, output, quiet, notes_file)
            return
    meta = {"label": c.sides.label, "baseline": c.sides.baseline, "sides": c.sides.sides,
            "test": test, "alpha": alpha, "correction": c.table.correction_text(),
            "tested": c.table.tested, "unit": unit}
    method = formats.BY_NAME[fmt].method
    doc = Document("comparison", None if method else co.records(c.sides, c.table), meta,
                   list(c.notes), text=getattr(c, method)() if method else None)
    _write_with_notes(fmt, doc, output, quiet, notes_file)


def _write_with_notes(fmt, doc, output, quiet, notes_file):
    """`doc` in `fmt`; its notes on stderr when the output does not hold them or goes to a
    file, and in --notes FILE when asked."""
    if not quiet and (output or not formats.BY_NAME[fmt].notes_inside):
        for note in doc.notes:
            _note(note)
    if notes_file:
        formats.write_notes(notes_file, doc, fmt)
    formats.write(fmt, doc, output)


def _percent(value):
    """--detect 5% (or 5) as 5.0; None when not given; anything else is a usage error."""
    if value is None:
        return None
    text = value.strip().rstrip("%")
    try:
        pct = float(text)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a percentage (write e.g. 5%)") from None
    if not (0 < pct < 1000):
        raise click.BadParameter(f"{value!r}: give a change between 0% and 1000%")
    return pct


def _side_names(text):
    if text is None:
        return None
    names = [n.strip() for n in text.split(",")]
    if len(names) < 2 or not all(names):
        raise click.BadParameter(f"{text!r}: name two or more sides, baseline first, "
                                 "separated by commas", param_hint="--sides")
    return names


def _directions(items):
    """--direction METRIC=higher|lower as {metric: direction}."""
    out = {}
    for item in items:
        name, _, way = item.partition("=")
        if not name or way not in ("higher", "lower"):
            raise click.BadParameter(f"{item!r}: write METRIC=higher or METRIC=lower",
                                     param_hint="--direction")
        out[name] = way
    return out or None


def _metric_names(metrics):
    """--metrics as a list of names (None: not given); empty, blank or repeated names are errors."""
    if metrics is None:
        return None
    names = [m.strip() for m in metrics.split(",")]
    if not any(names):
        raise click.BadParameter("names no metric; leave the option out for the default set",
                                 param_hint="--metrics")
    if not all(names):
        raise click.BadParameter(f"{metrics!r} has an empty name between commas",
                                 param_hint="--metrics")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise click.BadParameter(f"names {', '.join(repeated)} more than once",
                                 param_hint="--metrics")
    return names


def _write_text(text, output):
    if output:
        from kmemscope.common.outfile import write_file

        write_file(output, text)
    else:
        click.echo(text, nl=False)


def _compare_over(c, names, over, fmt, output, quiet, notes_file):
    """compare --over run|minute: each metric's values over runs or minutes, per side."""
    from kmemscope.render.writers import Document

    if fmt == "mmtests":
        offered = [f for f in formats.names("comparison") if f != "mmtests"]
        raise click.BadParameter(f"--over writes {formats.listed(offered)}, not mmtests",
                                 param_hint="--format")
    trend = c.trend(over, names)
    machine = formats.is_machine(fmt)
    doc = Document("trend", trend.rows if machine else None,
                   {"label": c.sides.label, "baseline": c.sides.baseline,
                    "sides": c.sides.sides, "over": over}, list(trend.notes),
                   text=None if machine else trend.text())
    _write_with_notes(fmt, doc, output, quiet, notes_file)


@cli.group()
def metrics():
    """Benchmark results beside the trace: import them for runs, list them.

    Each row names a run (its id, a unique prefix, or a host with one run),
    a metric, its value, unit, and whether higher or lower is better.
    `compare` shows imported metrics beside the allocator's.
    """


@metrics.command("import")
@click.argument("dataset", type=click.Path(), callback=utf8_path)
@click.argument("file", type=click.Path(dir_okay=False), callback=utf8_path)
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default=None,
              help="The file's format (default: from its extension, else from its first character).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing when it worked.")
@limit_options
def metrics_import(dataset, file, fmt, quiet, memory_limit, timeout):
    """Import FILE's metrics into DATASET (CSV or JSON: run,metric,value,unit,better).

    A bad row, a run that does not resolve, a non-number or a `better` other
    than higher/lower is one error line, and nothing is imported. Importing
    a metric again replaces that metric's values for the runs named.

    \b
    run,metric,value,unit,better
    host-a1,pgbench_tps,1234.5,tps,higher
    4f1c0e9a,pgbench_tps,1198.0,tps,higher
    """
    import kmemscope

    with _limits(memory_limit, timeout):
        written = kmemscope.open(dataset).import_metrics(file, fmt)
    if not quiet:
        values = sum(len(v) for v in written.values())
        names = sorted({m for v in written.values() for m in v})
        click.echo(f"imported {values} value{'s' if values != 1 else ''} of "
                   f"{len(names)} metric{'s' if len(names) != 1 else ''} for {len(written)} "
                   f"run{'s' if len(written) != 1 else ''}: {', '.join(names[:8])}"
                   + (" ..." if len(names) > 8 else ""), err=True)


@metrics.command("list")
@click.argument("dataset", type=click.Path(), callback=utf8_path)
@selection_options
@FORMAT_OPTION
@OUTPUT_OPTION
@NOTES_OPTION
def metrics_list(dataset, runs, labels, fmt, output, notes_file):
    """List the imported metrics of DATASET's runs (the run_metrics analysis).

    json writes one object {schema_version, kmemscope_version, kind, query, rows, notes},
    as `query run_metrics` does.
    """
    import kmemscope
    from kmemscope.render.writers import Document

    fmt = formats.resolve(fmt, output)
    result = kmemscope.open(dataset).query("run_metrics", run=list(runs) or None,
                                           label=list(labels) or None)
    doc = Document("query", result.arrow(), meta={"query": "run_metrics"}, notes=list(result.notes))
    if notes_file:
        formats.write_notes(notes_file, doc, fmt)
    formats.write(fmt, doc, output)


@cli.command()
@click.argument("dataset", type=click.Path(), callback=utf8_path)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), callback=utf8_path,
              help="The HTML file to write.")
@click.option("--compare", "compare_label", metavar="LABEL",
              help="Also compare the sides of this label (compare notebook).")
@click.option("--baseline", metavar="VALUE", help="Baseline side of --compare.")
@selection_options
@click.option("--keep-notebooks", type=click.Path(file_okay=False),
              help="Also keep the executed notebooks in this directory.")
@PROGRESS_OPTION
@limit_options
@engine_options
def report(dataset, output, compare_label, baseline, runs, labels, keep_notebooks, progress,
           memory_limit, timeout, engine, spark_master, spark_conf):
    """Execute the report notebooks over DATASET and write one self-contained HTML file."""
    from kmemscope.notebooks.report import build_report

    lines = progress

    def say(message):
        from kmemscope.common.text import printable

        click.echo(f"kmemscope report: {printable(message)}", err=True)

    spec = _engine(engine, spark_master, spark_conf).spec    # the notebooks start Spark
    with _limits(memory_limit, timeout):       # the notebooks' kernels inherit the memory limit
        with _LongAnswer("report", lines=lines) as steps:
            build_report(dataset, output, compare=compare_label, baseline=baseline,
                         runs=list(runs), labels=list(labels), keep_dir=keep_notebooks,
                         progress=say, engine=spec, cell_bar=sys.stderr.isatty(), steps=steps)


@cli.group()
def export():
    """Write a run in another tool's format, to look at it there."""


@export.command("perfetto")
@click.argument("dataset", type=click.Path(), callback=utf8_path)
@click.option("--run", "run", required=True, metavar="ID", help="The run (its id or a unique prefix).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), callback=utf8_path,
              help="The trace file to write (e.g. run.pftrace).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing when it worked.")
def export_perfetto(dataset, run, output, quiet):
    """Write one run of DATASET as a Perfetto trace, for Perfetto's UI (ui.perfetto.dev).

    A track per task with its direct compaction and direct reclaim stalls as
    slices (order and result as arguments), kcompactd and kswapd runs, THP
    fault outcomes and migratetype fallbacks as instants, and counters of free
    pages per order (buddyinfo) and vmstat rates. Open the file with "Open
    trace file" in the UI: it is read in the browser, not uploaded.
    """
    from kmemscope.render.perfetto import export_run as _export
    from kmemscope.render.tables import printable

    done = _export(dataset, run, output)
    if not quiet:
        slices = sum(done.slices.values())
        instants = sum(done.instants.values())
        click.echo(f"kmemscope export: wrote {printable(str(done.path))}: run {done.run_id}, "
                   f"{done.tasks} task tracks, {slices:,} slices, {instants:,} instants, "
                   f"{len(done.counters)} counters", err=True)
        for note in done.notes:
            _note(note)


# ---------------------------------------------------------------- spark-env (cli/spark_env.py)

from kmemscope.cli.spark_env import spark_env  # noqa: E402  (click only: no heavy import)

cli.add_command(spark_env)


# ---------------------------------------------------------------- entry point

def _report_error(ctx, exc):
    debug = bool(ctx and ctx.obj and ctx.obj.get("debug"))
    if debug:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    _error(message)


def _error(message):
    """The one error line on stderr, control characters escaped (a folder name or label
    from a dataset must not reach the terminal as an escape sequence)."""
    from kmemscope.common.text import printable

    click.echo(f"kmemscope: error: {printable(message)}", err=True)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: unwound like Ctrl-C, so that work in progress is cleaned up."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


# The stop signal that arrived, for a Terminated that a library turned into its own error
# (DuckDB makes an exception raised in a handler during a statement RuntimeError("Query
# interrupted")).
_stopped_by = None


def _raise_terminated(signum, frame):
    global _stopped_by
    _stopped_by = signum
    raise Terminated(signum)


def _raise_interrupted(signum, frame):
    global _stopped_by
    _stopped_by = signum
    raise KeyboardInterrupt


def _sql_comment_first(args):
    """SQL that starts with a `-- comment` is the query, not an option: put it after `--`."""
    for i, a in enumerate(args):
        if a.startswith("--") and (a == "--" or any(c.isspace() for c in a[2:]) or a[2:3] == "-"):
            if a == "--":
                return args
            return args[:i] + args[i + 1:] + ["--", a]
    return args


def main(argv=None):
    import signal

    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    # `record` parses its own arguments, including the `--` before COMMAND that
    # click would swallow: hand them over untouched.
    first = next((i for i, a in enumerate(args) if a != "--debug"), None)
    if first is not None and args[first] == "record":
        from kmemscope.capture.command import main as record_main

        sys.exit(record_main(args[first + 1:]))
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_terminated)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:   # not when ignored (nohup)
        signal.signal(signal.SIGINT, _raise_interrupted)
    if first is not None and args[first] == "sql":
        args = _sql_comment_first(args)
    try:
        cli.main(args=args, prog_name="kmemscope", standalone_mode=False)
        sys.stdout.flush()      # a closed pipe shows here, not as Python's complaint at exit
    except (_PipeClosed, BrokenPipeError):
        # `kmemscope sql ... | head`: the reader has what it wanted; quiet, and no
        # second error when Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except click.exceptions.Abort as exc:
        # click turns KeyboardInterrupt (and so Terminated) into Abort.
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, Terminated):
            click.echo(f"kmemscope: error: terminated by {signal.Signals(cause.signum).name}",
                       err=True)
            sys.exit(128 + cause.signum)
        click.echo("kmemscope: error: interrupted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        # One line like every other error; the usage text is one --help away.
        where = exc.ctx.command_path if exc.ctx else "kmemscope"
        _error(f"{exc.format_message()} (see `{where} --help`)")
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KmemscopeError as exc:
        if debug:
            raise
        _error(str(exc).strip().splitlines()[0])
        sys.exit(1)
    except (ValueError, OSError) as exc:
        if debug:
            raise
        _error(str(exc))
        sys.exit(1)
    except Terminated as exc:
        click.echo(f"kmemscope: error: terminated by {signal.Signals(exc.signum).name}", err=True)
        sys.exit(128 + exc.signum)
    except KeyboardInterrupt:
        click.echo("kmemscope: error: interrupted", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except MemoryError:
        if debug:
            raise
        _error("out of memory (narrow the question; `kmemscope sql` with --format "
               f"{formats.listed(formats.MACHINE)} streams a result of any size)")
        sys.exit(1)
    except Exception as exc:  # a bug in kmemscope: one line, the traceback on --debug
        if _stopped_by is not None:       # a stop signal that a library's error wrapped
            click.echo("kmemscope: error: interrupted" if _stopped_by == signal.SIGINT else
                       f"kmemscope: error: terminated by {signal.Signals(_stopped_by).name}",
                       err=True)
            sys.exit(128 + _stopped_by)
        if debug:
            raise
        _error(f"internal error: {exc!r} (rerun with --debug and report it)")
        sys.exit(2)
