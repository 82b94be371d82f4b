"""The Python API as a notebook user meets it: what renders, what fails at once, what closes.

Oracles: the row counts of the same SQL on the command line, and pandas'
own frames joined in plain Python.
"""
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kmrun import kmemscope as km_cli, rows_of

import kmemscope
from kmemscope.common.errors import DatasetError, QueryError


@pytest.fixture(scope="module")
def ds_path(examples_dataset):
    """kmem-compaction as kernel=a, memory-pressure as kernel=b (conftest.py, shared)."""
    return examples_dataset


def test_result_html_says_how_many_rows_it_shows_and_carries_the_notes(ds_path):
    ds = kmemscope.open(ds_path)
    n = rows_of(km_cli("sql", ds_path, "SELECT count(*) AS n FROM mm_page_alloc",
                       "--format", "json"))[0]["n"]
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


def test_result_html_renders_pfns_and_labels_as_its_text_does(ds_path):
    """pfns in hex and labels as k=v in HTML as in text (the HTML showed 2487480 and dict reprs)."""
    import re

    ds = kmemscope.open(ds_path)
    res = ds.sql("SELECT a.pfn, r.labels FROM page_allocs a JOIN runs r USING (run_id) "
                 "WHERE NOT a.failed ORDER BY a.ts LIMIT 5")
    html, text = res._repr_html_(), repr(res)
    pfns = [r["pfn"] for r in res.rows()]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", html)
    for pfn in pfns:
        assert hex(pfn) in cells and hex(pfn) in text
        assert str(pfn) not in cells
    labels = [",".join(f"{k}={v}" for k, v in sorted(r["labels"].items())) for r in res.rows()]
    assert all(lab in cells for lab in labels)
    assert "{'kernel'" not in html and "{&#x27;kernel" not in html


def test_large_results_page_alike_in_text_and_html(ds_path):
    ds = kmemscope.open(ds_path)
    res = ds.sql("SELECT pfn, \"order\" FROM mm_page_alloc ORDER BY ts, pfn")
    n = len(res)
    assert n > 120
    sentence = f"showing 50 of {n:,} rows"
    assert sentence in repr(res) and sentence in res._repr_html_()
    assert repr(res).count("\n") < 60
    second = res.page(1)
    assert second.arrow().equals(res.arrow().slice(50, 50))
    assert f"showing 50 of" not in second._repr_html_()
    with pytest.raises(ValueError, match="out of range"):
        res.page(n // 50 + 1)


def test_polars_is_a_declared_extra():
    import configparser
    from pathlib import Path

    cfg = configparser.ConfigParser()
    cfg.read(Path(kmemscope.__file__).parent.parent / "setup.cfg")
    assert "polars" in cfg["options.extras_require"]["polars"]
    docs = (Path(kmemscope.__file__).parent.parent / "docs" / "python.md").read_text()
    assert "kmemscope[polars]" in docs


def test_pl_names_the_extra_when_polars_is_absent(ds_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_polars(name, *a, **kw):
        if name == "polars":
            raise ImportError(name)
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_polars)
    with pytest.raises(kmemscope.KmemscopeError, match=r"kmemscope\[polars\]"):
        kmemscope.open(ds_path).runs.pl()


def test_a_query_result_plots_its_analysis(ds_path):
    """ds.query(NAME).plot() is the figure kmemscope.plots draws for that analysis, same runs."""
    from kmemscope import plots

    ds = kmemscope.open(ds_path)
    a = ds.run_ids(label="kernel=a")
    via_result = ds.query("atomic_orders.orders", run=a).plot(by="kernel")
    direct = plots.order_histogram(ds, run=a, by="kernel")
    assert via_result.name == direct.name == "orders"
    for name, frame in direct.drawn.panels.items():
        assert via_result.drawn.panels[name].equals(frame)
    with pytest.raises(QueryError, match="only the result of Dataset.query"):
        ds.sql("SELECT 1").plot()
    with pytest.raises(QueryError, match="no figure draws"):
        ds.query("pfn_reuse.summary").plot()


def test_comparison_plot_names_an_unknown_metric(ds_path):
    cmp = kmemscope.open(ds_path).compare("kernel")
    with pytest.raises(QueryError, match="no metric nope"):
        cmp.plot("nope")
    fig = cmp.plot(cmp.rows[0].metric.name)
    assert fig.name == "distributions"


def test_a_figure_without_rows_says_so_and_an_error_is_raised(ds_path):
    """No rows: an empty figure with the sentence; a bad run: the error, not "no data"."""
    from kmemscope import plots

    ds = kmemscope.open(ds_path)
    fig = plots.alloc_origins(ds)            # the examples have no kernel stacks
    assert fig.empty and "kernel stacks" in fig.notes[0] and "<img" not in fig._repr_html_()
    with pytest.raises(kmemscope.KmemscopeError):
        plots.stall_cdf(ds, run="ffffffffffffffff")
