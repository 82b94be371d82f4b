"""Each analysis documents its own output: the @columns of every section are what it returns.

The three example bundles (examples/kmem-compaction, examples/thp-faults and
examples/memory-pressure, real captures on Linux 6.18) are parsed with labels
into one dataset; every section of every analysis runs on it, and its result's
column names must be the documented ones, in order. Sections these captures
cannot feed are listed in CANNOT_RUN with the reason, and the test checks that
they fail for that reason, so the list cannot go stale; where this machine can
record what they need (root and tracefs), a short recording made here checks
their columns too. `kmemscope queries NAME` is read back as a user sees it.
"""
import json
import re

import pytest

from kmemscope.common.errors import DatasetError
from kmemscope.queries import catalog, runner

from conftest import EXAMPLES, STACKS_RECORD_ARGS
from kmrun import kmemscope

BUNDLES = {"kmem-compaction": "compaction", "thp-faults": "thp", "memory-pressure": "pressure"}

# analysis -> (why it cannot run on the examples, text its error must contain,
#              kmemscope record arguments that give it what it needs)
CANNOT_RUN = {
    "alloc_origins": ("needs kernel_stack events (the atomic-origins preset, trace-cmd -T); "
                      "no example bundle was recorded with stacks", "no kernel_stack events",
                      ["--preset", "atomic-origins", "-e", "kmem:mm_page_free:order > 0"]),
}
SECTIONS = [(a.name, a.query_name(s)) for a in catalog.load_analyses().values() for s in a.sections]


@pytest.fixture(scope="module")
def examples_ds(tmp_path_factory):
    ds = tmp_path_factory.mktemp("docs") / "ds"
    for bundle, label in BUNDLES.items():
        kmemscope("parse", "-q", EXAMPLES / bundle, "-o", ds, "--label", f"example={label}")
    return ds


def test_every_section_documents_its_columns_with_units():
    for name, qname in SECTIONS:
        a, sec = catalog.find_analysis(qname)
        assert sec.columns, f"{qname}: no @columns"
        assert [c.name for c in sec.columns[:2]] == ["run_id", "labels"], qname
        for c in sec.columns:
            assert c.unit in catalog.UNITS and c.doc, (qname, c)


@pytest.mark.parametrize("qname", [q for n, q in SECTIONS if n not in CANNOT_RUN])
def test_result_columns_are_the_documented_ones(examples_ds, qname):
    _, sec = catalog.find_analysis(qname)
    table = runner.run_query(qname, examples_ds)
    assert table.column_names == [c.name for c in sec.columns]


@pytest.mark.parametrize("qname", [q for n, q in SECTIONS if n in CANNOT_RUN])
def test_sections_that_cannot_run_on_the_examples_fail_for_the_listed_reason(examples_ds, qname):
    _reason, error, _record = CANNOT_RUN[qname.partition(".")[0]]
    with pytest.raises(DatasetError, match=re.escape(error)):
        runner.run_query(qname, examples_ds)


@pytest.fixture(scope="module")
def recorded_ds(stacks_recording):
    """A dataset of the run's shared recording with kernel stacks (conftest.py), which
    gives each analysis of CANNOT_RUN what it needs."""
    for _reason, _error, args in CANNOT_RUN.values():
        assert tuple(args) == STACKS_RECORD_ARGS, "a new analysis of CANNOT_RUN needs its own recording"
    return stacks_recording[1]


@pytest.mark.parametrize("qname", [q for n, q in SECTIONS if n in CANNOT_RUN])
def test_sections_that_need_a_recording_document_their_columns(recorded_ds, qname):
    _, sec = catalog.find_analysis(qname)
    table = runner.run_query(qname, recorded_ds)
    assert table.column_names == [c.name for c in sec.columns]


def test_every_example_run_is_in_the_dataset(examples_ds):
    labels = [r["labels"] for r in runner.run_query("summary", examples_ds).to_pylist()]
    assert sorted(dict(lab)["example"] for lab in labels) == sorted(BUNDLES.values())


def _block(text, heading):
    """The lines of `text` from the one that starts with `heading` to the next blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return "\n".join(lines[start:end])


def _row(text, first):
    """The words of the line of `text` that starts with `first` (after indentation)."""
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == first:
            return words
    raise AssertionError(f"no line starts with {first!r} in:\n{text}")


def test_queries_name_prints_parameters_and_columns_with_units():
    out = kmemscope("queries", "atomic_orders").stdout
    # parameters: type, default, choices or range (as atomic_orders.sql declares them)
    params = _block(out, "Parameters")
    assert _row(params, "era")[:6] == ["era", "varchar", "default", "auto", "one", "of"]
    assert _row(params, "era")[6] == "auto|A|B"
    assert _row(params, "top_comms")[:5] == ["top_comms", "integer", "default", "10", "1..100000"]
    # every section, with its columns and their units
    orders = _block(out, "atomic_orders: per run")
    assert _row(orders, "column")[:2] == ["column", "unit"]
    assert _row(orders, "allocs_per_s")[:2] == ["allocs_per_s", "/s"]
    assert _row(orders, "order")[:2] == ["order", "order"]
    assert _row(_block(out, "atomic_orders.costly:"), "pct_of_class")[:2] == ["pct_of_class", "%"]
    assert _row(_block(out, "atomic_orders.comms:"), "rank")[:2] == ["rank", "rank"]
    assert "Caveats: eligible is not reserved." in out


def test_queries_name_json_is_the_same_documentation():
    doc = json.loads(kmemscope("queries", "atomic_orders", "--format", "json").stdout)
    params = {p["name"]: p for p in doc["parameters"]}
    assert params["era"]["choices"] == ["auto", "A", "B"] and params["era"]["default"] == "auto"
    assert (params["top_comms"]["min"], params["top_comms"]["max"]) == (1, 100000)
    assert [s["query"] for s in doc["sections"]] == ["atomic_orders", "atomic_orders.costly",
                                                      "atomic_orders.comms"]
    costly = doc["sections"][1]
    assert costly["requires"] == ["mm_page_alloc"]
    assert [(c["name"], c["unit"]) for c in costly["columns"]] == [
        ("run_id", "text"), ("labels", "map"), ("highatomic_era", "text"), ("alloc_class", "text"),
        ("order_band", "text"), ("allocs", "count"), ("failed", "count"), ("allocs_per_s", "/s"),
        ("pct_of_class", "%")]
    assert doc["caveats"].startswith("Caveats: eligible is not reserved.")
    one = json.loads(kmemscope("queries", "atomic_orders.comms", "--format", "json").stdout)
    assert [s["query"] for s in one["sections"]] == ["atomic_orders.comms"]


def test_queries_name_csv_is_one_row_per_column():
    lines = kmemscope("queries", "pcp", "--format", "csv").stdout.splitlines()
    assert lines[0] == '"query","column","unit","description"'
    assert lines[1].startswith('"pcp","run_id","text",')
    assert any(line.startswith('"pcp","pages","pages",') for line in lines)


def test_unknown_name_suggests_one():
    proc = kmemscope("queries", "atomic_order", check=False)
    assert proc.returncode != 0 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("kmemscope: error: unknown query 'atomic_order' (did you mean atomic_orders ")


def test_query_help_points_to_the_documentation():
    assert "kmemscope queries NAME" in kmemscope("query", "--help").stdout


def _header_file(tmp_path, text):
    path = tmp_path / "doc_probe.sql"
    path.write_text(text)
    return path


@pytest.mark.parametrize("bad, error", [
    ("--   n   furlongs  x\n", "unknown unit 'furlongs'"),
    ("--   run_id   text  x\n", "columns repeated"),
    ("--   n   count\n", "bad @columns line"),
])
def test_bad_columns_are_refused(tmp_path, bad, error):
    from kmemscope.common.errors import QueryError

    path = _header_file(tmp_path, "-- doc_probe: a probe\n-- @columns\n" + bad + "SELECT 1\n")
    with pytest.raises(QueryError, match=re.escape(error)):
        catalog.parse_analysis(path)


def test_removed_directives_are_refused(tmp_path):
    from kmemscope.common.errors import QueryError

    for old in ("uses", "procfs", "procfs_optional"):
        path = _header_file(tmp_path, f"-- doc_probe: a probe\n-- @{old} vmstat\nSELECT 1\n")
        with pytest.raises(QueryError, match=f"unknown directive @{old}"):
            catalog.parse_analysis(path)


def test_continuation_lines_and_section_notes(tmp_path):
    path = _header_file(tmp_path, (
        "-- doc_probe: a probe\n--\n-- What it asks.\n--\n-- Caveats: mind this.\n\n"
        "-- @section one: first\n-- @columns\n--   a   count  first line\n"
        "--                continued\n--   b   ns     second\n-- A note on one.\nSELECT 1 AS a\n"))
    a = catalog.parse_analysis(path)
    cols = a.sections[0].columns
    assert [(c.name, c.unit, c.doc) for c in cols[2:]] == [("a", "count", "first line continued"),
                                                          ("b", "ns", "second")]
    assert a.text == ["What it asks."] and a.caveats == ["Caveats: mind this."]
    assert a.sections[0].notes == ["A note on one."]
