"""Per-run kernel facts that the analyses need and that no event field carries.

Everything here follows queries/KERNEL-ERAS.md; the section is
named at each rule. The facts are computed once per run in Python from the runs
table (kernel_release, arch, pageblock_order, manifest) and registered in DuckDB
as the table `run_facts`, together with `migratetype_names`. Gfp bit positions
are NOT decided here: the SQL reads them from the run's own print_flags.

run_facts columns:
  run_id, labels            the run and its labels (MAP)
  kernel_release            uname -r as recorded
  highatomic_era            'A' or 'B' (section 3): which gfp rule makes an allocation
                            eligible for the high-atomic reserve
  highatomic_era_note       why that era was chosen
  extfrag_era               '4.19-6.9', '6.10-6.14' or '6.15+' (section 1, extfrag)
  pageblock_order           from runs.pageblock_order, else the manifest, else the arch default
  pageblock_order_source    'runs' or 'assumed: ...'
  first_ts, last_ts         ns, the capture window
  duration_s                seconds of the capture window
"""
import json
import re

# Section 4: the enum order that /proc/pagetypeinfo follows. Types 0-3 never
# move; what 4 and 5 are depends on CONFIG_CMA and CONFIG_MEMORY_ISOLATION,
# which only the run's manifest (its pagetypeinfo header) can tell.
FALLBACK_MIGRATETYPES = {0: "Unmovable", 1: "Movable", 2: "Reclaimable", 3: "HighAtomic",
                         4: "CMA or Isolate", 5: "Isolate"}

# Fields of a known event that a kernel of some era does not declare (KERNEL-ERAS.md): a run
# without one reads it as NULL. Every other field of a known event every era declares.
ERA_FIELDS = {"mm_page_alloc_zone_locked": {"percpu_refill"},          # 5.19+
              "mm_compaction_kcompactd_wake": {"highest_zoneidx"},     # classzone_idx < 5.8
              "mm_compaction_wakeup_kcompactd": {"highest_zoneidx"}}

_RELEASE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def parse_release(release):
    """'6.1.73-foo' -> (6, 1, 73); None when the string is not a kernel release."""
    m = _RELEASE.match(release or "")
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def highatomic_era(release):
    """Section 3: era A (ALLOC_HARDER from __GFP_ATOMIC) or era B (ALLOC_HIGHATOMIC).

    Era B is upstream 6.3+, backported to 5.15.171 and to 6.1.y somewhere
    between .73 and .116 (.72 lacks it, .116 has it).
    """
    v = parse_release(release)
    if v is None:
        return "B", "kernel release unknown: assumed era B (upstream 6.3+)"
    major, minor, patch = v
    if (major, minor) >= (6, 3):
        return "B", "6.3+: order>0, __GFP_HIGH, no __GFP_DIRECT_RECLAIM, no __GFP_NOMEMALLOC"
    if (major, minor) == (6, 1):
        if patch >= 116:
            return "B", "6.1.116+ carries the 6.3 ALLOC_HIGHATOMIC backport"
        if patch <= 72:
            return "A", "6.1.72 and older: ALLOC_HARDER from __GFP_ATOMIC"
        return "B", ("6.1.73-6.1.115: the backport point is not pinned down; assumed era B "
                     "(override with era=A)")
    if (major, minor) == (5, 15) and patch >= 171:
        return "B", "5.15.171+ carries the 6.3 ALLOC_HIGHATOMIC backport"
    return "A", "before 6.3: ALLOC_HARDER from __GFP_ATOMIC without __GFP_NOMEMALLOC"


def extfrag_era(release):
    """Section 1: what mm_page_alloc_extfrag.change_ownership means."""
    v = parse_release(release)
    if v is None or v[:2] >= (6, 15):
        return "6.15+"
    if v[:2] >= (6, 10):
        return "6.10-6.14"
    return "4.19-6.9"


OWNERSHIP_MEANING = {
    ("4.19-6.9", 1): "claim: fallback block now belongs to the requester",
    ("4.19-6.9", 0): ("steal without claim: remainder moved to the requester's list, "
                      "so later allocations from that block are not traced"),
    ("6.10-6.14", 1): "claim: fallback block now belongs to the requester",
    ("6.10-6.14", 0): "steal without claim: remainder stays on its block's list (each later one traced)",
    ("6.15+", 1): "claim (__rmqueue_claim)",
    ("6.15+", 0): "steal (__rmqueue_steal) or compaction capture into a foreign block",
}


def default_pageblock_order(arch):
    """Section 5: pageblock_order is the PMD huge page order with 4 KiB pages (9)."""
    return 9, f"assumed: 9 (2 MiB pageblocks with 4 KiB pages on {arch or 'unknown arch'})"


def manifest_migratetypes(manifest):
    """Migratetype names in pagetypeinfo (enum) order from a run's manifest JSON, or None."""
    if not manifest:
        return None
    try:
        data = json.loads(manifest)
    except (TypeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    candidates = [data.get("migratetype_names"), data.get("migratetypes")]
    for key in ("pagetypeinfo", "kernel", "mm"):
        sub = data.get(key)
        if isinstance(sub, dict):
            candidates += [sub.get("migratetype_names"), sub.get("migratetypes")]
    for names in candidates:
        if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
            return names
    return None


def manifest_pageblock_order(manifest):
    try:
        data = json.loads(manifest) if manifest else None
    except (TypeError, ValueError):
        return None
    if isinstance(data, dict):
        for key in ("pageblock_order",):
            if isinstance(data.get(key), int):
                return data[key]
        sub = data.get("pagetypeinfo")
        if isinstance(sub, dict) and isinstance(sub.get("pageblock_order"), int):
            return sub["pageblock_order"]
    return None


def run_facts(runs):
    """runs: list of dicts (rows of the runs table) -> (facts rows, migratetype rows).

    Migratetype names come from runs.migratetypes, else the manifest's
    pagetypeinfo list, else the section 4 enum (marked as such in `source`).
    """
    facts, mts = [], []
    for r in runs:
        era, note = highatomic_era(r.get("kernel_release"))
        pbo, pbo_src = r.get("pageblock_order"), "runs"
        if pbo is None:
            pbo = manifest_pageblock_order(r.get("manifest"))
            pbo_src = "manifest"
        if pbo is None:
            pbo, pbo_src = default_pageblock_order(r.get("arch"))
        first, last = r.get("first_ts"), r.get("last_ts")
        duration = (last - first) / 1e9 if first is not None and last is not None and last > first else None
        facts.append({
            "run_id": r["run_id"],
            "kernel_release": r.get("kernel_release"),
            "highatomic_era": era,
            "highatomic_era_note": note,
            "extfrag_era": extfrag_era(r.get("kernel_release")),
            "pageblock_order": int(pbo),
            "pageblock_order_source": pbo_src,
            "first_ts": first,
            "last_ts": last,
            "duration_s": duration,
        })
        names, source = r.get("migratetypes"), "runs.migratetypes"
        if not names:
            names, source = manifest_migratetypes(r.get("manifest")), "manifest (pagetypeinfo order)"
        if names:
            for i, n in enumerate(names):
                mts.append({"run_id": r["run_id"], "migratetype": i, "name": n, "source": source})
        else:
            for i, n in FALLBACK_MIGRATETYPES.items():
                mts.append({"run_id": r["run_id"], "migratetype": i, "name": n,
                            "source": "KERNEL-ERAS.md section 4 enum (no manifest)"})
    return facts, mts
