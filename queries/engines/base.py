"""The interface every engine implements (DuckDB in this process, Apache Spark).

queries/runner.py decides what an analysis means: its sections, bound
parameters, chosen runs, notes and era facts. An engine only executes. It
opens a Backend over the chosen runs of a dataset, in which every dataset
table the SQL names is a view of that name; the runner then registers Arrow
tables (run facts, parameters), runs the shared views of queries/_common.sql
and the analysis's prelude, builds the derived tables the section declares,
and reads the section's result as Arrow. All SQL is in DuckDB's dialect; an
engine that speaks another translates it (spark_sql.py).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable

Progress = Optional[Callable[[str], None]]


@runtime_checkable
class Backend(Protocol):
    """The chosen runs of one dataset, open for one query at a time."""

    name: str            # "duckdb", "spark": recorded in results' metadata
    where: str           # appended to error messages: "" or " on Spark"

    def register_arrow(self, name: str, table: Any) -> None:
        """Make the pyarrow.Table `table` a temporary table called `name`."""

    def run_script(self, sql: str, params: Mapping[str, Any]) -> None:
        """Execute every statement of `sql`, binding the $parameters each refers to."""

    def query_arrow(self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None) -> Any:
        """Run one SELECT with bound parameters and return a pyarrow.Table."""

    def derived(self, name: str, progress: Progress = None) -> None:
        """Make derived table `name` (dataset.schema.DERIVED_COLUMNS) a view over the runs,
        building the runs' cached files where missing."""

    def error_text(self, exc: BaseException) -> Optional[str]:
        """The engine's error as one line, or None when `exc` is not the engine's (a bug)."""

    def close(self) -> None:
        """Release what the backend holds (connections, temp views, a session lock)."""


@runtime_checkable
class Engine(Protocol):
    """A way to run SQL over a dataset; lives as long as its session (none for DuckDB)."""

    name: str

    def open(self, dataset: Any, chosen: Sequence[str], parts: Mapping[str, Mapping[str, list]],
             tables: set, threads: Optional[int] = None) -> Backend:
        """A Backend over runs `chosen` of `dataset` with views for `tables`.

        parts: the dataset's listing, {table: {run_id: [files]}}."""

    def close(self) -> None:
        """Stop the engine's session, if it has one."""
