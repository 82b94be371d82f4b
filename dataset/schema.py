"""The columns kmemscope's analyses read, with their types (DuckDB type names).

One home for both engines: the DuckDB backend gives a run that lacks a column
(an older kernel's format) a NULL of this type, and a dataset that lacks a
table an empty view with these columns; the Spark backend maps the same names
to Spark types (queries/engines/spark_sql.py `spark_type`).
"""

_EVENT = {"ts": "BIGINT", "cpu": "INTEGER", "pid": "INTEGER", "comm": "VARCHAR"}
TABLE_COLUMNS = {
    "mm_page_alloc": {**_EVENT, "pfn": "UBIGINT", "order": "UINTEGER",
                      "gfp_flags": "UBIGINT", "migratetype": "INTEGER"},
    "mm_page_free": {**_EVENT, "pfn": "UBIGINT", "order": "UINTEGER"},
    "mm_page_alloc_extfrag": {**_EVENT, "pfn": "UBIGINT", "alloc_order": "INTEGER",
                              "fallback_order": "INTEGER", "alloc_migratetype": "INTEGER",
                              "fallback_migratetype": "INTEGER", "change_ownership": "INTEGER"},
    "mm_page_alloc_zone_locked": {**_EVENT, "pfn": "UBIGINT", "order": "UINTEGER",
                                  "migratetype": "INTEGER", "percpu_refill": "INTEGER"},
    "mm_page_pcpu_drain": {**_EVENT, "pfn": "UBIGINT", "order": "UINTEGER", "migratetype": "INTEGER"},
    "mm_compaction_begin": {**_EVENT, "zone_start": "UBIGINT", "migrate_pfn": "UBIGINT",
                            "free_pfn": "UBIGINT", "zone_end": "UBIGINT", "sync": "UTINYINT"},
    "mm_compaction_end": {**_EVENT, "zone_start": "UBIGINT", "migrate_pfn": "UBIGINT",
                          "free_pfn": "UBIGINT", "zone_end": "UBIGINT", "sync": "UTINYINT",
                          "status": "INTEGER"},
    "mm_compaction_try_to_compact_pages": {**_EVENT, "order": "INTEGER", "gfp_mask": "UBIGINT",
                                           "prio": "INTEGER"},
    "mm_compaction_deferred": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER", "order": "INTEGER",
                               "considered": "UINTEGER", "defer_shift": "UINTEGER",
                               "order_failed": "INTEGER"},
    "mm_compaction_defer_compaction": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER",
                                       "order": "INTEGER", "considered": "UINTEGER",
                                       "defer_shift": "UINTEGER", "order_failed": "INTEGER"},
    "mm_compaction_defer_reset": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER", "order": "INTEGER",
                                  "considered": "UINTEGER", "defer_shift": "UINTEGER",
                                  "order_failed": "INTEGER"},
    "mm_compaction_finished": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER", "order": "INTEGER",
                               "ret": "INTEGER"},
    "mm_compaction_suitable": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER", "order": "INTEGER",
                               "ret": "INTEGER"},
    "mm_compaction_kcompactd_wake": {**_EVENT, "nid": "INTEGER", "order": "INTEGER",
                                     "highest_zoneidx": "UINTEGER"},
    "mm_compaction_wakeup_kcompactd": {**_EVENT, "nid": "INTEGER", "order": "INTEGER",
                                       "highest_zoneidx": "UINTEGER"},
    "mm_vmscan_wakeup_kswapd": {**_EVENT, "nid": "INTEGER", "zid": "INTEGER", "order": "INTEGER",
                                "gfp_flags": "UBIGINT"},
    "mm_vmscan_kswapd_wake": {**_EVENT, "nid": "INTEGER", "zid": "INTEGER", "order": "INTEGER"},
    "mm_vmscan_kswapd_sleep": {**_EVENT, "nid": "INTEGER"},
    "mm_vmscan_direct_reclaim_begin": {**_EVENT, "order": "INTEGER", "gfp_flags": "UBIGINT"},
    "mm_vmscan_direct_reclaim_end": {**_EVENT, "nr_reclaimed": "UBIGINT"},
    # The trace's own counts of what vmstat's compact_*_scanned, pgscan_* and pgsteal_* count
    # (queries/vmstat_trace.sql); `unsigned long` fields, 4 bytes on 32-bit kernels.
    "mm_compaction_isolate_migratepages": {**_EVENT, "start_pfn": "UBIGINT", "end_pfn": "UBIGINT",
                                           "nr_scanned": "UBIGINT", "nr_taken": "UBIGINT"},
    "mm_compaction_isolate_freepages": {**_EVENT, "start_pfn": "UBIGINT", "end_pfn": "UBIGINT",
                                        "nr_scanned": "UBIGINT", "nr_taken": "UBIGINT"},
    "mm_compaction_fast_isolate_freepages": {**_EVENT, "start_pfn": "UBIGINT",
                                             "end_pfn": "UBIGINT", "nr_scanned": "UBIGINT",
                                             "nr_taken": "UBIGINT"},
    "mm_vmscan_lru_shrink_inactive": {**_EVENT, "nid": "INTEGER", "nr_scanned": "UBIGINT",
                                      "nr_reclaimed": "UBIGINT"},
    "mm_vmscan_memcg_reclaim_begin": {**_EVENT, "order": "INTEGER", "gfp_flags": "UBIGINT"},
    "mm_vmscan_memcg_reclaim_end": {**_EVENT, "nr_reclaimed": "UBIGINT"},
    # A recording with kernel stacks (trace-cmd -T): each kernel_stack record names its stack
    # in the run's stacks table, one row per distinct stack (dataset-format.md, "Kernel stacks").
    "kernel_stack": {**_EVENT, "size": "INTEGER", "stack_id": "INTEGER"},
    "stacks": {"stack_id": "INTEGER", "frames": "VARCHAR[]", "addresses": "UBIGINT[]"},
    "runs": {"kernel_release": "VARCHAR", "arch": "VARCHAR", "first_ts": "BIGINT",
             "last_ts": "BIGINT", "pageblock_order": "INTEGER", "manifest": "VARCHAR",
             "migratetypes": "VARCHAR[]", "labels": "MAP(VARCHAR, VARCHAR)",
             "lost_events": "BIGINT", "sha256": "VARCHAR"},
    # Which events a run's trace.dat carries formats for (recorded), with their row counts:
    # an empty stand-in view for datasets parsed before it existed.
    "event_tables": {"event_id": "INTEGER", "system": "VARCHAR", "event": "VARCHAR",
                     "table": "VARCHAR", "rows": "BIGINT"},
    "print_flags": {"event": "VARCHAR", "field": "VARCHAR", "kind": "VARCHAR",
                    "value": "UBIGINT", "name": "VARCHAR"},
    "lost_events": {"cpu": "INTEGER", "ts": "BIGINT", "missed": "BIGINT"},
    "vmstat": {"ts": "BIGINT", "name": "VARCHAR", "value": "BIGINT"},
    "pagetypeinfo_free": {"ts": "BIGINT", "node": "INTEGER", "zone": "VARCHAR",
                          "migratetype": "VARCHAR", "order": "INTEGER", "count": "BIGINT"},
    "pagetypeinfo_blocks": {"ts": "BIGINT", "node": "INTEGER", "zone": "VARCHAR",
                            "migratetype": "VARCHAR", "blocks": "BIGINT"},
    "buddyinfo": {"ts": "BIGINT", "node": "INTEGER", "zone": "VARCHAR", "order": "INTEGER",
                  "count": "BIGINT"},
    # debugfs extfrag/ samples (when debugfs was mounted): the kernel's indices in thousandths
    "extfrag_unusable_index": {"ts": "BIGINT", "node": "INTEGER", "zone": "VARCHAR",
                               "order": "INTEGER", "unusable_index_permille": "INTEGER"},
    "extfrag_index": {"ts": "BIGINT", "node": "INTEGER", "zone": "VARCHAR", "order": "INTEGER",
                      "fragmentation_index_permille": "INTEGER"},
    # What the counts cost (capture/sampler.py's cost sources), where the kernel had them:
    # /proc/pressure/memory (CONFIG_PSI, 4.20+), /proc/stat's cpu lines and the CPU time of the
    # kswapd*, kcompactd* and khugepaged threads in clock ticks (ticks_per_s: the manifest's
    # clock_ticks_per_s), and the per-size mTHP counters (6.10+)
    "psi_memory": {"ts": "BIGINT", "kind": "VARCHAR", "total_us": "BIGINT", "avg10": "DOUBLE",
                   "avg60": "DOUBLE", "avg300": "DOUBLE"},
    "cpu_stat": {"ts": "BIGINT", "cpu": "INTEGER", "user": "BIGINT", "nice": "BIGINT",
                 "system": "BIGINT", "idle": "BIGINT", "iowait": "BIGINT", "irq": "BIGINT",
                 "softirq": "BIGINT", "steal": "BIGINT", "ticks_per_s": "INTEGER"},
    "kthread_cpu": {"ts": "BIGINT", "pid": "INTEGER", "comm": "VARCHAR", "kind": "VARCHAR",
                    "utime": "BIGINT", "stime": "BIGINT", "run_ns": "BIGINT",
                    "ticks_per_s": "INTEGER"},
    "mthp_stats": {"ts": "BIGINT", "size_kb": "INTEGER", "counter": "VARCHAR", "value": "BIGINT"},
    # Benchmark results of the run (parsers/benchmark_results.py): a bundle's metrics.json, or
    # `kmemscope metrics import`.
    "run_metrics": {"metric": "VARCHAR", "value": "DOUBLE", "unit": "VARCHAR",
                    "better": "VARCHAR", "source": "VARCHAR"},
}

# Per-run tables built once from a run's events (queries/derived_tables.py, cached by
# dataset/derived.py).
DERIVED_COLUMNS = {
    "page_pairs": {"pfn": "UBIGINT", "reuse": "BOOLEAN", "interval_ns": "BIGINT",
                   "same_cpu": "BOOLEAN", "order": "UTINYINT", "cpu": "INTEGER"},
    "pfn_allocs": {"pfn": "UBIGINT", "allocs": "BIGINT", "rank": "BIGINT"},
    "alloc_stacks": {"stack_id": "INTEGER", "frames": "VARCHAR[]", "addresses": "UBIGINT[]"},
    "alloc_stack_ids": {"ts": "BIGINT", "cpu": "INTEGER", "pfn": "UBIGINT", "order": "UINTEGER",
                        "stack_id": "INTEGER"},
    "stack_pairing": {"stacks": "BIGINT", "stacks_alloc": "BIGINT", "stacks_other": "BIGINT",
                      "stacks_unpaired": "BIGINT", "stacks_mismatched": "BIGINT",
                      "allocs": "BIGINT", "allocs_with_stack": "BIGINT"},
}
