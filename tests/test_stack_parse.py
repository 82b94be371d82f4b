"""Stack-heavy traces: a kernel stack after every page allocation, parsed at full speed.

The decoder interns stacks: each distinct stack of a run is one row of its `stacks`
table (stack_id, frames, addresses), symbolised once, and each kernel_stack row carries
only its stack_id. These tests take a real recording made here (kmemscope record's
atomic-origins preset with mm_page_alloc unfiltered, around a page-churning workload)
and check every kernel_stack row, joined to the stacks row its id names, against
`trace-cmd report -t` text, read in plain Python below: the addresses, and the function
each one resolves to, record by record. The recording repeats a few hundred distinct
stacks hundreds of thousands of times; one decoder thread and two (sharing one stack
table, different segments each) must give the same stacks for the same records.
"""
import contextlib
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import _hold_tracing_lock
from kmrun import kmemscope

CHURN = Path(__file__).resolve().parent.parent / "benchmarks" / "workload_churn.py"

_LINE = re.compile(r"^\s*.*-\d+\s+\[(?P<cpu>\d+)\]\s+(?P<ts>\d+\.\d+):\s+(?P<event>\w+):")
_FRAME = re.compile(r"^=> (?P<fn>\S+) \((?P<addr>[0-9a-f]+)\)$")


@pytest.fixture(scope="module")
def stack_heavy(live_tracefs, tmp_path_factory):
    """A bundle with a kernel stack on every allocation, parsed with one and two threads."""
    d = tmp_path_factory.mktemp("stacks")
    bundle = d / "bundle"
    with contextlib.contextmanager(_hold_tracing_lock)():
        kmemscope("record", "-o", bundle, "--preset", "atomic-origins", "-e", "kmem:mm_page_alloc",
                  "--buffer-kb", "32768", "--", sys.executable, CHURN, "0.5")
    out = {}
    for threads in (1, 2):
        out[threads] = d / f"ds{threads}"
        kmemscope("parse", "-q", "--threads", threads, bundle, "-o", out[threads])
    return bundle / "trace.dat", out


def report_stacks(trace_dat):
    """Every kernel_stack record of `trace-cmd report -t`: (cpu, ts ns, addresses, functions)."""
    text = subprocess.run(["trace-cmd", "report", "-t", "-i", str(trace_dat)],
                          capture_output=True, text=True, check=True).stdout
    stacks, current = [], None
    for line in text.splitlines():
        m = _FRAME.match(line)
        if m and current is not None:
            current[2].append(int(m.group("addr"), 16))
            current[3].append(m.group("fn"))
            continue
        if current is not None:
            stacks.append((current[0], current[1], tuple(current[2]), tuple(current[3])))
            current = None
        m = _LINE.match(line)
        if m and m.group("event") == "kernel_stack":
            current = (int(m.group("cpu")), int(m.group("ts").replace(".", "")), [], [])
    if current is not None:
        stacks.append((current[0], current[1], tuple(current[2]), tuple(current[3])))
    return stacks


def dataset_stacks(ds):
    """(cpu, ts, addresses, frames, size) per kernel_stack row, its stack looked up by id."""
    import duckdb

    rows = duckdb.sql(f"SELECT k.cpu, k.ts, s.addresses, s.frames, k.size FROM "
                      f"read_parquet('{ds}/kernel_stack/*/*.parquet') AS k "
                      f"LEFT JOIN read_parquet('{ds}/stacks/*/*.parquet') AS s "
                      f"ON s.stack_id = k.stack_id").fetchall()
    return rows


def stacks_rows(ds):
    import duckdb

    return duckdb.sql(f"SELECT stack_id, addresses, frames FROM "
                      f"read_parquet('{ds}/stacks/*/*.parquet') ORDER BY stack_id").fetchall()


def functions(symbols):
    """'function+0xoffset' -> 'function'."""
    return tuple(re.sub(r"\+0x[0-9a-f]+$", "", s) for s in symbols)


def test_every_stack_row_matches_trace_cmd_report(stack_heavy):
    trace, ds = stack_heavy
    expected = report_stacks(trace)
    rows = dataset_stacks(ds[2])
    assert len(rows) > 50_000, "the workload should allocate (and record a stack) far more often"
    assert len(rows) == len(expected)
    got = Counter((cpu, ts, tuple(caller), functions(symbols)) for cpu, ts, caller, symbols, _ in rows)
    assert got == Counter(expected)
    # Every frame is resolved, and the offsets put it inside the function at that address.
    for _, _, caller, symbols, size in rows[:2000]:
        assert len(caller) == len(symbols) == size
        assert all(re.fullmatch(r"\S+\+0x[0-9a-f]+", s) for s in symbols), symbols
    # Nearly every row repeats a stack met before: one stacks row serves all of them.
    distinct = {tuple(caller) for _, _, caller, _, _ in rows}
    assert len(distinct) * 20 < len(rows), (len(distinct), len(rows))


def _decoded_stacks(t, event_ids=None):
    """The stacks table's (addresses, frames) rows of an in-process decode of TraceFile t."""
    import threading

    rows, lock = [], threading.Lock()

    def sink(table, batch):
        if table == "stacks":
            with lock:
                rows.extend(zip(batch.column("addresses").to_pylist(),
                                batch.column("frames").to_pylist()))
    t.decode(lambda i: sink, event_ids=event_ids, threads=2)
    return sorted(rows)


def test_kallsyms_is_parsed_only_when_a_stack_needs_a_symbol(stack_heavy):
    """The open keeps the file's kallsyms text (layout.read_metadata reads it), which the
    module parses at the first stack's first symbol (parsers/native/kallsyms.h): a decode with no stack never
    pays for it; frames against `trace-cmd report` are checked above."""
    from kmemscope.parsers import _tracedat, layout
    from kmemscope.parsers.tracedat import TraceFile, TraceFileError

    trace, _ = stack_heavy
    plain = TraceFile(trace)
    assert plain.native._kallsyms_waiting()
    no_stacks = {i for i, t in plain.tables.items() if t.event == "mm_page_alloc"}
    assert _decoded_stacks(plain, event_ids=no_stacks) == []
    assert plain.native._kallsyms_waiting()

    lazy_trace = TraceFile(trace)
    lazy = _decoded_stacks(lazy_trace)
    assert not lazy_trace.native._kallsyms_waiting()
    assert len(lazy) > 20 and all(re.fullmatch(r"\S+\+0x[0-9a-f]+", f) for _, fs in lazy for f in fs)

    # The open keeps a copy of the text (its first counted allocation after the chunk
    # tables' walk): without it, no open.
    _tracedat._alloc_fault(-1)
    layout.read_layout(str(trace), _tracedat.decompress)
    _tracedat._alloc_fault(_tracedat._alloc_fault(0) + 1)
    try:
        with pytest.raises(TraceFileError, match="out of memory reading the file's metadata"):
            TraceFile(trace)
    finally:
        _tracedat._alloc_fault(0)


@pytest.mark.parametrize("threads", [1, 2])
def test_stacks_table_holds_each_distinct_stack_once(stack_heavy, threads):
    """stack_id is 1..n, one row per distinct stack of the report, and every kernel_stack
    row names one of them (its frames checked above)."""
    import duckdb

    trace, ds = stack_heavy
    table = stacks_rows(ds[threads])
    assert [r[0] for r in table] == list(range(1, len(table) + 1))
    expected = {(addrs, fns) for _, _, addrs, fns in report_stacks(trace)}
    assert sorted((tuple(a), functions(f)) for _, a, f in table) == sorted(expected)
    orphans = duckdb.sql(f"SELECT count(*) FROM read_parquet('{ds[threads]}/kernel_stack/*/*.parquet') "
                         f"WHERE stack_id IS NULL OR stack_id NOT BETWEEN 1 AND {len(table)}"
                         ).fetchall()[0][0]
    assert orphans == 0


def test_one_and_two_decoder_threads_give_the_same_stack_table(stack_heavy):
    _, ds = stack_heavy
    one = Counter((cpu, ts, tuple(c), tuple(s)) for cpu, ts, c, s, _ in dataset_stacks(ds[1]))
    two = Counter((cpu, ts, tuple(c), tuple(s)) for cpu, ts, c, s, _ in dataset_stacks(ds[2]))
    assert one == two


def test_stack_tables_schema(stack_heavy):
    """kernel_stack: the event's columns with stack_id for caller; stacks: the interned rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _, ds = stack_heavy
    for part in sorted(Path(ds[2], "kernel_stack").glob("*/*.parquet")):
        schema = pq.ParquetFile(part).schema_arrow
        assert schema.field("stack_id").type == pa.int32()
        assert {"ts", "cpu", "pid", "comm", "size"} <= set(schema.names)
        assert "caller" not in schema.names and "caller_symbols" not in schema.names
    for part in sorted(Path(ds[2], "stacks").glob("*/*.parquet")):
        schema = pq.ParquetFile(part).schema_arrow
        assert schema.names == ["stack_id", "frames", "addresses"]
        assert schema.field("stack_id").type == pa.int32()
        assert schema.field("frames").type.value_type == pa.string()
        assert schema.field("addresses").type.value_type == pa.uint64()


def old_shape_copy(ds, out):
    """A copy of dataset `ds` as kmemscope parsed stacks before they were interned: each
    kernel_stack row holds its stack (caller, caller_symbols, from the stacks row its id
    names), no stacks table, and no recorded digests (such a run predates them too)."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.copytree(ds, out)
    shutil.rmtree(out / "stacks")
    for digests in out.glob("runs/run_id=*/_files.json"):
        digests.unlink()
    shutil.rmtree(out / "_derived", ignore_errors=True)
    for part in sorted(out.glob("kernel_stack/run_id=*/*.parquet")):
        rows = {r["stack_id"]: r for f in (ds / "stacks" / part.parent.name).glob("*.parquet")
                for r in pq.read_table(f).to_pylist()}
        t = pq.read_table(part)
        ids = t.column("stack_id").to_pylist()
        t = t.drop_columns(["stack_id"])
        t = t.append_column("caller", pa.array([rows[i]["addresses"] for i in ids],
                                               pa.list_(pa.uint64())))
        t = t.append_column("caller_symbols", pa.array([rows[i]["frames"] for i in ids],
                                                       pa.list_(pa.string())))
        pq.write_table(t, part)


def test_a_dataset_parsed_before_stacks_were_interned_answers_alike(stack_heavy, tmp_path):
    """Every alloc_origins section gives the same rows over the dataset and over its copy in
    the older shape (kernel_stack with caller and caller_symbols, no stacks table)."""
    from kmemscope.queries import runner

    _, ds = stack_heavy
    old = tmp_path / "old"
    old_shape_copy(ds[2], old)
    assert not (old / "stacks").exists()
    # (outstanding needs mm_page_free, which this recording has not)
    for section in ("alloc_origins.stacks", "alloc_origins.callsites", "alloc_origins.subsystems",
                    "alloc_origins.folded", "alloc_origins.pairing"):
        new_rows = runner.run_query(section, ds[2]).to_pylist()
        old_rows = runner.run_query(section, old).to_pylist()
        assert new_rows == old_rows, section
        assert new_rows, section
