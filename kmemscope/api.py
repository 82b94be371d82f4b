"""kmemscope from Python: the same datasets, analyses and comparisons as the command line.

    import kmemscope
    kmemscope.parse(["bundle-a", "bundle-b"], "ds", labels={"kernel": "patched"})
    ds = kmemscope.open("ds")
    ds.runs.df()                                   # one row per run, labels as a dict
    ds.query("hot_pfns", top_n=10).df()            # a named analysis, parameters bound
    ds.sql("SELECT count(*) FROM mm_page_alloc").arrow()
    ds.compare(by="kernel", baseline="vanilla").text()

Every call returns data; nothing prints. Errors are kmemscope.errors.KmemscopeError
subclasses with a one-line message, as on the command line.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from kmemscope.errors import KmemscopeError

LabelsArg = Mapping[str, "str | Sequence[str]"] | Sequence[str] | str | None


class Labels(dict):
    """A run's labels: a dict that is also hashable and ordered, so pandas can group by it."""

    def _key(self):
        return tuple(sorted(self.items()))

    def __hash__(self):
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

    def arrow(self):
        """The rows as a pyarrow.Table (labels stay an Arrow MAP)."""
        return self._table

    def df(self):
        """The rows as a pandas DataFrame; a `labels` column holds Labels dicts."""
        frame = self._table.to_pandas()
        for name in frame.columns:
            if name == "labels" or name.endswith("_labels"):
                frame[name] = frame[name].map(_labels_value)
        return frame

    def pl(self):
        """The rows as a polars DataFrame (polars must be installed)."""
        try:
            import polars
        except ImportError:
            raise KmemscopeError("Result.pl() needs polars", "pip install polars") from None
        return polars.from_arrow(self._table)

    def rows(self) -> list[dict]:
        """The rows as a list of dicts (labels as Labels)."""
        return [{k: _labels_value(v) for k, v in row.items()} for row in self._table.to_pylist()]

    @property
    def columns(self) -> list[str]:
        return self._table.column_names

    def __len__(self):
        return self._table.num_rows

    def __repr__(self):
        from kmemscope.cli.output import format_table

        notes = "".join(f"note: {n}\n" for n in self.notes)
        return notes + format_table(self._table.slice(0, 50)) + (
            f"... {self._table.num_rows - 50} more rows\n" if self._table.num_rows > 50 else "")

    def _repr_html_(self):
        return self.df().head(50).to_html(index=False)


@dataclass
class Comparison:
    """The sides of a label compared metric by metric (what `kmemscope compare` prints)."""

    sides: object
    rows: list
    test: str
    alpha: float

    @property
    def notes(self) -> list[str]:
        from kmemscope.queries.sides import condense_notes, missing_notes

        return condense_notes(self.sides.notes) + missing_notes(self.sides, self.rows)

    def result(self) -> Result:
        """One row per metric, statistic and side (the csv/json output of compare)."""
        import pyarrow as pa

        from kmemscope.cli.compare_output import records

        return Result(pa.Table.from_pylist(records(self.sides, self.rows)), self.notes)

    def df(self):
        return self.result().df()

    def text(self) -> str:
        from kmemscope.cli.compare_output import format_text

        return format_text(self.sides, self.rows, self.test, self.alpha)

    def markdown(self) -> str:
        from kmemscope.cli.compare_output import format_markdown

        return format_markdown(self.sides, self.rows)

    def __repr__(self):
        return self.text()


class Dataset:
    """A kmemscope dataset opened for queries (DuckDB, in this process)."""

    def __init__(self, path):
        from kmemscope.queries.dataset import table_dirs

        self.path = Path(path)
        table_dirs(self.path)              # a missing or empty dataset fails here, in one line

    def __repr__(self):
        return f"kmemscope.Dataset({str(self.path)!r})"

    @property
    def tables(self) -> list[str]:
        from kmemscope.queries.dataset import table_runs

        return sorted(table_runs(self.path))

    @property
    def runs(self) -> Result:
        """One row per run: host, kernel, clock, timestamps, events, labels, source..."""
        return self.sql("SELECT * EXCLUDE (manifest) FROM runs ORDER BY run_id")

    def sql(self, query: str, params: Sequence | Mapping | None = None, *,
            run: str | Sequence[str] | None = None, label: LabelsArg = None,
            read_only: bool = False) -> Result:
        """Run SQL over the dataset, every table a view of its own name; params are bound.

        The shared helper views of the analyses (flag names, allocation classes,
        migratetype names...) are there too. run/label restrict every view to
        those runs. read_only=True allows SELECTs that read the dataset only, for
        SQL from elsewhere.
        """
        import duckdb

        from kmemscope.errors import QueryError
        from kmemscope.queries.dataset import confine, query_arrow, sql_error_text
        from kmemscope.queries.engine import open_run_set

        con, _chosen, _parts, _facts = open_run_set(
            self.path, [run] if isinstance(run, str) else run, label)
        try:
            if read_only:
                confine(con, self.path, query)
            return Result(query_arrow(con, query, params))
        except duckdb.Error as exc:
            raise QueryError(f"SQL failed: {sql_error_text(exc)}") from None
        finally:
            con.close()

    def query(self, name: str, *, run: str | Sequence[str] | None = None,
              label: LabelsArg = None, **params) -> Result:
        """Run the named analysis `name` (see kmemscope.analyses()) over some or all runs."""
        from kmemscope.queries.engine import notes_of, run_query

        table = run_query(name, self.path, run_ids=[run] if isinstance(run, str) else run,
                          labels=label, params={k: str(v) if not isinstance(v, str) else v
                                                for k, v in params.items()} or None)
        return Result(table, notes_of(table))

    def compare(self, by: str, baseline: str | None = None, *, metrics: Iterable[str] | None = None,
                test: str = "band", alpha: float = 0.05, run=None, label: LabelsArg = None
                ) -> Comparison:
        """Compare the summary metrics of the sides of label `by`, mmtests style."""
        from kmemscope.queries.sides import compare_sides, load_sides, resolve_metrics

        names = list(metrics) if metrics else None
        resolve_metrics(names)
        sides = load_sides(self.path, by, baseline, run_ids=[run] if isinstance(run, str) else run,
                           labels=label)
        return Comparison(sides, compare_sides(sides, names, test, alpha), test, alpha)


def open(path) -> Dataset:  # noqa: A001 - kmemscope.open reads like open()
    """Open the dataset at `path` (written by kmemscope parse)."""
    return Dataset(path)


def analyses() -> Result:
    """The named analyses: name and question."""
    import pyarrow as pa

    from kmemscope.queries.catalog import list_queries

    rows = list_queries()
    return Result(pa.table({"name": [r[0] for r in rows], "question": [r[1] for r in rows]}))


def parse(inputs, dataset, labels: Mapping[str, str] | None = None, *,
          events: Sequence[str] | None = None, threads: int | None = None,
          derive: bool = False, on_error: str = "raise") -> list:
    """Parse trace.dat files or bundles into `dataset`; returns one RunSummary per input.

    on_error="skip" goes on past a bad input (its exception is in the returned
    list in its place); "raise" stops at the first.
    """
    from kmemscope.parsers.ingest import ingest

    if on_error not in ("raise", "skip"):
        raise ValueError("on_error must be 'raise' or 'skip'")
    if isinstance(inputs, (str, Path)):
        inputs = [inputs]
    out = []
    for source in inputs:
        try:
            summary = ingest(source, dataset, labels=dict(labels or {}), events=list(events or []),
                             threads=threads)
            if derive:
                from kmemscope.queries.derive import derive_runs

                derive_runs(dataset, [summary.run_id])
            out.append(summary)
        except KmemscopeError as exc:
            if on_error == "raise":
                raise
            out.append(exc)
    return out
