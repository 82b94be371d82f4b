"""The interface every engine implements (DuckDB in this process, Apache Spark).

queries/runner.py decides what an analysis means: its sections, bound
parameters, chosen runs, notes and era facts (a runner.Plan). An engine only
executes, in two ways:

  run_plan   a named analysis: the runner hands over the Plan and its own
             DuckDB path, `local(plan, dataset, threads, progress) -> PlanRows`
             (open the runs in DuckDB, register the run facts, build the
             derived tables, run the queries/lib/ modules the analysis
             includes, register the parameters, run the prelude and the
             section). DuckDB runs it once over every chosen run in this
             process. Spark runs it once per group of consecutive runs, one
             task per group on the executors (each builds and caches its runs'
             derived tables in the same task), and the driver concatenates the
             groups' rows in run_id order. Every section's rows are computed from one
             run's tables and its ORDER BY starts with run_id, so the two give
             the same rows in the same order: same engine, same SQL.
  open       ad-hoc SQL (`kmemscope sql`, Dataset.sql): a Backend over the
             chosen runs in which every dataset table the SQL names is a view
             of that name. The SQL is in DuckDB's dialect; Spark translates it
             (spark_sql.py) and runs it over the whole dataset.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable

Progress = Optional[Callable[[str], None]]


@dataclass
class PlanRows:
    """What running a Plan gives: the section's rows and the runs' era facts (for notes)."""

    table: Any                                   # pyarrow.Table, in the section's ORDER BY
    facts: list = field(default_factory=list)    # eras.run_facts() rows of the runs
    mts: list = field(default_factory=list)      # migratetype names of the runs


def plan_of_runs(plan, runs):
    """`plan` (a runner.Plan) narrowed to `runs` (a list in run_id order): its chosen runs
    and their files."""
    keep = set(runs)
    parts = {t: {r: f for r, f in files.items() if r in keep} for t, files in plan.parts.items()}
    return dataclasses.replace(plan, chosen=list(runs), parts=parts, notes=[])


# local(plan, dataset, threads, progress) -> PlanRows: the runner's DuckDB path
LocalRun = Callable[[Any, Any, Optional[int], Progress], PlanRows]


@runtime_checkable
class Backend(Protocol):
    """The chosen runs of one dataset, open for one query at a time (ad-hoc SQL)."""

    name: str            # "duckdb", "spark": recorded in results' metadata
    where: str           # appended to error messages: "" or " on Spark"

    def register_arrow(self, name: str, table: Any) -> None:
        """Make the pyarrow.Table `table` a temporary table called `name`."""

    def run_script(self, sql: str, params: Mapping[str, Any]) -> None:
        """Execute every statement of `sql`, binding the $parameters each refers to."""

    def query_arrow(self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None) -> Any:
        """Run one SELECT with bound parameters and return a pyarrow.Table."""

    def error_text(self, exc: BaseException) -> Optional[str]:
        """The engine's error as one line, or None when `exc` is not the engine's (a bug)."""

    def close(self) -> None:
        """Release what the backend holds (connections, temp views, a session lock)."""


@runtime_checkable
class Engine(Protocol):
    """A way to run SQL over a dataset; lives as long as its session (none for DuckDB)."""

    name: str

    def run_plan(self, plan: Any, dataset: Any, local: LocalRun, threads: Optional[int] = None,
                 progress: Progress = None) -> PlanRows:
        """The rows of `plan`'s section over plan.chosen, in the section's ORDER BY.

        local: the runner's DuckDB path for a plan (see the module docstring);
        an engine runs it where the data is, over all runs or one run at a time.
        Raises KmemscopeError (a QueryError for the engine's own failures)."""

    def open(self, dataset: Any, chosen: Sequence[str], parts: Mapping[str, Mapping[str, list]],
             tables: set, threads: Optional[int] = None) -> Backend:
        """A Backend over runs `chosen` of `dataset` with views for `tables` (ad-hoc SQL).

        parts: the dataset's listing, {table: {run_id: [files]}}."""

    def close(self) -> None:
        """Stop the engine's session, if it has one."""
