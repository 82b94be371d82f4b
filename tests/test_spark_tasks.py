"""Spark's tasks over groups of runs: any grouping gives DuckDB's rows in DuckDB's order.

A named analysis on Spark is cut into tasks over groups of consecutive runs
(spark_engine.group_runs), each task running the section once over its group
with DuckDB. The grouping must not change a result: here the first section of
every analysis runs on the mixed dataset (parity_data.py: kernel eras, field
widths, ties on leading ORDER BY keys) with one run per task, every run in one
task and a size in between, and each result is checked row by row, in order,
against DuckDB's over all runs in this process (test_spark_parity.py covers
every section with the default grouping). The grouping itself is checked
against a plain recount of what it must keep: the runs, in order, each once.
"""
import pytest

from conftest import skip_without_spark

skip_without_spark(allow_module_level=True)

from kmemscope.queries import runner  # noqa: E402
from kmemscope.queries.engines.spark_engine import SparkEngine, group_runs  # noqa: E402
from parity_data import every_section  # noqa: E402
from test_determinism import _assert_same_rows  # noqa: E402

# the first section of each analysis: every analysis's prelude, derived tables and FILE
# parameters once, at three task sizes
FIRST_SECTIONS = list({a.name: (q, a, s) for q, a, s in reversed(every_section())}.values())


@pytest.mark.parametrize("sizes,tasks", [
    ([("a", 5), ("b", 1), ("c", 1), ("d", 9), ("e", 2)], 2),
    ([("a", 5), ("b", 1), ("c", 1), ("d", 9), ("e", 2)], 5),
    ([("a", 5), ("b", 1), ("c", 1), ("d", 9), ("e", 2)], 50),
    ([("a", 0), ("b", 0), ("c", 0)], 2),
    ([(f"r{i:03d}", (i * 7919) % 1000) for i in range(300)], 6),
    ([("only", 10)], 4),
])
def test_groups_keep_every_run_once_in_order(sizes, tasks):
    groups = group_runs(sizes, tasks)
    assert [r for g in groups for r in g] == [r for r, _b in sizes]
    assert len(groups) == min(tasks, len(sizes))
    assert all(groups)


def test_groups_of_equal_runs_are_equal_in_size():
    sizes = [(f"r{i:03d}", 100) for i in range(300)]
    assert [len(g) for g in group_runs(sizes, 6)] == [50] * 6
    lengths = [len(g) for g in group_runs(sizes, 7)]
    assert sum(lengths) == 300 and max(lengths) - min(lengths) <= 1


def test_a_large_run_is_a_group_of_its_own():
    sizes = [("a", 1), ("b", 1), ("c", 1000), ("d", 1), ("e", 1)]
    groups = group_runs(sizes, 3)
    assert ["c"] in groups
    weight = dict(sizes)
    assert max(sum(weight[r] for r in g) for g in groups) == 1000


_DUCK = {}


def _duckdb(qname, dataset):
    if qname not in _DUCK:
        try:
            _DUCK[qname] = runner.run_query(qname, dataset)
        except Exception as exc:        # refused on this dataset: Spark must refuse too
            _DUCK[qname] = exc
    return _DUCK[qname]


@pytest.fixture(scope="module")
def runs_of(mixed_dataset):
    return len(runner.prepare("summary", mixed_dataset).chosen)


@pytest.mark.parametrize("size", ["one-run-per-task", "one-task", "middle"])
@pytest.mark.parametrize("qname,a,section", FIRST_SECTIONS, ids=[s[0] for s in FIRST_SECTIONS])
def test_section_equal_at_every_task_size(qname, a, section, size, mixed_dataset, runs_of,
                                          spark_engine):
    tasks = {"one-run-per-task": runs_of, "one-task": 1, "middle": max(2, runs_of // 2)}[size]
    engine = SparkEngine(spark=spark_engine.spark, tasks=tasks)
    duck = _duckdb(qname, mixed_dataset)
    if isinstance(duck, Exception):
        with pytest.raises(type(duck)):
            runner.run_query(qname, mixed_dataset, engine=engine)
        return
    on_spark = runner.run_query(qname, mixed_dataset, engine=engine)
    _assert_same_rows(duck, on_spark, f"{qname}, DuckDB vs Spark in {tasks} task(s)")
    assert runner.notes_of(on_spark) == runner.notes_of(duck)
    assert on_spark.schema.metadata[b"kmemscope.engine"] == b"spark"
