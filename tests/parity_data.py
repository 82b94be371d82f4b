"""The dataset that engine parity and output determinism are checked on, and every section.

Runs from several kernel eras and field widths: the three example bundles (6.x),
a public 5.15 recording (when absent, a failure under KMEMSCOPE_REQUIRE_FIXTURES=1),
the run's shared recording with kernel stacks when the run records live
(alloc_origins needs one; conftest.stacks_recording), and two synthetic runs
for kernels this machine cannot run (kmdata.py): a 5.15-era run whose
gfp_flags are 4 bytes wide where the others' are 8 (its run id is all digits,
which must stay a string), and a 5.10-era run (high-atomic era A, extfrag era
4.19-6.9, mm_page_alloc_zone_locked without percpu_refill) whose fallbacks,
per-CPU drains and compactions are made to tie on the leading ORDER BY keys,
so that only a total ORDER BY gives one row order. Two runs carry imported
benchmark results (run_metrics).
"""
import requirements
from conftest import EXAMPLES, PUBLIC_FIXTURES

RUNS = [(EXAMPLES / "kmem-compaction", "a"), (EXAMPLES / "thp-faults", "b"),
        (EXAMPLES / "memory-pressure", "c"),
        (PUBLIC_FIXTURES / "langraph_v7_zstd148_le_l8_4cpu_5.15.dat", "old")]


def every_section():
    """[(query name, Analysis, Section)] of every analysis."""
    from kmemscope.queries import catalog

    out = []
    for a in catalog.load_analyses().values():
        for s in a.sections:
            out.append((f"{a.name}.{s.name}" if s.name else a.name, a, s))
    return out


def synthetic_515(ds):
    """A synthetic 5.15 run: gfp_flags is 4 bytes wide, as on kernels up to 5.15."""
    import kmdata as K
    run, sec = "5150000000000000", 10 ** 9
    K.write_run(ds, run, kernel="5.15.0", last_ts=2 * sec, labels={"kernel": "synthetic-5.15"})
    atomic = K.gfp("5.10", "__GFP_HIGH", "__GFP_ATOMIC", "__GFP_KSWAPD_RECLAIM")
    kernel = K.gfp("5.10", "__GFP_IO", "__GFP_FS", "__GFP_DIRECT_RECLAIM", "__GFP_KSWAPD_RECLAIM")
    allocs, frees = [], []
    for i in range(400):
        order = (0, 1, 2, 3, 9)[i % 5]
        pfn = K.FAILED_PFN if i % 37 == 0 else 4096 + (i % 50) * 512
        allocs.append(dict(ts=i * 1000 + 10, cpu=i % 2, pid=100 + i % 7, comm=f"task{i % 3}",
                           pfn=pfn, order=order, gfp_flags=atomic if i % 3 else kernel,
                           migratetype=i % 3))
        if pfn != K.FAILED_PFN:
            frees.append(dict(ts=i * 1000 + 500, cpu=(i + i // 2) % 2, pid=1, comm="free",
                              pfn=pfn, order=order))
    K.write_events(ds, "mm_page_alloc", run, allocs, kernel="5.15.0")
    K.write_events(ds, "mm_page_free", run, frees, kernel="5.15.0")
    K.write_other(ds, "print_flags", run, K.gfp_print_flags("5.10"))


def synthetic_510_ties(ds):
    """A synthetic 5.10 run whose rows tie on every ORDER BY key but the last ones."""
    import kmdata as K
    run, kern, sec = "0510aa0000000000", "5.10.0", 10 ** 9
    K.write_run(ds, run, kernel=kern, last_ts=3 * sec, labels={"kernel": "synthetic-5.10"})
    atomic = K.gfp("5.10", "__GFP_HIGH", "__GFP_ATOMIC", "__GFP_KSWAPD_RECLAIM")
    allocs, frees, extfrag, drains, zone = [], [], [], [], []
    for i in range(240):
        order = (0, 0, 1, 2, 3, 10)[i % 6]
        pfn = 8192 + (i % 40) * 1024
        allocs.append(dict(ts=i * 10_000 + 7, cpu=i % 2, pid=200 + i % 5, comm=f"w{i % 4}",
                           pfn=pfn, order=order, gfp_flags=atomic, migratetype=i % 2))
        frees.append(dict(ts=i * 10_000 + 5000, cpu=(i + 1) % 2, pid=1, comm="free",
                          pfn=pfn, order=order))
    # fallbacks: for each (alloc, fallback) pair, four rows of 5 events each that differ
    # only in fragmenting (fallback_order below pageblock_order 9 or not) and change_ownership
    ts = 0
    for alloc_mt, fallback_mt in ((0, 1), (1, 0), (2, 0)):
        for fallback_order in (3, 10):
            for change in (0, 1):
                for _ in range(5):
                    ts += 1000
                    extfrag.append(dict(ts=ts, cpu=0, pid=300, comm="frag", pfn=4096 + ts,
                                        alloc_order=0, fallback_order=fallback_order,
                                        alloc_migratetype=alloc_mt,
                                        fallback_migratetype=fallback_mt,
                                        change_ownership=change))
    for i in range(60):
        drains.append(dict(ts=i * 1000, cpu=i % 2, pid=1, comm="drain", pfn=100 + i,
                           order=i % 3, migratetype=i % 2))
        zone.append(dict(ts=i * 1000 + 3, cpu=i % 2, pid=1, comm="z", pfn=500 + i,
                         order=i % 4, migratetype=(0, 3)[i % 2]))
    K.write_events(ds, "mm_page_alloc", run, allocs, kernel=kern)
    K.write_events(ds, "mm_page_free", run, frees, kernel=kern)
    K.write_events(ds, "mm_page_alloc_extfrag", run, extfrag, kernel=kern)
    K.write_events(ds, "mm_page_pcpu_drain", run, drains, kernel=kern)
    K.write_events(ds, "mm_page_alloc_zone_locked", run, zone, kernel=kern)
    K.write_other(ds, "print_flags", run, K.gfp_print_flags("5.10"))


def build(tmp, stacks=None):
    """The mixed dataset under `tmp` -> its path; `stacks`: a bundle recorded with kernel stacks."""
    import kmemscope

    out = tmp / "ds"
    for path, label in RUNS:
        if not path.exists():
            if path.is_relative_to(EXAMPLES) or requirements.required("fixtures"):
                requirements.skip("fixtures" if label == "old" else "setup", f"{path} is missing")
            continue        # the public fixture, not demanded: built without it
        kmemscope.parse([str(path)], str(out), labels={"kernel": label})
    if stacks is not None:
        kmemscope.parse([str(stacks)], str(out), labels={"kernel": "stacks"})
    synthetic_515(out)
    synthetic_510_ties(out)
    # benchmark results on two runs (one metric on one run only): run_metrics and the
    # comparison's imported metrics are compared across engines too
    runs = kmemscope.open(out).sql("SELECT run_id FROM runs ORDER BY run_id").rows()
    bench = tmp / "bench.csv"
    bench.write_text("run,metric,value,unit,better\n"
                     f"{runs[0]['run_id']},tps,1200.5,tps,higher\n"
                     f"{runs[-1]['run_id']},tps,1100,tps,higher\n"
                     f"{runs[-1]['run_id']},p99_ms,4.25,ms,lower\n")
    kmemscope.open(out).import_metrics(bench)
    return out
