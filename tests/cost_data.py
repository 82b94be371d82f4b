"""Cost samples (psi_memory, cpu_stat, kthread_cpu, mthp_stats) added to runs of a parsed dataset.

Synthetic: the committed examples were recorded before kmemscope sampled these files,
so no real run of them holds these tables. The rows follow the tables' documented
columns (dataset/schema.py), on each run's own trace clock, and are committed the
way `kmemscope metrics import` writes a committed run's partition: through the dataset
layer's folders (opened without following links), then the run's recorded digests
updated, so `kmemscope verify` passes.

`add_cost_samples(ds, run_id, seed)` returns the rows it wrote, so a test recounts
the expected values from them in plain Python (`expected(rows)`), sharing no code
with queries/cost.sql or queries/metrics.py.
"""
import random

TICKS = 100
MTHP_COUNTERS = ("anon_fault_alloc", "anon_fault_fallback", "anon_fault_fallback_charge",
                 "swpout", "split", "nr_anon")


def _span(ds, run_id):
    import duckdb

    con = duckdb.connect()
    row = con.execute(
        "SELECT first_ts, last_ts FROM read_parquet(?, hive_partitioning = true) WHERE run_id = ?",
        [str(ds / "runs" / f"run_id={run_id}" / "*.parquet"), run_id]).fetchone()
    return int(row[0]), int(row[1])


def make_rows(first_ts, last_ts, seed, samples=6, sizes=(64, 256, 2048), kthreads=True,
              schedstat=True):
    """{table: [row dicts]} of `samples` samples from first_ts to last_ts; counters only rise.
    schedstat: the kernel threads' rows carry run_ns (/proc/PID/schedstat), else NULL."""
    rng = random.Random(seed)
    step = (last_ts - first_ts) // (samples - 1)
    times = [first_ts + i * step for i in range(samples)]
    rows: dict = {"psi_memory": [], "cpu_stat": [], "kthread_cpu": [], "mthp_stats": []}
    psi = {"some": rng.randrange(10**6, 10**7), "full": rng.randrange(10**5, 10**6)}
    cpus = {c: {k: rng.randrange(1000, 100000) for k in
                ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")}
            for c in (0, 1)}
    threads = [(rng.randrange(30, 90), "kswapd0", "kswapd"), (rng.randrange(30, 90) + 100,
                                                              "kcompactd0", "kcompactd"),
               (rng.randrange(30, 90) + 200, "khugepaged", "khugepaged")]
    ns_rng = random.Random(-seed)      # its own stream: the other values stay those of `seed`
    tcpu = {t: [rng.randrange(0, 50), rng.randrange(100, 5000), ns_rng.randrange(10**9, 10**11)]
            for t in threads}
    mthp = {(s, c): rng.randrange(0, 1000) for s in sizes for c in MTHP_COUNTERS}
    for i, ts in enumerate(times):
        if i:
            psi["some"] += rng.randrange(0, 200000)
            psi["full"] = min(psi["full"] + rng.randrange(0, 50000), psi["some"])
            for c in cpus.values():
                for k in c:
                    c[k] += rng.randrange(0, 300)
            for t in tcpu.values():
                t[0] += rng.randrange(0, 2)
                t[1] += rng.randrange(0, 40)
                t[2] += ns_rng.randrange(0, 4 * 10**8)     # ns: not a whole number of ticks
            for key in mthp:
                # the 2048 kB size and swpout stay put on every run: sizes that did not move
                if key[0] != 2048 and key[1] != "swpout":
                    mthp[key] += rng.randrange(0, 30) - (15 if key[1] == "nr_anon" else 0)
        for kind in ("some", "full"):
            rows["psi_memory"].append({"ts": ts, "kind": kind, "total_us": psi[kind],
                                       "avg10": rng.random(), "avg60": rng.random(),
                                       "avg300": rng.random()})
        agg = {k: sum(c[k] for c in cpus.values()) for k in cpus[0]}
        for cpu, vals in [(-1, agg)] + sorted(cpus.items()):
            rows["cpu_stat"].append({"ts": ts, "cpu": cpu, **vals, "ticks_per_s": TICKS})
        if kthreads:
            for (pid, comm, kind), (ut, stime, run_ns) in tcpu.items():
                rows["kthread_cpu"].append({"ts": ts, "pid": pid, "comm": comm, "kind": kind,
                                            "utime": ut, "stime": stime,
                                            "run_ns": run_ns if schedstat else None,
                                            "ticks_per_s": TICKS})
        for (size, counter), value in mthp.items():
            rows["mthp_stats"].append({"ts": ts, "size_kb": size, "counter": counter,
                                       "value": value})
    return rows


def write_table(ds, run_id, table, rows):
    """Commit `rows` as the run's partition of `table` and record the new file's digests."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kmemscope.dataset import format as dataset_format
    from kmemscope.dataset.digests import update_digests
    from kmemscope.dataset.safefs import RUN_PREFIX, Dir
    from kmemscope.dataset.schema import TABLE_COLUMNS

    types = {"BIGINT": pa.int64(), "INTEGER": pa.int32(), "VARCHAR": pa.string(),
             "DOUBLE": pa.float64()}
    cols = TABLE_COLUMNS[table]
    data = pa.table({c: pa.array([r[c] for r in rows], types[t]) for c, t in cols.items()})
    data = dataset_format.to_canonical(table, data)
    with Dir.root(ds) as root:
        with root.walk([table, RUN_PREFIX + run_id], "a table folder", make=True) as part:
            part.write_atomic("part-0.parquet",
                              lambda f: pq.write_table(data, f, write_page_checksum=True))
            update_digests(root, table, run_id, part)


def add_cost_samples(ds, run_id, seed, tables=None, **kw):
    """Write synthetic cost samples for `run_id` of dataset folder `ds`; returns the rows."""
    first, last = _span(ds, run_id)
    rows = make_rows(first, last, seed, **kw)
    for table, table_rows in rows.items():
        if table_rows and (tables is None or table in tables):
            write_table(ds, run_id, table, table_rows)
    return rows


def expected(rows):
    """The cost.* and mthp.* values of one run, recounted from its rows in plain Python."""
    def first_last(samples, key):
        ordered = sorted(samples, key=lambda r: r["ts"])
        return ordered[0][key], ordered[-1][key]

    out = {}
    for kind in ("some", "full"):
        a, b = first_last([r for r in rows["psi_memory"] if r["kind"] == kind], "total_us")
        out[f"cost.psi_{kind}_ms"] = (b - a) / 1000.0
    a, b = first_last([r for r in rows["cpu_stat"] if r["cpu"] == -1], "system")
    out["cost.system_cpu_s"] = (b - a) / TICKS
    for kind in ("kswapd", "kcompactd", "khugepaged"):
        total = 0
        for pid in {r["pid"] for r in rows["kthread_cpu"] if r["kind"] == kind}:
            mine = [r for r in rows["kthread_cpu"] if r["pid"] == pid]
            ordered = sorted(mine, key=lambda r: r["ts"])
            if all(r["run_ns"] is not None for r in mine):     # schedstat's ns, in seconds
                total += (ordered[-1]["run_ns"] - ordered[0]["run_ns"]) / 1e9
            else:
                total += (ordered[-1]["utime"] + ordered[-1]["stime"]
                          - ordered[0]["utime"] - ordered[0]["stime"]) / TICKS
        out[f"cost.{kind}_cpu_s"] = total if rows["kthread_cpu"] else None
    span_ns = max(r["ts"] for r in rows["psi_memory"]) - min(r["ts"] for r in rows["psi_memory"])
    out["window_min"] = span_ns / 60e9
    deltas: dict = {}
    for size in {r["size_kb"] for r in rows["mthp_stats"]}:
        for counter in MTHP_COUNTERS:
            a, b = first_last([r for r in rows["mthp_stats"]
                               if r["size_kb"] == size and r["counter"] == counter], "value")
            deltas[(size, counter)] = b - a
    out["mthp"] = deltas
    return out


def background_share(kcompactd_ms, direct_compaction_ms):
    """kcompactd's compaction time over itself plus direct compaction's (both the trace's)."""
    if kcompactd_ms is None or direct_compaction_ms is None:
        return None
    total = kcompactd_ms + direct_compaction_ms
    return None if total == 0 else 100.0 * kcompactd_ms / total
