"""The dataset contract: the format file, canonical column types, run_id as a string.

- `kmemscope parse` writes DATASET/_kmemscope.json (format 2) into a new dataset;
  readers refuse a damaged file or a newer format in one line.
- A format-1 dataset (no file; a 5.15-era run whose gfp_flags are 4 bytes next to
  a 6.18 run whose are 8; synthetic, written with kmdata) still answers
  `kmemscope query`, checked against a plain-Python recount.
- A trace whose format declares pfn and gfp_flags 4 bytes wide (as 32-bit kernels
  and kernels up to 5.15 do), made at test time from a real recording by editing
  the sizes in its format text, is stored with both at uint64; the values are
  the decoder's own and what `trace-cmd report -R` prints.
- run_id stays a string when it is all digits, in DuckDB and in Spark.
"""
import csv
import io
import json
import os
import re
import shutil
import subprocess
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import requirements

import kmdata as K
from conftest import EXAMPLES, PROJECT_ROOT
from kmrun import kmemscope, one_error_line
from kmemscope import DatasetError, __version__
from kmemscope.dataset import format as F

SMALL = EXAMPLES / "memory-pressure"
ALLOCS = EXAMPLES / "thp-faults"     # 30,026 mm_page_alloc events


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    ds = tmp_path_factory.mktemp("fmt") / "ds"
    kmemscope("parse", SMALL, "-o", ds)
    return ds


@pytest.fixture
def copy_of(parsed, tmp_path):
    ds = tmp_path / "ds"
    shutil.copytree(parsed, ds)
    return ds


# ---------------------------------------------------------------- the format file

def test_parse_writes_the_format_file(parsed):
    doc = json.loads((parsed / F.FORMAT_FILE).read_text())
    from kmemscope import __version__
    assert doc == {"format": 2, "writer": f"kmemscope {__version__}"}
    assert F.read_format(parsed) == 2
    assert not [p.name for p in parsed.iterdir() if F.FORMAT_FILE in p.name and p.name != F.FORMAT_FILE]
    # the file is no table
    info = json.loads(kmemscope("info", parsed, "--format", "json").stdout)
    assert F.FORMAT_FILE not in {row["table"] for row in info["tables"]}


HOSTILE = {
    "huge": (b"{\"format\": 2, \"writer\": \"" + b"x" * 100_000 + b"\"}", "more than 4096"),
    "not json": (b"format = 2\n", "not JSON"),
    "not utf-8": (b"{\"format\": 2, \"writer\": \"\xff\xfe\"}", "not UTF-8"),
    "an array": (b"[2]", "not an object"),
    "no format": (b"{\"writer\": \"kmemscope\"}", "no \"format\""),
    "format as text": (b"{\"format\": \"2\"}", "not a whole number"),
    "format as float": (b"{\"format\": 2.0}", "not a whole number"),
    "format as bool": (b"{\"format\": true}", "not a whole number"),
    "format zero": (b"{\"format\": 0}", "not a whole number"),
    "format NaN": (b"{\"format\": NaN}", "not JSON"),
    "format twice": (b"{\"format\": 1, \"format\": 2}", "twice"),
    "unknown field": (b"{\"format\": 2, \"tables\": {}}", "unexpected field"),
    "writer a number": (b"{\"format\": 2, \"writer\": 7}", "\"writer\""),
    "writer with escapes": (b"{\"format\": 2, \"writer\": \"a\\u001b[2Jb\"}", "\"writer\""),
    "deep nesting": (b"{\"format\": 2, \"writer\": " + b"[" * 3000 + b"]" * 3000 + b"}",
                     "more than 4096"),
    "deep nesting, small": (b"[" * 2000 + b"]" * 2000, "not"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_damaged_format_file_is_one_error_line(copy_of, case):
    data, expected = HOSTILE[case]
    (copy_of / F.FORMAT_FILE).write_bytes(data)
    for args in (("info", copy_of), ("query", "summary", copy_of),
                 ("sql", copy_of, "SELECT count(*) FROM runs")):
        line = one_error_line(kmemscope(*args, check=False))
        assert "_kmemscope.json" in line and expected in line, line
        assert "\x1b" not in line


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink to /dev/zero"])
def test_a_format_file_that_is_no_regular_file_is_refused(copy_of, kind):
    path = copy_of / F.FORMAT_FILE
    path.unlink()
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    line = one_error_line(kmemscope("info", copy_of, check=False, timeout=60))
    # a link is refused as a link, never followed out of the dataset
    assert ("is a symbolic link" if kind.startswith("symlink") else "not a regular file") \
        in line, line


def test_a_newer_format_is_refused_by_readers_and_by_parse(copy_of):
    (copy_of / F.FORMAT_FILE).write_text('{"format": 3, "writer": "kmemscope 9.0", "new": [1]}')
    before = sorted(p.relative_to(copy_of) for p in copy_of.rglob("*"))
    for args in (("info", copy_of), ("query", "atomic_orders", copy_of),
                 ("parse", ALLOCS, "-o", copy_of)):
        line = one_error_line(kmemscope(*args, check=False))
        assert ("format 3 (written by kmemscope 9.0)" in line and "reads formats 1 to 2" in line
                and "upgrade kmemscope" in line), line
    after = sorted(p.relative_to(copy_of) for p in copy_of.rglob("*")
                   if p.name != ".kmemscope.lock")
    assert after == [p for p in before if p.name != ".kmemscope.lock"]   # the parse added nothing
    assert (copy_of / F.FORMAT_FILE).read_text().startswith('{"format": 3')


@pytest.mark.parametrize("writer", ["a\u001b[2Jb", "x" * 41, 7])
def test_a_newer_formats_writer_is_named_only_when_short_and_printable(copy_of, writer):
    (copy_of / F.FORMAT_FILE).write_text(json.dumps({"format": 4, "writer": writer}))
    line = one_error_line(kmemscope("info", copy_of, check=False))
    assert "format 4;" in line and "written by" not in line and "\x1b" not in line, line


def test_a_failed_parse_writes_no_format_file(tmp_path):
    bad = tmp_path / "trunc.dat"
    bad.write_bytes((SMALL / "trace.dat").read_bytes()[:100_000])
    ds = tmp_path / "ds"
    one_error_line(kmemscope("parse", bad, "-o", ds, check=False))
    assert not (ds / F.FORMAT_FILE).exists()


def test_write_format_is_atomic_and_leaves_no_temporary(tmp_path):
    F.write_format(tmp_path, 2)
    F.write_format(tmp_path, 2)
    assert [p.name for p in tmp_path.iterdir()] == [F.FORMAT_FILE]
    assert F.parse_format((tmp_path / F.FORMAT_FILE).read_bytes())["format"] == 2


# ---------------------------------------------------------------- a dataset kmemscope 0.2.0 wrote
#
# tests/data/dataset-0.2.0: `kmemscope parse examples/memory-pressure` and `kmemscope query
# vmstat_rates` by kmemscope 0.2.0 (commit 5fabb89), committed as they left it: its format
# file, its runs' records of their files and the analysis rows 0.2.0 kept. Every later
# kmemscope must read it as it is (docs/dataset-format.md, "Which kmemscope reads which
# dataset").

V020 = PROJECT_ROOT / "tests" / "data" / "dataset-0.2.0"


@pytest.fixture
def v020(tmp_path):
    ds = tmp_path / "v020"
    shutil.copytree(V020, ds)
    return ds


def _parquet_rows(ds, table):
    """The rows of one table, read straight from its Parquet files (no kmemscope reader)."""
    files = sorted((ds / table).glob("run_id=*/part-*.parquet"))
    return [row for f in files for row in pq.read_table(f).to_pylist()]


def test_the_0_2_0_dataset_is_what_0_2_0_wrote():
    doc = json.loads((V020 / F.FORMAT_FILE).read_text())
    assert doc == {"format": 2, "writer": "kmemscope 0.2.0"}
    assert [p.name for p in (V020 / "runs").iterdir()] == ["run_id=01a9b1a2837f8c15"]
    assert (V020 / "_derived" / "result_vmstat_rates").is_dir()


def test_a_dataset_written_by_0_2_0_is_read_as_it_is(v020):
    assert F.read_format(v020) == 2
    tables = sorted(p.name for p in v020.iterdir()
                    if p.is_dir() and not p.name.startswith(("_", ".")))
    info = json.loads(kmemscope("info", v020, "--format", "json").stdout)
    assert {r["table"]: r["rows"] for r in info["tables"]} == {
        t: len(_parquet_rows(v020, t)) for t in tables}
    got = {r["name"]: (int(r["first_value"]), int(r["last_value"]))
           for r in _csv(kmemscope("query", "vmstat_rates", v020, "--format", "csv"))}
    assert got == _first_and_last_samples(v020) and len(got) > 100
    assert kmemscope("verify", v020, "--deep").returncode == 0


def _first_and_last_samples(ds):
    """vmstat_rates recounted from the vmstat rows: each counter's first and last value."""
    samples = {}
    for r in _parquet_rows(ds, "vmstat"):
        samples.setdefault(r["name"], []).append((r["ts"], r["value"]))
    return {name: (min(s)[1], max(s)[1]) for name, s in samples.items()}


def test_rows_kept_by_0_2_0_are_computed_again_by_a_newer_kmemscope(v020, monkeypatch):
    """0.2.0 kept vmstat_rates' rows, signed with its version: a newer kmemscope (stood in
    for by another version string) finds them stale, computes and keeps them again."""
    import kmemscope as api
    from kmemscope.queries import result_cache

    kept = next((v020 / "_derived" / "result_vmstat_rates").glob("run_id=*/part-0.parquet"))
    before = kept.read_bytes()
    monkeypatch.setenv(result_cache.ENV_SWITCH, "1")     # the suite turns kept rows off
    monkeypatch.setattr(result_cache, "__version__", "0.2.0+newer")
    # verify --deep asks the kept rows' question again and finds the same rows
    assert api.verify(str(v020), deep=True).problems == []
    assert kept.read_bytes() == before
    rows = api.open(str(v020)).query("vmstat_rates").rows()
    assert {r["name"]: (r["first_value"], r["last_value"]) for r in rows} == \
        _first_and_last_samples(v020)
    assert kept.read_bytes() != before                  # computed again and kept anew
    assert api.verify(str(v020)).problems == []


def test_runs_are_added_to_a_dataset_written_by_0_2_0(v020):
    before = (v020 / F.FORMAT_FILE).read_bytes()
    kmemscope("parse", ALLOCS, "-o", v020)
    assert (v020 / F.FORMAT_FILE).read_bytes() == before      # still format 2, its writer kept
    info = json.loads(kmemscope("info", v020, "--format", "json").stdout)
    assert len(info["runs"]) == 2
    allocs = {r["table"]: r["rows"] for r in info["tables"]}["mm_page_alloc"]
    assert allocs == len(_parquet_rows(v020, "mm_page_alloc")) == 30_026
    assert kmemscope("verify", v020).returncode == 0


# ---------------------------------------------------------------- an older format

def test_a_format_older_than_this_kmemscope_reads_is_refused(copy_of, tmp_path, monkeypatch):
    """No format has been dropped yet (OLDEST_FORMAT is 1); the day one is, its datasets are
    refused in one line that says to parse the traces again. Raised here to 2, format 1."""
    assert F.OLDEST_FORMAT == F.LEGACY_FORMAT == 1
    monkeypatch.setattr(F, "OLDEST_FORMAT", 2)
    (copy_of / F.FORMAT_FILE).write_text('{"format": 1, "writer": "kmemscope 0.1.0"}')
    legacy = tmp_path / "legacy"
    _format1_dataset(legacy)            # no format file: format 1
    for ds, written in ((copy_of, " (written by kmemscope 0.1.0)"), (legacy, "")):
        for call in (F.read_format, F.ensure_format):
            with pytest.raises(DatasetError) as err:
                call(ds)
            text = str(err.value)
            assert text == (f"{ds} is a kmemscope dataset of format 1{written}, which is no "
                            f"longer read; kmemscope {__version__} reads formats 2 to 2 "
                            "(parse its traces again into a new dataset)"), text
    assert not (legacy / F.FORMAT_FILE).exists()        # a refused dataset gets no file
    new = tmp_path / "new"
    new.mkdir()
    assert F.ensure_format(new) == F.FORMAT           # a new dataset is no old one
    assert F.read_format(new) == F.FORMAT


# ---------------------------------------------------------------- format 1

OLD, NEW = "5150000000000000", "6180000000000000"
HIGH_BIT = 1 << 40     # a bit above 32, so a narrowing anywhere would show


def _format1_dataset(ds):
    """Two synthetic runs as kmemscope wrote them before format files: gfp_flags 4 bytes
    wide in the 5.15 run (era A bits), 8 in the 6.18 run (era B bits)."""
    sec = 10 ** 9
    truth = {}
    for run, kernel, era in ((OLD, "5.15.0", "5.10"), (NEW, "6.18.44", "6.18")):
        K.write_run(ds, run, kernel=kernel, last_ts=2 * sec, labels={"kernel": kernel})
        bits = K.GFP_BITS[era]
        gfps = [K.gfp(era, "__GFP_HIGH", "__GFP_KSWAPD_RECLAIM"),
                K.gfp(era, "__GFP_IO", "__GFP_FS", "__GFP_DIRECT_RECLAIM", "__GFP_KSWAPD_RECLAIM"),
                K.gfp(era, "__GFP_HIGH", "__GFP_NOMEMALLOC"),
                K.gfp(era, "__GFP_NOWARN")]
        if "__GFP_ATOMIC" in bits:
            gfps.append(K.gfp(era, "__GFP_HIGH", "__GFP_ATOMIC", "__GFP_KSWAPD_RECLAIM"))
        else:
            gfps.append(HIGH_BIT | K.gfp(era, "__GFP_HIGH"))
        rows = []
        for i in range(300):
            pfn = K.FAILED_PFN if i % 41 == 0 else 1000 + i
            rows.append(dict(ts=i * 1000, cpu=i % 2, pid=10, comm="t", pfn=pfn,
                             order=(0, 1, 3, 4, 9)[i % 5], gfp_flags=gfps[i % len(gfps)],
                             migratetype=0))
        K.write_events(ds, "mm_page_alloc", run, rows, kernel=kernel)
        K.write_other(ds, "print_flags", run, K.gfp_print_flags(era))
        truth[run] = ("A" if era == "5.10" else "B", bits, rows)
    return truth


def _classes(truth):
    """atomic_orders.orders recounted: (run, era, class, order) -> [allocs, failed]."""
    out = Counter()
    failed = Counter()
    for run, (era, bits, rows) in truth.items():
        for r in rows:
            g, order = r["gfp_flags"], r["order"]
            has = lambda name: bool(g & bits.get(name, 0))   # noqa: E731
            if era == "A":
                eligible = order > 0 and has("__GFP_ATOMIC") and not has("__GFP_NOMEMALLOC")
            else:
                eligible = (order > 0 and has("__GFP_HIGH") and not has("__GFP_DIRECT_RECLAIM")
                            and not has("__GFP_NOMEMALLOC"))
            cls = ("highatomic_eligible" if eligible else
                   "other_nonblocking" if not has("__GFP_DIRECT_RECLAIM") else "blocking")
            key = (run, era, cls, order)
            out[key] += 1
            failed[key] += r["pfn"] == K.FAILED_PFN
    return {k: [n, failed[k]] for k, n in out.items()}


def _csv(proc):
    return list(csv.DictReader(io.StringIO(proc.stdout)))


def test_a_format1_dataset_with_mixed_gfp_widths_still_answers(tmp_path):
    ds = tmp_path / "ds"
    truth = _format1_dataset(ds)
    widths = {pq.read_schema(f).field("gfp_flags").type
              for f in (ds / "mm_page_alloc").glob("*/*.parquet")}
    assert widths == {pa.uint32(), pa.uint64()}
    assert F.read_format(ds) == 1
    got = {(r["run_id"], r["highatomic_era"], r["alloc_class"], int(r["order"])):
           [int(r["allocs"]), int(r["failed"])]
           for r in _csv(kmemscope("query", "atomic_orders.orders", ds, "--format", "csv"))}
    assert got == _classes(truth)
    sums = {r["run_id"]: (int(r["s"]), r["t"]) for r in _csv(kmemscope(
        "sql", ds, "SELECT run_id, sum(gfp_flags) AS s, typeof(gfp_flags) AS t FROM mm_page_alloc "
        "GROUP BY ALL", "--format", "csv"))}
    assert sums == {run: (sum(r["gfp_flags"] for r in rows), "UBIGINT")
                    for run, (_, _, rows) in truth.items()}
    assert not (ds / F.FORMAT_FILE).exists()     # readers never write it


def test_a_run_parsed_into_a_format1_dataset_keeps_it_format1(tmp_path):
    ds = tmp_path / "ds"
    _format1_dataset(ds)
    kmemscope("parse", SMALL, "-o", ds)
    assert not (ds / F.FORMAT_FILE).exists()      # its old runs are not canonical
    info = json.loads(kmemscope("info", ds, "--format", "json").stdout)
    assert len(info["runs"]) == 3


# ---------------------------------------------------------------- canonical types

def test_canonical_schema_widens_and_never_narrows():
    schema = pa.schema([("ts", pa.int64()), ("pfn", pa.uint32()), ("order", pa.int32()),
                        ("gfp_flags", pa.uint32()), ("migratetype", pa.uint16()),
                        ("cpu", pa.int64()), ("comm", pa.dictionary(pa.int32(), pa.string())),
                        ("common_flags", pa.uint8())])
    got = F.canonical_schema("mm_page_alloc", schema)
    assert [(f.name, f.type) for f in got] == [
        ("ts", pa.int64()),
        ("pfn", pa.uint64()),            # uint32 -> UBIGINT
        ("order", pa.int32()),           # signed, canonical UINTEGER: kept (negatives)
        ("gfp_flags", pa.uint64()),      # uint32 -> UBIGINT
        ("migratetype", pa.int32()),     # uint16 -> INTEGER: fits
        ("cpu", pa.int64()),             # wider than INTEGER: kept
        ("comm", pa.dictionary(pa.int32(), pa.string())),
        ("common_flags", pa.uint8()),    # not a column kmemscope reads
    ]
    assert F.canonical_schema("sched_switch", schema).equals(schema)
    assert F.canonical_schema("mm_vmscan_direct_reclaim_end",
                              pa.schema([("nr_reclaimed", pa.int64())])).field(0).type == pa.int64()


def test_to_canonical_keeps_every_value():
    t = pa.table({"pfn": pa.array([0, 2 ** 32 - 1], pa.uint32()),
                  "order": pa.array([-1, 3], pa.int32()),
                  "gfp_flags": pa.array([0xffffffff, 0x400], pa.uint32())})
    out = F.to_canonical("mm_page_alloc", t)
    assert out.schema.field("pfn").type == pa.uint64() and out.schema.field("order").type == pa.int32()
    assert out.to_pydict() == t.to_pydict()


def _as_old_kernel(v7, out):
    """A v6 copy of a real trace whose mm_page_alloc format declares pfn and gfp_flags
    4 bytes wide (32-bit `unsigned long`, and gfp_t up to 5.15): same length, little
    endian, so each field reads the low half of the recorded 8 bytes."""
    v6 = out.with_suffix(".v6.dat")
    subprocess.run(["trace-cmd", "convert", "--file-version", "6", "--compression", "none",
                    "-i", str(v7), "-o", str(v6)], check=True, capture_output=True)
    data = bytearray(v6.read_bytes())
    start = data.index(b"name: mm_page_alloc\nID: ")
    end = data.index(b"print fmt", start)
    block = bytes(data[start:end])
    new = block.replace(b" pfn;\toffset:8;\tsize:8;", b" pfn;\toffset:8;\tsize:4;")
    new = new.replace(b" gfp_flags;\toffset:24;\tsize:8;", b" gfp_flags;\toffset:24;\tsize:4;")
    assert len(new) == len(block) and new.count(b"size:4;") - block.count(b"size:4;") == 2
    data[start:end] = new
    out.write_bytes(bytes(data))
    return out


def _raw_decode(path, table):
    """The decoder's own batches for `table`, before any cast."""
    from kmemscope.parsers.tracedat import TraceFile

    batches = []
    TraceFile(str(path)).decode(lambda i: (lambda t, b: batches.append(b) if t == table else None),
                                threads=1)
    return pa.Table.from_batches(batches)


REPORT_ALLOC = re.compile(r"\[(\d+)\]\s+(\d+\.\d+): mm_page_alloc:\s+pfn=0x([0-9a-f]+) order=(\d+) "
                          r"gfp_flags=0x([0-9a-f]+) migratetype=")


def test_4_byte_pfn_and_gfp_flags_are_stored_as_uint64_with_the_same_values(tmp_path):
    if not shutil.which("trace-cmd"):
        requirements.skip("setup", "trace-cmd is not installed (make setup)")
    trace = _as_old_kernel(ALLOCS / "trace.dat", tmp_path / "old.dat")
    raw = _raw_decode(trace, "mm_page_alloc")
    assert raw.schema.field("pfn").type == pa.uint32()
    assert raw.schema.field("gfp_flags").type == pa.uint32()
    ds = tmp_path / "ds"
    kmemscope("parse", trace, "-o", ds)
    files = sorted((ds / "mm_page_alloc").glob("*/*.parquet"))
    stored = pa.concat_tables(pq.read_table(f) for f in files)
    assert stored.schema.field("pfn").type == pa.uint64()
    assert stored.schema.field("gfp_flags").type == pa.uint64()
    assert stored.schema.field("order").type == pa.uint32()
    cols = ["cpu", "ts", "pfn", "order", "gfp_flags"]

    def rows(t):
        return Counter(zip(*(t.column(c).to_pylist() for c in cols)))

    assert rows(stored) == rows(raw)
    # the independent oracle: trace-cmd's own reading of the edited format
    text = subprocess.run(["trace-cmd", "report", "-R", "-t", "-i", str(trace)],
                          capture_output=True, text=True, check=True).stdout
    report = Counter()
    for m in REPORT_ALLOC.finditer(text):
        sec, ns = m.group(2).split(".")
        report[(int(m.group(1)), int(sec) * 10 ** 9 + int(ns), int(m.group(3), 16), int(m.group(4)),
                int(m.group(5), 16))] += 1
    assert sum(report.values()) == stored.num_rows == 30026
    assert report == rows(stored)
    failed = sum(n for key, n in report.items() if key[2] == 2 ** 32 - 1)
    assert failed > 0          # a 32-bit kernel's -1UL, widened, still counts as failed
    got = _csv(kmemscope("query", "atomic_orders.orders", ds, "--format", "csv"))
    assert sum(int(r["failed"]) for r in got) == failed


def test_unknown_tables_keep_the_trace_types(public_fixtures, tmp_path):
    """A 32-bit ARM trace: none of its tables is one kmemscope reads; every table is stored
    with the decoder's own schema."""
    trace = public_fixtures / "trappy_hist_trace_v6_le_l4_8cpu_sched_hmp_59k.dat"
    ds = tmp_path / "ds"
    kmemscope("parse", trace, "-o", ds)
    for table in ("sched_switch", "sched_wakeup", "sched_migrate_task"):
        raw = _raw_decode(trace, table)
        files = list((ds / table).glob("*/*.parquet"))
        assert files and all(pq.read_schema(f).remove_metadata().equals(raw.schema.remove_metadata())
                             for f in files), table


# ---------------------------------------------------------------- run_id is a string

# Left to guess, Spark reads both as numbers (dropping the zero), DuckDB the second.
DIGITS, DIGITS2 = "0123456789012345", "1234567890123456"


def _digit_run(ds):
    for run in (DIGITS, DIGITS2):
        K.write_run(ds, run, labels={"kernel": "digits"})
        K.write_events(ds, "mm_page_alloc", run, [dict(ts=1, pfn=5, order=0, migratetype=0,
                                                       gfp_flags=K.gfp("6.18", "__GFP_IO"))])


def test_an_all_digit_run_id_stays_a_string_in_duckdb(tmp_path):
    ds = tmp_path / "ds"
    _digit_run(ds)
    got = _csv(kmemscope("sql", ds, "SELECT a.run_id, typeof(a.run_id) AS t, r.kernel_release "
                         "FROM mm_page_alloc a JOIN runs r USING (run_id) ORDER BY 1", "--format", "csv"))
    assert got == [{"run_id": run, "t": "VARCHAR", "kernel_release": "6.18.44"}
                   for run in (DIGITS, DIGITS2)]
    for run in (DIGITS, DIGITS2):
        got = _csv(kmemscope("query", "atomic_orders.orders", ds, "--run", run, "--format", "csv"))
        assert [r["run_id"] for r in got] == [run]


def test_an_all_digit_run_id_stays_a_string_in_spark(tmp_path, spark_engine):
    """Spark reads the same answer as DuckDB from a format-1 dataset of mixed gfp widths
    plus an all-digit run id (partition type inference is off)."""
    from kmemscope.queries import runner

    ds = tmp_path / "ds"
    _format1_dataset(ds)
    _digit_run(ds)
    cols = ["run_id", "highatomic_era", "alloc_class", "order", "allocs", "failed"]

    def rows(t):
        return sorted(tuple(v if isinstance(v, str) else int(v) for v in r)
                      for r in zip(*(t.column(c).to_pylist() for c in cols)))

    duck = runner.run_query("atomic_orders.orders", ds)
    eng = spark_engine          # the run's one Spark session (conftest.py)
    spark = runner.run_query("atomic_orders.orders", ds, engine=eng)
    assert spark.schema.field("run_id").type == pa.string()
    assert rows(spark) == rows(duck)
    assert {DIGITS, DIGITS2} <= {r[0] for r in rows(spark)}
    backend, *_ = runner.open_runs(ds, run_ids=[DIGITS, DIGITS2], tables=["mm_page_alloc"],
                                   engine=eng)
    try:
        for table in ("runs", "mm_page_alloc"):
            df = backend.read_table(table)
            assert df.schema["run_id"].dataType.simpleString() == "string"
            assert sorted(r["run_id"] for r in df.select("run_id").collect()) == [DIGITS, DIGITS2]
        row = df.select("gfp_flags", "pfn").collect()[0]
        assert (int(row["gfp_flags"]), int(row["pfn"])) == (K.gfp("6.18", "__GFP_IO"), 5)
    finally:
        backend.close()
