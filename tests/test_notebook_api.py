"""The Python API as a notebook user meets it: what renders, what fails at once, what closes.

Oracles: the row counts of the same SQL on the command line, and pandas'
own frames joined in plain Python.
"""
import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kmrun import kmemscope as km_cli

import kmemscope
from kmemscope.common.errors import DatasetError, QueryError


@pytest.fixture(scope="module")
def ds_path(examples_dataset):
    """kmem-compaction as kernel=a, memory-pressure as kernel=b (conftest.py, shared)."""
    return examples_dataset


def test_result_html_says_how_many_rows_it_shows_and_carries_the_notes(ds_path):
    ds = kmemscope.open(ds_path)
    n = json.loads(km_cli("sql", ds_path, "SELECT count(*) AS n FROM mm_page_alloc",
                          "--format", "json").stdout)[0]["n"]
    res = ds.sql("SELECT pfn FROM mm_page_alloc")
    html = res._repr_html_()
    assert f"showing 50 of {n:,} rows" in html
    assert html.count("<tr>") <= 51 + 1
    summary = ds.query("summary")
    assert summary.notes and all(note.split(":")[0] in summary._repr_html_() for note in summary.notes)
    small = ds.sql("SELECT 1 AS x")
    assert "showing" not in small._repr_html_()


def test_comparison_and_analysis_docs_render(ds_path):
    ds = kmemscope.open(ds_path)
    cmp = ds.compare("kernel", metrics=["vmstat.compact_stall", "pollution_per_1000_allocs"])
    html = cmp._repr_html_()
    assert html.startswith("<pre>") and "vmstat" in html and "headline" in html
    assert "kernel: baseline a" in html
    doc = ds.describe("hot_pfns")
    assert doc["name"] == "hot_pfns" and "hot_pfns" in doc._repr_html_()
    assert kmemscope.describe("pfn_reuse.cross_cpu")["sections"][0]["query"] == "pfn_reuse.cross_cpu"


def test_open_validates_at_once(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "run_id=x").mkdir()
    pq.write_table(pa.table({"a": [1]}), tmp_path / "notes" / "run_id=x" / "part-0.parquet")
    with pytest.raises(DatasetError, match="not a kmemscope dataset"):
        kmemscope.open(tmp_path)
    with pytest.raises(DatasetError, match="does not exist"):
        kmemscope.open(tmp_path / "nowhere")


def test_dataset_is_a_context_manager(ds_path):
    with kmemscope.open(ds_path) as ds:
        assert len(ds.runs) == 2
    ds.close()                      # closing twice is fine


def test_sql_sees_local_dataframes_by_name(ds_path):
    ds = kmemscope.open(ds_path)
    runs = ds.runs.df()
    racks = pd.DataFrame({"run_id": list(runs.run_id), "rack": ["r1", "r2"]})     # noqa: F841
    arrow_racks = pa.table({"run_id": list(runs.run_id), "room": ["x", "y"]})     # noqa: F841
    got = ds.sql("SELECT r.run_id, k.rack, a.room FROM runs r JOIN racks k USING (run_id) "
                 "JOIN arrow_racks a USING (run_id) ORDER BY r.run_id").rows()
    want = sorted(zip(runs.run_id, ["r1", "r2"], ["x", "y"]))
    assert [(g["run_id"], g["rack"], g["room"]) for g in got] == want


@pytest.mark.parametrize("sql", ["", "  ", "-- nothing", ";"])
def test_empty_sql_is_a_query_error(ds_path, sql):
    with pytest.raises(QueryError, match="no statement"):
        kmemscope.open(ds_path).sql(sql)


def test_the_package_is_typed():
    from pathlib import Path

    assert (Path(kmemscope.__file__).parent / "py.typed").is_file()
