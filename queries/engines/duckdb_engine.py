"""DuckDB in this process, the default engine: one in-process connection per query.

Every dataset table is a view over the chosen runs' Parquet files
(dataset/reader.py `connect`), with NULL stand-ins for the columns of
schema.TABLE_COLUMNS that an older kernel's format lacks. Derived tables are
Parquet files built once per run (queries/derived_tables.py, cached by dataset/derived.py)
and read as views.
"""
import duckdb

from kmemscope.dataset import reader as ds
from kmemscope.dataset.handle import DatasetRef
from kmemscope.dataset.schema import DERIVED_COLUMNS, TABLE_COLUMNS
from kmemscope.common.errors import QueryError

from .. import derived_tables

_ARROW_IN = "_kmemscope_arrow_in"


class DuckDBEngine:
    """Stateless: every query gets a fresh connection (engines/base.py Engine)."""

    name = "duckdb"

    def run_plan(self, plan, dataset, local, threads=None, progress=None):
        """Every chosen run at once, in this process: the runner's DuckDB path as it is."""
        return local(plan, dataset, threads, progress)

    def open(self, dataset, chosen, parts, tables, threads=None):
        return DuckDBBackend(dataset, chosen, parts, tables, threads)

    def close(self):
        pass


class DuckDBBackend:
    """The chosen runs as DuckDB views, for one query (engines/base.py Backend)."""

    name = "duckdb"
    where = ""                 # error messages need not say which engine: it is the default

    def __init__(self, dataset, chosen, parts, tables, threads=None):
        self.ref = DatasetRef.of(dataset)
        self.dataset = self.ref.location
        self.chosen, self.parts, self.threads = chosen, parts, threads
        columns = {t: TABLE_COLUMNS[t] for t in tables if t in TABLE_COLUMNS}
        self.con = ds.connect(self.ref, threads=threads, run_ids=chosen, columns=columns,
                              tables=tables, parts=parts)

    def register_arrow(self, name, table):
        """A temp table `name` holding the Arrow `table`."""
        self.con.register(_ARROW_IN, table)
        try:
            # sql-safe: name is quote_ident()
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE {ds.quote_ident(name)} AS "
                             f"SELECT * FROM {_ARROW_IN}")
        finally:
            self.con.unregister(_ARROW_IN)

    def run_script(self, sql, params):
        """Execute each statement of `sql`, binding the parameters it refers to."""
        # guarded: SIGTERM/SIGINT stop a long statement at once and end the command in one
        # line, instead of DuckDB's RuntimeError("Query interrupted")
        with ds.guarded(self.con):
            for statement in self.con.extract_statements(sql):
                used = {k: params[k] for k in statement.named_parameters if k in (params or {})}
                self.con.execute(statement.query, used or None)

    def query_arrow(self, sql, params):
        with ds.guarded(self.con):
            return ds.query_arrow(self.con, sql, params or None)

    def derived(self, name, progress=None):
        """A view of derived table `name` over the chosen runs, built where missing."""
        files = derived_tables.derived_files(self.ref, name, self.chosen, self.parts, self.threads,
                                     progress)
        view = ds.quote_ident(name)
        if files:
            # sql-safe: view is quote_ident(), scan_sql() quotes every path
            self.con.execute(f"CREATE TEMP VIEW {view} AS SELECT * FROM "
                             f"{ds.scan_sql(list(files.values()), by_name=False)}")
        else:
            cols = ", ".join(["CAST(NULL AS VARCHAR) AS run_id"] +
                             [f"CAST(NULL AS {t}) AS {ds.quote_ident(c)}"
                              for c, t in DERIVED_COLUMNS[name].items()])
            # sql-safe: view is quote_ident(); cols casts NULL to quote_ident() columns
            self.con.execute(f"CREATE TEMP VIEW {view} AS SELECT {cols} WHERE false")

    @staticmethod
    def error_text(exc):
        """One line for a DuckDB error (None: not DuckDB's, let it through)."""
        if isinstance(exc, duckdb.Error):
            return ds.sql_error_text(exc)
        if isinstance(exc, QueryError):
            return str(exc)
        return None

    def close(self):
        self.con.close()
