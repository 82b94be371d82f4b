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
  (frag.unusable_index_order9_max); `frag` names them all.

gather() runs the analyses a set of metrics needs, once each, and returns
one dict of values per run. The statistics are in compare.py.
"""
import re
from dataclasses import dataclass

from kmemscope.errors import DatasetError, QueryError

from .selection import labels_dict


@dataclass(frozen=True)
class Metric:
    name: str
    better: str          # "higher" or "lower"
    unit: str            # "%", "count", "/min", "ms", an imported unit, ...
    title: str           # what a table calls the row (mmtests' name for the vmstat rows)
    kind: str            # "summary", "vmstat", "stalls", "frag" or "imported"

    @property
    def mean_kind(self):
        """mmtests: the harmonic mean where higher is better, the arithmetic mean otherwise."""
        return "Hmean" if self.better == "higher" else "Amean"

    @property
    def range_unit(self):
        return "%" if self.unit == "%" else ""


def _summary(name, better, unit, title):
    return Metric(name, better, unit, title, "summary")


# The summary analysis's columns. HEADLINE is what `compare` shows by default.
SUMMARY = {m.name: m for m in [
    _summary("thp_fault_success_pct", "higher", "%", "THP fault success %"),
    _summary("compaction_success_pct", "higher", "%", "Direct compaction success %"),
    _summary("pgscan_kswapd_per_min", "lower", "/min", "pgscan_kswapd per minute"),
    _summary("highatomic_pageblocks_max", "lower", "count", "HighAtomic pageblocks (max)"),
    _summary("eligible_allocs_order_1_3", "lower", "count", "High-atomic-eligible allocs, order 1-3"),
    _summary("eligible_allocs_order_4_plus", "lower", "count", "High-atomic-eligible allocs, order 4+"),
    _summary("pollution_per_1000_allocs", "lower", "/1000", "Fallbacks per 1000 allocs"),
    # More allocations of the hottest frames = faster reuse of cache-hot pages (the per-CPU list study).
    _summary("top5_pfn_allocs_sum", "higher", "count", "Allocs of the 5 hottest pfns"),
    _summary("cross_cpu_free_pct", "lower", "%", "Pages freed on another CPU %"),
    _summary("lost_events", "lower", "count", "Lost trace events"),
    # With `record -- COMMAND` the capture lasts as long as the command: shorter is faster.
    _summary("duration_s", "lower", "s", "Capture duration"),
    _summary("allocs", "lower", "count", "Page allocations"),
]}
HEADLINE = [name for name in SUMMARY if name not in ("duration_s", "allocs")]

# vmstat counters where more is better; every other counter (stalls, scans,
# fallbacks, swap, refaults) is work or failure, so fewer is better.
VMSTAT_HIGHER = {"thp_fault_alloc", "thp_collapse_alloc", "thp_file_alloc", "compact_success",
                 "compact_success_pct"}

# kmemscope's own vmstat rows: name -> (formula over counters' increases, unit).
# Each formula gets {counter: increase} and returns a number or None.
def _diff(a, b):
    return lambda d: None if a not in d or b not in d else d[a] - d[b]


def _sum(*names):
    return lambda d: None if any(n not in d for n in names) else sum(d[n] for n in names)


def _allocstall(d):
    # One counter before 4.8, one per zone since: allocstall_dma, _dma32, _normal, _movable...
    if "allocstall" in d:
        return d["allocstall"]
    zones = [v for k, v in d.items() if k.startswith("allocstall_")]
    return sum(zones) if zones else None


def _refault_file(d):
    # workingset_refault split into _anon and _file in 5.9
    return d.get("workingset_refault_file", d.get("workingset_refault"))


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

# stalls.per_run: the kinds of stall and the statistics a comparison can use.
STALL_KINDS = ("direct_compaction", "direct_reclaim", "kcompactd", "kswapd")
STALL_STATS = {"stalls": "count", "total_ms": "ms", "mean_ms": "ms", "p50_ms": "ms",
               "p90_ms": "ms", "p99_ms": "ms", "max_ms": "ms"}
STALL_HEADLINE = ("stalls", "total_ms", "p99_ms")

# Names of the default set's blocks (what --format mmtests prints under these titles).
GROUPS = {"headline": "summary", "vmstat": "vmstat", "stalls": "stalls", "benchmark": "imported"}

_VMSTAT_NAME = re.compile(r"vmstat\.([a-z][a-z0-9_]{0,63})(/min)?")
_STALL_NAME = re.compile(r"stalls\.([a-z_]+)\.([a-z0-9_]+)")


def vmstat_metric(counter, per_min=False):
    unit = "/min" if per_min else VMSTAT_DERIVED.get(counter, (None, "count"))[1]
    name = f"vmstat.{counter}" + ("/min" if per_min else "")
    title = MMTESTS_TITLES.get(counter, counter) + (" per minute" if per_min else "")
    return Metric(name, "higher" if counter in VMSTAT_HIGHER else "lower", unit, title, "vmstat")


def stall_metric(kind, stat):
    title = f"{kind.replace('_', ' ')} {stat.replace('_ms', ' ms')}"
    return Metric(f"stalls.{kind}.{stat}", "lower", STALL_STATS[stat], title, "stalls")


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
        if not m or m.group(1) not in STALL_KINDS or m.group(2) not in STALL_STATS:
            raise QueryError(f"bad stall metric {name!r}",
                             f"write stalls.KIND.STAT, KIND one of {', '.join(STALL_KINDS)}, "
                             f"STAT one of {', '.join(STALL_STATS)}")
        return ("stalls", m.group(1), m.group(2))
    if name.startswith("frag."):
        return _parse_frag_name(name)
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


def _run_query(name, dataset, run_ids, labels, engine, params=None):
    from .runner import notes_of, run_query

    table = run_query(name, dataset, run_ids=run_ids, labels=labels, params=params, engine=engine)
    return table.to_pylist(), list(notes_of(table))


def _imported_metrics(rows):
    """name -> Metric of the imported rows; runs that disagree on direction are an error."""
    out, units = {}, {}
    for r in rows:
        name = r["metric"]
        if name is None:
            continue
        m = out.get(name)
        if m is None:
            out[name] = Metric(name, r["better"], r["unit"] or "", name, "imported")
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
    from .runner import one_listing

    frag, names = _split_frag_names(names)
    with one_listing(dataset):         # every analysis of the comparison sees one snapshot
        found = _gather(dataset, names, run_ids, labels, engine, with_defaults and not frag)
        if frag:
            _gather_frag(found, dataset, frag, run_ids, labels, engine)
        return found


def _gather(dataset, names, run_ids, labels, engine, with_defaults):
    groups = [n for n in names or [] if n in GROUPS]
    parsed = [(n, parse_name(n)) for n in names or [] if n not in GROUPS]
    kinds = {p[0] for _, p in parsed} | {GROUPS[g] for g in groups}
    defaults = not names and with_defaults
    notes = []

    listing, more = _run_query("run_metrics.runs", dataset, run_ids, labels, engine)
    notes += more
    runs = {}
    for r in listing:
        runs[r["run_id"]] = {"run_id": r["run_id"], "labels": labels_dict(r["labels"]),
                             "host": r["host"], "started_ns": _int_or_none(r["started_ns"]),
                             "first_ts": r["first_ts"]}

    imported_rows, more = _run_query("run_metrics", dataset, run_ids, labels, engine)
    notes += [n for n in more if "run_metrics" not in n]   # most runs have no imported metrics
    imported, mixed_units = _imported_metrics(imported_rows)
    for name, found in sorted(mixed_units.items()):
        notes.append(f"{name}: imported with different units ({', '.join(sorted(found))})")
    for r in imported_rows:
        if r["metric"] is not None and r["run_id"] in runs:
            runs[r["run_id"]][r["metric"]] = r["value"]

    chosen = {}
    if defaults or "summary" in kinds:
        rows, more = _run_query("summary", dataset, run_ids, labels, engine)
        notes += more
        for r in rows:
            top5 = r.get("top5_pfn_allocs")
            r["top5_pfn_allocs_sum"] = sum(top5) if top5 else None
            target = runs.get(r["run_id"])
            if target is not None:
                for name in SUMMARY:
                    target[name] = r.get(name)
                    for suffix in ("_source",):
                        col = (name[:-4] if name.endswith("_pct") else name) + suffix
                        if col in r:
                            target[col] = r[col]

    counters = set()
    if defaults or "vmstat" in kinds:
        rows, more = _vmstat_rows(dataset, run_ids, labels, engine)
        notes += more
        per_run = {}
        for r in rows:
            counters.add(r["name"])
            deltas, windows = per_run.setdefault(r["run_id"], ({}, []))
            deltas[r["name"]] = r["delta"]
            windows.append(r["window_s"])
        for run_id, (deltas, windows) in per_run.items():
            target = runs.get(run_id)
            if target is None:
                continue
            window_s = max((w for w in windows if w is not None), default=None)
            values = {c: v for c, v in deltas.items()}
            for counter, (formula, _unit) in VMSTAT_DERIVED.items():
                values[counter] = formula(deltas)
            for counter, value in values.items():
                target[f"vmstat.{counter}"] = value
                target[f"vmstat.{counter}/min"] = (
                    None if value is None or not window_s or counter.endswith("_pct")
                    else 60.0 * value / window_s)
        counters |= {c for c in VMSTAT_DERIVED if any(
            runs[r].get(f"vmstat.{c}") is not None for r in runs)}

    stall_kinds = set()
    if defaults or "stalls" in kinds:
        rows, more = _stall_rows(dataset, run_ids, labels, engine, required="stalls" in kinds)
        notes += more
        for r in rows:
            stall_kinds.add(r["kind"])
            target = runs.get(r["run_id"])
            if target is not None:
                for stat in STALL_STATS:
                    target[f"stalls.{r['kind']}.{stat}"] = r.get(stat)
        if rows:
            _zero_stalls(dataset, runs)

    # The metrics to show, in order, each checked against what the runs have.
    def group(kind):
        if kind == "summary":
            return {name: SUMMARY[name] for name in HEADLINE}
        if kind == "vmstat":
            return {f"vmstat.{c}": vmstat_metric(c) for _t, c in MMTESTS_VMSTAT if c in counters}
        if kind == "stalls":
            return {m.name: m for kind in STALL_KINDS if kind in stall_kinds
                    for m in (stall_metric(kind, stat) for stat in STALL_HEADLINE)}
        return dict(imported)

    if defaults:
        for kind in ("summary", "vmstat", "stalls", "imported"):
            chosen.update(group(kind))
    for name in names or []:
        if name in GROUPS:
            chosen.update(group(GROUPS[name]))
            continue
        p = parse_name(name)
        if p[0] == "summary":
            chosen[name] = SUMMARY[name]
        elif p[0] == "vmstat":
            if p[1] not in counters:
                near = ", ".join(sorted(c for c in counters if p[1][:6] in c)[:6])
                raise QueryError(f"no selected run sampled vmstat counter {p[1]!r}",
                                 f"counters like it: {near}" if near else
                                 "runs recorded without procfs samples have no vmstat metrics")
            chosen[name] = vmstat_metric(p[1], p[2])
        elif p[0] == "stalls":
            chosen[name] = stall_metric(p[1], p[2])
        else:
            if name not in imported:
                import difflib

                close = difflib.get_close_matches(name, list(SUMMARY) + list(imported), n=3)
                hint = ("did you mean " + ", ".join(close)) if close else (
                    "summary metrics: " + ", ".join(SUMMARY) + "; vmstat.NAME[/min]; "
                    "stalls.KIND.STAT; imported: " + (", ".join(sorted(imported)) or "none"))
                raise QueryError(f"unknown metric {name!r}", hint)
            chosen[name] = imported[name]
    return RunValues(list(runs.values()), chosen, notes, counters, imported)


# ---------------------------------------------------------------- frag.*: the fragmentation analysis

# The columns of fragmentation.metrics a comparison can use: unit and row title.
# Every one is lower-is-better: less free memory unusable at the order, fewer
# samples where the allocation would fail, and failures that are less down to
# fragmentation (the fragmentation index) are what anti-fragmentation work aims at.
FRAG_METRICS = {
    "unusable_index_order3_mean": ("/1000", "Unusable free space index, order 3, mean"),
    "unusable_index_order3_max": ("/1000", "Unusable free space index, order 3, max"),
    "unusable_index_order9_mean": ("/1000", "Unusable free space index, order 9, mean"),
    "unusable_index_order9_max": ("/1000", "Unusable free space index, order 9, max"),
    "order3_fail_pct": ("%", "Samples where order 3 would fail %"),
    "order9_fail_pct": ("%", "Samples where order 9 would fail %"),
    "fragmentation_index_order3_mean": ("/1000", "Fragmentation index, order 3, mean"),
    "fragmentation_index_order3_max": ("/1000", "Fragmentation index, order 3, max"),
    "fragmentation_index_order9_mean": ("/1000", "Fragmentation index, order 9, mean"),
    "fragmentation_index_order9_max": ("/1000", "Fragmentation index, order 9, max"),
}
GROUPS["frag"] = "frag"


def frag_metric(column):
    unit, title = FRAG_METRICS[column]
    return Metric(f"frag.{column}", "lower", unit, title, "frag")


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
    except DatasetError as exc:
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
    except DatasetError as exc:
        if "vmstat" in str(exc):        # no run has procfs samples: no vmstat metrics
            return [], ["no selected run has vmstat samples: no vmstat metrics"]
        raise


# The events a kind of stall is timed by: a run that recorded them and has no row had none.
STALL_EVENTS = {
    "direct_compaction": ("mm_compaction_try_to_compact_pages", "mm_compaction_begin",
                          "mm_compaction_end"),
    "direct_reclaim": ("mm_vmscan_direct_reclaim_begin", "mm_vmscan_direct_reclaim_end"),
    "kcompactd": ("mm_compaction_begin", "mm_compaction_end"),
    "kswapd": ("mm_vmscan_kswapd_wake", "mm_vmscan_kswapd_sleep"),
}


def _zero_stalls(dataset, runs):
    """0 stalls and 0 ms for a kind a run recorded the events of and never stalled in.

    stalls.per_run has no row for such a run; without this its comparison would
    leave it out ("no value") instead of counting a run that never stalled.
    """
    from kmemscope.dataset.reader import table_runs

    tables = table_runs(dataset)
    for run_id, target in runs.items():
        for kind, events in STALL_EVENTS.items():
            if f"stalls.{kind}.stalls" in target:
                continue
            if all(run_id in tables.get(e, {}) for e in events):
                target[f"stalls.{kind}.stalls"] = 0
                target[f"stalls.{kind}.total_ms"] = 0.0


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
    except DatasetError:
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
    rows, more = _run_query("vmstat_rates.per_minute", dataset, run_ids, None, engine)
    notes += more
    per = {}
    for r in rows:
        per.setdefault((r["run_id"], r["minute"]), {})[r["name"]] = r["delta"]
    series = {}
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
