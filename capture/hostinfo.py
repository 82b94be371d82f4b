"""Facts about the host that go into manifest.json (docs/record.md)."""
import os
import re
import socket
import subprocess

from kmemscope.capture.tracefs import selected

# The vm sysctls that shape the allocator's behaviour; absent ones are null.
VM_SYSCTLS = ("defrag_mode", "min_free_kbytes", "watermark_scale_factor", "watermark_boost_factor",
              "percpu_pagelist_high_fraction", "compaction_proactiveness", "extfrag_threshold",
              "nr_hugepages", "zone_reclaim_mode", "compact_unevictable_allowed")
THP_DIR = "/sys/kernel/mm/transparent_hugepage"
THP_FILES = ("enabled", "defrag", "shmem_enabled", "khugepaged/defrag",
             "khugepaged/max_ptes_none", "khugepaged/pages_to_scan")


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _thp(name):
    """A THP setting's current choice ('always [madvise] never' -> 'madvise')."""
    text = _read(os.path.join(THP_DIR, name))
    return None if text is None else selected(text)


def _int_or_text(text):
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return text


def pagetypeinfo_layout(text):
    """(pageblock_order, pages_per_block, migratetype names) from /proc/pagetypeinfo; a
    value that is not a small number is None (the manifest says unknown)."""
    order = pages = None
    names = []
    for line in text.splitlines():
        if line.startswith("Page block order:"):
            order = _small_int(line.split(":", 1)[1])
        elif line.startswith("Pages per block:"):
            pages = _small_int(line.split(":", 1)[1])
        elif line.startswith("Number of blocks type"):
            names = line[len("Number of blocks type"):].split()
    return order, pages, names


def _small_int(text):
    text = text.strip()
    return int(text) if re.fullmatch(r"[0-9]{1,9}", text) else None


def meminfo_kb(field="MemTotal"):
    text = _read("/proc/meminfo") or ""
    m = re.search(r"^%s:\s+(\d+) kB" % re.escape(field), text, re.M)
    return int(m.group(1)) if m else None


def trace_cmd_version(binary="trace-cmd"):
    try:
        out = subprocess.run([binary, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"version\s+(\S+)", out)
    return m.group(1) if m else None


def clock_ticks_per_s():
    """USER_HZ, the unit of /proc/stat and of /proc/PID/stat's utime and stime."""
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return None


def collect():
    """The host part of the manifest: identity, memory layout, allocator settings."""
    u = os.uname()
    order, pages, migratetypes = pagetypeinfo_layout(_read("/proc/pagetypeinfo") or "")
    return {
        "host": socket.gethostname(),
        "uname": {"sysname": u.sysname, "release": u.release, "version": u.version,
                  "machine": u.machine},
        "boot_id": _read("/proc/sys/kernel/random/boot_id"),
        "cpus": os.cpu_count(),
        "cpus_online": _read("/sys/devices/system/cpu/online"),
        "memory_kb": meminfo_kb("MemTotal"),
        "page_size": os.sysconf("SC_PAGE_SIZE"),
        "clock_ticks_per_s": clock_ticks_per_s(),
        "pageblock_order": order,
        "pages_per_block": pages,
        "migratetypes": migratetypes,
        "thp": {name: _thp(name) for name in THP_FILES},
        "vm": {name: _int_or_text(_read("/proc/sys/vm/" + name)) for name in VM_SYSCTLS},
    }
