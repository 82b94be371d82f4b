"""Compare a kmemscope dataset with the trace-cmd report oracle (tests/report_oracle.py).

The dataset is read with pyarrow, file by file and column by position (the oracle decides
which column is which field, from the trace's own formats), so that the comparison does not
depend on kmemscope's dataset views. Rows are compared as multisets of canonical tuples per
event: (cpu, ts, pid, comm, common_flags, common_preempt_count, fields...). Equal timestamps
on one CPU are therefore fine, and so is any row order inside the Parquet files.
"""
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from report_oracle import UNCHECKED, canon_text, canon_value, split_fields

COMMON = ["ts", "cpu", "pid", "comm"]


def read_table_files(dataset, table):
    """Every Parquet file of `table` (all runs), as pyarrow tables, in path order."""
    files = sorted((Path(dataset) / table).glob("run_id=*/*.parquet"))
    return [pq.ParquetFile(f).read() for f in files]


def _run_stacks(run_dir):
    """{stack_id: addresses} of one run's stacks table (its folder beside kernel_stack's)."""
    out = {}
    for f in sorted((run_dir.parent.parent / "stacks" / run_dir.name).glob("*.parquet")):
        t = pq.ParquetFile(f).read()
        for sid, addrs in zip(t.column("stack_id").to_pylist(), t.column("addresses").to_pylist()):
            assert sid not in out, f"stack_id {sid} twice in {run_dir.name}'s stacks"
            out[sid] = addrs
    return out


def table_rows(dataset, table):
    """(column names, list of row tuples) of a table, read positionally. A kernel_stack's
    stack_id is replaced by the addresses of the stacks row it names, as column `caller`
    (the field the trace recorded), so that rows compare with the report's records."""
    names, rows = None, []
    for f in sorted((Path(dataset) / table).glob("run_id=*/*.parquet")):
        t = pq.ParquetFile(f).read()
        cols = [c.to_pylist() for c in t.columns]
        cnames = t.column_names
        if table == "kernel_stack" and "stack_id" in cnames:
            stacks = _run_stacks(f.parent)
            i = cnames.index("stack_id")
            cols[i] = [stacks[sid] for sid in cols[i]]
            cnames = cnames[:i] + ["caller"] + cnames[i + 1:]
        names = names or cnames
        assert cnames == names, f"{table}: files with different columns"
        rows.extend(zip(*cols))
    return names or [], rows


def work_dirs_left(dataset):
    """Hidden entries of a dataset other than its lock file: what a parse left behind."""
    return [p.name for p in Path(dataset).iterdir()
            if p.name.startswith(".") and p.name != ".kmemscope.lock"]


def event_counts(dataset):
    """{table: rows} for every per-event table of a dataset."""
    skip = {"runs", "print_flags", "lost_events", "event_tables", "stacks"}
    out = {}
    for d in sorted(Path(dataset).iterdir()):
        if d.is_dir() and not d.name.startswith(".") and d.name not in skip:
            out[d.name] = sum(pq.ParquetFile(f).metadata.num_rows for f in d.glob("run_id=*/*.parquet"))
    return out


@dataclass
class Comparison:
    compared: Counter = field(default_factory=Counter)       # event -> rows compared
    unchecked: Counter = field(default_factory=Counter)      # (event, field) -> values not comparable
    problems: list = field(default_factory=list)             # human-readable lines

    def fail(self, msg):
        self.problems.append(msg)


def _stack_prefix(canon, n):
    """kernel_stack's `caller` is printed by -R as its declared [8]; compare the first n entries."""
    if canon is UNCHECKED or canon[0] != "bytes":
        return canon
    return ("bytes", canon[1][:n])


def compare_event(dataset, table, fmt, records, result, max_examples=5, check_common=True):
    """Compare one event's table with the oracle's records of it (all of them)."""
    names, rows = table_rows(dataset, table)
    fnames = [f.name for f in fmt.fields]
    # Derived columns may follow the format's fields: `<field>_symbols` (resolved addresses).
    derived = 0
    while names and names[-1 - derived].endswith("_symbols") and \
            names[-1 - derived][:-len("_symbols")] in fnames:
        derived += 1
    if derived:
        names = names[:-derived]
        rows = [r[:-derived] for r in rows]
    own_cols = names[len(names) - len(fnames):] if fnames else []
    # Where the event has fields named like a common column (sched_wakeup's comm
    # and pid), the common column is called common_<name>.
    common_names = [n if n not in fnames else f"common_{n}" for n in COMMON]
    if names[:4] != common_names or own_cols != fnames:
        result.fail(f"{table}: columns {names} do not end with the format's fields {fnames}")
        return
    common_cols = names[4:len(names) - len(fnames)]
    ci = {n: i for i, n in enumerate(names[:len(names) - len(fnames)])}
    want = {"common_flags", "common_preempt_count"} if check_common else set()
    if not want <= set(common_cols):
        result.fail(f"{table}: common columns {common_cols} lack {want - set(common_cols)}")
        return
    is_stack = fmt.name == "kernel_stack" and fnames[:2] == ["size", "caller"]
    off = len(names) - len(fnames)
    declared = next((f.arraylen for f in fmt.fields if f.name == "caller"), 0) if is_stack else 0

    def key_common(cpu, ts, pid, comm, flags, pc):
        return (cpu, ts, pid, comm) + ((flags, pc) if check_common else ())

    oracle = Counter()
    for r in records:
        texts = split_fields(fmt, r.text)
        canon = [canon_text(f, fmt.plans[f.name], texts[f.name]) for f in fmt.fields]
        if is_stack:
            n = max(0, min(int(texts["size"]), declared)) * fmt.fields[1].element_size
            canon[1] = _stack_prefix(canon[1], n)
        for f, c in zip(fmt.fields, canon):
            if c is UNCHECKED:
                result.unchecked[(fmt.name, f.name)] += 1
        oracle[key_common(r.cpu, r.ts, r.pid, r.comm, r.flags, r.preempt) + tuple(canon)] += 1

    mine = Counter()
    for row in rows:
        vals = row[off:]
        canon = [canon_value(f, fmt.plans[f.name], v) for f, v in zip(fmt.fields, vals)]
        if is_stack:
            n = max(0, min(vals[0], declared)) * fmt.fields[1].element_size
            canon[1] = _stack_prefix(canon[1], n)
        flags = row[ci["common_flags"]] if check_common else None
        pc = row[ci["common_preempt_count"]] if check_common else None
        cn = dict(zip(COMMON, common_names))
        mine[key_common(row[ci[cn["cpu"]]], row[ci[cn["ts"]]], row[ci[cn["pid"]]], row[ci[cn["comm"]]],
                        flags, pc)
             + tuple(canon)] += 1

    result.compared[fmt.name] += len(records)
    if oracle == mine:
        return
    only_oracle = sorted((oracle - mine).elements(), key=lambda t: (t[0], t[1]))
    only_mine = sorted((mine - oracle).elements(), key=lambda t: (t[0], t[1]))
    result.fail(f"{table}: {len(only_oracle)} rows of trace-cmd report -R not in the table, "
                f"{len(only_mine)} table rows not in the report (of {len(records)} events)")
    header = ["cpu", "ts", "pid", "comm"] + (["common_flags", "common_preempt_count"] if check_common else [])
    cols = header + fnames
    mine_by_key = defaultdict(list)
    for t in only_mine:
        mine_by_key[(t[0], t[1])].append(t)
    for t in only_oracle[:max_examples]:
        other = mine_by_key.get((t[0], t[1]), [None])[0]
        if other is None:
            result.fail(f"  report: {dict(zip(cols, t))}  (no table row at cpu {t[0]} ts {t[1]})")
            continue
        diffs = {c: (a, b) for c, a, b in zip(cols, t, other) if a != b}
        result.fail(f"  cpu {t[0]} ts {t[1]}: (report, table) differ in {diffs}")
    if not only_oracle:
        for t in only_mine[:max_examples]:
            result.fail(f"  table only: {dict(zip(cols, t))}")


def compare_dataset(dataset, report, events=None, check_common=True, max_examples=5):
    """Compare every event (or those in `events`) of `report` with `dataset`'s tables."""
    result = Comparison()
    by_event = defaultdict(list)
    for r in report.records:
        by_event[r.event].append(r)
    tables = set(event_counts(dataset))
    for name, recs in sorted(by_event.items()):
        if events is not None and name not in events:
            continue
        fmts = report.formats.get(name, [])
        if len(fmts) != 1:
            # Two systems share the name: -R does not say which, so only counts can be compared.
            result.unchecked[(name, "*")] += len(recs)
            continue
        fmt = fmts[0]
        table = name if name in tables else f"{fmt.system}__{name}"
        if table not in tables:
            result.fail(f"{name}: {len(recs)} events in trace-cmd report, no table")
            continue
        compare_event(dataset, table, fmt, recs, result, max_examples=max_examples,
                      check_common=check_common)
    return result
