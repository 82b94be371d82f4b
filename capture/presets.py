"""What each preset records, and how -e SYSTEM:EVENT[:FILTER] adds to it.

A preset is a list of events (whole systems allowed), optional in-kernel
filters, and which events carry a kernel stack. Filters that test gfp bits get
their values from the live mm_page_alloc format (eventformat.py).

Kernel stacks come two ways. "stacktrace": True puts one on every recorded
event (trace-cmd -T). STACK as an event's fourth element puts one only on the
events of that entry, through an event trigger `stacktrace if FILTER` (trace-cmd
-R): the trigger carries the event's own filter because a trigger without a
condition runs before the event filter, on every hit of the tracepoint. A
kernel without the stacktrace trigger (before 3.14, or built without it) gets
-T instead, and record says so.

Rates: the measured ones come from a 2-CPU 6.18 VM (benchmarks/
capture_overhead.py: page-fault churn; a TCP loopback transfer for
atomic-origins); busy production hosts see more per CPU, so size --buffer-kb
from the lost-event report at the end of a trial recording.
"""
import os

from kmemscope.capture import eventformat
from kmemscope.common.errors import CaptureError

# An event entry's fourth element: a kernel stack on each of its events (and no other).
STACK = "stack"

# What the trace needs to count pages scanned and reclaimed as vmstat's pgscan_* and pgsteal_*
# do (queries/vmstat_trace.sql): one event per batch of up to 32 pages taken off an inactive
# LRU list, only while reclaim runs, and the memcg-limit reclaims those counters leave out.
RECLAIM_COUNTS = [
    ("vmscan", "mm_vmscan_lru_shrink_inactive"),
    ("vmscan", "mm_vmscan_memcg_reclaim_begin"), ("vmscan", "mm_vmscan_memcg_reclaim_end"),
]
PRESETS: dict = {
    "default": {
        "purpose": "every page allocation and free, fallbacks, pcp drains, compaction and "
                   "reclaim wake-ups: the full picture for one host",
        "rate": "one event per page allocated and per page freed: 5x10^5 events/s measured under "
                "page-fault churn on 2 CPUs (2.7 MiB/s of compressed trace.dat); +31.7% of the churn's "
                "CPU under trace-cmd record, +25.5% under an idle flight recorder (95% interval "
                "+23.1 to +28.5%, quiet machine, docs/record.md): nearly all of it mm_page_alloc "
                "and mm_page_free, one each per page; `standard` drops them",
        "buffer_kb": 8192,
        "events": [
            ("kmem", "mm_page_alloc"), ("kmem", "mm_page_free"),
            ("kmem", "mm_page_alloc_extfrag"), ("kmem", "mm_page_alloc_zone_locked"),
            ("kmem", "mm_page_pcpu_drain"), ("compaction", "*"),
            ("vmscan", "mm_vmscan_wakeup_kswapd"), ("vmscan", "mm_vmscan_kswapd_wake"),
            ("vmscan", "mm_vmscan_direct_reclaim_begin"), ("vmscan", "mm_vmscan_direct_reclaim_end"),
        ] + RECLAIM_COUNTS,
    },
    "standard": {
        "purpose": "what kernel patch postings tabulate (THP and compaction success, stalls, "
                   "atomic allocations by order, reclaim scans) without an event per order-0 "
                   "page: every high-order or non-blocking "
                   "allocation (filtered in the kernel), fallbacks, compaction, kswapd and "
                   "kcompactd wake-ups and sleeps, direct reclaim and the reclaim scan counts. "
                   "Keeps atomic_orders, compaction, fallback_pollution, reclaim_wakes, stalls "
                   "(kswapd runs included), thp (the fault model, a model with bounds without "
                   "frees) and vmstat_trace; gives up hot_pfns, pfn_reuse, pcp, "
                   "highatomic.served and alloc_origins.outstanding (every order-0 allocation "
                   "and every free, per-CPU list drains, allocations off the free lists under "
                   "the zone lock), and summary counts only the allocations recorded",
        "rate": "order-0 blocking allocations (page faults) and all frees are not recorded: "
                "under page-fault churn it keeps what high-order keeps (~300 events/s measured "
                "for that preset) and reclaim batches while reclaim runs; the tracepoint of mm_page_alloc still runs for every "
                "allocation and tests the filter in the kernel: +7.6% of the churn's CPU under "
                "trace-cmd record, +9.8% under an idle flight recorder (95% interval +5.2 to "
                "+14.6%, quiet machine, docs/record.md)",
        "buffer_kb": 4096,
        "events": [
            ("kmem", "mm_page_alloc", "order > 0 || !(gfp_flags & {__GFP_DIRECT_RECLAIM})"),
            ("kmem", "mm_page_alloc_extfrag"), ("compaction", "*"),
            ("vmscan", "mm_vmscan_wakeup_kswapd"), ("vmscan", "mm_vmscan_kswapd_wake"),
            ("vmscan", "mm_vmscan_kswapd_sleep"),
            ("vmscan", "mm_vmscan_direct_reclaim_begin"), ("vmscan", "mm_vmscan_direct_reclaim_end"),
        ] + RECLAIM_COUNTS,
    },
    "light": {
        "purpose": "busy production hosts, a flight recorder left on: the allocator's slow path "
                   "only (fallbacks, compaction, kswapd wake-ups with the order and gfp of the "
                   "allocation that woke it, direct reclaim stalls); no event on the fast path",
        "rate": "near 0 while allocations are served from the free lists: no event fires per "
                "page; an idle flight recorder cost page-fault churn -1.1% of its CPU, i.e. nothing "
                "measurable (95% interval -2.3 to +3.8%, quiet machine, docs/record.md)",
        "buffer_kb": 4096,
        "events": [
            ("kmem", "mm_page_alloc_extfrag"), ("compaction", "*"),
            ("vmscan", "mm_vmscan_wakeup_kswapd"), ("vmscan", "mm_vmscan_kswapd_wake"),
            ("vmscan", "mm_vmscan_kswapd_sleep"),
            ("vmscan", "mm_vmscan_direct_reclaim_begin"), ("vmscan", "mm_vmscan_direct_reclaim_end"),
        ],
    },
    "high-order": {
        "purpose": "which high-order (order > 0) and non-blocking (no __GFP_DIRECT_RECLAIM) "
                   "allocations a host makes, with fallbacks and compaction: every allocation's "
                   "tracepoint runs and tests the filter in the kernel",
        "rate": "order-0 user faults and all frees are filtered out in the kernel: ~300 events/s "
                "measured under page-fault churn; the tracepoint runs for every allocation all "
                "the same: +6.2% of the churn's CPU under trace-cmd record (95% interval +3.3 to "
                "+12.7%), as much under a flight recorder (docs/record.md)",
        "buffer_kb": 4096,
        "events": [
            ("kmem", "mm_page_alloc", "order > 0 || !(gfp_flags & {__GFP_DIRECT_RECLAIM})"),
            ("kmem", "mm_page_alloc_extfrag"), ("compaction", "*"),
        ],
    },
    "atomic-origins": {
        "purpose": "who makes non-blocking high-order allocations (high-atomic reserve "
                   "candidates): those allocations with kernel stack traces",
        "rate": "tens per second on a quiet host; network-heavy hosts far more (TCP page frags are "
                "order-3 and non-blocking: 8x10^4 allocations/s over loopback here); each carries a stack",
        "buffer_kb": 8192,
        "stacktrace": True,
        "events": [
            ("kmem", "mm_page_alloc", "order > 0 && !(gfp_flags & {__GFP_DIRECT_RECLAIM})"),
        ],
    },
    "costly-stalls": {
        "purpose": "who stalls at costly orders and for how long (the stalls and alloc_origins "
                   "analyses together): allocations and direct-compaction attempts of order > 3 "
                   "with kernel stacks, and the begin and end of every direct compaction, direct "
                   "reclaim, kcompactd and kswapd run",
        "rate": "near 0 on a quiet host: one event per costly allocation (large page-cache folio, "
                "THP, hugetlb page), compaction attempt and run, reclaim stall and kswapd "
                "wake; the squeeze of examples/workload_stalls.py gave 1.7x10^4 events, 7x10^3 "
                "of them with stacks, in 37 s here (1.1 MiB of trace.dat)",
        "buffer_kb": 8192,
        "events": [
            ("kmem", "mm_page_alloc", "order > 3", STACK),
            ("compaction", "mm_compaction_try_to_compact_pages", "order > 3", STACK),
            ("compaction", "mm_compaction_begin"), ("compaction", "mm_compaction_end"),
            ("compaction", "mm_compaction_kcompactd_wake"),
            ("vmscan", "mm_vmscan_direct_reclaim_begin"), ("vmscan", "mm_vmscan_direct_reclaim_end"),
            ("vmscan", "mm_vmscan_kswapd_wake"), ("vmscan", "mm_vmscan_kswapd_sleep"),
        ],
    },
    "compaction": {
        "purpose": "compaction and reclaim only: why huge pages fail or stall, at little cost",
        "rate": "near 0 when idle; bursts while compaction scans: a full compact_memory over 2 GiB "
                "of shredded memory gave 1.2x10^4 events in 0.6 s here",
        "buffer_kb": 8192,
        "events": [
            ("compaction", "*"),
            ("vmscan", "mm_vmscan_wakeup_kswapd"), ("vmscan", "mm_vmscan_kswapd_wake"),
            ("vmscan", "mm_vmscan_kswapd_sleep"),
            ("vmscan", "mm_vmscan_direct_reclaim_begin"), ("vmscan", "mm_vmscan_direct_reclaim_end"),
            ("oom", "compact_retry"),
        ] + RECLAIM_COUNTS,
    },
}


class EventSpec:
    """One `-e` for trace-cmd: SYSTEM:EVENT (EVENT may be '*') with an optional filter.

    trigger: an event trigger for trace-cmd -R (`stacktrace if FILTER`), or None.
    """

    def __init__(self, system, event, filter=None, required=True, trigger=None):
        self.system, self.event, self.filter, self.required = system, event, filter, required
        self.trigger = trigger
        self.stack_fallback = False     # wanted a stack trigger the kernel lacks: -T instead

    @property
    def name(self):
        return self.system if self.event == "*" else "%s:%s" % (self.system, self.event)

    @property
    def trigger_path(self):
        """events/SYSTEM/EVENT/trigger, relative to tracefs."""
        return "events/%s/%s/trigger" % (self.system, self.event)

    def trace_cmd_args(self):
        args = ["-e", self.name]
        if self.filter:
            args += ["-f", self.filter]
        if self.trigger:
            args += ["-R", self.trigger]
        return args

    def as_dict(self):
        out = {"event": self.name, "filter": self.filter}
        if self.trigger:
            out["trigger"] = self.trigger
        return out


def parse_event_arg(text):
    """'kmem:mm_page_alloc:order > 2' -> EventSpec; '-e compaction' means the whole system."""
    parts = text.split(":", 2)
    system = parts[0].strip()
    event = parts[1].strip() if len(parts) > 1 and parts[1].strip() else "*"
    flt = parts[2].strip() if len(parts) > 2 and parts[2].strip() else None
    if not system or any(c.isspace() for c in system + event):
        raise CaptureError("bad event %r" % text, "write -e SYSTEM:EVENT[:FILTER], e.g. -e kmem:mm_page_alloc")
    return EventSpec(system, event, flt, required=True)


def _fill_filter(template, tracefs, system, event):
    """Replace each {FLAG} in `template` with its hex value from the live format."""
    if template is None or "{" not in template:
        return template
    fmt = eventformat.read_format(tracefs, system, event)
    table = eventformat.print_flags(fmt, "gfp_flags")
    out, rest = [], template
    while "{" in rest:
        head, _, tail = rest.partition("{")
        flag, _, rest = tail.partition("}")
        if flag not in table:
            raise CaptureError("this kernel's %s:%s format has no %s flag" % (system, event, flag),
                               "use another preset or give -e with your own filter")
        out += [head, "0x%x" % table[flag]]
    return "".join(out + [rest])


def stack_trigger(filter):
    """The trigger that records a kernel stack on exactly the events `filter` keeps."""
    return "stacktrace if %s" % filter if filter else "stacktrace"


def has_stacktrace_trigger(tracefs, system, event):
    """True when this kernel can run the stacktrace trigger on SYSTEM:EVENT.

    A trigger file lists the commands this kernel has ('# Available triggers:')
    only while it holds no trigger; one that holds some lists those, and then
    the trigger section of tracefs's README tells.
    """
    try:
        with open(os.path.join(tracefs, "events", system, event, "trigger")) as f:
            head = f.read(4096)
    except OSError:
        return False
    lines = head.splitlines()
    if lines and lines[0].startswith("# Available triggers"):
        return len(lines) > 1 and "stacktrace" in lines[1].lstrip("#").split()
    try:
        with open(os.path.join(tracefs, "README")) as f:
            readme = f.read()
    except OSError:
        return False
    start = readme.find("Format: <trigger>")
    end = readme.find("example:", start)
    return start >= 0 and "stacktrace" in readme[start:end].split()


def event_exists(tracefs, spec):
    base = os.path.join(tracefs, "events", spec.system)
    return os.path.isdir(base if spec.event == "*" else os.path.join(base, spec.event))


def resolve(tracefs, preset, extra_events):
    """Events to record: the preset's (if any) then the -e ones; returns (specs, missing, stacktrace).

    A preset event that this kernel lacks is skipped and reported in `missing`
    (older kernels lack some compaction and vmscan events); an -e event that it
    lacks is an error. A STACK entry gets its stacktrace trigger where the
    kernel has one; otherwise stacktrace is True (a stack on every event) and
    the spec's stack_fallback is True, for record to say so.
    """
    specs, missing, stacktrace = [], [], False
    if preset is not None:
        if preset not in PRESETS:
            raise CaptureError("unknown preset %r" % preset, "choose one of: " + ", ".join(PRESETS))
        stacktrace = PRESETS[preset].get("stacktrace", False)
        for entry in PRESETS[preset]["events"]:
            system, event = entry[0], entry[1]
            template = entry[2] if len(entry) > 2 else None
            spec = EventSpec(system, event, None, required=False)
            if not event_exists(tracefs, spec):
                missing.append(spec.name)
                continue
            spec.filter = _fill_filter(template, tracefs, system, event)
            if len(entry) > 3 and entry[3] == STACK:
                if has_stacktrace_trigger(tracefs, system, event):
                    spec.trigger = stack_trigger(spec.filter)
                else:
                    stacktrace = spec.stack_fallback = True
            specs.append(spec)
    for spec in extra_events:
        # An -e for an event the preset already has replaces it (its filter wins).
        specs = [s for s in specs if s.name != spec.name]
        if not event_exists(tracefs, spec):
            raise CaptureError("this kernel has no event %s" % spec.name,
                               "list the events with `trace-cmd list -e`")
        specs.append(spec)
    if not specs:
        raise CaptureError("no event to record", "give --preset or -e SYSTEM:EVENT")
    return specs, missing, stacktrace


# What a flight recorder's own process costs while it waits for a trigger, beside the cost of
# the preset's tracepoints in the traced tasks (the rates above): benchmarks/flight_idle.py.
FLIGHT_IDLE_COST = ("--flight, waiting for a trigger: the recorder's own checks, heartbeats "
                    "and /proc samples took 0.23% of a CPU with light, 0.26% with standard "
                    "(600 s each at load average 2.7-8.3 on 2 shared cores; 0.20-0.22% beside "
                    "page-fault churn; benchmarks/flight_idle.py, docs/record.md), "
                    "beside the preset's tracepoints above")


def describe():
    """Text for `--list-presets`: each preset's purpose, expected rate and events."""
    lines = []
    for name, p in PRESETS.items():
        events = ", ".join((e[0] if e[1] == "*" else "%s:%s" % (e[0], e[1])) +
                           (" (with kernel stacks)" if len(e) > 3 and e[3] == STACK else "")
                           for e in p["events"])
        lines.append("%s\n  purpose: %s\n  rate:    %s\n  events:  %s%s\n  buffer:  %d KiB per CPU"
                     % (name, p["purpose"], p["rate"], events,
                        " (with kernel stacks)" if p.get("stacktrace") else "", p["buffer_kb"]))
    lines.append(FLIGHT_IDLE_COST)
    return "\n\n".join(lines)
