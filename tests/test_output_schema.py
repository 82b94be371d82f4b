"""Every machine-readable output follows the JSON Schema shipped with kmemscope, and every CSV
reader reads kmemscope's CSV whole.

The schemas (kmemscope/render/schemas/, package data) are strict: each row and envelope names
its required fields and allows no others, so a field renamed or added without its schema (and
docs/output-schema.md) fails here. The oracles are the jsonschema package, each format's own
reader (json, csv, pyarrow.parquet, pandas, DuckDB) and the comparison's own json rows, whose
metrics and sides are counted here.
"""
import csv
import io
import json
from importlib import resources

import duckdb
import jsonschema
import pandas as pd
import pyarrow.parquet as pq
import pytest

from kmemscope.common.version import __version__
from kmrun import kmemscope, rows_of

METRICS = "thp_fault_success_pct,cross_cpu_free_pct,vmstat.thp_fault_alloc"
COMPARE = ["compare", "--by", "kernel", "--metrics", METRICS]
MACHINE = ("csv", "json", "jsonl", "parquet")


def schema(kind):
    text = (resources.files("kmemscope.render") / "schemas" / f"{kind}.schema.json").read_text()
    return json.loads(text)


def validator(kind, part=None):
    """A validator of the kind's document, or of one of its $defs (`part`)."""
    whole = schema(kind)
    target = whole if part is None else {"$ref": f"#/$defs/{part}", "$defs": whole["$defs"]}
    return jsonschema.Draft202012Validator(target)


def written(tmp_path, args, fmt, *extra):
    """(bytes of -o FILE, the --notes document) of the command in `fmt`."""
    out, notes = tmp_path / f"out.{fmt}", tmp_path / f"notes-{fmt}.json"
    if out.exists():
        out.unlink()
    if notes.exists():
        notes.unlink()
    kmemscope(*args, "--format", fmt, "-o", out, "--notes", notes, *extra, text=False)
    return out.read_bytes(), json.loads(notes.read_text())


def parquet_envelope(data):
    """The envelope a Parquet file's key-value metadata holds, as its JSON document has it
    (a query result's own kmemscope.query and kmemscope.engine, plain text, left aside)."""
    meta = pq.read_schema(io.BytesIO(data)).metadata
    head = {k.decode(): v.decode() for k, v in meta.items() if not k.startswith(b"ARROW")}
    out = {k: head.pop(k) for k in ("schema_version", "kmemscope_version", "kind")}
    notes = json.loads(head.pop("kmemscope.notes"))
    head = {k: v for k, v in head.items() if not k.startswith("kmemscope.")}
    return {**out, **{k: json.loads(v) for k, v in head.items()}}, notes


@pytest.fixture(scope="module")
def comparison(examples_ab, tmp_path_factory):
    """{format: (bytes, notes document)} of one comparison in every machine format."""
    tmp = tmp_path_factory.mktemp("schema-compare")
    return {fmt: written(tmp, [COMPARE[0], examples_ab, *COMPARE[1:]], fmt) for fmt in MACHINE}


def test_the_schemas_ship_with_the_package_and_are_valid():
    shipped = sorted(p.name for p in (resources.files("kmemscope.render") / "schemas").iterdir()
                     if p.name.endswith(".schema.json"))
    assert shipped == sorted(f"{k}.schema.json" for k in
                             ("comparison", "trend", "info", "query", "sql", "perfetto"))
    for name in shipped:
        jsonschema.Draft202012Validator.check_schema(schema(name[:-len(".schema.json")]))


def test_compare_json_follows_its_schema(comparison):
    doc = json.loads(comparison["json"][0])
    validator("comparison").validate(doc)
    assert (doc["schema_version"], doc["kmemscope_version"], doc["kind"]) == ("1", __version__,
                                                                            "comparison")
    # one row per metric and side
    assert sorted((r["metric"], r["side"]) for r in doc["rows"]) == sorted(
        (m, s) for m in METRICS.split(",") for s in doc["sides"])


def test_a_renamed_or_added_field_fails_the_schema(comparison):
    doc = json.loads(comparison["json"][0])
    row = doc["rows"][0]
    renamed = {("mean" if k == "value" else k): v for k, v in row.items()}
    for bad in (renamed, {**row, "extra": 1}):
        with pytest.raises(jsonschema.ValidationError):
            validator("comparison", "row").validate(bad)
    with pytest.raises(jsonschema.ValidationError):
        validator("comparison").validate({**doc, "schema_version": "0"})


@pytest.mark.parametrize("fmt", MACHINE)
def test_every_compare_format_holds_the_schemas_rows_and_envelope(comparison, fmt):
    data, notes_doc = comparison[fmt]
    doc = json.loads(comparison["json"][0])
    rows_of_json = doc["rows"]
    row = validator("comparison", "row")
    if fmt == "json":
        rows = json.loads(data)["rows"]
    elif fmt == "jsonl":
        rows = [json.loads(line) for line in data.decode().splitlines()]
    elif fmt == "parquet":
        rows = pq.read_table(io.BytesIO(data)).to_pylist()
        envelope, notes = parquet_envelope(data)
        validator("comparison").validate({**envelope, "rows": rows, "notes": notes})
        assert notes == doc["notes"]
    else:   # csv: text only, so its columns are checked (every field, in the schema's order)
        header, *lines = list(csv.reader(io.StringIO(data.decode())))
        assert header == schema("comparison")["$defs"]["row"]["required"]
        assert len(lines) == len(rows_of_json)
        rows = None
    for r in rows or ():
        row.validate(r)
    if rows is not None:
        assert len(rows) == len(rows_of_json)
    # --notes FILE: the envelope and the notes, the one place of csv's and jsonl's version
    validator("comparison", "notes_file").validate(notes_doc)
    assert notes_doc["format"] == fmt and notes_doc["notes"] == doc["notes"]
    assert notes_doc["kmemscope_version"] == __version__


def test_compare_over_runs_follows_its_schema(examples_ab, tmp_path):
    args = ["compare", examples_ab, "--by", "kernel", "--metrics", "vmstat.thp_fault_alloc",
            "--over", "run"]
    doc = json.loads(kmemscope(*args, "--format", "json").stdout)
    validator("trend").validate(doc)
    data, notes_doc = written(tmp_path, args, "parquet")
    envelope, notes = parquet_envelope(data)
    validator("trend").validate({**envelope, "rows": pq.read_table(io.BytesIO(data)).to_pylist(),
                                 "notes": notes})
    validator("trend", "notes_file").validate(notes_doc)
    assert len(doc["rows"]) == 3          # one per run of the three examples


def test_info_follows_its_schema(examples_ab, tmp_path):
    doc = json.loads(kmemscope("info", examples_ab, "--format", "json").stdout)
    validator("info").validate(doc)
    assert doc["kind"] == "info" and doc["kmemscope_version"] == __version__
    data = kmemscope("info", examples_ab, "--format", "parquet", "-o", tmp_path / "i.parquet")
    assert data.returncode == 0
    table = pq.read_table(tmp_path / "i.parquet")
    for r in table.to_pylist():
        validator("info", "rows_per_run").validate(r)
    assert table.num_rows == len(doc["rows_per_run"])
    envelope, _notes = parquet_envelope((tmp_path / "i.parquet").read_bytes())
    assert envelope["kind"] == "info" and envelope["schema_version"] == "1"
    data, notes_doc = written(tmp_path, ["info", examples_ab], "csv")
    validator("info", "notes_file").validate(notes_doc)
    assert len(list(csv.DictReader(io.StringIO(data.decode())))) == len(doc["rows_per_run"])


def test_metrics_list_is_the_run_metrics_query(examples_ab, tmp_path):
    data, notes_doc = written(tmp_path, ["metrics", "list", examples_ab], "parquet")
    validator("query", "notes_file").validate(notes_doc)
    envelope, _notes = parquet_envelope(data)
    assert (envelope["kind"], envelope["query"]) == ("query", "run_metrics")
    doc = json.loads(kmemscope("metrics", "list", examples_ab, "--format", "json").stdout)
    validator("query").validate(doc)
    table = pq.read_table(io.BytesIO(data))
    assert doc["query"] == "run_metrics" and len(doc["rows"]) == table.num_rows


@pytest.mark.parametrize("verb", ["query", "sql"])
def test_query_and_sql_say_their_schema_in_json_parquet_and_notes(examples_dataset, tmp_path, verb):
    args = (["query", "hot_pfns", examples_dataset, "--param", "top_n=3"] if verb == "query"
            else ["sql", examples_dataset, "SELECT run_id, count(*) AS n FROM mm_page_alloc "
                                           "GROUP BY 1 ORDER BY 1"])
    doc = json.loads(kmemscope(*args, "--format", "json").stdout)
    validator(verb).validate(doc)
    rows = doc["rows"]
    data, notes_doc = written(tmp_path, args, "parquet")
    envelope, notes = parquet_envelope(data)
    validator(verb).validate({**envelope, "rows": rows, "notes": notes})
    validator(verb, "notes_file").validate(notes_doc)
    # one envelope and one set of notes, whichever format carries them
    assert {k: v for k, v in doc.items() if k != "rows"} == {**envelope, "notes": notes}
    assert {k: v for k, v in notes_doc.items() if k != "format"} == {**envelope, "notes": notes}
    assert envelope["kind"] == verb and envelope["kmemscope_version"] == __version__
    table = pq.read_table(io.BytesIO(data))
    assert rows and (table.column_names, table.num_rows) == (list(rows[0]), len(rows))


def test_the_perfetto_trace_says_what_wrote_it(examples_ab, tmp_path):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    run = kmemscope("sql", examples_ab, "SELECT min(run_id) AS r FROM runs", "--format", "json")
    run_id = rows_of(run)[0]["r"]
    kmemscope("export", "perfetto", examples_ab, "--run", run_id, "-o", tmp_path / "t.pftrace")
    trace = pb.Trace()
    trace.ParseFromString((tmp_path / "t.pftrace").read_bytes())
    found = [p.track_event for p in trace.packet
             if p.HasField("track_event") and p.track_event.name == "kmemscope export"]
    assert len(found) == 1
    meta = {a.name: a.string_value for a in found[0].debug_annotations}
    validator("perfetto").validate(meta)
    assert meta["run_id"] == run_id and meta["kmemscope_version"] == __version__


# ---------------------------------------------------------------- CSV every reader reads

def _readers(path):
    """{reader: (column names, rows)} of one CSV file by pandas, DuckDB and Python's csv."""
    frame = pd.read_csv(path)
    con = duckdb.connect()
    try:
        rel = con.execute("SELECT * FROM read_csv(?)", [str(path)])
        names = [d[0] for d in rel.description]
        duck_rows = rel.fetchall()
    finally:
        con.close()
    with open(path, newline="") as f:
        header, *lines = list(csv.reader(f))
    return {"pandas": (list(frame.columns), len(frame)), "duckdb": (names, len(duck_rows)),
            "csv": (header, len(lines))}


def test_compare_csv_reads_whole_in_pandas_duckdb_and_csv(comparison, tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(comparison["csv"][0])
    want = json.loads(comparison["json"][0])["rows"]
    for reader, (names, count) in _readers(path).items():
        assert names == list(want[0]), reader
        assert count == len(want), reader       # one row per metric and side
    frame = pd.read_csv(path)
    assert sorted(zip(frame["metric"], frame["side"])) == sorted(
        (r["metric"], r["side"]) for r in want)


def test_query_csv_reads_whole_in_pandas_duckdb_and_csv(examples_dataset, tmp_path):
    args = ["query", "hot_pfns", examples_dataset, "--param", "top_n=5"]
    want = rows_of(kmemscope(*args, "--format", "json"))
    kmemscope(*args, "--format", "csv", "-o", tmp_path / "q.csv")
    assert want
    for reader, (names, count) in _readers(tmp_path / "q.csv").items():
        assert (names, count) == (list(want[0]), len(want)), reader


def test_csv_notes_go_to_stderr_not_into_the_file(comparison, examples_ab):
    proc = kmemscope(*[COMPARE[0], examples_ab, *COMPARE[1:]], "--format", "csv")
    assert not any(line.startswith("#") for line in proc.stdout.splitlines())
    stderr_notes = [line.split("note: ", 1)[1] for line in proc.stderr.splitlines()
                    if "note: " in line]
    assert stderr_notes == json.loads(comparison["json"][0])["notes"] and stderr_notes


def test_the_notes_file_of_a_text_output_follows_the_schema_too(comparison, examples_ab, tmp_path):
    notes = tmp_path / "notes.json"
    kmemscope(*[COMPARE[0], examples_ab, *COMPARE[1:]], "--format", "mmtests", "-o",
              tmp_path / "c.txt", "--notes", notes)
    doc = json.loads(notes.read_text())
    validator("comparison", "notes_file").validate(doc)
    assert doc["format"] == "mmtests"
    assert doc["notes"] == json.loads(comparison["json"][0])["notes"]
