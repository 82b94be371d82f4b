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
"""
import os
import re

PAGETYPEINFO_CAP = 100000

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
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            if current is not None:
                samples.append(current + ("\n".join(lines),))
            current, lines = (int(m.group(1)), int(m.group(2))), []
        elif current is not None:
            lines.append(line)
    if current is not None:
        samples.append(current + ("\n".join(lines),))
    return samples


def parse_vmstat(body):
    """/proc/vmstat text -> [(name, value)]."""
    rows = []
    for line in body.splitlines():
        parts = line.split()
        if len(parts) == 2 and _is_int(parts[1]):
            rows.append((parts[0], int(parts[1])))
    return rows


def _is_int(token):
    return token.lstrip("-").isdigit()


def _count(token):
    """'123' -> (123, False); '>100000' -> (100000, True); anything else -> None."""
    if token.startswith(">") and token[1:].isdigit():
        return int(token[1:]), True
    if token.isdigit():
        return int(token), False
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
    for line in body.splitlines():
        if line.startswith("Free pages count per migrate type at order"):
            orders = [int(t) for t in line.split("order", 1)[1].split()]
            continue
        if line.startswith("Number of blocks type"):
            block_types = line[len("Number of blocks type"):].split()
            continue
        m = _FREE_ROW.match(line)
        if m and orders is not None:
            counts = [_count(t) for t in m.group(4).split()]
            if len(counts) != len(orders) or None in counts:
                continue  # a line cut short at the end of a killed record
            for order, (count, capped) in zip(orders, counts):
                free.append((int(m.group(1)), m.group(2), m.group(3), order, count, capped))
            continue
        m = _ZONE_ROW.match(line)
        if m and block_types is not None:
            values = m.group(3).split()
            if len(values) != len(block_types) or not all(v.isdigit() for v in values):
                continue
            for name, value in zip(block_types, values):
                blocks.append((int(m.group(1)), m.group(2), name, int(value)))
    return free, blocks


def parse_buddyinfo(body):
    """/proc/buddyinfo text -> [(node, zone, order, count)]; order is the column index."""
    rows = []
    for line in body.splitlines():
        m = _ZONE_ROW.match(line)
        if not m:
            continue
        values = m.group(3).split()
        if not all(v.isdigit() for v in values):
            continue
        for order, value in enumerate(values):
            rows.append((int(m.group(1)), m.group(2), order, int(value)))
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
    for line in body.splitlines():
        m = _ZONE_ROW.match(line)
        if not m:
            continue
        values = [_thousandths(t) for t in m.group(3).split()]
        if not values or None in values:
            continue
        for order, value in enumerate(values):
            rows.append((int(m.group(1)), m.group(2), order, value))
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


# ---------------------------------------------------------------- bundle -> Arrow

def _read_file(bundle_dir, name):
    from kmemscope.parsers.sources import read_procfs_text

    return read_procfs_text(os.path.join(bundle_dir, "procfs", name))


def unheaded(text):
    """True for a sample file with text but no sample header: no sample can be placed in
    time, so none is kept (read_bundle_procfs says so in its notes)."""
    return bool(text.strip()) and not _HEADER.search(text) and not split_samples(text)


# The sampler takes its first and last samples just before tracing starts and after it stops.
SAMPLE_SLACK_NS = 1_000_000_000


def sample_window_notes(tables, first_ts, last_ts):
    """Notes for procfs samples more than a second outside the trace [first_ts, last_ts] (ns)."""
    notes: list = []
    if first_ts is None or last_ts is None:
        return notes
    for name, t in sorted(tables.items()):
        if t.num_rows == 0:
            continue
        times = set(t.column("ts").to_pylist())
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


def read_bundle_procfs(bundle_dir, notes=None):
    """{table: pyarrow.Table} for the procfs tables a bundle has samples for.

    Tables: vmstat, pagetypeinfo_free, pagetypeinfo_blocks, buddyinfo and,
    where debugfs was sampled, extfrag_unusable_index and extfrag_index (see
    docs/dataset-format.md), without run_id: the dataset writer adds the partition.
    `notes` (a list) hears of sample files that are kept out, e.g. text without sample headers.
    """
    import pyarrow as pa

    def table(rows, schema):
        columns: list = list(zip(*rows)) if rows else [[] for _ in schema]
        return pa.table([pa.array(col, type=field.type) for col, field in zip(columns, schema)],
                        schema=schema)

    ts, node, zone = ("ts", pa.int64()), ("node", pa.int32()), ("zone", pa.string())
    out = {}
    notes = [] if notes is None else notes

    def _read(bundle_dir, name):
        text = _read_file(bundle_dir, name)
        if text is not None and unheaded(text):
            notes.append(f"procfs/{name} has no '#kmemscope-sample mono_ns=... realtime_ns=...' "
                         "header before its text, so no sample can be placed in time: it is "
                         "left out (kmemscope record writes one before every sample)")
            return None
        return text

    text = _read(bundle_dir, "vmstat")
    if text is not None:
        out["vmstat"] = table(vmstat_rows(text),
                              pa.schema([ts, ("name", pa.string()), ("value", pa.int64())]))
    text = _read(bundle_dir, "pagetypeinfo")
    if text is not None:
        free, blocks = pagetypeinfo_rows(text)
        out["pagetypeinfo_free"] = table(free, pa.schema([
            ts, node, zone, ("migratetype", pa.string()), ("order", pa.int32()),
            ("count", pa.int64()), ("capped", pa.bool_())]))
        out["pagetypeinfo_blocks"] = table(blocks, pa.schema([
            ts, node, zone, ("migratetype", pa.string()), ("blocks", pa.int64())]))
    text = _read(bundle_dir, "buddyinfo")
    if text is not None:
        out["buddyinfo"] = table(buddyinfo_rows(text), pa.schema([
            ts, node, zone, ("order", pa.int32()), ("count", pa.int64())]))
    out.update(_extfrag_tables(bundle_dir, table, [ts, node, zone, ("order", pa.int32())]))
    return out


# bundle file (capture/sampler.py EXTFRAG_SOURCES) -> (table, value column), both in thousandths
EXTFRAG_TABLES = (("unusable_index", "extfrag_unusable_index", "unusable_index_permille"),
                  ("extfrag_index", "extfrag_index", "fragmentation_index_permille"))


def _extfrag_tables(bundle_dir, table, key_columns):
    import pyarrow as pa

    out = {}
    for source, name, column in EXTFRAG_TABLES:
        text = _read_file(bundle_dir, source)
        if text is not None:
            out[name] = table(extfrag_rows(text), pa.schema(key_columns + [(column, pa.int32())]))
    return out
