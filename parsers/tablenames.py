"""Dataset table names for a trace's events: a safe alphabet, never a path or SQL.

System and event names come from the trace's format section, which a hostile
or corrupt trace can fill with anything (`../../x`, `/etc`, quotes, NUL-free
binary). A table name becomes a directory of the dataset and a SQL view name,
so it is restricted to `[a-z][a-z0-9_]*` (at most 64 characters). A name that
is not safe as it is, or that would collide with a table kmemscope writes
itself, is rewritten, and a suffix with the event id keeps rewritten names
apart. The mapping is recorded in the `event_tables` table of every run; the
original names stay in `event_tables` and `print_flags`.
"""
import re

# Tables that kmemscope writes for every run or from a bundle's /proc samples,
# and the public views and derived tables the analyses define beside them
# (queries/lib/, queries/runner.py): an event may not shadow any of them. The
# analyses' internal views start with "_", which no table name can.
RESERVED_TABLES = frozenset({
    "runs", "print_flags", "lost_events", "event_tables", "stacks",
    "vmstat", "pagetypeinfo_free", "pagetypeinfo_blocks", "buddyinfo", "zoneinfo",
    "extfrag_unusable_index", "extfrag_index",
    "psi_memory", "cpu_stat", "kthread_cpu", "mthp_stats",
    "run_metrics", "run_facts", "migratetype_names", "extfrag_ownership", "query_params",
    "page_pairs", "pfn_allocs", "alloc_stacks", "alloc_stack_frames",
    "alloc_stack_ids", "stack_pairing", "frame_skip", "subsystem_map", "stack_frames",
    "stack_origins", "origin_allocs",
    "gfp_bits", "compaction_status_names", "page_allocs", "page_alloc_classes",
    "vmstat_deltas", "vmstat_intervals", "thp_fault_attempts", "direct_compactions", "trace_windows",
    "thp_fault_success", "thp_fault_unsure", "compaction_success", "compaction_runs",
    "compaction_run_pairing",
    "stack_callsites",
})
_SAFE = re.compile(r"[a-z][a-z0-9_]{0,63}")


def is_safe(name):
    """True when `name` may be used as a table directory and view name as it is."""
    return bool(_SAFE.fullmatch(name)) and name not in RESERVED_TABLES


def _squash(text):
    """Lower-case, every run of other characters to one '_', at most 40 characters."""
    text = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    return text[:40] or "x"


def name_tables(formats):
    """Map event id -> table name for [(event_id, system, event), ...].

    Events are named after themselves; `system__event` only where two systems
    share an event name. Anything unsafe becomes `ev_<squashed>_<id>`.
    """
    per_name: dict = {}
    for _, _, event in formats:
        per_name[event] = per_name.get(event, 0) + 1
    names, used = {}, set()
    for event_id, system, event in sorted(formats):
        wanted = event if per_name[event] == 1 else f"{system}__{event}"
        if not is_safe(wanted) or wanted in used:
            wanted = f"ev_{_squash(system)}__{_squash(event)}_{int(event_id)}"
        names[event_id] = wanted
        used.add(wanted)
    return names
