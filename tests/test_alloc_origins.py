"""alloc_origins: allocations paired with their kernel stacks, callsites, subsystems.

Two parts:
- a real recording made here with kernel stacks on every high-order
  non-blocking allocation (the atomic-origins preset) and on high-order frees,
  under loopback TCP traffic, checked against an independent pairing of
  `trace-cmd report` text (plain Python below, sharing no code with kmemscope);
- SYNTHETIC DATA (tests/kmdata.py layout): hand-written stacks whose callsite,
  subsystem, pairing and outstanding pages are worked out by hand from the
  rules of queries/alloc_origins.sql and queries/lib/callsites.sql, including
  nested stacks, a stack of another event and hostile symbol names.
"""
import re
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

from kmemscope.common.errors import QueryError
from kmemscope.queries import runner

import kmdata as K
from kmrun import kmemscope, rows_of
from kmemscope.dataset.handle import DatasetRef

SEC = 1_000_000_000

# ------------------------------------------------------------------ real recording


@pytest.fixture(scope="module")
def recorded(stacks_recording):
    """The run's shared recording (tests/conftest.py): atomic-origins plus high-order frees
    over 1 s of loopback TCP; its trace.dat and dataset."""
    bundle, ds = stacks_recording
    return bundle / "trace.dat", ds


_LINE = re.compile(r"^\s*(?P<comm>.*)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<ts>\d+\.\d+):\s+"
                   r"(?P<event>\w+):\s*(?P<rest>.*)$")
_FRAME = re.compile(r"^=> (?P<fn>\S+) \((?P<addr>[0-9a-f]+)\)$")


def report_pairs(trace_dat):
    """Independent pairing from `trace-cmd report -t` text.

    Per CPU, in the order the report prints that CPU's records, every event
    opens and every kernel_stack closes the most recent open event (the
    kernel writes the stack after its event; an interrupt during the unwind
    nests whole event+stack pairs inside). Returns (allocations, frees):
    allocations as dicts with ts, pfn, order and the stack as a tuple of
    (function, address) or None; frees as (ts, pfn, order).
    """
    out = subprocess.run(["trace-cmd", "report", "-t", "-i", str(trace_dat)],
                         capture_output=True, text=True, check=True).stdout
    open_events = defaultdict(list)
    allocs, frees = [], []
    current = None          # the frames of the kernel_stack being read
    for line in out.splitlines():
        m = _FRAME.match(line)
        if m:
            current.append((m.group("fn"), m.group("addr")))
            continue
        m = _LINE.match(line)
        if not m:
            continue
        cpu, event = int(m.group("cpu")), m.group("event")
        ts = int(m.group("ts").replace(".", ""))
        if event == "kernel_stack":
            current = []
            if open_events[cpu]:
                ev = open_events[cpu].pop()
                if ev is not None:
                    ev["stack"] = current
            continue
        fields = dict(kv.split("=", 1) for kv in m.group("rest").split() if "=" in kv)
        if event == "mm_page_alloc":
            ev = dict(ts=ts, pfn=int(fields["pfn"], 16), order=int(fields["order"]), stack=None)
            allocs.append(ev)
            open_events[cpu].append(ev)
        else:
            if event == "mm_page_free":
                frees.append((ts, int(fields["pfn"], 16), int(fields["order"])))
            open_events[cpu].append(None)
    for a in allocs:
        if a["stack"] is not None:
            a["stack"] = tuple(a["stack"])
    return allocs, frees


def query_json(name, ds, *params):
    args = ["query", name, ds, "--format", "json"]
    for p in params:
        args += ["--param", p]
    return rows_of(kmemscope(*args))


def functions(frames):
    """Function names of kmemscope's 'function+0xoffset' frames."""
    return tuple(re.sub(r"\+0x[0-9a-f]+$", "", f) for f in frames)


def test_stacks_match_an_independent_pairing_of_trace_cmd_report(recorded):
    trace_dat, ds = recorded
    allocs, _ = report_pairs(trace_dat)
    stacked = [a for a in allocs if a["stack"] is not None]
    assert len(stacked) > 100, "the loopback workload made too few high-order allocations"
    # The pairing is right: every allocation's stack starts in its own trace function.
    assert all(a["stack"][0][0] == "trace_event_raw_event_mm_page_alloc" for a in stacked)

    rows = query_json("alloc_origins.stacks", ds)
    # All allocations with a stack are accounted for, once.
    assert sum(r["allocs"] for r in rows) == len(stacked)
    assert len({r["stack_id"] for r in rows}) == len(rows)
    # Same distinct stacks (by addresses in the report, by stack_id here) ...
    oracle = Counter(a["stack"] for a in stacked)
    assert len(rows) == len(oracle)
    # ... with the same counts: grouped by their function names, the multiset of
    # per-stack counts is the same (two stacks may differ only in offsets).
    ours_by_fn, oracle_by_fn = defaultdict(list), defaultdict(list)
    for r in rows:
        ours_by_fn[functions(r["frames"])].append(r["allocs"])
    for stack, n in oracle.items():
        oracle_by_fn[tuple(fn for fn, _ in stack)].append(n)
    assert {k: sorted(v) for k, v in ours_by_fn.items()} == \
           {k: sorted(v) for k, v in oracle_by_fn.items()}
    # Per order too.
    ours_orders = Counter()
    for r in rows:
        for item in r["orders"].split():
            order, n = item.split(":")
            ours_orders[int(order)] += int(n)
    assert ours_orders == Counter(a["order"] for a in stacked)

    pairing = query_json("alloc_origins.pairing", ds)[0]
    assert pairing["allocs"] == len(allocs)
    assert pairing["allocs_with_stack"] == len(stacked)
    assert pairing["stacks_mismatched"] == 0


def test_rollups_and_folded_add_up(recorded):
    _, ds = recorded
    stacks = query_json("alloc_origins.stacks", ds)
    total = sum(r["allocs"] for r in stacks)
    callsites = query_json("alloc_origins.callsites", ds)
    subsystems = query_json("alloc_origins.subsystems", ds)
    assert sum(r["allocs"] for r in callsites) == total
    assert sum(r["allocs"] for r in subsystems) == total
    by_callsite = Counter()
    for r in stacks:
        by_callsite[r["callsite"]] += r["allocs"]
    got = Counter()
    for r in callsites:
        got[r["callsite"]] += r["allocs"]
    assert got == by_callsite
    # TCP over loopback: page frags from the network stack, made without direct reclaim.
    net = sum(r["allocs"] for r in subsystems if r["subsystem"] == "net")
    assert net > total / 2
    assert all(r["alloc_class"] != "blocking" for r in subsystems)    # the preset's filter

    out = kmemscope("query", "alloc_origins.folded", ds, "--format", "folded").stdout
    lines = out.splitlines()
    assert lines and all(re.fullmatch(r"[^ \n]+ \d+", line) for line in lines)
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == total
    pages = kmemscope("query", "alloc_origins.folded", ds, "--format", "folded",
                      "--param", "weight=pages", "--param", "root=order").stdout
    assert sum(int(line.rsplit(" ", 1)[1]) for line in pages.splitlines()) == \
           sum(r["pages"] for r in stacks)
    assert all(line.startswith("order-") for line in pages.splitlines())


def test_the_report_icicle_draws_the_nonblocking_high_order_allocations(recorded):
    """The overview's icicle: its top row equals the allocations of the report-text pairing."""
    import kmemscope as km
    from kmemscope import plots

    trace_dat, ds = recorded
    allocs, _ = report_pairs(trace_dat)
    drawn = plots.alloc_origins(km.open(ds)).drawn
    (top,) = [frame for name, frame in drawn.panels.items() if "widest" not in name]
    drawn_orders = {name: int(n) for name, n in top["allocations"].items()}
    # The preset's kernel filter keeps only non-blocking allocations of order > 0, so every
    # allocation with a stack in the report belongs in the icicle.
    expected = {}
    for a in allocs:
        if a["stack"] is not None:
            expected[f"order-{a['order']}"] = expected.get(f"order-{a['order']}", 0) + 1
    assert expected and min(int(k.split("-")[1]) for k in expected) >= 1
    assert drawn_orders == expected


def test_outstanding_matches_report_frees(recorded):
    trace_dat, ds = recorded
    allocs, frees = report_pairs(trace_dat)
    frees_of = defaultdict(list)
    for ts, pfn, order in frees:
        frees_of[(pfn, order)].append(ts)
    oracle = Counter()
    for a in allocs:
        if a["stack"] is None or a["pfn"] >= 2 ** 32 - 1:
            continue
        if not any(t > a["ts"] for t in frees_of[(a["pfn"], a["order"])]):
            oracle[tuple(fn for fn, _ in a["stack"])] += 1
    rows = query_json("alloc_origins.outstanding", ds)
    ours = Counter()
    for r in rows:
        ours[functions(r["frames"])] += r["outstanding"]
        assert r["outstanding"] + r["freed"] == r["allocs"]
        assert r["oldest_age_s"] >= r["median_age_s"] >= 0
    assert ours == oracle


# ------------------------------------------------------------------ synthetic

# kernel_stack as kmemscope parses it: a stack_id into the run's stacks table ...
STACK_SCHEMA = pa.schema(K.COMMON + [("size", pa.int32()), ("stack_id", pa.int32())])
STACKS_SCHEMA = pa.schema([("stack_id", pa.int32()), ("frames", pa.list_(pa.string())),
                           ("addresses", pa.list_(pa.uint64()))])
# ... and as it was parsed before stacks were interned: each record's whole stack.
RECORDED_STACK_SCHEMA = pa.schema(K.COMMON + [("size", pa.int32()),
                                              ("caller", pa.list_(pa.uint64())),
                                              ("caller_symbols", pa.list_(pa.string()))])
G = lambda *n: K.gfp("6.18", *n)   # noqa: E731
NOWAIT = G("__GFP_KSWAPD_RECLAIM")                       # other_nonblocking
ATOMIC = G("__GFP_HIGH", "__GFP_KSWAPD_RECLAIM")          # eligible at order > 0 (era B)
KERNEL = G("__GFP_DIRECT_RECLAIM", "__GFP_KSWAPD_RECLAIM", "__GFP_IO", "__GFP_FS")

TRACE = "trace_event_raw_event_mm_page_alloc+0xb7"
SKB = [TRACE, "__alloc_frozen_pages_noprof+0x26b", "alloc_pages_mpol+0x86", "allocate_slab+0x1",
       "___slab_alloc+0x2", "__slab_alloc.isra.0+0x3", "kmem_cache_alloc_node_noprof+0x4",
       "__alloc_skb+0x5", "tcp_stream_alloc_skb+0x6", "do_syscall_64+0x7"]
DRIVER = [TRACE, "__alloc_pages_noprof+0x2", "mystery_driver_fn.constprop.0+0x3", "btrfs_foo+0x4"]
ALLOCATOR_ONLY = [TRACE, "alloc_pages_noprof+0x2", "kmalloc_trace+0x3"]
HOSTILE = [TRACE, "x;y z\nw+0x1", "ext4_thing+0x2"]
FREE_STACK = ["trace_event_raw_event_mm_page_free+0x95", "free_unref_folios+0x1"]
ADDR = {}


def _stack(ts, cpu, frames):
    addrs = [ADDR.setdefault(f, 0xffffffff81000000 + 16 * len(ADDR)) for f in frames]
    return dict(ts=ts, cpu=cpu, size=len(frames), caller=addrs, caller_symbols=frames)


def write_stacks(ds, run, stacks, shape):
    """kernel_stack records (dicts of _stack) in the dataset's shape: 'recorded' (each row
    holds its stack) or 'interned' (rows name a stacks row; ids in an order of their own, and
    one stack under two ids, as the decoder gives once its memo is full)."""
    if shape == "recorded":
        K.write_rows(ds, "kernel_stack", run, stacks, RECORDED_STACK_SCHEMA)
        return
    ids, table = {}, []
    for st in reversed(stacks):
        key = tuple(st["caller"])
        if key not in ids or st["ts"] == 300:     # the SKB stack at 300 gets a second id
            ids[key] = len(table) + 1
            table.append(dict(stack_id=ids[key], frames=st["caller_symbols"], addresses=list(key)))
        st["stack_id"] = ids[key]
    K.write_rows(ds, "kernel_stack", run, stacks, STACK_SCHEMA)
    K.write_rows(ds, "stacks", run, table, STACKS_SCHEMA)


@pytest.fixture(params=["interned", "recorded"])
def synthetic(tmp_path, request):
    return make_synthetic(tmp_path, request.param)


def make_synthetic(tmp_path, shape):
    """One 6.18 run, two CPUs, in either shape of kernel_stack. Per CPU in time order:
    cpu0: a1 a2 S(a2) S(a1)   (a2 nested in a1's unwind)
          a3 S(a3)  a5 S(free-function stack: mismatched)  a6 (no stack: capture ended)
    cpu1: S(orphan: its event came before the capture)  f1 a4 S(a4) S(f1)  a7 S(a7)
    """
    ds = tmp_path / "ds"
    K.write_run(ds, "r", first_ts=0, last_ts=10 * SEC)
    K.write_other(ds, "print_flags", "r", K.gfp_print_flags("6.18"))
    allocs = [
        dict(ts=100, cpu=0, pfn=10, order=3, gfp_flags=NOWAIT),      # a1: SKB
        dict(ts=200, cpu=0, pfn=20, order=1, gfp_flags=ATOMIC),      # a2: DRIVER (nested)
        dict(ts=400, cpu=0, pfn=30, order=3, gfp_flags=NOWAIT),      # a3: SKB
        dict(ts=600, cpu=0, pfn=40, order=2, gfp_flags=NOWAIT),      # a5: mismatched stack
        dict(ts=900, cpu=0, pfn=50, order=2, gfp_flags=NOWAIT),      # a6: no stack
        dict(ts=150, cpu=1, pfn=60, order=0, gfp_flags=KERNEL),      # a4: ALLOCATOR_ONLY
        dict(ts=700, cpu=1, pfn=70, order=1, gfp_flags=NOWAIT),      # a7: HOSTILE
    ]
    K.write_events(ds, "mm_page_alloc", "r", allocs)
    K.write_events(ds, "mm_page_free", "r", [
        dict(ts=120, cpu=1, pfn=99, order=0),                        # f1
        dict(ts=5 * SEC, cpu=1, pfn=10, order=3),                    # frees a1
        dict(ts=6 * SEC, cpu=0, pfn=30, order=0),                    # a3's pfn, wrong order
    ])
    write_stacks(ds, "r", [
        _stack(210, 0, DRIVER), _stack(300, 0, SKB), _stack(500, 0, SKB),
        _stack(650, 0, FREE_STACK),
        _stack(50, 1, FREE_STACK), _stack(160, 1, ALLOCATOR_ONLY), _stack(170, 1, FREE_STACK),
        _stack(710, 1, HOSTILE),
    ], shape)
    return ds


def q(name, ds, **params):
    return runner.run_query(name, ds, params=params or None).to_pylist()


def test_synthetic_pairing_nesting_and_callsite_rule(synthetic):
    rows = {r["callsite"]: r for r in q("alloc_origins.stacks", synthetic)}
    assert set(rows) == {"__alloc_skb", "mystery_driver_fn", "(allocator)", "x;y z\nw"}
    skb = rows["__alloc_skb"]
    assert (skb["allocs"], skb["orders"], skb["subsystem"]) == (2, "3:2", "net")
    assert skb["other_nonblocking"] == 2 and skb["pages"] == 16
    assert skb["frames"] == SKB                      # as recorded, innermost first
    # The nested allocation got its own stack, not its enclosing one's.
    drv = rows["mystery_driver_fn"]
    assert (drv["allocs"], drv["orders"], drv["highatomic_eligible"]) == (1, "1:1", 1)
    assert drv["subsystem"] == "btrfs"               # the first mapped frame outward
    alloc_only = rows["(allocator)"]
    assert (alloc_only["subsystem"], alloc_only["blocking"], alloc_only["orders"]) == \
           ("other", 1, "0:1")
    assert rows["x;y z\nw"]["subsystem"] == "ext4"
    pairing = q("alloc_origins.pairing", synthetic)[0]
    assert {k: pairing[k] for k in ("allocs", "allocs_with_stack", "allocs_without_stack",
                                    "stacks", "stacks_alloc", "stacks_other",
                                    "stacks_unpaired", "stacks_mismatched",
                                    "distinct_stacks")} == \
        dict(allocs=7, allocs_with_stack=5, allocs_without_stack=2, stacks=8, stacks_alloc=5,
             stacks_other=1, stacks_unpaired=1, stacks_mismatched=1, distinct_stacks=4)


def test_interned_and_recorded_stacks_answer_alike(tmp_path):
    """A dataset parsed before stacks were interned (kernel_stack with caller and
    caller_symbols) and one parsed now (stack_id and a stacks table, numbered otherwise,
    one stack under two ids) give the same rows in every alloc_origins section and the
    same derived tables."""
    from kmemscope.queries import derived_tables

    made = {shape: make_synthetic(tmp_path / shape, shape) for shape in ("interned", "recorded")}
    assert (made["interned"] / "stacks").is_dir() and not (made["recorded"] / "stacks").exists()
    for section in ("alloc_origins.stacks", "alloc_origins.callsites", "alloc_origins.subsystems",
                    "alloc_origins.outstanding", "alloc_origins.folded", "alloc_origins.pairing"):
        rows = {shape: q(section, ds) for shape, ds in made.items()}
        assert rows["interned"] == rows["recorded"], section
        assert rows["interned"], section
    import pyarrow.parquet as pq

    tables = {}
    for name in derived_tables.STACK_TABLES:
        got = {}
        for shape, ds in made.items():
            (path,) = derived_tables.derived_files(ds, name, ["r"], read_only=True).values()
            got[shape] = pq.read_table(path).to_pylist()
        assert got["interned"] == got["recorded"], name
        tables[name] = got["interned"]
    # alloc_stacks numbers stacks by first use by an allocation: SKB (a1 at 100), then
    # ALLOCATOR_ONLY (a4 at 150), DRIVER (a2 at 200), HOSTILE (a7 at 700); once each.
    assert [(r["stack_id"], r["frames"]) for r in tables["alloc_stacks"]] == \
        [(1, SKB), (2, ALLOCATOR_ONLY), (3, DRIVER), (4, HOSTILE)]


def test_stacks_of_another_shape_are_refused_in_one_line(tmp_path):
    """kernel_stack holding neither stack ids nor recorded stacks, or stack ids without a
    stacks table: one line naming the fix, no traceback."""
    ds = tmp_path / "ds"
    K.write_run(ds, "r")
    K.write_events(ds, "mm_page_alloc", "r", [dict(ts=1, pfn=1, order=1, gfp_flags=NOWAIT)])
    K.write_rows(ds, "kernel_stack", "r", [dict(ts=2, size=1, stack_id=1)], STACK_SCHEMA)
    proc = kmemscope("query", "alloc_origins", ds, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "kmemscope: error:" in ln]
    assert len(errors) == 1 and proc.stderr.rstrip("\n").endswith(errors[0].split("kmemscope: ", 1)[-1])
    assert "no stacks table" in errors[0] and "kmemscope parse" in errors[0], proc.stderr
    K.write_rows(ds, "kernel_stack", "r", [dict(ts=2, size=1)],
                 pa.schema(K.COMMON + [("size", pa.int32())]))
    proc = kmemscope("query", "alloc_origins", ds, check=False)
    errors = [ln for ln in proc.stderr.splitlines() if "kmemscope: error:" in ln]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and len(errors) == 1
    assert "neither stack ids nor recorded stacks" in errors[0] and "kmemscope parse" in errors[0]


def test_synthetic_rollups_and_class_filter(synthetic):
    subs = {(r["subsystem"], r["order"], r["alloc_class"]): r["allocs"]
            for r in q("alloc_origins.subsystems", synthetic)}
    assert subs == {("net", 3, "other_nonblocking"): 2, ("btrfs", 1, "highatomic_eligible"): 1,
                    ("other", 0, "blocking"): 1, ("ext4", 1, "other_nonblocking"): 1}
    nonblocking = q("alloc_origins.subsystems", synthetic, alloc_class="nonblocking")
    assert {r["subsystem"] for r in nonblocking} == {"net", "btrfs", "ext4"}
    calls = {(r["callsite"], r["order"]): r["allocs"] for r in
             q("alloc_origins.callsites", synthetic, alloc_class="highatomic_eligible")}
    assert calls == {("mystery_driver_fn", 1): 1}


def test_synthetic_subsystem_override(synthetic, tmp_path):
    table = tmp_path / "mine.csv"
    table.write_text("# my own table\npattern,subsystem\ntcp_*,net\ntcp_stream_*,tcp-stream\n"
                     "mystery_*,drivers\n")
    rows = {r["callsite"]: r["subsystem"]
            for r in q("alloc_origins.stacks", synthetic, subsystems=str(table))}
    # __alloc_skb is unmapped here: the next frame matches both tcp patterns; the longer wins.
    assert rows == {"__alloc_skb": "tcp-stream", "mystery_driver_fn": "drivers",
                    "(allocator)": "other", "x;y z\nw": "other"}
    for bad, match in ((tmp_path / "none.csv", "cannot read"), (tmp_path, "not a regular file"),
                       (str(tmp_path / "*.csv"), "must name one file")):
        with pytest.raises(QueryError, match=match):
            q("alloc_origins", synthetic, subsystems=str(bad))
    big = tmp_path / "big.csv"
    big.write_text("pattern,subsystem\n" + "a,b\n" * 300_000)
    with pytest.raises(QueryError, match="more than"):
        q("alloc_origins", synthetic, subsystems=str(big))
    hostile = tmp_path / "hostile.csv"
    hostile.write_text("pattern,subsystem\n\"*'); DROP TABLE runs; --\",x\n")
    assert {r["subsystem"] for r in q("alloc_origins.stacks", synthetic,
                                      subsystems=str(hostile))} == {"other"}


def test_synthetic_outstanding(synthetic):
    rows = {r["callsite"]: r for r in q("alloc_origins.outstanding", synthetic)}
    # a1 freed at 5 s; a3's pfn freed only at order 0: outstanding unless match_order=false.
    skb = rows["__alloc_skb"]
    assert (skb["allocs"], skb["freed"], skb["outstanding"], skb["outstanding_pages"]) == (2, 1, 1, 8)
    assert skb["oldest_age_s"] == pytest.approx((10 * SEC - 400) / SEC)
    assert skb["median_lifetime_s"] == pytest.approx((5 * SEC - 100) / SEC)
    assert rows["mystery_driver_fn"]["outstanding_pages"] == 2
    loose = {r["callsite"]: r for r in q("alloc_origins.outstanding", synthetic,
                                          match_order="false")}
    assert "__alloc_skb" not in loose


def test_synthetic_folded_output(synthetic):
    out = kmemscope("query", "alloc_origins.folded", synthetic, "--format", "folded").stdout
    assert out.splitlines() == [
        "do_syscall_64;tcp_stream_alloc_skb;__alloc_skb;kmem_cache_alloc_node_noprof;"
        "__slab_alloc;___slab_alloc;allocate_slab;alloc_pages_mpol;"
        "__alloc_frozen_pages_noprof 2",
        "btrfs_foo;mystery_driver_fn;__alloc_pages_noprof 1",
        "ext4_thing;x_y_z_w 1",
        "kmalloc_trace;alloc_pages_noprof 1",
    ]
    by_class = kmemscope("query", "alloc_origins.folded", synthetic, "--format", "folded",
                         "--param", "root=class", "--param", "weight=pages").stdout
    assert "highatomic_eligible;btrfs_foo;mystery_driver_fn;__alloc_pages_noprof 2" \
        in by_class.splitlines()
    wrong = kmemscope("query", "alloc_origins.stacks", synthetic, "--format", "folded", check=False)
    # (a synthetic run has no recorded digests: its stacks are paired again, privately, first)
    assert wrong.returncode != 0
    assert wrong.stderr.strip().splitlines()[-1].startswith("kmemscope: error:")
    assert "Traceback" not in wrong.stderr


def test_synthetic_needs_stacks(tmp_path):
    ds = tmp_path / "ds"
    K.write_run(ds, "r")
    K.write_events(ds, "mm_page_alloc", "r", [dict(ts=1, pfn=1, order=1, gfp_flags=NOWAIT)])
    proc = kmemscope("query", "alloc_origins", ds, check=False)
    assert proc.returncode != 0 and "kernel_stack" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_documented_callsite_rule_is_the_one_applied():
    """The globs that lib/callsites.sql documents above frame_skip are exactly the VALUES it
    matches, each under its documented kind."""
    text = (Path(runner.__file__).parent / "lib" / "callsites.sql").read_text()
    header = text.split("compiler suffixes such as .isra.0 removed), by kind:", 1)[1]
    header = header.split("-- @columns", 1)[0]
    documented, kind = set(), None
    for line in header.splitlines():
        words = line[2:].split()
        if words and words[0] in ("tracing", "allocator", "slab", "vmalloc"):
            kind, words = words[0], words[1:]
        documented.update((w, kind) for w in words)
    table = text.split("CREATE TEMP TABLE frame_skip AS", 1)[1].split(") AS t(pattern, kind)")[0]
    applied = set(re.findall(r"\('([^']+)', '(tracing|allocator|slab|vmalloc)'\)", table))
    assert documented and documented == applied
