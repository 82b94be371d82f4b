"""Every per-run number a comparison can use, with its unit and direction.

A metric is one value per run. Four kinds:

- `summary` columns: the headline metrics of the `summary` analysis
  (thp_fault_success_pct, pollution_per_1000_allocs, ...);
- `vmstat.NAME`: a /proc/vmstat counter's increase over the capture (last
  sample minus first), `vmstat.NAME/min` its rate per minute; a few names are
  kmemscope's own sums and differences of counters (VMSTAT_DERIVED), the rows
  page-allocator patches publish (direct = total - daemon scanned, total =
  kswapd + direct);
- `stalls.KIND.STAT`: a latency statistic of the `stalls` analysis
  (stalls.direct_compaction.p99_ms);
- imported metrics: benchmark results in the run's `run_metrics` table, under
  the names they were imported with;
- `frag.COLUMN`: a column of the `fragmentation` analysis's metrics section
  (frag.unusable_index_order9_max); `frag` names them all;
- `cost.NAME`: what the capture cost (COST): pressure, system CPU and the allocator's
  kernel threads' CPU from the `cost` analysis's samples, and the time tasks spent in
  direct compaction and direct reclaim from the trace (the `stalls` analysis);
  `cost.NAME/min` its rate;
- `mthp.<size>kB.COUNTER`: a per-size mTHP counter's increase over the capture (6.10+),
  and `mthp.<size>kB.anon_fault_success_pct`.

gather() runs the analyses a set of metrics needs, once each, and returns
one dict of values per run. The statistics are in statistics.py.
"""
import re
from dataclasses import dataclass

from kmemscope.common.errors import QueryError
from kmemscope.common.text import printable

from .runner import NoSuchEvents
from .selection import labels_dict


# Kinds of metric that are the kernel's own counters: arithmetic means, raw relative change.
COUNTER_KINDS = ("vmstat", "stalls", "cost", "mthp", "shifted", "workload")


@dataclass(frozen=True)
class Metric:
    name: str
    better: str          # "higher", "lower" or "none" (the change is no gain or loss by itself)
    unit: str            # "%", "count", "/min", "ms", an imported unit, ...
    title: str           # what a table calls the row (mmtests' name for the vmstat rows)
    kind: str            # "summary", "vmstat", "stalls", "cost", "mthp", "shifted", "frag" or
                         # "imported"
    reason: str = ""     # why `better` is the better way, or why there is none (every row has one)

    @property
    def convention(self):
        """How a comparison summarises and compares it (queries/statistics.py): "mmtests" for the
        headline and benchmark metrics, "counter" for the kernel's counters (vmstat, stalls)."""
        return "counter" if self.kind in COUNTER_KINDS else "mmtests"

    @property
    def mean_kind(self):
        """mmtests: the harmonic mean where higher is better, the arithmetic mean otherwise;
        the kernel's counters and metrics with no direction: always the arithmetic mean of the
        runs (as postings print them)."""
        if self.convention == "counter" or self.better == "none":
            return "Amean"
        return "Hmean" if self.better == "higher" else "Amean"

    @property
    def range_unit(self):
        return "%" if self.unit == "%" else ""

    @property
    def same_quantity(self):
        """(the other metrics' names, what they all measure) of a quantity that more than one
        row measures (SAME_QUANTITY), or ((), None)."""
        return same_quantity(self.name)


# Directions, reviewed row by row. The principle, for every kind:
# - lower: what an allocating task waits for or fails at (stalls, fallbacks, failed compaction,
#   direct scanning), what reclaim evicts (scans, steals, refaults, swap), what the host pays
#   (CPU, pressure) and what a trace loses;
# - higher: the share of requests served as asked (THP and compaction success);
# - none: a change that is no gain or loss by itself: the workload's demand (allocations,
#   allocations eligible for the reserve), the background threads' activity (kcompactd's and
#   kswapd's runs and their lengths, kcompactd's scanning: moving work there from the
#   allocating tasks is what some patches aim at; what it costs is the cost block's CPU rows),
#   sums of those with direct work, and trade-offs that one patch wants and another gives up.
# `compare --direction NAME=higher|lower` states a direction for a row that has none.
_DEMAND = ("the workload's demand, not the allocator's answer to it: a change says the runs "
           "asked for something else, which is no gain or loss by itself")
_FOLLOWS_DEMAND = ("the success rate (alloc / (alloc + fallback)) is the allocator's answer, and "
                   "it carries the direction")
_BACKGROUND = ("{what} stalls no task: more or less of it is background work, which some "
               "patches move there on purpose (direct stalls fall as it rises) and others cut; "
               "no gain or loss by itself. What it costs is the row cost.{cpu}")
_TASK_WAITS = "time an allocating task waited, in the allocation path, instead of running"
_STALLED = "a task stalled in the allocation path (each is a wait the workload sees)"


def _summary(name, better, unit, title, reason):
    return Metric(name, better, unit, title, "summary", reason)


# The summary analysis's columns. HEADLINE is what `compare` shows by default.
SUMMARY = {m.name: m for m in [
    _summary("thp_fault_success_pct", "higher", "%", "THP fault success %",
             "the share of THP faults served with a huge page rather than falling back to "
             "base pages"),
    _summary("compaction_success_pct", "higher", "%", "Direct compaction success %",
             "the share of direct compaction stalls that produced the page asked for; a failed "
             "one was a wait for nothing"),
    _summary("pgscan_kswapd_per_min", "lower", "/min", "pgscan_kswapd per minute",
             "pages kswapd scanned for reclaim per minute: reclaim work and the evictions behind "
             "refaults; a shift of reclaim into the tasks shows in allocstall and pgscan_direct"),
    _summary("highatomic_pageblocks_max", "lower", "count", "HighAtomic pageblocks (max)",
             "pageblocks held in the high-atomic reserve are kept from every other allocation; "
             "the reserve patches aim to hold fewer for the same atomic demand"),
    _summary("eligible_allocs_order_1_3", "none", "count", "High-atomic-eligible allocs, order 1-3",
             "allocations eligible for the high-atomic reserve are " + _DEMAND),
    _summary("eligible_allocs_order_4_plus", "none", "count",
             "High-atomic-eligible allocs, order 4+",
             "allocations eligible for the high-atomic reserve are " + _DEMAND),
    _summary("pollution_per_1000_allocs", "lower", "/1000",
             "Fragmenting fallbacks per 1000 allocs",
             "a fallback that steals from another migratetype's pageblock mixes movable and "
             "unmovable pages, which later blocks huge pages and compaction"),
    # No direction: faster reuse of cache-hot frames, or frees spread over CPUs, is what one
    # patch wants and another gives up (the per-CPU list postings argue both ways); the user
    # states one with --direction NAME=higher|lower.
    _summary("top5_pfn_allocs_sum", "none", "count", "Allocs of the 5 hottest pfns",
             "reuse of a few cache-hot frames is what one per-CPU list patch wants and another "
             "gives up for spreading: no gain or loss by itself"),
    _summary("cross_cpu_free_pct", "none", "%", "Pages freed on another CPU %",
             "frees on another CPU than the allocation's trade cache locality for balance, as the "
             "per-CPU list postings argue both ways: no gain or loss by itself"),
    _summary("lost_events", "lower", "count", "Lost trace events",
             "events the ring buffer dropped: every count from the trace falls short by them"),
    _summary("duration_s", "none", "s", "Capture duration",
             "a fixed-length capture's duration is the operator's choice; with `record -- "
             "COMMAND` it is the command's run time (then --direction duration_s=lower)"),
    _summary("allocs", "none", "count", "Page allocations", "page allocations are " + _DEMAND),
]}
HEADLINE = [name for name in SUMMARY if name not in ("duration_s", "allocs")]

# vmstat counters: which way is better, and why, for every counter a comparison shows by
# default (MMTESTS_VMSTAT) and a few more. A counter not reviewed here has no direction: a
# /proc/vmstat counter's increase can be demand, work, failure or a gauge's net change.
_EVICTS = ("reclaim work and the evictions behind refaults; fewer is less reclaim pressure "
           "for the same work")
VMSTAT_DIRECTIONS = {
    "thp_fault_alloc": ("none", "faults served with a huge page follow how many THP faults "
                                "the workload took: " + _FOLLOWS_DEMAND),
    "thp_fault_fallback": ("lower", "a THP fault that fell back to base pages"),
    "thp_collapse_alloc": ("higher", "khugepaged got the huge page it asked for to collapse into"),
    "thp_collapse_alloc_failed": ("lower", "khugepaged failed to get a huge page"),
    "thp_file_alloc": ("higher", "a file THP allocated as asked"),
    "thp_file_fallback": ("lower", "a file THP allocation that fell back"),
    "compact_stall": ("lower", "direct compaction stalls: " + _STALLED),
    "compact_fail": ("lower", "a direct compaction stall that did not produce the page: a wait "
                              "for nothing"),
    "compact_success": ("none", "a success is still a stall in direct compaction: more of "
                                "them is more waiting unless stalls fell too; the gain or loss "
                                "is the rate (Direct compact success rate %)"),
    "compact_success_pct": ("higher", "the share of direct compaction stalls that produced the "
                                      "page asked for"),
    "compact_daemon_migrate_scanned": ("none", _BACKGROUND.format(
        what="kcompactd's scanning", cpu="kcompactd_cpu_s")),
    "compact_daemon_free_scanned": ("none", _BACKGROUND.format(
        what="kcompactd's scanning", cpu="kcompactd_cpu_s")),
    "compact_direct_migrate_scanned": ("lower", "pages scanned inside direct compaction: work "
                                                "an allocating task waits for"),
    "compact_direct_free_scanned": ("lower", "pages scanned inside direct compaction: work an "
                                             "allocating task waits for"),
    "compact_migrate_scanned": ("none", "the sum of direct scanning (a wait) and kcompactd's "
                                        "(background): a move between the two leaves it as it "
                                        "was; the direct and daemon rows say which moved"),
    "compact_free_scanned": ("none", "the sum of direct scanning (a wait) and kcompactd's "
                                     "(background): a move between the two leaves it as it was; "
                                     "the direct and daemon rows say which moved"),
    "allocstall": ("lower", "direct reclaim stalls: " + _STALLED),
    "pgscan_kswapd": ("lower", "pages kswapd scanned: " + _EVICTS),
    "pgsteal_kswapd": ("lower", "pages kswapd evicted: " + _EVICTS),
    "pgscan_direct": ("lower", "pages scanned in direct reclaim, inside a task's stall"),
    "pgsteal_direct": ("lower", "pages evicted in direct reclaim, inside a task's stall"),
    "pgscan_total": ("lower", "pages reclaim scanned, by kswapd or in a task: " + _EVICTS),
    "pgsteal_total": ("lower", "pages reclaim evicted, by kswapd or in a task: " + _EVICTS),
    "pswpout": ("lower", "pages written to swap: I/O, and later swap-ins"),
    "pswpin": ("lower", "pages read back from swap: a task waited on I/O"),
    "workingset_refault_file": ("lower", "file pages read again soon after reclaim evicted them"),
}
VMSTAT_UNREVIEWED = ("no direction reviewed for this counter: its increase can be demand, work, "
                     "failure or a gauge's net change (state one with --direction)")


def vmstat_direction(counter):
    """(better, reason) of a vmstat counter (VMSTAT_DIRECTIONS; none where not reviewed)."""
    return VMSTAT_DIRECTIONS.get(counter, ("none", VMSTAT_UNREVIEWED))


# kmemscope's own vmstat rows: name -> (formula over counters' increases, unit).
# Each formula gets {counter: increase} and returns a number or None.
def _made_of(*parts):
    """Mark a formula with the counters it is made of (value_source reads them)."""
    def mark(formula):
        formula.parts = parts
        return formula
    return mark


def _diff(a, b):
    return _made_of(a, b)(lambda d: None if a not in d or b not in d else d[a] - d[b])


def _sum(*names):
    return _made_of(*names)(lambda d: None if any(n not in d for n in names) else sum(d[n] for n in names))


def _allocstall(d):
    # One counter before 4.8, one per zone since: allocstall_dma, _dma32, _normal, _movable...
    if "allocstall" in d:
        return d["allocstall"]
    zones = [v for k, v in d.items() if k.startswith("allocstall_")]
    return sum(zones) if zones else None


def _refault_file(d):
    # workingset_refault split into _anon and _file in 5.9
    return d.get("workingset_refault_file", d.get("workingset_refault"))


@_made_of("compact_success", "compact_stall")
def _success_pct(d):
    if "compact_stall" not in d or "compact_success" not in d or d["compact_stall"] == 0:
        return None
    return 100.0 * d["compact_success"] / d["compact_stall"]


VMSTAT_DERIVED = {
    "compact_direct_migrate_scanned": (_diff("compact_migrate_scanned",
                                             "compact_daemon_migrate_scanned"), "count"),
    "compact_direct_free_scanned": (_diff("compact_free_scanned", "compact_daemon_free_scanned"),
                                    "count"),
    "allocstall": (_allocstall, "count"),
    "pgscan_total": (_sum("pgscan_kswapd", "pgscan_direct"), "count"),
    "pgsteal_total": (_sum("pgsteal_kswapd", "pgsteal_direct"), "count"),
    "workingset_refault_file": (_refault_file, "count"),
    "compact_success_pct": (_success_pct, "%"),
}

# The vmstat rows of a kernel A/B table (the defrag_mode patch series'), under
# the names mmtests and those postings give them, in their order.
MMTESTS_VMSTAT = [
    ("THP fault alloc", "thp_fault_alloc"),
    ("THP fault fallback", "thp_fault_fallback"),
    ("Direct compact fail", "compact_fail"),
    ("Direct compact success", "compact_success"),
    ("Direct compact success rate %", "compact_success_pct"),
    ("Compact daemon scanned migrate", "compact_daemon_migrate_scanned"),
    ("Compact daemon scanned free", "compact_daemon_free_scanned"),
    ("Compact direct scanned migrate", "compact_direct_migrate_scanned"),
    ("Compact direct scanned free", "compact_direct_free_scanned"),
    ("Compact total migrate scanned", "compact_migrate_scanned"),
    ("Compact total free scanned", "compact_free_scanned"),
    ("Alloc stall", "allocstall"),
    ("Pages kswapd scanned", "pgscan_kswapd"),
    ("Pages kswapd reclaimed", "pgsteal_kswapd"),
    ("Pages direct scanned", "pgscan_direct"),
    ("Pages direct reclaimed", "pgsteal_direct"),
    ("Pages total scanned", "pgscan_total"),
    ("Pages total reclaimed", "pgsteal_total"),
    ("Swap out", "pswpout"),
    ("Swap in", "pswpin"),
    ("File refaults", "workingset_refault_file"),
]
MMTESTS_TITLES = {counter: title for title, counter in MMTESTS_VMSTAT}
# Counters outside that table that a comparison still names the way postings do.
MMTESTS_TITLES["compact_stall"] = "Direct compact stall"

# stalls.per_run: the kinds of stall and the statistics a comparison can use.
STALL_KINDS = ("direct_compaction", "direct_reclaim", "kcompactd", "kswapd")
# stalls: as the kernel counts them (direct compaction: vmstat's compact_stall); timed: those the
# latencies are over; compaction_runs: the compact_zone() runs inside direct compaction stalls.
STALL_STATS = {"stalls": "count", "timed": "count", "compaction_runs": "count", "total_ms": "ms",
               "mean_ms": "ms", "p50_ms": "ms", "p90_ms": "ms", "p99_ms": "ms", "max_ms": "ms"}
STALL_HEADLINE = ("stalls", "compaction_runs", "total_ms", "p99_ms")
# kcompactd and kswapd do not stall anyone: their count is of the threads' runs (from wake to
# sleep, or one compaction pass), named `runs` (stalls.kcompactd.runs), never "stalls", which
# means one thing everywhere: what vmstat's compact_stall (and allocstall) count.
THREAD_KINDS = ("kcompactd", "kswapd")


def stall_stat_name(kind, stat):
    """The name of stalls.per_run's column `stat` for `kind` in a metric name."""
    return "runs" if stat == "stalls" and kind in THREAD_KINDS else stat


def stall_column(kind, name):
    """stalls.per_run's column of a metric name's statistic (the inverse of stall_stat_name)."""
    return "stalls" if name == "runs" and kind in THREAD_KINDS else name


# What a table calls a stall statistic, after the kind's name.
STALL_TITLES = {"stalls": "stalls", "runs": "runs", "timed": "stalls timed",
                "compaction_runs": "runs (compact_zone)",
                "total_ms": "total ms", "mean_ms": "mean ms", "p50_ms": "p50 ms",
                "p90_ms": "p90 ms", "p99_ms": "p99 ms", "max_ms": "max ms"}

# Names of the default set's blocks (what --format mmtests prints under these titles).
GROUPS = {"headline": "summary", "vmstat": "vmstat", "stalls": "stalls", "benchmark": "imported"}

_VMSTAT_NAME = re.compile(r"vmstat\.([a-z][a-z0-9_]{0,63})(/min)?")
_STALL_NAME = re.compile(r"stalls\.([a-z_]+)\.([a-z0-9_]+)")


def vmstat_metric(counter, per_min=False):
    unit = "/min" if per_min else VMSTAT_DERIVED.get(counter, (None, "count"))[1]
    name = f"vmstat.{counter}" + ("/min" if per_min else "")
    title = MMTESTS_TITLES.get(counter, counter) + (" per minute" if per_min else "")
    better, reason = vmstat_direction(counter)
    return Metric(name, better, unit, title, "vmstat", reason)


def stall_metric(kind, stat):
    """The Metric of stalls.per_run's column `stat` of `kind`, under its metric name."""
    name = stall_stat_name(kind, stat)
    what = "runs timed" if stat == "timed" and kind in THREAD_KINDS else STALL_TITLES[name]
    title = f"{kind.replace('_', ' ')} {what}"
    better, reason = stall_direction(kind, stat)
    return Metric(f"stalls.{kind}.{name}", better, STALL_STATS[stat], title, "stalls", reason)


def stall_direction(kind, stat):
    """(better, reason) of a stall statistic: lower for the stalls tasks wait in; none for the
    background threads' runs (THREAD_KINDS), which stall no one."""
    if kind in THREAD_KINDS:
        cpu = f"{kind}_cpu_s"
        return "none", _BACKGROUND.format(what=kind, cpu=cpu)
    what = kind.replace("_", " ")
    if stat in ("stalls", "timed"):
        return "lower", f"{what} stalls: " + _STALLED
    if stat == "compaction_runs":
        return "lower", "compact_zone() runs inside direct compaction stalls: work a task waits for"
    return "lower", f"{what} stall time: " + _TASK_WAITS


def parse_name(name):
    """A metric name's kind and parts, without looking at data: ('vmstat', counter, per_min),
    ('stalls', kind, stat), ('summary', name) or ('imported', name)."""
    if name in SUMMARY:
        return ("summary", name)
    if name.startswith("vmstat."):
        m = _VMSTAT_NAME.fullmatch(name)
        if not m:
            raise QueryError(f"bad vmstat metric {name!r}",
                             "write vmstat.NAME or vmstat.NAME/min, NAME as in /proc/vmstat")
        return ("vmstat", m.group(1), bool(m.group(2)))
    if name.startswith("stalls."):
        m = _STALL_NAME.fullmatch(name)
        column = m and stall_column(m.group(1), m.group(2))
        if (not m or m.group(1) not in STALL_KINDS or column not in STALL_STATS
                or stall_stat_name(m.group(1), column) != m.group(2)):
            threads = m is not None and m.group(1) in THREAD_KINDS and m.group(2) == "stalls"
            kind = m.group(1) if m is not None else ""
            raise QueryError(f"bad stall metric {name!r}",
                             f"{kind} does not stall a task: its count is "
                             f"stalls.{kind}.runs" if threads else
                             f"write stalls.KIND.STAT, KIND one of {', '.join(STALL_KINDS)}, "
                             f"STAT one of {', '.join(STALL_STATS)} (runs instead of stalls for "
                             "kcompactd and kswapd)")
        return ("stalls", m.group(1), column)
    if name.startswith("frag."):
        return _parse_frag_name(name)
    if name.startswith("cost."):
        return _parse_cost_name(name)
    if name.startswith("mthp."):
        return _parse_mthp_name(name)
    if name.startswith("shifted."):
        return _parse_shifted_name(name)
    if name.startswith("workload."):
        return _parse_workload_name(name)
    return ("imported", name)


@dataclass
class RunValues:
    """What gather() found: one row per run (run_id, labels, started_ns) plus metric values."""
    runs: list             # [{"run_id", "labels": {k: v}, "started_ns", "first_ts", name: value...}]
    metrics: dict          # name -> Metric, in the order to show them
    notes: list
    counters: set          # the vmstat counters some run sampled
    imported: dict         # imported name -> Metric


def _int_or_none(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _run_query(name, dataset, run_ids, labels, engine, params=None, with_labels=False):
    """(rows as dicts, notes) of analysis `name`. Each row's labels MAP is left out unless
    asked for: only the runs' listing needs them, and turning a MAP into Python on every
    row of vmstat_rates (192 per run) took a second at a thousand runs."""
    from .runner import notes_of, run_query

    table = run_query(name, dataset, run_ids=run_ids, labels=labels, params=params, engine=engine)
    notes = list(notes_of(table))
    if not with_labels and "labels" in table.column_names:
        table = table.drop_columns(["labels"])
    return table.to_pylist(), notes


# Why an imported row has its direction: the benchmark's own, stated at import.
IMPORTED_REASON = {
    "higher": "stated at import (better=higher): the benchmark's result, higher is better",
    "lower": "stated at import (better=lower): the benchmark's result, lower is better",
    "none": "imported without a direction (better=none); state one with --direction",
}


def _imported_metrics(rows):
    """name -> Metric of the imported rows; runs that disagree on direction are an error.

    A name of kmemscope's own (a bundle's metrics.json written by hand can hold one; `metrics
    import` refuses them) would make two rows of one name: it is left out, and named in
    _shadowed_notes."""
    out: dict = {}
    units: dict = {}
    for r in rows:
        name = r["metric"]
        if name is None or name in SUMMARY:
            continue
        m = out.get(name)
        if m is None:
            out[name] = Metric(name, r["better"], r["unit"] or "", name, "imported",
                               IMPORTED_REASON.get(r["better"], IMPORTED_REASON["none"]))
            units[name] = {r["unit"] or ""}
        elif m.better != r["better"]:
            raise QueryError(f"metric {name!r} is imported as {m.better}-is-better for some runs "
                             f"and {r['better']}-is-better for others",
                             "import it again with one direction")
        else:
            units[name].add(r["unit"] or "")
    return out, {n: u for n, u in units.items() if len(u) > 1}


def gather(dataset, names=None, run_ids=None, labels=None, engine=None, with_defaults=True):
    """Per-run values of metrics `names` (None: the default set) over the selected runs.

    The default set is the summary headline metrics, the vmstat rows of
    MMTESTS_VMSTAT that some run sampled, the stall headline statistics of the
    kinds some run recorded, and every imported metric. An explicit name that
    no run can give is an error naming what is there. frag.* metrics are
    given only when asked for (by name, or all of them as `frag`).
    """
    from kmemscope.dataset.handle import DatasetRef

    frag, names = _split_frag_names(names)
    ref = DatasetRef.of(dataset)       # every analysis of the comparison sees one snapshot
    found = _gather(ref, names, run_ids, labels, engine, with_defaults and not frag)
    if frag:
        _gather_frag(found, ref, frag, run_ids, labels, engine)
    return found


class _Gathering:
    """One gather(): the selected runs (one dict of values each), what was found, the notes.

    Each kind of metric is added by its own method below, reading the analysis that
    gives it once; _choose then picks the metrics to show from what was found.
    """

    def __init__(self, dataset, run_ids, labels, engine):
        self.dataset, self.run_ids, self.labels, self.engine = dataset, run_ids, labels, engine
        self.notes = []
        self.runs = {}                # run_id -> {"run_id", "labels", ..., metric: value}
        self.trace_spans = {}         # run_id -> (first_ts, last_ts) of its trace
        self.imported = {}            # imported name -> Metric
        self.counters = set()         # vmstat counters some run has (sampled or from its trace)
        self.bare = []                # runs without vmstat samples
        self.stall_kinds = set()
        self.stalls_added = False
        self.cost_sampled = set()     # runs with cost samples (cost.per_run has a row)
        self.cost_traced = set()      # runs whose trace times direct compaction or reclaim
        self.cost_asked = self.mthp_asked = False
        self.mthp_counters = {}       # size_kb -> the counters some run has at that size
        self.mthp_moved = set()       # sizes whose counters (gauges aside) moved on some run
        self.mthp_moving = set()      # (size_kb, counter) that moved on some run

    def query(self, name, run_ids=None, labels=None, with_labels=False):
        rows, notes = _run_query(name, self.dataset, run_ids or self.run_ids,
                                 self.labels if labels is None else labels, self.engine,
                                 with_labels=with_labels)
        return rows, notes

    def add_runs(self):
        listing, more = self.query("run_metrics.runs", with_labels=True)
        self.notes += more
        for r in listing:
            self.runs[r["run_id"]] = {"run_id": r["run_id"], "labels": labels_dict(r["labels"]),
                                      "host": r["host"],
                                      "started_ns": _int_or_none(r["started_ns"]),
                                      "first_ts": r["first_ts"],
                                      "duration_s": r.get("duration_s"),
                                      LOST: _int_or_none(r.get("lost_events"))}
            self.runs[r["run_id"]].update(workload_values(r.get("workload_rusage")))
            order = _int_or_none(r.get("pageblock_order"))
            if order is not None and 0 <= order < 20:
                self.runs[r["run_id"]][PMD_KB] = 4 << order      # 4 kB pages: what it is named
            self.trace_spans[r["run_id"]] = (r["first_ts"], r.get("last_ts"))

    def add_imported(self):
        rows, more = self.query("run_metrics")
        self.notes += [n for n in more if "run_metrics" not in n]   # most runs import nothing
        self.imported, mixed_units = _imported_metrics(rows)
        shadowed = sorted({r["metric"] for r in rows if r["metric"] in SUMMARY})
        if shadowed:
            self.notes.append(f"imported metric{'s' if len(shadowed) > 1 else ''} "
                              f"{', '.join(shadowed)} left out: kmemscope's own metric of that "
                              "name is the row")
        for name, found in sorted(mixed_units.items()):
            self.notes.append(f"{name}: imported with different units ({', '.join(sorted(found))})")
        for r in rows:
            if r["metric"] is not None and r["metric"] not in SUMMARY and r["run_id"] in self.runs:
                self.runs[r["run_id"]][r["metric"]] = r["value"]

    def add_summary(self):
        rows, more = self.query("summary")
        self.notes += more
        for r in rows:
            top5 = r.get("top5_pfn_allocs")
            r["top5_pfn_allocs_sum"] = sum(top5) if top5 else None
            target = self.runs.get(r["run_id"])
            if target is None:
                continue
            for name in SUMMARY:
                target[name] = r.get(name)
                source = (name[:-4] if name.endswith("_pct") else name) + "_source"
                if source in r:
                    target[source] = r[source]

    def add_vmstat(self):
        """Sampled counters' increases; for runs without samples, the trace's counts."""
        rows, more = _vmstat_rows(self.dataset, self.run_ids, self.labels, self.engine)
        self.notes += [n for n in more if "no selected run has vmstat samples" not in n]
        per_run = _per_run_deltas(rows)
        self.counters |= {r["name"] for r in rows}
        self.notes += _sample_window_notes(rows, self.trace_spans)
        self.bare = [r for r in self.runs if r not in per_run]
        if self.bare:
            rows, more = _trace_counter_rows(self.dataset, self.bare, self.engine)
            self.notes += [n for n in more if "memcg_reclaim" not in n]   # none: none left out
            traced = _per_run_deltas(rows)
            for run_id, (deltas, _windows) in traced.items():
                self.runs[run_id][TRACE_SOURCE] = set(deltas)
                mine = [r for r in rows if r["run_id"] == run_id]
                self.runs[run_id][TRACE_INEXACT] = {r["name"] for r in mine
                                                    if _exactness(r) == "lower bound"}
                self.runs[run_id][TRACE_MODEL] = {r["name"]: (r["bound_low"], r["bound_high"])
                                                  for r in mine if _exactness(r) == "model"}
            per_run.update(traced)
            self.counters |= {r["name"] for r in rows}
        for run_id, (deltas, windows) in per_run.items():
            if run_id in self.runs:
                _set_vmstat_values(self.runs[run_id], deltas, windows,
                                   self.runs[run_id].get(TRACE_MODEL))
                _set_summary_bounds(self.runs[run_id], deltas)
        self.counters |= {c for c in VMSTAT_DERIVED
                          if any(r.get(f"vmstat.{c}") is not None for r in self.runs.values())}
        if self.bare:
            self.notes += _trace_notes(self.runs, self.bare)

    def add_stalls(self, required):
        if self.stalls_added:
            return
        self.stalls_added = True
        rows, more = _stall_rows(self.dataset, self.run_ids, self.labels, self.engine, required)
        self.notes += more
        for r in rows:
            self.stall_kinds.add(r["kind"])
            target = self.runs.get(r["run_id"])
            if target is not None:
                for stat in STALL_STATS:
                    target[f"stalls.{r['kind']}.{stall_stat_name(r['kind'], stat)}"] = r.get(stat)
        if rows:
            _zero_stalls(self.dataset, self.runs)

    def group(self, kind):
        """The metrics of a group (GROUPS) that the runs have, in the order to show them."""
        if kind == "summary":
            return {name: SUMMARY[name] for name in HEADLINE}
        if kind == "vmstat":
            # with a bare trace among the runs every row shows: n/a where nothing answers it
            return {f"vmstat.{c}": vmstat_metric(c) for _t, c in MMTESTS_VMSTAT
                    if c in self.counters or (self.bare and self.counters)}
        if kind == "cost":
            return {f"cost.{name}": cost_metric(name) for name in COST}
        if kind == "mthp":
            return mthp_group(self)
        if kind == "shifted":
            return {f"shifted.{name}": shifted_metric(name) for name in SHIFTED
                    if any(r.get(f"shifted.{name}") is not None for r in self.runs.values())}
        if kind == "workload":
            return {f"workload.{name}": workload_metric(name) for name in WORKLOAD
                    if any(r.get(f"workload.{name}") is not None for r in self.runs.values())}
        if kind == "stalls":
            return {m.name: m for kind in STALL_KINDS if kind in self.stall_kinds
                    for m in (stall_metric(kind, stat) for stat in STALL_HEADLINE
                              if stat != "compaction_runs" or kind == "direct_compaction")}
        return dict(self.imported)

    def pmd_kb(self):
        """The PMD (THP) size of the runs in kB, as most runs' pageblock order gives it with
        4 kB pages (2048 where none does): the size the n/a mTHP rows of bare traces name."""
        sizes = [r[PMD_KB] for r in self.runs.values() if r.get(PMD_KB)]
        return max(set(sizes), key=sizes.count) if sizes else 2048

    def metric(self, name):
        """The Metric of one name the user gave, or an error saying what there is instead."""
        p = parse_name(name)
        if p[0] == "summary":
            return SUMMARY[name]
        if p[0] == "vmstat":
            if p[1] not in self.counters:
                near = ", ".join(sorted(c for c in self.counters if p[1][:6] in c)[:6])
                raise QueryError(f"no selected run sampled vmstat counter {p[1]!r}",
                                 f"counters like it: {near}" if near else
                                 "runs recorded without procfs samples have no vmstat metrics")
            return vmstat_metric(p[1], p[2])
        if p[0] == "stalls":
            return stall_metric(p[1], p[2])
        if p[0] == "cost":
            return cost_metric(p[1], p[2])
        if p[0] == "shifted":
            return shifted_metric(p[1])
        if p[0] == "workload":
            return workload_metric(p[1])
        if p[0] == "mthp":
            if p[2] not in self.mthp_counters.get(p[1], ()):
                have = ", ".join(f"{s}kB" for s in sorted(self.mthp_counters)) or "none"
                raise QueryError(f"no selected run sampled mTHP counter {p[2]!r} at {p[1]}kB",
                                 f"sizes sampled: {have} (6.10+ kernels, kmemscope record)")
            return mthp_metric(p[1], p[2])
        if name not in self.imported:
            import difflib

            close = difflib.get_close_matches(name, list(SUMMARY) + list(self.imported), n=3)
            hint = ("did you mean " + ", ".join(close)) if close else (
                "summary metrics: " + ", ".join(SUMMARY) + "; vmstat.NAME[/min]; "
                "stalls.KIND.STAT; imported: " + (", ".join(sorted(self.imported)) or "none"))
            raise QueryError(f"unknown metric {name!r}", hint)
        return self.imported[name]

    def choose(self, names, defaults):
        """The metrics to show, in order, each checked against what the runs have."""
        chosen = {}
        if defaults:
            for kind in ("summary", "vmstat", "stalls"):
                chosen.update(self.group(kind))
            if self.cost_sampled:        # runs with cost samples: the cost block beside the counts
                chosen.update(self.group("cost"))
            chosen.update(self.group("workload"))   # runs recorded with a command: its rusage
            chosen.update(mthp_group(self, everything=False))
            chosen.update(self.group("imported"))
        for name in names or []:
            if name not in GROUPS:
                chosen[name] = self.metric(name)
                continue
            found = self.group(GROUPS[name])
            if not found and name == "mthp":
                # runs without per-size samples (bare traces): the PMD size's fault rows, n/a,
                # and cost_notes' reason, not an error that hides the other rows asked for
                found = {f"mthp.{self.pmd_kb()}kB.{c}": mthp_metric(self.pmd_kb(), c)
                         for c in MTHP_FIRST}
            if not found:
                raise QueryError(f"no selected run has a metric of the group {name!r}",
                                 _EMPTY_GROUP_HINT[name])
            chosen.update(found)
        return chosen


def _gather(dataset, names, run_ids, labels, engine, with_defaults):
    kinds = {GROUPS[n] if n in GROUPS else parse_name(n)[0] for n in names or []}
    defaults = not names and with_defaults
    g = _Gathering(dataset, run_ids, labels, engine)
    g.add_runs()
    g.add_imported()
    if defaults or "summary" in kinds:
        g.add_summary()
    # the trace's counters also bound a bare trace's summary rates (SUMMARY_MODEL_PARTS)
    if defaults or kinds & {"vmstat", "shifted"} or ("summary" in kinds
                                                    and _summary_from_trace(g.runs)):
        g.add_vmstat()
    if "shifted" in kinds:
        _add_shifted(g)
    if defaults or "stalls" in kinds:
        g.add_stalls(required="stalls" in kinds)
    if defaults or "cost" in kinds or "mthp" in kinds:
        g.cost_asked, g.mthp_asked = "cost" in kinds, "mthp" in kinds
        if defaults or "cost" in kinds:
            g.add_stalls(required=False)        # the trace-timed rows: stalls.per_run's times
        _add_cost(g)
        g.notes += cost_notes(g, cost_rows=defaults or "cost" in kinds)
    g.notes += _lost_events_rows(g.runs)
    chosen = g.choose(names, defaults)
    # each analysis gives its notes about the same runs: one of each
    return RunValues(list(g.runs.values()), chosen, list(dict.fromkeys(g.notes)), g.counters,
                     g.imported)


def _sample_window_notes(rows, trace_spans):
    """Runs whose vmstat samples lie partly or wholly outside their trace."""
    spans: dict = {}
    for r in rows:
        if r.get("first_ts") is not None:
            lo, hi = spans.get(r["run_id"], (r["first_ts"], r["last_ts"]))
            spans[r["run_id"]] = (min(lo, r["first_ts"]), max(hi, r["last_ts"]))
    outside, apart = [], []
    for run_id, (lo, hi) in sorted(spans.items()):
        first, last = trace_spans.get(run_id, (None, None))
        if first is None or last is None:
            continue
        if hi < first or lo > last:
            apart.append(run_id)
        elif lo < first - SAMPLE_SLACK_NS or hi > last + SAMPLE_SLACK_NS:
            outside.append(run_id)
    notes = []
    if apart:
        notes.append(f"{len(apart)} run{'s' if len(apart) > 1 else ''} ({', '.join(apart[:3])}) "
                     "have vmstat samples wholly outside their trace: the vmstat rows are the "
                     "samples' own (their window), the trace's counts cover the capture; the two "
                     "do not describe the same time")
    if outside:
        notes.append(f"{len(outside)} run{'s' if len(outside) > 1 else ''} ({', '.join(outside[:3])}) "
                     "have vmstat samples reaching more than 1 s past their trace: the vmstat rows "
                     "cover the samples' window, the trace's counts only its overlap with the trace")
    return notes


# A sampler takes its first and last samples just before and after tracing: not news.
SAMPLE_SLACK_NS = 1_000_000_000

_EMPTY_GROUP_HINT = {
    "headline": "the summary analysis gave no row for these runs",
    "vmstat": "the runs have neither vmstat samples nor the events vmstat_trace counts from",
    "stalls": "the runs recorded no stall events (record with the costly-stalls or default preset)",
    "benchmark": "no benchmark result was imported: kmemscope metrics import DATASET FILE",
    "mthp": "no selected run has per-size mTHP samples that moved (6.10+ kernels; kmemscope "
            "record samples /sys/kernel/mm/transparent_hugepage/hugepages-*/stats/)",
    "shifted": "the runs have neither vmstat's compaction scan counters nor the "
               "mm_compaction_isolate_* events that count them",
    "workload": "no selected run was recorded with a command (kmemscope record ... -- COMMAND "
                "keeps what the command used)",
}

# A run's key holding how many events its trace lost (the run's record; None: not recorded).
LOST = "@lost_events"
# ... and its PMD size in kB (the mTHP rows a run without per-size samples is n/a for).
PMD_KB = "@pmd_kb"
# The rows timed by pairing a begin with its end: a lost end pairs a begin with a later end
# (one lost-event run gave 18.6 times its span of direct reclaim), so no bound holds there.
PAIRED_COST = ("direct_compaction_ms", "direct_reclaim_ms", "kcompactd_compaction_ms",
               "background_compaction_share_pct")


def _lost_events_rows(runs):
    """Rows from a trace that lost events are never exact: the rows timed from begin and end
    pairs (stalls.*, the cost block's trace rows) and the trace's ratios are n/a, the counts
    from the trace lower bounds (an event lost is a count missed; value_exactness says so).
    Returns the notes that say which runs."""
    lost = {run_id: target[LOST] for run_id, target in runs.items() if target.get(LOST)}
    timed, counted, ratios = [], [], []       # the runs each note names
    for run_id in sorted(lost):
        target = runs[run_id]
        for name in list(target):
            if name.startswith("stalls.") or (name.startswith("cost.") and
                                              name[5:].split("/")[0] in PAIRED_COST):
                if target[name] is not None and run_id not in timed:
                    timed.append(run_id)
                target[name] = None
        traced = target.get(TRACE_SOURCE)
        if traced:
            counted.append(run_id)
            target[TRACE_INEXACT] = set(target.get(TRACE_INEXACT) or ()) | set(traced)
            target.pop(TRACE_MODEL, None)
        for name in [n for n in target if n.endswith((BOUND_LOW, BOUND_HIGH))]:
            del target[name]          # a model's bounds assume every event was seen
        for name in SUMMARY:
            if (_summary_source(name, target) == "trace" and name.endswith(_RATIOS)
                    and target.get(name) is not None):
                if run_id not in ratios:
                    ratios.append(run_id)
                target[name] = None

    def named(run_ids):
        shown = ", ".join(f"{printable(r)}: {lost[r]:,}" for r in run_ids[:3])
        more = " ..." if len(run_ids) > 3 else ""
        return (f"{len(run_ids)} run{'s' if len(run_ids) > 1 else ''} whose trace lost events "
                f"({shown}{more})")

    notes = []
    if timed:
        notes.append(f"stalls.*, cost.{', cost.'.join(PAIRED_COST)}: n/a for {named(timed)}: "
                     "a time paired from a begin and an end is then no bound either way (a "
                     "lost end pairs a begin with a later one)")
    if counted:
        notes.append(f"vmstat rows [trace]: lower bounds for {named(counted)}: each lost event "
                     "is a count the trace missed")
    if ratios:
        rates = ", ".join(n for n in SUMMARY if n.endswith(_RATIOS))
        notes.append(f"the headline rates from the trace ({rates}): n/a for {named(ratios)}: a "
                     "ratio of two counts that each missed events is no bound either way; the "
                     "headline counts from the trace are lower bounds there")
    return notes


# Summary rows a lost event cannot change (the count itself, the capture's length) and the
# ratios it makes meaningless.
LOST_EXACT = ("lost_events", "duration_s")
_RATIOS = ("_pct", "_per_1000_allocs")


def _summary_source(name, run):
    recorded = run.get((name[:-4] if name.endswith("_pct") else name) + "_source")
    return recorded or SUMMARY_FROM_PROCFS.get(name, "trace")


# A run's key naming the vmstat counters that its values came from the trace for, and the
# key naming those of them the trace counts only in part (vmstat_trace.counters' exact).
TRACE_SOURCE = "vmstat_from_trace"
TRACE_INEXACT = "vmstat_trace_lower_bounds"
# ... and those the trace counts by a model that met events it could not classify:
# {counter: (bound_low, bound_high)} (vmstat_trace.counters). A model row without such
# events is exact there.
TRACE_MODEL = "vmstat_trace_models"
# A run's value of a metric whose value is a model's: its bounds under these keys' names.
BOUND_LOW, BOUND_HIGH = "@low", "@high"
EXACTNESS = ("exact", "model", "lower bound")


def _exactness(row):
    """A vmstat_trace.counters row's exactness (a dataset cache written before the column was
    added has only `exact`)."""
    return row.get("exactness") or ("exact" if row.get("exact") else "lower bound")

# Where a metric's per-run value comes from: the sources a comparison names.
SOURCES = ("vmstat", "procfs sample", "sysfs sample", "trace", "imported", "rusage")
# Summary columns read from /proc samples rather than the trace.
SUMMARY_FROM_PROCFS = {"pgscan_kswapd_per_min": "vmstat",
                       "highatomic_pageblocks_max": "procfs sample"}
# Summary rates that a bare trace computes with a model: (the counter of successes, of
# failures). Where the model met attempts it could not classify (TRACE_MODEL), the rate is a
# model too, its bounds those of the successes over the same attempts.
SUMMARY_MODEL_PARTS = {"compaction_success_pct": ("compact_success", "compact_fail"),
                       "thp_fault_success_pct": ("thp_fault_alloc", "thp_fault_fallback")}


def value_source(metric, run):
    """(source, exact) of one run's value of `metric`: source one of SOURCES; exact False where
    the value is a lower bound (a vmstat counter the trace counts only in part) or a model's
    with bounds (value_exactness says which)."""
    source, exactness = value_exactness(metric, run)
    return source, exactness == "exact"


def value_exactness(metric, run):
    """(source, exactness) of one run's value of `metric`: exactness one of EXACTNESS: 'exact';
    'model', a trace model that met events it could not classify (the run's value has bounds
    under metric.name + BOUND_LOW / BOUND_HIGH); 'lower bound', the trace sees only part of
    what the kernel counts."""
    if metric.kind == "imported":
        return "imported", "exact"
    if metric.kind == "frag":
        return "procfs sample", "exact"
    if run.get(LOST) and metric.name not in LOST_EXACT:
        source, exactness = _exactness_seen_whole(metric, run)
        return source, "lower bound" if "trace" in source else exactness
    return _exactness_seen_whole(metric, run)


def _exactness_seen_whole(metric, run):
    """value_exactness of a run whose trace lost no events."""
    if metric.kind == "stalls":
        return "trace", "exact"
    if metric.kind == "cost":
        return COST[parse_name(metric.name)[1]].source, "exact"
    if metric.kind == "mthp":
        return "sysfs sample", "exact"
    if metric.kind == "shifted":
        return value_exactness(vmstat_metric(SHIFTED[parse_name(metric.name)[1]].counter), run)
    if metric.kind == "workload":
        return "rusage", "exact"
    if metric.kind == "summary":
        name = metric.name
        source = _summary_source(name, run)
        successes = SUMMARY_MODEL_PARTS.get(name, (None,))[0]
        if source == "trace" and successes in (run.get(TRACE_MODEL) or {}):
            return source, "model"
        return source, "exact"
    counter = parse_name(metric.name)[1]
    traced = run.get(TRACE_SOURCE)
    if not traced:
        return "vmstat", "exact"
    parts = getattr(VMSTAT_DERIVED.get(counter, (None,))[0], "parts", (counter,))
    if any(p in (run.get(TRACE_INEXACT) or set()) for p in parts):
        return "trace", "lower bound"
    if any(p in (run.get(TRACE_MODEL) or {}) for p in parts):
        return "trace", "model"
    return "trace", "exact"


def _per_run_deltas(rows):
    """{run_id: ({counter: increase}, [window_s])} of vmstat_rates or vmstat_trace rows."""
    per_run: dict = {}
    for r in rows:
        deltas, windows = per_run.setdefault(r["run_id"], ({}, []))
        deltas[r["name"]] = r["delta"] if "delta" in r else r["value"]
        windows.append(r["window_s"])
    return per_run


def _set_vmstat_values(target, deltas, windows, models=None):
    """A run's vmstat.NAME and vmstat.NAME/min values, kmemscope's own rows included; with
    models ({counter: (low, high)} of the trace's model rows), the bounds of every value made
    of them (BOUND_LOW, BOUND_HIGH)."""
    window_s = max((w for w in windows if w is not None), default=None)
    values = dict(deltas)
    for counter, (formula, _unit) in VMSTAT_DERIVED.items():
        values[counter] = formula(deltas)
    bounds = {c: models[c] for c in models or {} if c in deltas}
    for counter, (formula, _unit) in VMSTAT_DERIVED.items():
        parts = [p for p in getattr(formula, "parts", ()) if p in bounds]
        if parts and values[counter] is not None:
            bounds[counter] = _formula_bounds(formula, deltas, {p: bounds[p] for p in parts})

    def per_min(counter, value):
        return (None if value is None or not window_s or counter.endswith("_pct")
                else 60.0 * value / window_s)

    for counter, value in values.items():
        target[f"vmstat.{counter}"] = value
        target[f"vmstat.{counter}/min"] = per_min(counter, value)
        if counter in bounds:
            for key, bound in zip((BOUND_LOW, BOUND_HIGH), bounds[counter]):
                target[f"vmstat.{counter}{key}"] = bound
                target[f"vmstat.{counter}/min{key}"] = per_min(counter, bound)


def _summary_from_trace(runs):
    """True when some run's summary rate of SUMMARY_MODEL_PARTS came from the trace."""
    return any(run.get(name[:-4] + "_source") == "trace"
               for run in runs.values() for name in SUMMARY_MODEL_PARTS)


def _set_summary_bounds(target, deltas):
    """The bounds of a run's summary rates that the trace's models gave (SUMMARY_MODEL_PARTS):
    the successes' bounds over the same attempts, in percent."""
    models = target.get(TRACE_MODEL) or {}
    for name, (successes, failures) in SUMMARY_MODEL_PARTS.items():
        source = target.get(name[:-4] + "_source")
        attempts = (deltas.get(successes) or 0) + (deltas.get(failures) or 0)
        if source != "trace" or successes not in models or not attempts:
            continue
        for key, bound in zip((BOUND_LOW, BOUND_HIGH), models[successes]):
            target[name + key] = None if bound is None else 100.0 * bound / attempts


def _formula_bounds(formula, deltas, bounds):
    """(least, most) a derived counter can be when each model part lies within its bounds: the
    formula at every corner of the box (each formula is monotone in each part)."""
    import itertools

    names = sorted(bounds)
    found = []
    for corner in itertools.product(*(bounds[n] for n in names)):
        value = formula({**deltas, **dict(zip(names, corner))})
        if value is not None:
            found.append(value)
    return (min(found), max(found)) if found else (None, None)


def _trace_counter_rows(dataset, run_ids, engine):
    """vmstat_trace.counters of the runs without vmstat samples (none when they recorded
    none of its events)."""
    try:
        return _run_query("vmstat_trace.counters", dataset, run_ids, None, engine)
    except NoSuchEvents:
        return [], []


# Why a vmstat row has no value for a bare trace: what would answer it.
UNTRACED = {
    "pswpout": "no tracepoint counts swap-outs",
    "pswpin": "no tracepoint counts swap-ins",
    "workingset_refault_file": "no tracepoint counts refaults",
}
TRACE_EVENTS = {
    "thp_fault_alloc": "kmem:mm_page_alloc (order > 0)",
    "compact_stall": "compaction:* (try_to_compact_pages, end, deferred, defer_reset)",
    "compact_migrate_scanned": "compaction:mm_compaction_isolate_migratepages",
    "compact_free_scanned": "compaction:mm_compaction_isolate_freepages (and fast_isolate_freepages)",
    "allocstall": "vmscan:mm_vmscan_direct_reclaim_begin",
    "pgscan_kswapd": "vmscan:mm_vmscan_lru_shrink_inactive",
}


def _trace_notes(runs, bare):
    """What the vmstat block shows for runs without vmstat samples, and what it cannot."""
    traced = [r for r in bare if runs[r].get(TRACE_SOURCE)]
    notes = []
    if traced:
        notes.append(
            f"vmstat rows marked [trace]: {len(traced)} of {len(runs)} runs have no vmstat samples; "
            "their values are counted from the trace (kmemscope queries vmstat_trace says how; "
            "Compact ... scanned migrate and Pages ... scanned are lower bounds there; THP fault "
            "and Direct compact success/fail rows are models, marked model with bounds +k/-j "
            "where the trace met events it cannot classify, exact elsewhere)")
    missing: dict = {}
    for run_id in bare:
        have = runs[run_id].get(TRACE_SOURCE) or set()
        for counter, events in TRACE_EVENTS.items():
            if counter not in have:
                missing.setdefault(f"record {events}", []).append(run_id)
    for what, ids in sorted(missing.items()):
        notes.append(f"{len(ids)} run{'s' if len(ids) > 1 else ''} without vmstat samples "
                     f"{'lack' if len(ids) > 1 else 'lacks'} the events for some vmstat rows "
                     f"(n/a there): {what}, or sample /proc/vmstat")
    notes.append("Swap out, Swap in, File refaults: n/a for runs without vmstat samples: "
                 "no tracepoint counts them; only /proc/vmstat samples (kmemscope record takes "
                 "them) answer those rows")
    return notes


# ---------------------------------------------------------------- frag.*: the fragmentation analysis

# The columns of fragmentation.metrics a comparison can use: unit, row title, direction and why.
_UNUSABLE = ("the share of free memory too fragmented to serve the order: less is more free "
             "memory usable at that order")
_FAILS = "samples where no free block of the order was left: an allocation there would fail"
_FRAG_INDEX = ("which cause a failing allocation would have (0: too little memory, 1000: "
               "fragmentation), not how often it fails: a fall with more failures is no gain; "
               "order*_fail_pct counts the failures")
FRAG_METRICS = {
    "unusable_index_order3_mean": ("/1000", "Unusable free space index, order 3, mean",
                                   "lower", _UNUSABLE),
    "unusable_index_order3_max": ("/1000", "Unusable free space index, order 3, max",
                                  "lower", _UNUSABLE),
    "unusable_index_order9_mean": ("/1000", "Unusable free space index, order 9, mean",
                                   "lower", _UNUSABLE),
    "unusable_index_order9_max": ("/1000", "Unusable free space index, order 9, max",
                                  "lower", _UNUSABLE),
    "order3_fail_pct": ("%", "Samples where order 3 would fail %", "lower", _FAILS),
    "order9_fail_pct": ("%", "Samples where order 9 would fail %", "lower", _FAILS),
    "fragmentation_index_order3_mean": ("/1000", "Fragmentation index, order 3, mean",
                                        "none", _FRAG_INDEX),
    "fragmentation_index_order3_max": ("/1000", "Fragmentation index, order 3, max",
                                       "none", _FRAG_INDEX),
    "fragmentation_index_order9_mean": ("/1000", "Fragmentation index, order 9, mean",
                                        "none", _FRAG_INDEX),
    "fragmentation_index_order9_max": ("/1000", "Fragmentation index, order 9, max",
                                       "none", _FRAG_INDEX),
}
GROUPS["frag"] = "frag"


def frag_metric(column):
    unit, title, better, reason = FRAG_METRICS[column]
    return Metric(f"frag.{column}", better, unit, title, "frag", reason)


def _parse_frag_name(name):
    column = name[len("frag."):]
    if column not in FRAG_METRICS:
        raise QueryError(f"bad fragmentation metric {name!r}",
                         "write frag.NAME, NAME one of " + ", ".join(FRAG_METRICS))
    return ("frag", column)


def _split_frag_names(names):
    """([frag.* names asked for], the other names): the group `frag` is every frag.* metric."""
    if not names:
        return [], names
    frag, rest = [], []
    for name in names:
        if name == "frag":
            frag += [f"frag.{c}" for c in FRAG_METRICS]
        elif name.startswith("frag."):
            _parse_frag_name(name)
            frag.append(name)
        else:
            rest.append(name)
    return list(dict.fromkeys(frag)), rest


def _gather_frag(found, dataset, names, run_ids, labels, engine):
    """Add the frag.* values of fragmentation.metrics to gather()'s runs and metrics."""
    try:
        rows, notes = _run_query("fragmentation.metrics", dataset, run_ids, labels, engine)
    except NoSuchEvents as exc:
        if "buddyinfo" in str(exc):
            raise QueryError("no selected run has buddyinfo samples: no frag.* metrics",
                             "record the runs with `kmemscope record`, which samples "
                             "/proc/buddyinfo") from None
        raise
    found.notes += notes
    by_run = {r["run_id"]: r for r in rows}
    for run in found.runs:
        row = by_run.get(run["run_id"], {})
        for name in names:
            run[name] = row.get(name[len("frag."):])
    for name in names:
        found.metrics[name] = frag_metric(name[len("frag."):])


def _vmstat_rows(dataset, run_ids, labels, engine):
    try:
        return _run_query("vmstat_rates", dataset, run_ids, labels, engine)
    except NoSuchEvents as exc:
        if "vmstat" in str(exc):        # no run has procfs samples: no vmstat metrics
            return [], ["no selected run has vmstat samples: no vmstat metrics"]
        raise


def stall_events():
    """{kind: the events a kind of stall is timed by}, as stalls.sql's header declares them
    (@timed_by): a run that recorded them and has no row had none."""
    from .catalog import find_analysis

    return find_analysis("stalls")[0].timed_by


def _zero_stalls(dataset, runs):
    """0 stalls and 0 ms for a kind a run recorded the events of and never stalled in.

    stalls.per_run has no row for such a run; without this its comparison would
    leave it out ("no value") instead of counting a run that never stalled.
    """
    from kmemscope.dataset.handle import DatasetRef

    tables = DatasetRef.of(dataset).listing
    timed_by = stall_events()
    for run_id, target in runs.items():
        for kind, events in timed_by.items():
            count = f"stalls.{kind}.{stall_stat_name(kind, 'stalls')}"
            if count in target:
                continue
            if all(run_id in tables.get(e, {}) for e in events):
                target[count] = 0
                target[f"stalls.{kind}.timed"] = 0
                target[f"stalls.{kind}.total_ms"] = 0.0
                if kind == "direct_compaction":
                    target[f"stalls.{kind}.compaction_runs"] = 0


def _stall_rows(dataset, run_ids, labels, engine, required):
    from .catalog import find_analysis

    try:
        find_analysis("stalls")
    except QueryError:
        if required:
            raise
        return [], []
    try:
        return _run_query("stalls.per_run", dataset, run_ids, labels, engine)
    except NoSuchEvents:
        if required:
            raise
        return [], []        # no run recorded stall events: nothing to add by default


def minute_series(dataset, sides, names, engine=None):
    """vmstat metrics minute by minute: ({(run_id, name): {minute: value}}, notes, names kept).

    Only vmstat metrics move within a run; the others are one value per run
    (compare --over run shows them) and are left out with a note.
    """
    wanted = {n: parse_name(n) for n in names}
    kept = [n for n, p in wanted.items() if p[0] == "vmstat"]
    notes = []
    dropped = [n for n in names if n not in kept]
    if dropped:
        notes.append(f"{', '.join(dropped[:5])}{' ...' if len(dropped) > 5 else ''}: one value per "
                     "run, no minute-by-minute values (use --over run)")
    if not kept:
        return {}, notes, kept
    run_ids = [r for rs in sides.runs.values() for r in rs]
    try:
        rows, more = _run_query("vmstat_rates.per_minute", dataset, run_ids, None, engine)
    except NoSuchEvents:
        rows, more = [], []
    if not rows:
        raise QueryError("--over minute needs vmstat samples, and no selected run has any",
                         "compare --over run shows one value per run instead")
    notes += more
    per: dict = {}
    for r in rows:
        per.setdefault((r["run_id"], r["minute"]), {})[r["name"]] = r["delta"]
    series: dict = {}
    for (run_id, minute), deltas in per.items():
        for name in kept:
            _kind, counter, per_min = wanted[name]
            formula = VMSTAT_DERIVED.get(counter, (None,))[0]
            value = formula(deltas) if formula else deltas.get(counter)
            if value is None:
                continue
            # a whole minute's increase is its rate per minute (the last minute may be partial)
            series.setdefault((run_id, name), {})[minute] = value
    if any(p[2] for n, p in wanted.items() if n in kept):
        notes.append("per minute, vmstat.NAME and vmstat.NAME/min are the same numbers: the "
                     "counter's increase within each minute (the last minute may be partial)")
    return series, notes, kept


# ---------------------------------------------------------------- cost.*: what the capture cost

@dataclass(frozen=True)
class CostRow:
    unit: str
    title: str
    better: str
    source: str          # where the value comes from (a comparison's source field)
    column: str | None   # cost.per_run's column; None for the rows taken from stalls.per_run
    window: str | None   # cost.per_run's column of the row's window in seconds (None: the capture)
    era: str             # which kernels have it
    reason: str          # why `better` is better


_CPU_IS_COST = ("CPU time is work the machine did for the allocator instead of the workload; "
                "a shift of compaction into kcompactd shows in background_compaction_share_pct")
_WAIT_IS_COST = "time allocating tasks spent waiting, in the allocation path, instead of running"
# cost.NAME -> its row; in the order a table shows them (fixed names: scripts rely on them).
COST = {
    "psi_some_ms": CostRow("ms", "Memory pressure some (PSI) ms", "lower", "procfs sample",
                           "psi_some_ms", "psi_window_s", "4.20+ with CONFIG_PSI",
                           "time during which at least one task stalled on memory"),
    "psi_full_ms": CostRow("ms", "Memory pressure full (PSI) ms", "lower", "procfs sample",
                           "psi_full_ms", "psi_window_s", "4.20+ with CONFIG_PSI",
                           "time during which every non-idle task stalled on memory at once"),
    "system_cpu_s": CostRow("s", "System CPU s", "lower", "procfs sample", "system_cpu_s",
                            "cpu_window_s", "every kernel (/proc/stat)",
                            "kernel-mode CPU time is what allocator work costs the host"),
    "kswapd_cpu_s": CostRow("s", "kswapd CPU s", "lower", "procfs sample", "kswapd_cpu_s",
                            "kthread_window_s", "every kernel (/proc/PID/stat)", _CPU_IS_COST),
    "kcompactd_cpu_s": CostRow("s", "kcompactd CPU s", "lower", "procfs sample",
                               "kcompactd_cpu_s", "kthread_window_s", "4.6+ (kcompactd)",
                               _CPU_IS_COST),
    "khugepaged_cpu_s": CostRow("s", "khugepaged CPU s", "lower", "procfs sample",
                                "khugepaged_cpu_s", "kthread_window_s",
                                "kernels with CONFIG_TRANSPARENT_HUGEPAGE", _CPU_IS_COST),
    "direct_compaction_ms": CostRow("ms", "Direct compaction time ms", "lower", "trace", None,
                                    None, "every kernel with the compaction tracepoints",
                                    _WAIT_IS_COST),
    "direct_reclaim_ms": CostRow("ms", "Direct reclaim time ms", "lower", "trace", None, None,
                                 "every kernel with the vmscan tracepoints", _WAIT_IS_COST),
    "kcompactd_compaction_ms": CostRow(
        "ms", "kcompactd compaction time ms", "none", "trace", None, None,
        "4.6+ (kcompactd), with mm_compaction_begin and mm_compaction_end",
        "kcompactd's compaction stalls no task: more of it is compaction moved out of the "
        "allocation path (the share below) or more compaction (its CPU is kcompactd_cpu_s)"),
    "background_compaction_share_pct": CostRow(
        "%", "Background compaction share %", "higher", "trace", None, None,
        "4.6+ (kcompactd), with mm_compaction_begin and mm_compaction_end",
        "kcompactd compaction time / (kcompactd compaction time + direct compaction time), "
        "both the trace's compact_zone() time: compaction no allocating task waits for; what it "
        "costs in CPU is the kcompactd_cpu_s row"),
}
# The trace-timed rows: stalls.per_run's total time of a kind.
COST_FROM_STALLS = {"direct_compaction_ms": "direct_compaction", "direct_reclaim_ms": "direct_reclaim",
                    "kcompactd_compaction_ms": "kcompactd"}
COST_SAMPLED = [name for name, row in COST.items() if row.column is not None]
GROUPS["cost"] = "cost"
GROUPS["mthp"] = "mthp"
_COST_NAME = re.compile(r"cost\.([a-z_]+)(/min)?")
_MTHP_NAME = re.compile(r"mthp\.([0-9]{1,8})kB\.([a-z][a-z0-9_]{0,63})")

# What answers the sampled rows, and why a run without it has none.
COST_SAMPLE_FILES = {
    "psi_some_ms": "/proc/pressure/memory", "psi_full_ms": "/proc/pressure/memory",
    "system_cpu_s": "/proc/stat", "kswapd_cpu_s": "/proc/PID/stat of the kernel threads",
    "kcompactd_cpu_s": "/proc/PID/stat of the kernel threads",
    "khugepaged_cpu_s": "/proc/PID/stat of the kernel threads",
}


def cost_metric(name, per_min=False):
    row = COST[name]
    if per_min:
        return Metric(f"cost.{name}/min", row.better, f"{row.unit}/min",
                      row.title + " per minute", "cost", row.reason)
    return Metric(f"cost.{name}", row.better, row.unit, row.title, "cost", row.reason)


def _parse_cost_name(name):
    m = _COST_NAME.fullmatch(name)
    if not m or m.group(1) not in COST or (m.group(2) and COST[m.group(1)].unit == "%"):
        raise QueryError(f"bad cost metric {name!r}",
                         "write cost.NAME or cost.NAME/min, NAME one of " + ", ".join(COST)
                         + " (a share has no rate)")
    return ("cost", m.group(1), bool(m.group(2)))


# mTHP counters (/sys/kernel/mm/transparent_hugepage/hugepages-<size>kB/stats/): which way is
# better, and why. A counter not named here (a later kernel's) has no direction.
MTHP_BETTER = {
    "anon_fault_alloc": ("none", "anonymous faults served at this size follow how many faults "
                                 "tried it, and faults that fell back from a larger size land "
                                 "here (64 kB rises when 256 kB fails): " + _FOLLOWS_DEMAND),
    "anon_fault_fallback": ("lower", "an anonymous fault at this size fell back to a smaller one"),
    "anon_fault_fallback_charge": ("lower", "a fault fell back because the memcg charge failed"),
    "anon_fault_success_pct": ("higher", "alloc / (alloc + fallback): faults served at this size"),
    "shmem_alloc": ("higher", "a shmem folio of this size was allocated"),
    "shmem_fallback": ("lower", "a shmem allocation at this size fell back"),
    "shmem_fallback_charge": ("lower", "a shmem allocation fell back on its memcg charge"),
    "swpout_fallback": ("lower", "a folio was split before swap-out instead of written whole"),
    "swpin_fallback": ("lower", "swap-in at this size fell back to smaller folios"),
    "swpin_fallback_charge": ("lower", "swap-in fell back on its memcg charge"),
    "split_failed": ("lower", "a split of a folio of this size failed"),
}
MTHP_NO_DIRECTION = ("a count of work whose better way depends on the patch (swapping or splitting "
                     "whole folios), or a gauge (nr_anon*: folios now, its increase a net change)")
MTHP_FIRST = ("anon_fault_alloc", "anon_fault_fallback", "anon_fault_success_pct")
MTHP_GAUGES = ("nr_anon", "nr_anon_partially_mapped")


def mthp_metric(size_kb, counter):
    better, reason = MTHP_BETTER.get(counter, ("none", MTHP_NO_DIRECTION))
    unit = "%" if counter.endswith("_pct") else "count"
    return Metric(f"mthp.{size_kb}kB.{counter}", better, unit, f"mTHP {size_kb}kB {counter}",
                  "mthp", reason)


def _parse_mthp_name(name):
    m = _MTHP_NAME.fullmatch(name)
    if not m:
        raise QueryError(f"bad mTHP metric {name!r}",
                         "write mthp.<size>kB.COUNTER, e.g. mthp.64kB.anon_fault_alloc")
    return ("mthp", int(m.group(1)), m.group(2))


def _mthp_order(counter):
    return (MTHP_FIRST.index(counter) if counter in MTHP_FIRST else len(MTHP_FIRST), counter)


def _cost_rows(dataset, run_ids, labels, engine, section):
    try:
        return _run_query(section, dataset, run_ids, labels, engine)
    except NoSuchEvents:
        return [], []


def _add_cost(g, with_mthp=True):
    """cost.* and mthp.* values of gather()'s runs (g: a _Gathering with its stalls added)."""
    rows, notes = _cost_rows(g.dataset, g.run_ids, g.labels, g.engine, "cost.per_run")
    g.notes += notes
    by_run = {r["run_id"]: r for r in rows}
    impossible: dict = {}          # column -> runs whose samples of it are impossible
    for run_id, target in g.runs.items():
        row = by_run.get(run_id)
        if row is not None:
            g.cost_sampled.add(run_id)
            for column in (row.get("impossible") or "").split(", "):
                if column:
                    impossible.setdefault(column, []).append(run_id)
        for name in COST_SAMPLED:
            spec = COST[name]
            value = row.get(spec.column) if row else None
            window = row.get(spec.window) if row else None
            _set_cost(target, name, value, window)
        duration = target.get("duration_s")
        for name, kind in COST_FROM_STALLS.items():
            value = target.get(f"stalls.{kind}.total_ms")
            _set_cost(target, name, value, duration)
            if value is not None:
                g.cost_traced.add(run_id)
        target["cost.background_compaction_share_pct"] = background_share(
            target.get("cost.kcompactd_compaction_ms"), target.get("cost.direct_compaction_ms"))
    g.notes += [impossible_note(f"cost.{column}", runs) for column, runs in impossible.items()]
    if with_mthp:
        _add_mthp(g)


def background_share(kcompactd_ms, direct_ms):
    """kcompactd's share of the compaction time, both from the trace (time over time: the
    compact_zone() runs of kcompactd threads, and those inside direct compaction stalls); None
    where either is unknown or there was no compaction."""
    if kcompactd_ms is None or direct_ms is None or kcompactd_ms + direct_ms <= 0:
        return None
    return 100.0 * kcompactd_ms / (kcompactd_ms + direct_ms)


def _set_cost(target, name, value, window_s):
    target[f"cost.{name}"] = value
    target[f"cost.{name}/min"] = None if value is None or not window_s else 60.0 * value / window_s


def _add_mthp(g):
    rows, notes = _cost_rows(g.dataset, g.run_ids, g.labels, g.engine, "cost.mthp")
    g.notes += notes
    per_run: dict = {}
    impossible: dict = {}          # mthp.* name -> runs whose samples of it are impossible
    unnamed = sorted({f"{r['size_kb']}kB {r['counter']}" for r in rows
                      if not _MTHP_NAME.fullmatch(f"mthp.{r['size_kb']}kB.{r['counter']}")})
    if unnamed:                    # a row shown must be one a user can ask for by its name
        g.notes.append(f"mthp.*: {len(unnamed)} size and counter pair{'s' if len(unnamed) > 1 else ''}"
                       f" that no kernel names left out ({printable(', '.join(unnamed[:3]))}"
                       f"{' ...' if len(unnamed) > 3 else ''}): a size of at most 8 digits and a "
                       "counter that starts with a letter")
        rows = [r for r in rows
                if _MTHP_NAME.fullmatch(f"mthp.{r['size_kb']}kB.{r['counter']}")]
    for r in rows:
        per_run.setdefault(r["run_id"], {}).setdefault(r["size_kb"], {})[r["counter"]] = r["delta"]
        if r["delta"] is None:
            impossible.setdefault(f"mthp.{r['size_kb']}kB.{r['counter']}", []).append(r["run_id"])
    g.notes += [impossible_note(name, runs) for name, runs in impossible.items()]
    for run_id, sizes in per_run.items():
        target = g.runs.get(run_id)
        if target is None:
            continue
        for size, counters in sizes.items():
            g.mthp_counters.setdefault(size, set()).update(counters)
            if any(v for c, v in counters.items() if c not in MTHP_GAUGES):
                g.mthp_moved.add(size)
            for counter, value in counters.items():
                if value and counter not in MTHP_GAUGES:
                    g.mthp_moving.add((size, counter))
                target[f"mthp.{size}kB.{counter}"] = value
            alloc, fallback = counters.get("anon_fault_alloc"), counters.get("anon_fault_fallback")
            if alloc is not None and fallback is not None:
                g.mthp_counters[size].add("anon_fault_success_pct")
                target[f"mthp.{size}kB.anon_fault_success_pct"] = (
                    100.0 * alloc / (alloc + fallback) if alloc + fallback else None)


def impossible_note(name, runs):
    """Why `name` is n/a for `runs`, whose samples no kernel writes (cost.sql's checks)."""
    shown = ", ".join(printable(r) for r in runs[:3]) + (" ..." if len(runs) > 3 else "")
    return (f"{printable(name)}: n/a for {len(runs)} run{'s' if len(runs) > 1 else ''} whose "
            f"samples of it are impossible ({shown}): a counter that fell, more time than its "
            "window holds, or a value beyond 64 bits (a damaged or edited bundle)")


def mthp_group(g, everything=True):
    """The mthp.* rows of the sizes that moved on some run: every counter present there, or
    (everything=False, the default set) the anonymous-fault rows and the counters that moved."""
    out = {}
    for size in sorted(g.mthp_moved):
        for counter in sorted(g.mthp_counters.get(size, ()), key=_mthp_order):
            if everything or counter in MTHP_FIRST or (size, counter) in g.mthp_moving:
                out[f"mthp.{size}kB.{counter}"] = mthp_metric(size, counter)
    return out


def cost_notes(g, cost_rows=True):
    """Why a cost or mthp row is n/a for runs without the samples that answer it (the cost
    rows' notes only where cost rows are shown: cost_rows=False when only mthp.* rows are)."""
    notes = []
    bare = [r for r in g.runs if r not in g.cost_sampled]
    if cost_rows and bare and (g.cost_sampled or g.cost_asked):
        shown = ", ".join(bare[:3]) + (" ..." if len(bare) > 3 else "")
        notes.append(
            f"cost.psi_some_ms, cost.psi_full_ms, cost.system_cpu_s, cost.kswapd_cpu_s, "
            f"cost.kcompactd_cpu_s, cost.khugepaged_cpu_s: "
            f"n/a for {len(bare)} run{'s' if len(bare) > 1 else ''} without cost samples "
            f"({shown}): no tracepoint gives pressure or CPU time; only samples of "
            "/proc/pressure/memory, /proc/stat and the kernel threads' /proc/PID/stat "
            "(kmemscope record takes them) answer those rows; the trace-timed rows "
            "(direct_compaction_ms, direct_reclaim_ms, kcompactd_compaction_ms, "
            "background_compaction_share_pct) stay")
    untimed = [r for r in g.runs if r not in g.cost_traced]
    if cost_rows and untimed and (g.cost_sampled or g.cost_asked):
        notes.append(f"cost.direct_compaction_ms, cost.direct_reclaim_ms, "
                     f"cost.kcompactd_compaction_ms: n/a for {len(untimed)} "
                     f"run{'s' if len(untimed) > 1 else ''} that recorded neither kind's begin and "
                     "end events (kmemscope queries stalls says which)")
    if g.mthp_asked and not g.mthp_moved:
        notes.append("mthp.*: no selected run has per-size mTHP samples that moved (6.10+ kernels; "
                     "kmemscope record samples /sys/kernel/mm/transparent_hugepage/hugepages-*/stats/); "
                     "a bare trace gives none: the trace's THP fault model counts the PMD order only")
    elif g.mthp_moved:
        without = [r for r in g.runs if not any(k.startswith("mthp.") for k in g.runs[r])]
        if without:
            notes.append(f"mthp.*: n/a for {len(without)} run{'s' if len(without) > 1 else ''} "
                         "without per-size mTHP samples (a bare trace, or a kernel before 6.10): "
                         "the trace's THP fault model counts the PMD order only")
    return notes


# ---------------------------------------------------------------- shifted.*: where compaction ran

@dataclass(frozen=True)
class ShiftedRow:
    counter: str         # the vmstat counter (or kmemscope's derived one) whose value it is
    title: str


# "Direct compaction shifted": the pages compaction scanned, direct and kcompactd's apart, in
# the unit postings give a shift of compaction work into kcompactd in (pages scanned, migrate
# and free scanner). Each is the vmstat row of the same counter (sampled, or from the trace on a
# bare trace: a lower bound there), shown together so that their changes read side by side.
SHIFTED = {
    "direct_migrate_scanned": ShiftedRow("compact_direct_migrate_scanned",
                                         "Direct compaction scanned migrate"),
    "direct_free_scanned": ShiftedRow("compact_direct_free_scanned",
                                      "Direct compaction scanned free"),
    "kcompactd_migrate_scanned": ShiftedRow("compact_daemon_migrate_scanned",
                                            "kcompactd scanned migrate"),
    "kcompactd_free_scanned": ShiftedRow("compact_daemon_free_scanned", "kcompactd scanned free"),
}
GROUPS["shifted"] = "shifted"
_SHIFTED_NAME = re.compile(r"shifted\.([a-z_]+)")


def shifted_metric(name):
    row = SHIFTED[name]
    better, reason = vmstat_direction(row.counter)
    return Metric(f"shifted.{name}", better, "count", row.title, "shifted",
                  f"{reason} (vmstat's {row.counter})")


def _parse_shifted_name(name):
    m = _SHIFTED_NAME.fullmatch(name)
    if not m or m.group(1) not in SHIFTED:
        raise QueryError(f"bad shifted metric {name!r}",
                         "write shifted.NAME, NAME one of " + ", ".join(SHIFTED))
    return ("shifted", m.group(1))


def _add_shifted(g):
    """shifted.* values of gather()'s runs: their vmstat rows' (g: after add_vmstat)."""
    for target in g.runs.values():
        for name, row in SHIFTED.items():
            target[f"shifted.{name}"] = target.get(f"vmstat.{row.counter}")


# ---------------------------------------------------------------- workload.*: the command's own use

@dataclass(frozen=True)
class WorkloadRow:
    key: str             # the manifest's command.rusage key
    unit: str
    title: str
    reason: str


# What `kmemscope record ... -- COMMAND` kept of its command (wait4's rusage: the command and
# the children it waited for), the workload's own cost beside the host's: a posting's "System
# time" of a benchmark is this, where host-wide system CPU follows the capture's length.
WORKLOAD = {
    "user_cpu_s": WorkloadRow("user_s", "s", "Workload user CPU s",
                              "user-mode CPU time the workload needed for the same work"),
    "system_cpu_s": WorkloadRow("system_s", "s", "Workload system CPU s",
                                "kernel-mode CPU time of the workload (its page faults, "
                                "reclaim and compaction in its own context)"),
    "max_rss_kb": WorkloadRow("max_rss_kb", "kB", "Workload max RSS kB",
                              "the largest resident set of the workload or a child it waited "
                              "for: memory the same work held"),
    "major_faults": WorkloadRow("major_faults", "count", "Workload major faults",
                                "page faults that waited for I/O (swap-in, a file's page read)"),
}
GROUPS["workload"] = "workload"
_WORKLOAD_NAME = re.compile(r"workload\.([a-z_]+)")


def workload_metric(name):
    row = WORKLOAD[name]
    return Metric(f"workload.{name}", "lower", row.unit, row.title, "workload", row.reason)


def _parse_workload_name(name):
    m = _WORKLOAD_NAME.fullmatch(name)
    if not m or m.group(1) not in WORKLOAD:
        raise QueryError(f"bad workload metric {name!r}",
                         "write workload.NAME, NAME one of " + ", ".join(WORKLOAD))
    return ("workload", m.group(1))


def workload_values(text):
    """{workload.NAME: value} of a run's command.rusage (JSON text from its manifest, which is
    not trusted: a value that is not a finite number >= 0 is left out)."""
    import json
    import math

    try:
        usage = json.loads(text) if text else None
    except ValueError:
        usage = None
    if not isinstance(usage, dict):
        return {}
    out = {}
    for name, row in WORKLOAD.items():
        value = usage.get(row.key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(value) and value >= 0:
            out[f"workload.{name}"] = float(value)
    return out


# ---------------------------------------------------------------- one quantity, several rows

# Rows that measure one quantity, in different blocks (and so perhaps in different sign
# conventions, units or sources): a table that shows more than one of them says so beside
# each, so that `+82.93%` in one block and `-80.15%` in another read as the same fall.
SAME_QUANTITY = (
    (("pgscan_kswapd_per_min", "vmstat.pgscan_kswapd", "vmstat.pgscan_kswapd/min"),
     "pages kswapd scanned (vmstat's pgscan_kswapd): per minute or over the capture"),
    (("compaction_success_pct", "vmstat.compact_success_pct"),
     "the share of direct compaction stalls that succeeded (compact_success / compact_stall)"),
    (("stalls.direct_compaction.stalls", "vmstat.compact_stall"),
     "direct compaction stalls: from the trace, or vmstat's compact_stall"),
    (("stalls.direct_reclaim.stalls", "vmstat.allocstall"),
     "direct reclaim stalls: from the trace, or vmstat's allocstall"),
    (("stalls.direct_compaction.total_ms", "cost.direct_compaction_ms"),
     "the time tasks spent in direct compaction, from the trace"),
    (("stalls.direct_reclaim.total_ms", "cost.direct_reclaim_ms"),
     "the time tasks spent in direct reclaim, from the trace"),
    (("stalls.kcompactd.total_ms", "cost.kcompactd_compaction_ms"),
     "the time kcompactd spent compacting, from the trace"),
) + tuple(((f"vmstat.{row.counter}", f"shifted.{name}"), f"vmstat's {row.counter}")
          for name, row in SHIFTED.items())
_SAME = {name: (names, what) for names, what in SAME_QUANTITY for name in names}


def same_quantity(name):
    """(the other rows' metric names, what they all measure) for a metric that measures the
    same quantity as other rows (SAME_QUANTITY), or ((), None)."""
    names, what = _SAME.get(name, ((), None))
    return tuple(n for n in names if n != name), what
