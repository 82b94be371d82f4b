"""Write small datasets in the kmemscope contract layout from plain Python rows.

DATASET/<table>/run_id=<id>/part-0.parquet, without run_id in the file (it comes
from the Hive partition), column types as the parser writes them (docs/dataset-format.md).
Used for synthetic datasets only: kernels this machine cannot run (5.10, 6.1)
and edge cases no real capture produces on demand. Each test that uses it says so.
"""
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

FAILED_PFN = 2 ** 64 - 1

COMMON = [("ts", pa.int64()), ("cpu", pa.int32()), ("pid", pa.int32()),
          ("comm", pa.dictionary(pa.int32(), pa.string())),
          ("common_flags", pa.uint8()), ("common_preempt_count", pa.uint8())]


def _gfp_type(kernel):
    # gfp_flags is gfp_t (4 bytes) up to 5.15 and unsigned long from 5.19 (section 1).
    major, minor = (int(x) for x in kernel.split(".")[:2])
    return pa.uint32() if (major, minor) <= (5, 15) else pa.uint64()


def event_schema(table, kernel="6.18.44"):
    fields = {
        "mm_page_alloc": [("pfn", pa.uint64()), ("order", pa.uint32()),
                          ("gfp_flags", _gfp_type(kernel)), ("migratetype", pa.int32())],
        "mm_page_free": [("pfn", pa.uint64()), ("order", pa.uint32())],
        "mm_page_alloc_extfrag": [("pfn", pa.uint64()), ("alloc_order", pa.int32()),
                                  ("fallback_order", pa.int32()), ("alloc_migratetype", pa.int32()),
                                  ("fallback_migratetype", pa.int32()),
                                  ("change_ownership", pa.int32())],
        "mm_page_alloc_zone_locked": [("pfn", pa.uint64()), ("order", pa.uint32()),
                                      ("migratetype", pa.int32())]
        + ([("percpu_refill", pa.int32())] if _newer(kernel, (5, 19)) else []),
        "mm_page_pcpu_drain": [("pfn", pa.uint64()), ("order", pa.uint32()),
                               ("migratetype", pa.int32())],
        "mm_compaction_begin": [("zone_start", pa.uint64()), ("migrate_pfn", pa.uint64()),
                                ("free_pfn", pa.uint64()), ("zone_end", pa.uint64()),
                                ("sync", pa.uint8())],
        "mm_compaction_end": [("zone_start", pa.uint64()), ("migrate_pfn", pa.uint64()),
                              ("free_pfn", pa.uint64()), ("zone_end", pa.uint64()),
                              ("sync", pa.uint8()), ("status", pa.int32())],
        "mm_compaction_try_to_compact_pages": [("order", pa.int32()), ("gfp_mask", _gfp_type(kernel)),
                                               ("prio", pa.int32())],
        "mm_compaction_suitable": _zone_result(),
        "mm_compaction_finished": _zone_result(),
        "mm_compaction_deferred": _defer(),
        "mm_compaction_defer_compaction": _defer(),
        "mm_compaction_defer_reset": _defer(),
        "mm_compaction_kcompactd_wake": [("nid", pa.int32()), ("order", pa.int32()),
                                         ("highest_zoneidx", pa.uint32())],
        "mm_compaction_wakeup_kcompactd": [("nid", pa.int32()), ("order", pa.int32()),
                                           ("highest_zoneidx", pa.uint32())],
        "mm_vmscan_wakeup_kswapd": [("nid", pa.int32()), ("zid", pa.int32()), ("order", pa.int32()),
                                    ("gfp_flags", _gfp_type(kernel))],
        "mm_vmscan_kswapd_wake": [("nid", pa.int32()), ("zid", pa.int32()), ("order", pa.int32())],
        "mm_vmscan_direct_reclaim_begin": [("order", pa.int32()), ("gfp_flags", _gfp_type(kernel))],
        "mm_vmscan_direct_reclaim_end": [("nr_reclaimed", pa.uint64())],
    }[table]
    return pa.schema(COMMON + fields)


def _defer():
    return [("nid", pa.int32()), ("idx", pa.uint32()), ("order", pa.int32()),
            ("considered", pa.uint32()), ("defer_shift", pa.uint32()), ("order_failed", pa.int32())]


def _zone_result():
    return [("nid", pa.int32()), ("idx", pa.uint32()), ("order", pa.int32()), ("ret", pa.int32())]


def _newer(kernel, version):
    major, minor = (int(x) for x in kernel.split(".")[:2])
    return (major, minor) >= version


OTHER_SCHEMAS = {
    "print_flags": pa.schema([("event", pa.string()), ("field", pa.string()), ("kind", pa.string()),
                              ("value", pa.uint64()), ("name", pa.string())]),
    "lost_events": pa.schema([("cpu", pa.int32()), ("ts", pa.int64()), ("missed", pa.int64())]),
    "vmstat": pa.schema([("ts", pa.int64()), ("name", pa.string()), ("value", pa.int64())]),
    "pagetypeinfo_blocks": pa.schema([("ts", pa.int64()), ("node", pa.int32()), ("zone", pa.string()),
                                      ("migratetype", pa.string()), ("blocks", pa.int64())]),
    "pagetypeinfo_free": pa.schema([("ts", pa.int64()), ("node", pa.int32()), ("zone", pa.string()),
                                    ("migratetype", pa.string()), ("order", pa.int32()),
                                    ("count", pa.int64())]),
    "buddyinfo": pa.schema([("ts", pa.int64()), ("node", pa.int32()), ("zone", pa.string()),
                            ("order", pa.int32()), ("count", pa.int64())]),
}

RUNS_SCHEMA = pa.schema([
    ("host", pa.string()), ("kernel_release", pa.string()), ("kernel_version", pa.string()),
    ("arch", pa.string()), ("cpus", pa.int32()), ("trace_clock", pa.string()),
    ("first_ts", pa.int64()), ("last_ts", pa.int64()), ("source_file", pa.string()),
    ("sha256", pa.string()), ("file_version", pa.int32()), ("compression", pa.string()),
    ("labels", pa.map_(pa.string(), pa.string())), ("manifest", pa.string()),
    ("pageblock_order", pa.int32()),
])

# Single-bit gfp names by kernel (KERNEL-ERAS.md section 2). Composites come
# first in a real table; two are included so tests prove they are ignored.
GFP_BITS = {
    "6.18": {"__GFP_DMA": 0x1, "__GFP_HIGHMEM": 0x2, "__GFP_DMA32": 0x4, "__GFP_MOVABLE": 0x8,
             "__GFP_RECLAIMABLE": 0x10, "__GFP_HIGH": 0x20, "__GFP_IO": 0x40, "__GFP_FS": 0x80,
             "__GFP_ZERO": 0x100, "__GFP_DIRECT_RECLAIM": 0x400, "__GFP_KSWAPD_RECLAIM": 0x800,
             "__GFP_NOWARN": 0x2000, "__GFP_NORETRY": 0x10000, "__GFP_COMP": 0x40000,
             "__GFP_NOMEMALLOC": 0x80000, "__GFP_HARDWALL": 0x100000, "__GFP_ACCOUNT": 0x400000},
    "6.1": {"__GFP_DMA": 0x1, "__GFP_HIGHMEM": 0x2, "__GFP_DMA32": 0x4, "__GFP_MOVABLE": 0x8,
            "__GFP_RECLAIMABLE": 0x10, "__GFP_HIGH": 0x20, "__GFP_IO": 0x40, "__GFP_FS": 0x80,
            "__GFP_ZERO": 0x100, "__GFP_ATOMIC": 0x200, "__GFP_DIRECT_RECLAIM": 0x400,
            "__GFP_KSWAPD_RECLAIM": 0x800, "__GFP_NOWARN": 0x2000, "__GFP_COMP": 0x40000,
            "__GFP_NOMEMALLOC": 0x80000, "__GFP_ACCOUNT": 0x400000},
    "5.10": {"__GFP_DMA": 0x1, "__GFP_HIGH": 0x20, "__GFP_IO": 0x40, "__GFP_FS": 0x80,
             "__GFP_ZERO": 0x100, "__GFP_ATOMIC": 0x200, "__GFP_DIRECT_RECLAIM": 0x400,
             "__GFP_KSWAPD_RECLAIM": 0x800, "__GFP_NOWARN": 0x2000, "__GFP_COMP": 0x40000,
             "__GFP_NOMEMALLOC": 0x80000},
    "4.19": {"__GFP_DMA": 0x1, "__GFP_HIGH": 0x20, "__GFP_IO": 0x40, "__GFP_FS": 0x80,
             "__GFP_NOWARN": 0x200, "__GFP_COMP": 0x4000, "__GFP_ZERO": 0x8000,
             "__GFP_NOMEMALLOC": 0x10000, "__GFP_ATOMIC": 0x80000,
             "__GFP_DIRECT_RECLAIM": 0x200000, "__GFP_KSWAPD_RECLAIM": 0x400000},
}


def gfp(era, *names):
    bits = GFP_BITS[era]
    value = 0
    for n in names:
        value |= bits[n]
    return value


def gfp_print_flags(era, events=("mm_page_alloc",)):
    bits = GFP_BITS[era]
    rows = []
    for ev in events:
        field = "gfp_mask" if ev == "mm_compaction_try_to_compact_pages" else "gfp_flags"
        atomic = bits["__GFP_HIGH"] | bits.get("__GFP_ATOMIC", 0) | bits["__GFP_KSWAPD_RECLAIM"]
        rows.append(dict(event=ev, field=field, kind="flags", value=atomic, name="GFP_ATOMIC"))
        rows.append(dict(event=ev, field=field, kind="flags", value=bits["__GFP_DMA"], name="GFP_DMA"))
        for name, value in bits.items():
            rows.append(dict(event=ev, field=field, kind="flags", value=value, name=name))
    return rows


def compaction_status_flags():
    names = ["not_suitable_zone", "skipped", "deferred", "no_suitable_page", "continue",
             "complete", "partial_skipped", "contended", "success"]
    return [dict(event="mm_compaction_end", field="status", kind="symbolic", value=i, name=n)
            for i, n in enumerate(names)]


def write_rows(root, table, run_id, rows, schema):
    part = Path(root) / table / f"run_id={run_id}"
    part.mkdir(parents=True, exist_ok=True)
    cols = {f.name: [r.get(f.name) for r in rows] for f in schema}
    if "comm" in cols:
        cols["comm"] = [c if c is not None else "task" for c in cols["comm"]]
    for name in ("common_flags", "common_preempt_count"):
        if name in cols:
            cols[name] = [c or 0 for c in cols[name]]
    for name in ("cpu", "pid"):
        if name in cols:
            cols[name] = [c or 0 for c in cols[name]]
    pq.write_table(pa.table(cols, schema=schema), part / "part-0.parquet")


def write_events(root, table, run_id, rows, kernel="6.18.44"):
    write_rows(root, table, run_id, rows, event_schema(table, kernel))


def write_run(root, run_id, kernel="6.18.44", first_ts=0, last_ts=10 ** 9, labels=None,
              manifest=None, pageblock_order=9, arch="x86_64", host="synthetic"):
    row = dict(host=host, kernel_release=kernel, kernel_version="#1 SMP", arch=arch, cpus=2,
               trace_clock="mono", first_ts=first_ts, last_ts=last_ts, source_file="synthetic",
               sha256="0" * 64, file_version=7, compression="none",
               labels=list((labels or {}).items()),
               manifest=json.dumps(manifest) if manifest is not None else None,
               pageblock_order=pageblock_order)
    write_rows(root, "runs", run_id, [row], RUNS_SCHEMA)


def write_other(root, table, run_id, rows):
    write_rows(root, table, run_id, rows, OTHER_SCHEMAS[table])


def run_rows(ds, table, run, columns):
    """Every row of `table` for `run` as dicts, straight from its Parquet files (a recount's
    input that no kmemscope reader touches)."""
    out = []
    for f in sorted((Path(ds) / table / f"run_id={run}").glob("*.parquet")):
        out += pq.read_table(f, columns=columns).to_pylist()
    return out
