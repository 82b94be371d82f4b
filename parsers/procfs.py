"""Parse a bundle's procfs samples (capture/sampler.py) into rows and Arrow tables.

A sample file holds one sample after another, each preceded by

    #kmemscope-sample mono_ns=<CLOCK_MONOTONIC ns> realtime_ns=<ns>

mono_ns becomes `ts`: the trace is recorded on trace-cmd's `mono` clock, so
samples and events share one timeline. The parsers below are pure functions
over text; only read_bundle_procfs touches files and imports pyarrow.

/proc/pagetypeinfo prints a free count of 100000 or more as ">100000" (since
5.4: counting is capped to bound the time spent under the zone lock). Such a
count is returned as 100000 with capped=True: a lower bound, not a value.

The debugfs files /sys/kernel/debug/extfrag/unusable_index and extfrag_index
(sampled when debugfs is mounted) print each zone's index per order as the
kernel's integer in thousandths, formatted "%d.%03d" of (index / 1000,
index % 1000) with C's truncating division. They are read back to that
integer exactly: -1000 (printed "-1.000") is the fragmentation index's "an
allocation of this order would succeed".

A bundle's sample files are read as streams (stream_bundle_procfs): one sample at a
time, its rows handed on in batches, so that memory follows one batch, not the size
the file claims. What one file may keep is bounded (the bounds below): past a bound the
samples before it are kept and a note names the file and the bound; the trace and the
other files are not affected. A number out of the range of its column is an error
naming the file and line.
"""
import array
import os
import re

from kmemscope.parsers.sources import clipped

PAGETYPEINFO_CAP = 100000

# Bounds on one sample file (docs/safety.md). A day of 1 s samples of a 4-node machine's
# pagetypeinfo is about 90 M rows; a real /proc file has a few hundred lines (counters,
# or zone and migratetype lines) and lines of under 200 bytes.
MAX_ROWS = 200_000_000           # rows of one table from one file
MAX_SAMPLE_LINES = 16384         # lines of one sample: counters, zones x migratetypes
MAX_LINE_BYTES = 4096
MAX_SAMPLES = 2_000_000          # samples of one file: 23 days of 1 s samples
BATCH_ROWS = 1 << 17             # rows handed on at a time


class OutOfRange(ValueError):
    """A number that does not fit its column; `index` is its line in the sample's body."""

    def __init__(self, index, token, what):
        super().__init__(f"{what} {clipped(token)} is out of range")
        self.index = index


_INT32 = (-(1 << 31), (1 << 31) - 1, "an int32")
_INT64 = (-(1 << 63), (1 << 63) - 1, "a 64-bit count")
_TIME = (0, (1 << 63) - 1, "a sample header's time (ns)")


def _fit(value, index, token, bounds):
    lo, hi, what = bounds
    if not lo <= value <= hi:
        raise OutOfRange(index, token, f"{what}:")
    return value


# digits of the widest column's largest value (2**63 - 1): a longer number fits no column
_MAX_DIGITS = 19


def _int(token, index, bounds):
    """The number of `token` (ASCII digits, a '-' first allowed) fitted to `bounds`.

    One with more digits than any column holds is out of range before it is converted:
    Python's int() refuses 4300 digits and more with a message that names no file, and the
    text of a /proc copy (parse --procfs-start) comes in whole, not a bounded line at a time."""
    digits = token[1:] if token.startswith("-") else token
    digits = digits.lstrip("0") or "0"
    if len(digits) > _MAX_DIGITS:
        raise OutOfRange(index, token, f"{bounds[2]}:")
    return _fit(-int(digits) if token.startswith("-") else int(digits), index, token, bounds)

_HEADER = re.compile(r"^#kmemscope-sample\s+mono_ns=(\d+)\s+realtime_ns=(\d+)\s*$")
_FREE_ROW = re.compile(r"^Node\s+(\d+),\s*zone\s+(\S+),\s*type\s+(\S+)\s+(.*)$")
_ZONE_ROW = re.compile(r"^Node\s+(\d+),\s*zone\s+(\S+)\s+(.*)$")


def split_samples(text):
    """[(mono_ns, realtime_ns, body)] for each sample in a sample file.

    A last sample cut short (record killed mid-write) keeps its whole lines;
    the parsers skip a partial one.
    """
    samples, current = [], None
    lines: list = []
    for i, line in enumerate(text.splitlines()):
        m = _HEADER.match(line)
        if m:
            if current is not None:
                samples.append(current + ("\n".join(lines),))
            current, lines = (_int(m.group(1), i, _TIME), _int(m.group(2), i, _TIME)), []
        elif current is not None:
            lines.append(line)
    if current is not None:
        samples.append(current + ("\n".join(lines),))
    return samples


def parse_vmstat(body):
    """/proc/vmstat text -> [(name, value)]."""
    rows = []
    for i, line in enumerate(body.splitlines()):
        parts = line.split()
        if len(parts) == 2 and _is_int(parts[1]):
            rows.append((parts[0], _int(parts[1], i, _INT64)))
    return rows


def _digits(token):
    """True for a token of ASCII digits only: str.isdigit() also takes '²' and other digits
    that int() refuses, and a sample's text is decoded from untrusted bytes."""
    return token.isascii() and token.isdigit()


def _is_int(token):
    return _digits(token[1:] if token.startswith("-") else token)


def _count(token):
    """'123' -> ('123', False); '>100000' -> ('100000', True); anything else -> None
    (the digits are converted by _int, which bounds them)."""
    if token.startswith(">") and _digits(token[1:]):
        return token[1:], True
    if _digits(token):
        return token, False
    return None


def parse_pagetypeinfo(body):
    """/proc/pagetypeinfo text -> (free, blocks).

    free:   [(node, zone, migratetype, order, count, capped)]
    blocks: [(node, zone, migratetype, blocks)]
    Orders and migratetype names come from the file's own header lines: both
    differ between kernels (MAX_ORDER, CONFIG_CMA, CONFIG_MEMORY_ISOLATION).
    """
    free, blocks = [], []
    orders, block_types = None, None
    for i, line in enumerate(body.splitlines()):
        if line.startswith("Free pages count per migrate type at order"):
            tokens = line.split("order", 1)[1].split()
            if not all(_digits(t) for t in tokens):
                continue
            orders = [_int(t, i, _INT32) for t in tokens]
            continue
        if line.startswith("Number of blocks type"):
            block_types = line[len("Number of blocks type"):].split()
            continue
        m = _FREE_ROW.match(line)
        if m and orders is not None:
            counts = [_count(t) for t in m.group(4).split()]
            if len(counts) != len(orders) or None in counts:
                continue  # a line cut short at the end of a killed record
            node = _int(m.group(1), i, _INT32)
            for order, (count, capped) in zip(orders, counts):
                free.append((node, m.group(2), m.group(3), order, _int(count, i, _INT64), capped))
            continue
        m = _ZONE_ROW.match(line)
        if m and block_types is not None:
            values = m.group(3).split()
            if len(values) != len(block_types) or not all(_digits(v) for v in values):
                continue
            node = _int(m.group(1), i, _INT32)
            for name, value in zip(block_types, values):
                blocks.append((node, m.group(2), name, _int(value, i, _INT64)))
    return free, blocks


def parse_buddyinfo(body):
    """/proc/buddyinfo text -> [(node, zone, order, count)]; order is the column index."""
    rows = []
    for i, line in enumerate(body.splitlines()):
        m = _ZONE_ROW.match(line)
        if not m:
            continue
        values = m.group(3).split()
        if not all(_digits(v) for v in values):
            continue
        node = _int(m.group(1), i, _INT32)
        for order, value in enumerate(values):
            rows.append((node, m.group(2), order, _int(value, i, _INT64)))
    return rows


# "%d.%03d": a negative remainder prints with its sign inside the width ("-05", "-500")
_THOUSANDTHS = re.compile(r"^(-?\d+)\.(\d{3}|-\d{2,3})$")


def _thousandths(token):
    """'0.903' -> 903, '-1.000' -> -1000, '0.-500' -> -500; anything else -> None.

    The kernel prints index / 1000 and index % 1000 as two C ints, both
    truncated toward zero: a negative index gives a negative remainder, and
    the whole part of -1000 < index < 0 prints as 0. whole * 1000 + remainder
    is the index in every case.
    """
    m = _THOUSANDTHS.match(token)
    if not m:
        return None
    if len(m.group(1).lstrip("-").lstrip("0")) > _MAX_DIGITS:
        return 1 << 63             # beyond every column: refused by _fit, the token shown
    whole, rem = int(m.group(1)), int(m.group(2))
    if (whole > 0 and rem < 0) or (whole < 0 and rem > 0):
        return None                # no C int pair prints like this
    return whole * 1000 + rem


def parse_extfrag(body):
    """debugfs extfrag/unusable_index or extfrag/extfrag_index text -> [(node, zone, order, index)].

    index is the kernel's integer in thousandths (see the module docstring);
    order is the column index, as in /proc/buddyinfo. A line with a token that
    is not an index (a line cut short) is skipped whole.
    """
    rows = []
    for i, line in enumerate(body.splitlines()):
        m = _ZONE_ROW.match(line)
        if not m:
            continue
        tokens = m.group(3).split()
        values = [_thousandths(t) for t in tokens]
        if not values or None in values:
            continue
        node = _int(m.group(1), i, _INT32)
        for order, (value, token) in enumerate(zip(values, tokens)):
            rows.append((node, m.group(2), order, _fit(value, i, token, _INT32)))
    return rows


# ---------------------------------------------------------------- what the counts cost

# "%lu.%02lu" (kernel/sched/psi.c): a bounded decimal, so never inf or nan
_PSI_AVG = re.compile(r"[0-9]{1,9}\.[0-9]{1,9}")
_PSI_KEYS = ("avg10", "avg60", "avg300", "total")
# /proc/stat's cpu columns that cpu_stat keeps, in the kernel's order (fs/proc/stat.c);
# kernels before 2.6.11 print fewer (no steal): the missing ones are NULL
CPU_STAT_COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_CPU_LABEL = re.compile(r"cpu([0-9]*)")
_MTHP_COUNTER = re.compile(r"[a-z0-9_]{1,64}")


def parse_pressure(body):
    """/proc/pressure/memory text -> [(kind, total_us, avg10, avg60, avg300)].

    kind is 'some' or 'full'; total_us the cumulative stall time in microseconds; the
    averages percentages as the kernel printed them. A line with another kind, a key
    missing or a value that is not the kernel's number is skipped.
    """
    rows = []
    for i, line in enumerate(body.splitlines()):
        parts = line.split()
        if not parts or parts[0] not in ("some", "full"):
            continue
        values = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        if not all(k in values for k in _PSI_KEYS) or not _digits(values["total"]) \
                or not all(_PSI_AVG.fullmatch(values[k]) for k in _PSI_KEYS[:3]):
            continue
        rows.append((parts[0], _int(values["total"], i, _INT64),
                     float(values["avg10"]), float(values["avg60"]), float(values["avg300"])))
    return rows


def parse_cpu_stat(body):
    """The cpu lines of /proc/stat -> [(cpu, user, nice, system, idle, iowait, irq, softirq,
    steal)] in clock ticks; cpu is -1 for the aggregate `cpu` line. A line whose values
    are not all counts is skipped."""
    rows = []
    for i, line in enumerate(body.splitlines()):
        parts = line.split()
        m = _CPU_LABEL.fullmatch(parts[0]) if parts else None
        values = parts[1:1 + len(CPU_STAT_COLUMNS)]
        if not m or len(values) < 4 or not all(_digits(v) for v in values):
            continue
        cpu = _int(m.group(1), i, _INT32) if m.group(1) else -1
        counts = [_int(v, i, _INT64) for v in values]
        rows.append((cpu, *counts, *[None] * (len(CPU_STAT_COLUMNS) - len(counts))))
    return rows


def parse_kthreads(body):
    """procfs/kthreads text (lines `PID COMM UTIME STIME[ ns=RUN_NS]`, capture/sampler.py) ->
    [(pid, comm, kind, utime, stime, run_ns)], run_ns None where the line has none (a kernel
    without schedstat, or a bundle sampled before kmemscope read it). A line whose comm names
    none of the threads sampled, or whose numbers are not counts, is skipped."""
    from kmemscope.capture.sampler import kthread_kind

    rows = []
    for i, line in enumerate(body.splitlines()):
        parts = line.split()
        run_ns = None
        if parts and parts[-1].startswith("ns="):
            if not _digits(parts[-1][3:]):
                continue
            run_ns = _int(parts[-1][3:], i, _INT64)
            parts = parts[:-1]
        if len(parts) < 4 or not _digits(parts[0]) or not (_digits(parts[-2])
                                                             and _digits(parts[-1])):
            continue
        comm = " ".join(parts[1:-2])
        kind = kthread_kind(comm)
        if kind is None:
            continue
        rows.append((_int(parts[0], i, _INT32), comm, kind, _int(parts[-2], i, _INT64),
                     _int(parts[-1], i, _INT64), run_ns))
    return rows


def parse_mthp(body):
    """procfs/mthp text (lines `SIZE_KB COUNTER VALUE`, capture/sampler.py) ->
    [(size_kb, counter, value)]. A line that is not three such tokens is skipped."""
    rows = []
    for i, line in enumerate(body.splitlines()):
        parts = line.split()
        if len(parts) != 3 or not _digits(parts[0]) or not _MTHP_COUNTER.fullmatch(parts[1]) \
                or not _is_int(parts[2]):
            continue
        rows.append((_int(parts[0], i, _INT32), parts[1], _int(parts[2], i, _INT64)))
    return rows


# ---------------------------------------------------------------- rows with timestamps

def vmstat_rows(text):
    """Sample file text -> [(ts, name, value)]."""
    return [(ts,) + row for ts, _, body in split_samples(text) for row in parse_vmstat(body)]


def pagetypeinfo_rows(text):
    """Sample file text -> (free rows with ts first, block rows with ts first)."""
    free, blocks = [], []
    for ts, _, body in split_samples(text):
        f, b = parse_pagetypeinfo(body)
        free += [(ts,) + row for row in f]
        blocks += [(ts,) + row for row in b]
    return free, blocks


def buddyinfo_rows(text):
    """Sample file text -> [(ts, node, zone, order, count)]."""
    return [(ts,) + row for ts, _, body in split_samples(text) for row in parse_buddyinfo(body)]


def extfrag_rows(text):
    """Sample file text of an extfrag index -> [(ts, node, zone, order, index)]."""
    return [(ts,) + row for ts, _, body in split_samples(text) for row in parse_extfrag(body)]


# ---------------------------------------------------------------- bundle -> Arrow, streamed

# The sampler takes its first and last samples just before tracing starts and after it stops.
SAMPLE_SLACK_NS = 1_000_000_000


def sample_window_notes(sample_times, first_ts, last_ts):
    """Notes for procfs samples more than a second outside the trace [first_ts, last_ts] (ns).

    sample_times: {table: the ts of its samples} (what stream_bundle_procfs returns)."""
    notes: list[str] = []
    if first_ts is None or last_ts is None:
        return notes
    for name, times in sorted(sample_times.items()):
        if not len(times):
            continue
        before = [x for x in times if x < first_ts - SAMPLE_SLACK_NS]
        after = [x for x in times if x > last_ts + SAMPLE_SLACK_NS]
        if before or after:
            where = []
            if before:
                where.append(f"{(first_ts - min(before)) / 1e9:.1f} s before its first event")
            if after:
                where.append(f"{(max(after) - last_ts) / 1e9:.1f} s after its last")
            notes.append(f"{len(before) + len(after)} of {len(times)} {name} samples lie outside "
                         f"the trace (up to {' and '.join(where)}): counts from the trace cover "
                         "only the samples' overlap with it")
    return notes


def table_schemas():
    """{table: Arrow schema without run_id} of every procfs table (docs/dataset-format.md)."""
    import pyarrow as pa

    ts, node, zone, order = (("ts", pa.int64()), ("node", pa.int32()), ("zone", pa.string()),
                             ("order", pa.int32()))
    return {
        "vmstat": pa.schema([ts, ("name", pa.string()), ("value", pa.int64())]),
        "pagetypeinfo_free": pa.schema([ts, node, zone, ("migratetype", pa.string()), order,
                                        ("count", pa.int64()), ("capped", pa.bool_())]),
        "pagetypeinfo_blocks": pa.schema([ts, node, zone, ("migratetype", pa.string()),
                                          ("blocks", pa.int64())]),
        "buddyinfo": pa.schema([ts, node, zone, order, ("count", pa.int64())]),
        "extfrag_unusable_index": pa.schema([ts, node, zone, order,
                                             ("unusable_index_permille", pa.int32())]),
        "extfrag_index": pa.schema([ts, node, zone, order,
                                    ("fragmentation_index_permille", pa.int32())]),
        "psi_memory": pa.schema([ts, ("kind", pa.string()), ("total_us", pa.int64()),
                                 ("avg10", pa.float64()), ("avg60", pa.float64()),
                                 ("avg300", pa.float64())]),
        "cpu_stat": pa.schema([ts, ("cpu", pa.int32())]
                              + [(c, pa.int64()) for c in CPU_STAT_COLUMNS]
                              + [("ticks_per_s", pa.int32())]),
        "kthread_cpu": pa.schema([ts, ("pid", pa.int32()), ("comm", pa.string()),
                                  ("kind", pa.string()), ("utime", pa.int64()),
                                  ("stime", pa.int64()), ("run_ns", pa.int64()),
                                  ("ticks_per_s", pa.int32())]),
        "mthp_stats": pa.schema([ts, ("size_kb", pa.int32()), ("counter", pa.string()),
                                 ("value", pa.int64())]),
    }


def _pagetypeinfo_tables(body):
    free, blocks = parse_pagetypeinfo(body)
    return {"pagetypeinfo_free": free, "pagetypeinfo_blocks": blocks}


# bundle file (capture/sampler.py) -> its tables' rows of one sample's body, in file order
SOURCES = (
    ("vmstat", lambda body: {"vmstat": parse_vmstat(body)}),
    ("pagetypeinfo", _pagetypeinfo_tables),
    ("buddyinfo", lambda body: {"buddyinfo": parse_buddyinfo(body)}),
    ("unusable_index", lambda body: {"extfrag_unusable_index": parse_extfrag(body)}),
    ("extfrag_index", lambda body: {"extfrag_index": parse_extfrag(body)}),
    ("pressure_memory", lambda body: {"psi_memory": parse_pressure(body)}),
    ("stat", lambda body: {"cpu_stat": parse_cpu_stat(body)}),
    ("kthreads", lambda body: {"kthread_cpu": parse_kthreads(body)}),
    ("mthp", lambda body: {"mthp_stats": parse_mthp(body)}),
)
# tables in clock ticks: each row ends with the run's tick rate (the manifest's clock_ticks_per_s)
TICKED_TABLES = ("cpu_stat", "kthread_cpu")


def _with_ticks(parse, ticks_per_s):
    def parse_ticked(body):
        found = parse(body)
        for table in TICKED_TABLES:
            if table in found:
                found[table] = [row + (ticks_per_s,) for row in found[table]]
        return found
    return parse_ticked


class BoundReached(Exception):
    """A sample file passed one of the bounds: the samples before it are kept."""


class SampleReader:
    """The samples of a sample file, read a line at a time from the binary file `f`:
    iterating gives (mono_ns, realtime_ns, body, line number of the body's first line).
    Text before the first header is skipped (`unheaded_text` tells afterwards whether
    there was some and no header at all). Raises BoundReached past MAX_LINE_BYTES or
    MAX_SAMPLE_LINES."""

    def __init__(self, f, shown, max_bytes=None):
        self.f, self.shown, self.max_bytes = f, shown, max_bytes
        self.headed = self.text_before = False

    @property
    def unheaded_text(self):
        return self.text_before and not self.headed

    def __iter__(self):
        lines: list = []
        current, number, start, size = None, 0, 0, 0
        while raw := self.f.readline(MAX_LINE_BYTES + 1):
            number += 1
            size += len(raw)
            if self.max_bytes is not None and size > self.max_bytes:
                raise BoundReached(f"{self.shown}: grew past {self.max_bytes >> 20} MiB while "
                                   "it was read")
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise BoundReached(f"{self.shown}: line {number} is longer than {MAX_LINE_BYTES} "
                                   "bytes (a /proc line is under 200)")
            line = raw.decode("utf-8", "replace").rstrip("\n")
            m = _HEADER.match(line)
            if m:
                if current is not None:
                    yield current + ("\n".join(lines), start)
                self.headed = True
                # index: the header's own line (stream_sample_file adds no body start to it)
                current, lines, start = (_int(m.group(1), number, _TIME),
                                         _int(m.group(2), number, _TIME)), [], number + 1
            elif current is not None:
                if len(lines) >= MAX_SAMPLE_LINES:
                    raise BoundReached(f"{self.shown}: the sample from line {start - 1} has more "
                                       f"than {MAX_SAMPLE_LINES} lines (a /proc file has a few "
                                       "hundred counters or zone lines)")
                lines.append(line)
            elif line.strip():
                self.text_before = True
        if current is not None:
            yield current + ("\n".join(lines), start)


class _Batches:
    """Rows of one table gathered into Arrow record batches of BATCH_ROWS for `sink`."""

    def __init__(self, table, schema, sink):
        self.table, self.schema, self.sink = table, schema, sink
        self.pending, self.rows = [], 0

    def add(self, rows):
        self.pending += rows
        self.rows += len(rows)
        if len(self.pending) >= BATCH_ROWS:
            self.flush()

    def flush(self, last=False):
        import pyarrow as pa

        if not self.pending and not (last and self.rows == 0):
            return
        columns: list = list(zip(*self.pending)) if self.pending else [[] for _ in self.schema]
        self.sink(self.table, pa.record_batch(
            [pa.array(col, type=field.type) for col, field in zip(columns, self.schema)],
            schema=self.schema))
        self.pending = []


def stream_sample_file(f, shown, parse, schemas, sink, notes, source=None):
    """Parse the sample file `f` (binary, read a line at a time) into batches for `sink`;
    returns {table: [ts of its samples]}. `parse(body)` -> {table: rows}. Errors name the
    file as `source: shown`."""
    from kmemscope.common.errors import TraceFileError
    from kmemscope.parsers.sources import PROCFS_MAX_BYTES

    out = {t: _Batches(t, schemas[t], sink) for t in parse("")}
    times, samples = array.array("q"), 0
    reader = SampleReader(f, shown, PROCFS_MAX_BYTES)
    try:
        for ts, _realtime, body, start in reader:
            try:
                found = parse(body)
            except OutOfRange as exc:
                exc.index += start            # the body's line -> the file's
                raise
            if any(b.rows + len(found[t]) > MAX_ROWS for t, b in out.items()):
                raise BoundReached(f"{shown}: more than {MAX_ROWS:,} rows")
            if samples >= MAX_SAMPLES:
                raise BoundReached(f"{shown}: more than {MAX_SAMPLES:,} samples")
            for table, rows in found.items():
                out[table].add([(ts,) + r for r in rows])
            times.append(ts)
            samples += 1
    except OutOfRange as exc:
        raise TraceFileError(f"{source + ': ' if source else ''}{shown}: line {exc.index}: {exc}",
                             "the file is not a /proc file as the kernel prints it") from None
    except BoundReached as exc:
        notes.append(f"{exc}: the {samples:,} samples before it are kept, the rest of the file "
                     "is left out")
    else:
        if reader.unheaded_text:
            notes.append(f"{shown} has no '#kmemscope-sample mono_ns=... realtime_ns=...' "
                         "header before its text, so no sample can be placed in time: it is "
                         "left out (kmemscope record writes one before every sample)")
            return {}
    for b in out.values():
        b.flush(last=True)
    return {t: times for t in out}


def stream_bundle_procfs(bundle_dir, sink, notes=None, source=None, ticks_per_s=None):
    """Stream a bundle's procfs samples to `sink(table, record_batch)` (`bundle_dir`: the
    bundle's folder, or {name: sample file bytes}); returns {table: the ts of its samples}
    for the tables it has sample files for (every such table gets at least one
    batch, maybe of no rows).

    Tables: vmstat, pagetypeinfo_free, pagetypeinfo_blocks, buddyinfo and, where debugfs
    was sampled, extfrag_unusable_index and extfrag_index; where the kernel had them,
    psi_memory, cpu_stat, kthread_cpu and mthp_stats (docs/dataset-format.md), without
    run_id: the dataset writer adds the partition. `notes` (a list) hears of sample files
    kept out or cut at a bound; `source` (the input's name) opens the errors;
    `ticks_per_s` (the manifest's clock_ticks_per_s, or None) goes into the tables
    counted in clock ticks.
    """
    import io

    from kmemscope.parsers.sources import open_procfs_file

    schemas = table_schemas()
    notes = [] if notes is None else notes
    times = {}
    for name, parse in SOURCES:
        if isinstance(bundle_dir, dict):        # sample files made in memory (parsers/snapshots.py)
            f = io.BytesIO(bundle_dir[name]) if name in bundle_dir else None
        else:
            f = open_procfs_file(os.path.join(bundle_dir, "procfs", name))
        if f is None:
            continue
        with f:
            times.update(stream_sample_file(f, f"procfs/{name}", _with_ticks(parse, ticks_per_s),
                                            schemas, sink, notes, source))
    return times


def read_bundle_procfs(bundle_dir, notes=None, ticks_per_s=None):
    """{table: pyarrow.Table} of a bundle's procfs samples (stream_bundle_procfs, gathered)."""
    import pyarrow as pa

    batches: dict = {}
    stream_bundle_procfs(bundle_dir, lambda t, b: batches.setdefault(t, []).append(b), notes,
                         ticks_per_s=ticks_per_s)
    schemas = table_schemas()
    return {t: pa.Table.from_batches(bs, schema=schemas[t]) for t, bs in batches.items()}
