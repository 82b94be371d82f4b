"""`kmemscope parse` reads trace.dat files that other people's trace-cmd wrote.

The files are ../shared/fixtures/public (see its README): v6 and v7+zstd, 32-bit ARM longs,
old kernels, 1,112 event formats, trace_printk (bprint) events, kernel_stack events. For
each one, the per-event counts equal `trace-cmd report`'s, and every field that `trace-cmd
report -R` prints equals the parsed value (tests/report_oracle.py; fields that -R prints only
as symbol names, and bprint's zero-size `buf`, are counted as not comparable and listed).
"""
import re
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import requirements

from conftest import PUBLIC_FIXTURES
from kmrun import kmemscope
from oracle_compare import compare_dataset, event_counts, read_table_files, table_rows
from report_oracle import read_report

# Totals from the fixtures' README: events that trace-cmd report 3.1.6 printed.
README_TOTALS = {
    "lisa_sched_load_v6_le_l8_6cpu.dat": 3724,
    "lisa_example_rtapp_v6_le_l8_6cpu_bprint.dat": 7820,
    "trappy_tests_trace_v6_le_l4_8cpu_thermal.dat": 525,
    "trappy_hist_trace_v6_le_l4_8cpu_sched_hmp_59k.dat": 59176,
    "trappy_trace_idle_v6_le_l8_6cpu.dat": 43,
    "igt_2014_v6_le_l8_8cpu_i915.dat": 10375,
    "langraph_v7_zstd148_le_l8_4cpu_5.15.dat": 41400,
}
FIXTURE_FILES = sorted(README_TOTALS)


@pytest.fixture(scope="module")
def parsed(public_fixtures, tmp_path_factory):
    """{file name: (trace path, dataset, Report)} for every public fixture, parsed once."""
    out = {}
    for trace in sorted(public_fixtures.glob("*.dat")):
        ds = tmp_path_factory.mktemp("pub") / "ds"
        kmemscope("parse", "-q", trace, "-o", ds)
        out[trace.name] = (trace, ds, read_report(trace))
    return out


def test_every_public_fixture_is_listed(public_fixtures):
    assert sorted(p.name for p in public_fixtures.glob("*.dat")) == FIXTURE_FILES


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_per_event_counts_match_trace_cmd_report(parsed, name):
    if name not in parsed:
        requirements.skip("fixtures", f"{name} is not in {PUBLIC_FIXTURES}")
    trace, ds, report = parsed[name]
    assert len(report.records) == README_TOTALS[name], "the oracle disagrees with the README"
    assert event_counts(ds) == dict(report.counts())
    (run,) = [r for t in read_table_files(ds, "runs") for r in t.to_pylist()]
    assert run["events"] == README_TOTALS[name]


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_field_values_match_trace_cmd_raw_output(parsed, name):
    if name not in parsed:
        requirements.skip("fixtures", f"{name} is not in {PUBLIC_FIXTURES}")
    trace, ds, report = parsed[name]
    result = compare_dataset(ds, report)
    if result.unchecked:
        print(f"{name}: values -R prints only as symbols or not at all: {dict(result.unchecked)}")
    assert not result.problems, "\n".join(result.problems[:40])
    assert sum(result.compared.values()) == len(report.records)


def test_bprint_events_are_all_there(parsed):
    name = "lisa_example_rtapp_v6_le_l8_6cpu_bprint.dat"
    if name not in parsed:
        requirements.skip("fixtures", f"{name} is not in {PUBLIC_FIXTURES}")
    _, ds, report = parsed[name]
    assert report.counts()["bprint"] == 6242
    assert event_counts(ds)["bprint"] == 6242


def test_32bit_traces_type_longs_as_32_bits(parsed):
    name = "trappy_hist_trace_v6_le_l4_8cpu_sched_hmp_59k.dat"
    if name not in parsed:
        requirements.skip("fixtures", f"{name} is not in {PUBLIC_FIXTURES}")
    trace, ds, report = parsed[name]
    (run,) = [r for t in read_table_files(ds, "runs") for r in t.to_pylist()]
    assert run["long_size"] == 4
    (fmt,) = report.formats["bprint"]
    ip = read_table_files(ds, "bprint")[0].schema.field("ip").type
    assert fmt.fields[0].type == "unsigned long" and ip == pa.uint32()


_STACK_LINE = re.compile(r"^=> (?P<sym>\S+) \((?P<addr>[0-9a-f]+)\)$|^=> (?P<bare>[0-9a-f]+)$")


def test_kernel_stack_callers_follow_the_size_field(parsed):
    """langraph's v7+zstd file: 20,700 kernel_stack events, each naming a row of the run's
    stacks table whose addresses are as many as `size` says, equal to the addresses (and
    symbols) trace-cmd's stack printer shows for each event."""
    name = "langraph_v7_zstd148_le_l8_4cpu_5.15.dat"
    if name not in parsed:
        requirements.skip("fixtures", f"{name} is not in {PUBLIC_FIXTURES}")
    _, ds, report = parsed[name]
    stacks = [r for r in report.records if r.event == "kernel_stack"]
    assert len(stacks) == 20700
    names, rows = table_rows(ds, "kernel_stack")      # stack_id -> the stacks row's addresses
    assert len(rows) == 20700
    col = {n: i for i, n in enumerate(names)}
    _, stack_rows = table_rows(ds, "stacks")
    symbols = {tuple(addrs): frames for _, frames, addrs in stack_rows}
    assert len(symbols) == len(stack_rows), "one stacks row per distinct stack"
    bad_len = [r for r in rows if len(r[col["caller"]]) != r[col["size"]]
               or len(symbols[tuple(r[col["caller"]])]) != r[col["size"]]]
    assert not bad_len, f"{len(bad_len)} rows whose caller list is not `size` long, e.g. {bad_len[0]}"

    def oracle_stack(rec):
        addrs, syms = [], []
        for line in rec.pretty_extra:
            m = _STACK_LINE.match(line.strip())
            assert m, f"unexpected stack line {line!r}"
            addrs.append(int(m.group("addr") or m.group("bare"), 16))
            syms.append(m.group("sym"))
        return addrs, syms

    want = Counter()
    for rec in stacks:
        addrs, syms = oracle_stack(rec)
        want[(rec.cpu, rec.ts, tuple(addrs), tuple(syms))] += 1
    got = Counter()
    for r in rows:
        size = r[col["size"]]
        addrs = r[col["caller"]]
        # trace-cmd's printer walks to the end of the record and stops at a -1 entry.
        syms = [s.rsplit("+", 1)[0] if s else None for s in symbols[tuple(addrs)]]
        got[(r[col["cpu"]], r[col["ts"]], tuple(addrs[:size]), tuple(syms[:size]))] += 1
    missing = sorted((want - got).elements())[:3]
    extra = sorted((got - want).elements())[:3]
    assert want == got, f"stacks differ from trace-cmd report: report-only {missing}, table-only {extra}"


def test_oracle_comparison_detects_one_changed_value(parsed, tmp_path):
    """The comparison is not vacuous: change one value in a copy of a table and it fails."""
    name = "trappy_trace_idle_v6_le_l8_6cpu.dat"
    if name not in parsed:
        requirements.skip("fixtures", f"{name} is not in {PUBLIC_FIXTURES}")
    import shutil

    _, ds, report = parsed[name]
    copy = tmp_path / "ds"
    shutil.copytree(ds, copy)
    f = next(f for f in sorted((copy / "cpu_idle").glob("run_id=*/*.parquet"))
             if pq.ParquetFile(f).metadata.num_rows)
    t = pq.ParquetFile(f).read()
    i = t.column_names.index("state")
    vals = t.column(i).to_pylist()
    vals[len(vals) // 2] ^= 1
    t = t.set_column(i, t.schema.field(i), pa.array(vals, t.schema.field(i).type))
    pq.write_table(t, f)
    assert not compare_dataset(ds, report).problems
    problems = compare_dataset(copy, report).problems
    assert problems and "cpu_idle" in problems[0]


def test_every_table_has_distinct_column_names_and_reads_as_a_dataset(parsed):
    """Events with fields named like the common columns (sched_waking's comm and pid) must not
    produce duplicate column names: pyarrow.dataset, pandas and polars refuse those."""
    import pyarrow.dataset as pads

    problems = []
    for name, (_, ds, _) in sorted(parsed.items()):
        for table in sorted(event_counts(ds)):
            names = read_table_files(ds, table)[0].column_names
            dups = sorted({n for n in names if names.count(n) > 1})
            if dups:
                problems.append(f"{name}: {table} has duplicate columns {dups}")
                continue
            try:
                pads.dataset(str(ds / table), format="parquet", partitioning="hive").to_table()
            except Exception as exc:  # noqa: BLE001 - any reader failure is the finding
                problems.append(f"{name}: {table}: pyarrow.dataset cannot read it: {exc}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_trace_clock_is_the_one_trace_cmd_dump_reads(parsed, name):
    """The decoder opens files for their headers only; a v6 file's clock, which libtracecmd
    reads after the CPU table, is read by parsers/layout.py: the runs table names the clock
    `trace-cmd dump --clock` shows in brackets, and "local" where the file saved none."""
    import subprocess

    trace, ds, _report = parsed[name]
    dump = subprocess.run(["trace-cmd", "dump", "--clock", str(trace)], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    saved = re.search(r"\[([\w-]+)\]", dump.split("[Tracing clock]")[-1])
    assert saved or "No tracing clock saved" in dump, dump
    (run,) = [r for t in read_table_files(ds, "runs") for r in t.to_pylist()]
    assert run["trace_clock"] == (saved.group(1) if saved else "local"), (name, dump)


def test_a_v6_clock_after_the_cpu_table_is_read(public_fixtures, tmp_path):
    """A v6 file of an old trace-cmd keeps its clock only after the CPU table: with the
    bracket moved to `global` there, the run says global, as `trace-cmd dump --clock` does."""
    import subprocess

    src = public_fixtures / "lisa_example_rtapp_v6_le_l8_6cpu_bprint.dat"
    data = src.read_bytes()
    assert data.count(b"[local] global") == 1
    trace = tmp_path / "global.dat"
    trace.write_bytes(data.replace(b"[local] global", b"local [global]"))
    dump = subprocess.run(["trace-cmd", "dump", "--clock", str(trace)], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    assert "local [global]" in dump
    ds = tmp_path / "ds"
    kmemscope("parse", "-q", str(trace), "-o", str(ds))
    (run,) = [r for t in read_table_files(ds, "runs") for r in t.to_pylist()]
    assert run["trace_clock"] == "global"
