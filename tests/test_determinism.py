"""Every section gives one row order, and its rows are computed per run.

Two properties that Spark's per-run execution and the parity tests rely on,
checked on DuckDB alone over the mixed dataset (parity_data.py):

- the ORDER BY is total: 1 and 4 DuckDB threads give the same rows in the same
  order (parallel aggregation and sorting would expose a tie);
- the rows are per run: the section over every run equals the concatenation,
  in run_id order, of the section over each run alone; with an ORDER BY that
  starts with run_id, that is what Spark's driver builds from one task per run.
"""
import math
import re
from decimal import Decimal

import pytest

from kmemscope.queries import runner
from parity_data import every_section

SECTIONS = every_section()
REL = 1e-12          # sums of floats may be added in another order on more threads


def _norm(v):
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_norm(x) for x in v]
    return v


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=REL)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _assert_same_rows(a, b, what):
    assert a.schema.remove_metadata() == b.schema.remove_metadata(), what
    ra = [{k: _norm(v) for k, v in r.items()} for r in a.to_pylist()]
    rb = [{k: _norm(v) for k, v in r.items()} for r in b.to_pylist()]
    assert len(ra) == len(rb), f"{what}: {len(ra)} rows, then {len(rb)}"
    for i, (x, y) in enumerate(zip(ra, rb)):
        diff = {c: (x[c], y[c]) for c in x if not _same(x[c], y[c])}
        assert not diff, f"{what}: row {i} differs: {diff}"


def _run(qname, dataset, **kw):
    # Every section runs on the mixed dataset, with or without its kernel-stack run: an
    # exception here is a failure of the section.
    return runner.run_query(qname, dataset, **kw)


@pytest.mark.parametrize("qname,a,section", SECTIONS, ids=[s[0] for s in SECTIONS])
def test_order_by_starts_with_run_id(qname, a, section):
    orders = re.findall(r"^ORDER BY (.*)$", section.sql, re.M)
    assert orders, f"{qname}: no ORDER BY at the start of a line"
    first = orders[-1].split(",")[0].strip()
    assert first in ("run_id", "f.run_id"), f"{qname}: ORDER BY starts with {first}"


@pytest.mark.slow   # every section run 2 and 1 + runs times: Spark's parity (make test) relies on these
@pytest.mark.parametrize("qname,a,section", SECTIONS, ids=[s[0] for s in SECTIONS])
def test_one_and_four_threads_give_the_same_rows_in_the_same_order(qname, a, section,
                                                                    mixed_dataset):
    one = _run(qname, mixed_dataset, threads=1)
    four = _run(qname, mixed_dataset, threads=4)
    _assert_same_rows(one, four, f"{qname}, 1 then 4 threads")


@pytest.mark.slow   # every section run 2 and 1 + runs times: Spark's parity (make test) relies on these
@pytest.mark.parametrize("qname,a,section", SECTIONS, ids=[s[0] for s in SECTIONS])
def test_section_over_all_runs_is_the_runs_one_by_one(qname, a, section, mixed_dataset):
    import pyarrow as pa

    from kmemscope.queries.engines.spark_engine import plan_of_runs

    whole = _run(qname, mixed_dataset)
    plan = runner.prepare(qname, mixed_dataset)
    # what Spark tasks of one run each do (spark_engine.py), here in this process
    pieces = [runner.run_local(plan_of_runs(plan, [run]), mixed_dataset).table
              for run in sorted(plan.chosen)]
    one_by_one = pa.concat_tables(pieces, promote_options="permissive")
    _assert_same_rows(whole, one_by_one, f"{qname}, all runs vs one run at a time")
