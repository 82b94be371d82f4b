"""Every verb that prints rows writes one valid document in every format, to stdout and to -o.

The oracle is each format's own reader (json.load, csv, pyarrow.parquet), compared with the
rows the same verb prints as JSON; the test never parses kmemscope's table layout except to
check what a person sees (NULL, fixed-point numbers, escaped control characters).
"""
import csv
import io
import json
import re

import pyarrow.parquet as pq
import pytest

from conftest import EXAMPLES
from kmemscope.common.version import __version__
from kmrun import kmemscope, rows_of

FORMATS = ("table", "csv", "json", "jsonl", "parquet")


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    ds = tmp_path_factory.mktemp("formats") / "ds"
    kmemscope("parse", "-q", EXAMPLES / "kmem-compaction", "-o", ds, "--label", "kernel=a")
    kmemscope("parse", "-q", EXAMPLES / "thp-faults", "-o", ds, "--label", "kernel=b")
    return ds


VERBS = {
    "sql": lambda ds: ["sql", ds, "SELECT \"order\", count(*) AS n, avg(pfn) AS mean_pfn, "
                                  "NULL AS nothing, 'a' || chr(10) || 'b' AS text "
                                  "FROM mm_page_alloc GROUP BY 1 ORDER BY 1"],
    "query": lambda ds: ["query", "pfn_reuse.cross_cpu", ds],
    "queries": lambda ds: ["queries"],
    "info": lambda ds: ["info", ds],
    "compare": lambda ds: ["compare", ds, "--by", "kernel", "--metrics",
                           "thp_fault_success_pct,cross_cpu_free_pct"],
}


def read_back(fmt, data):
    """Rows of a written document, as dicts of strings where the format has no types."""
    if fmt == "json":
        doc = json.loads(data)
        if isinstance(doc, dict):   # info: runs, tables, rows_per_run; the others: rows, notes
            return doc["rows"] if "rows" in doc else doc["rows_per_run"]
        return doc                  # the queries catalogue: an array of rows
    if fmt == "jsonl":
        return [json.loads(line) for line in data.decode().splitlines()]
    if fmt == "csv":
        return list(csv.DictReader(io.StringIO(data.decode())))
    if fmt == "parquet":
        return pq.read_table(io.BytesIO(data)).to_pylist()
    raise ValueError(fmt)


def run(args, *extra):
    return kmemscope(*args, *extra, text=False, timeout=300).stdout


def norm(value):
    """One spelling per value whatever the format: CSV has only text, Parquet keeps types."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return format(float(value), ".9g")
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        value = dict(value)                    # an Arrow MAP read from Parquet
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, str):
        if value[:1] in "[{":
            try:
                return json.dumps(json.loads(value), sort_keys=True)
            except ValueError:
                return value
        try:
            return format(float(value), ".9g")
        except ValueError:
            return value
    return str(value)


def canonical(rows):
    return [{k: norm(v) for k, v in r.items()} for r in rows]


# compare computes every metric once per format (~2 s of CPU each): its formats are read back
# under `make check` by test_compare_metrics.py, and written here under `make test` (slow).
@pytest.mark.parametrize("verb", [pytest.param(v, marks=pytest.mark.slow) if v == "compare" else v
                                  for v in sorted(VERBS)])
@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "table"])
def test_every_verb_writes_every_format_as_one_valid_document(ds, tmp_path, verb, fmt):
    args = VERBS[verb](ds)
    stdout = run(args, "--format", fmt)
    out = tmp_path / f"result.{fmt}"
    run(args, "-o", out)                 # the format comes from the extension
    rows = read_back(fmt, stdout)
    assert rows, f"{verb} --format {fmt} wrote no rows"
    assert read_back(fmt, out.read_bytes()) == rows, "-o and stdout differ"
    # Every format holds the same rows as jsonl.
    reference = read_back("jsonl", run(args, "--format", "jsonl"))
    if fmt == "csv":     # CSV text escapes its newlines (test_cli_usage.py checks every rule)
        reference = [{k: v.replace("\n", "\\n") if isinstance(v, str) else v
                      for k, v in r.items()} for r in reference]
    assert canonical(rows) == canonical(reference)


def notes_back(fmt, data, notes_file):
    """The notes a compare document carries, read with the format's own reader; csv and jsonl
    hold rows only, their notes are in the --notes file."""
    if fmt == "json":
        return json.loads(data)["notes"]
    if fmt in ("csv", "jsonl"):
        return json.loads(notes_file.read_text())["notes"]
    if fmt == "parquet":
        meta = pq.read_schema(io.BytesIO(data)).metadata
        return json.loads(meta[b"kmemscope.notes"])
    text = data.decode()
    if fmt == "markdown":
        return [re.sub(r"\\(.)", r"\1", line[2:])                 # markdown escapes its text
                for line in text.split("\nNotes:\n", 1)[1].splitlines() if line.startswith("- ")]
    return [line[len("note: "):] for line in text.splitlines() if line.startswith("note: ")]


@pytest.mark.parametrize("fmt", ["text", "mmtests", "markdown", "csv", "json", "jsonl", "parquet"])
def test_compare_notes_are_inside_every_format_also_with_o(ds, tmp_path, fmt):
    """The caveats of a comparison travel with it: never only on stderr, where -o loses them
    (inside the document, or for csv and jsonl, which hold rows only, in --notes FILE)."""
    args = VERBS["compare"](ds)
    out, notes_file = tmp_path / "cmp.out", tmp_path / "notes.json"
    proc = kmemscope(*args, "--format", fmt, "-o", out, "--notes", notes_file, text=False,
                     timeout=300)
    notes = notes_back(fmt, out.read_bytes(), notes_file)
    # cross_cpu_free_pct needs mm_page_free, which the thp-faults run did not record
    assert any("cross_cpu_free_pct: no value for 1 of 1 on b" in n for n in notes), notes
    stderr_notes = [line.split("note: ", 1)[1] for line in proc.stderr.decode().splitlines()
                    if "note: " in line]
    assert stderr_notes == notes        # with -o, the notes are also shown on stderr


def test_info_json_is_one_object_with_runs_tables_and_rows(ds):
    doc = json.loads(run(["info", ds, "--format", "json"]))
    assert set(doc) == {"schema_version", "kmemscope_version", "kind", "runs", "tables",
                        "rows_per_run", "notes"}
    assert {r["run_id"] for r in doc["runs"]} == {r["run_id"] for r in doc["rows_per_run"]}
    per_table = {}
    for r in doc["rows_per_run"]:
        per_table[r["table"]] = per_table.get(r["table"], 0) + r["rows"]
    assert {t["table"]: t["rows"] for t in doc["tables"]} == per_table
    alloc_rows = rows_of(run(["sql", ds, "SELECT run_id, count(*) AS n FROM mm_page_alloc "
                                         "GROUP BY 1", "--format", "json"]))
    assert sorted((r["run_id"], r["n"]) for r in alloc_rows) == sorted(
        (r["run_id"], r["rows"]) for r in doc["rows_per_run"] if r["table"] == "mm_page_alloc")


def test_info_as_text_lists_each_table_with_the_json_counts(ds, tmp_path):
    """The default text of `info` (what `make demo` prints) names each table with its rows,
    with and without --per-run, and --notes writes its notes file from the text view too."""
    doc = json.loads(run(["info", ds, "--format", "json"]))
    for extra in ([], ["--per-run"], ["--notes", str(tmp_path / "n.json")]):
        text = run(["info", ds, *extra]).decode()
        for t in doc["tables"]:
            line = next(ln for ln in text.splitlines() if ln.split()[:1] == [t["table"]])
            assert f"{t['rows']:,}" in line or str(t["rows"]) in line, (t, line)
    assert json.loads((tmp_path / "n.json").read_text())["kind"] == "info"


def test_info_as_a_table_shows_runs_and_tables_without_per_run(ds, tmp_path):
    """The text table of info (and its --notes file) without --per-run, which alone asks
    for the rows of each table per run."""
    notes = tmp_path / "notes.json"
    text = run(["info", ds, "--notes", notes]).decode()
    tables = json.loads(run(["info", ds, "--format", "json"]))["tables"]
    titles = [line for line in text.splitlines() if re.fullmatch(r"\w+ \(\d+\)", line)]
    assert titles == ["runs (2)", f"tables ({len(tables)})"]
    assert json.loads(notes.read_text())["format"] == "table"


def test_compare_writes_markdown_and_text_by_extension(ds, tmp_path):
    args = VERBS["compare"](ds)
    run(args, "-o", tmp_path / "c.md")
    assert (tmp_path / "c.md").read_text().lstrip().startswith(("|", "#", "kernel"))
    assert "|" in (tmp_path / "c.md").read_text()
    run(args, "-o", tmp_path / "c.txt")
    assert "Amean" in (tmp_path / "c.txt").read_text() or "Hmean" in (tmp_path / "c.txt").read_text()


def test_a_format_that_contradicts_the_extension_is_refused(ds, tmp_path):
    proc = kmemscope("sql", ds, "SELECT 1", "-o", tmp_path / "x.parquet", "--format", "csv",
                     check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"kmemscope: error: -o {tmp_path / 'x.parquet'} looks like parquet but --format is csv: "
        "give a matching extension or drop one of them"]
    assert not (tmp_path / "x.parquet").exists()


def test_table_output_shows_nulls_fixed_point_numbers_and_escaped_text(ds):
    text = run(VERBS["sql"](ds)).decode()
    header, rule, *rows = text.splitlines()
    assert all("e+" not in r and "e-" not in r for r in rows), "scientific notation in a table"
    assert all(" NULL " in r + " " for r in rows)
    assert all("a\\nb" in r for r in rows), "a newline in data must not start a new row"
    assert len(rows) == len(rows_of(run(VERBS["sql"](ds), "--format", "json")))


def test_bytes_are_base64_in_json_and_csv(ds):
    query = ["sql", ds, "SELECT 'hi'::BLOB AS b, 1 AS n"]
    assert rows_of(run(query, "--format", "json")) == [{"b": "aGk=", "n": 1}]
    assert read_back("csv", run(query, "--format", "csv")) == [{"b": "aGk=", "n": "1"}]


def test_label_values_cannot_break_a_markdown_table():
    from kmemscope.render.comparison import markdown_text

    cell = markdown_text("a|b <b>x</b>\n*y*")
    assert "|" not in cell.replace("\\|", "") and "\n" not in cell
    assert "<" not in cell.replace("\\<", "") and "*" not in cell.replace("\\*", "")


# ---------------------------------------------------------------- memory

# An address-space limit of 1.5 GB on the command: Python, pyarrow and DuckDB with its
# threads start and run in it (they need about 1.1 GB of addresses), a result of 1.1 GB held
# whole does not. `sql --memory-limit` bounds DuckDB; the rows must stream to the writer.
ADDRESS_SPACE = 1500 * 10 ** 6


def _limited():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


@pytest.mark.parametrize("fmt,select", [
    # 10 million rows as a text table took 2.96 GB: a table shows its first rows
    ("table", "SELECT * FROM range(10000000)"),
    # 1.1 GB of rows, which csv and parquet once held whole as an Arrow table before writing
    ("csv", "SELECT range, repeat('x', 100) AS pad FROM range(10000000)"),
    ("parquet", "SELECT range, repeat('x', 100) AS pad FROM range(10000000)"),
    # json's envelope object around the rows: its rows still stream (2-3x csv's time)
    pytest.param("json", "SELECT range, repeat('x', 100) AS pad FROM range(10000000)",
                 marks=pytest.mark.slow),
])
def test_sql_results_stream_within_the_memory_limit(ds, tmp_path, fmt, select):
    out = tmp_path / f"out.{fmt}"
    proc = kmemscope("sql", ds, select, "--memory-limit", "200MB", "--format", fmt, "-o", out,
                     check=False, timeout=600, preexec_fn=_limited)
    assert proc.returncode == 0, proc.stderr
    if fmt == "table":              # the oracle: the rows a table may show, counted here
        lines = out.read_text().splitlines()
        assert [x.strip() for x in lines[2:4]] == ["0", "1"] and lines[-2].strip() == "9999"
        assert len(lines) == 2 + 10_000 + 1 and "csv, jsonl or parquet" in lines[-1]
    elif fmt == "parquet":          # every row, as pyarrow reads them back
        meta = pq.read_metadata(out)
        assert meta.num_rows == 10_000_000
        last = pq.ParquetFile(out).read_row_group(meta.num_row_groups - 1, columns=["range"])
        assert last.column("range")[-1].as_py() == 9_999_999
    elif fmt == "json":             # read as lines: json.load would hold 1.3 GB here
        with open(out) as f:
            head = "".join(next(f) for _ in range(5))        # the envelope, then "rows": [
            assert json.loads(head + "]}") == {"schema_version": "1", "kind": "sql", "rows": [],
                                              "kmemscope_version": __version__}
            rows, last, end = 0, None, []
            for line in f:
                if line.startswith('  {"range":'):
                    rows, last = rows + 1, line
                else:
                    end.append(line)
            assert rows == 10_000_000 and last.startswith('  {"range":9999999,')
            assert json.loads("{" + "".join(end[1:])) == {"notes": []}   # after "]," the notes
    else:
        with open(out) as f:
            assert next(f) == '"range","pad"\n'
            assert sum(1 for _ in f) == 10_000_000


def test_json_written_by_columns_holds_what_row_by_row_json_holds():
    """The column-wise JSON writer (each column turned to JSON text by Arrow's kernels) gives
    the values Python's json module gives row by row: text with quotes, backslashes and
    control characters, floats at the extremes and NaN, decimals, maps, lists, bytes."""
    import decimal
    import io
    import json

    import pyarrow as pa

    from kmemscope.render import formats, writers

    t = pa.table({
        "i": pa.array([1, None, -(2 ** 63), 2 ** 63 - 1], pa.int64()),
        "f": [1.0, float("nan"), 1.7e308, 5e-324],
        "g": [-1.7e308, float("inf"), None, -0.0],
        "f32": pa.array([0.1, None, 2.5, -1.0], pa.float32()),
        "s": ['a"b\\c\n\x01\x1b]0;t\x07é', None, "=x", ""],
        "b": [True, False, None, True],
        "d": pa.array([decimal.Decimal("0.5"), None, decimal.Decimal("-12.0"),
                       decimal.Decimal("1E-8")], pa.decimal128(20, 10)),
        "l": [[1, 2], None, [], [3]],
        "m": pa.array([[("k", 1)], [], None, [("a", 2), ("b", 3)]],
                      pa.map_(pa.string(), pa.int64())),
        "bin": [b"\x00", None, b"x", b""]})

    for fmt in ("json", "jsonl"):
        buf = io.BytesIO()
        formats.BY_NAME[fmt].writer(writers.Document("sql", t), buf)
        text = buf.getvalue().decode()
        got = rows_of(text, "sql") if fmt == "json" else [json.loads(line) for line in text.splitlines()]
        assert got == [json.loads(r) for r in writers._json_rows(t)]
        assert [r["i"] for r in got] == t.column("i").to_pylist()
        assert [r["s"] for r in got] == t.column("s").to_pylist()
        assert [r["f"] for r in got] == [1.0, None, 1.7e308, 5e-324]
        assert [r["g"] for r in got] == [-1.7e308, None, None, -0.0]
        assert [r["d"] for r in got] == [None if v is None else str(v)
                                         for v in t.column("d").to_pylist()]
        assert all(type(r["f"]) is float for r in got if r["f"] is not None)
