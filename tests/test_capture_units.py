"""Capture's pure parts: the flag-expression evaluator, format tables, presets,
units, the command line's errors, and that capture imports only the standard
library. None of these needs root.
"""
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import requirements

from kmemscope.capture import cexpr, eventformat, presets, tracefs, units
from kmemscope.common.errors import CaptureError

ROOT = Path(__file__).resolve().parent.parent
LIVE_FORMAT = Path("/sys/kernel/tracing/events/kmem/mm_page_alloc/format")

# Bit numbers of the live 6.18 kernel's gfp table, as read by hand from its
# format (queries/KERNEL-ERAS.md, section 2, "Live 6.18 table").
GFP_BITS_6_18 = {"__GFP_DMA": 0, "__GFP_HIGHMEM": 1, "__GFP_DMA32": 2, "__GFP_MOVABLE": 3,
                 "__GFP_RECLAIMABLE": 4, "__GFP_HIGH": 5, "__GFP_IO": 6, "__GFP_FS": 7,
                 "__GFP_ZERO": 8, "__GFP_DIRECT_RECLAIM": 10, "__GFP_KSWAPD_RECLAIM": 11,
                 "__GFP_WRITE": 12, "__GFP_NOWARN": 13, "__GFP_RETRY_MAYFAIL": 14,
                 "__GFP_NOFAIL": 15, "__GFP_NORETRY": 16, "__GFP_MEMALLOC": 17, "__GFP_COMP": 18,
                 "__GFP_NOMEMALLOC": 19, "__GFP_HARDWALL": 20, "__GFP_THISNODE": 21,
                 "__GFP_ACCOUNT": 22, "__GFP_ZEROTAGS": 23, "__GFP_NO_OBJ_EXT": 24}

# Synthetic: a 4.19-style table, where gfp values are hex literals with a u
# suffix (no 4.19 kernel is at hand; the shape follows its include/trace/events/mmflags.h).
FORMAT_4_19 = r'''name: mm_page_alloc
ID: 400
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:struct page * page;	offset:8;	size:8;	signed:0;
	field:unsigned int order;	offset:16;	size:4;	signed:0;
	field:gfp_t gfp_flags;	offset:20;	size:4;	signed:0;
	field:int migratetype;	offset:24;	size:4;	signed:1;

print fmt: "page=%p pfn=%lu order=%d migratetype=%d gfp_flags=%s", REC->page, REC->page ? (unsigned long)((REC->page) - vmemmap_base) : 0, REC->order, REC->migratetype, (REC->gfp_flags) ? __print_flags(REC->gfp_flags, "|", {(unsigned long)((( gfp_t)0x80000u)|(( gfp_t)0x20u)|(( gfp_t)0x400000u)), "GFP_ATOMIC"}, {(unsigned long)(( gfp_t)0x200000u), "__GFP_DIRECT_RECLAIM"}, {(unsigned long)(( gfp_t)0x400000u), "__GFP_KSWAPD_RECLAIM"}, {(unsigned long)(( gfp_t)0x20u), "__GFP_HIGH"}) : "none"
'''


@pytest.mark.parametrize("text, value", [
    ("(( gfp_t)((((1UL))) << (10)))", 1 << 10),
    ("(( gfp_t)(((((1UL))) << (10))|((((1UL))) << (11))))", 0xc00),
    ("( unsigned long)((( gfp_t)0x80000u)|(( gfp_t)0x20u))", 0x80020),
    ("((1UL << 5) | (1UL << 11)) & ~(1UL << 11)", 0x20),
    ("~0UL", (1 << 64) - 1),
    ("-1", (1 << 64) - 1),
    ("( gfp_t)0", 0),
    ("010", 8),
    ("2 * 3 + 1", 7),
])
def test_cexpr_evaluates_the_flag_subset_of_c(text, value):
    assert cexpr.evaluate(text) == value


@pytest.mark.parametrize("text", [
    "vmemmap_base", "((struct page *)0)", "foo(1)", "1 <<", "(1", "\"GFP\"", "1 << 64", "1; 2",
])
def test_cexpr_refuses_anything_else(text):
    with pytest.raises(CaptureError):
        cexpr.evaluate(text)


def test_live_gfp_table_matches_the_kernels_bit_numbers():
    if not LIVE_FORMAT.exists() or not os.access(LIVE_FORMAT, os.R_OK):
        requirements.skip("tracefs", f"no readable {LIVE_FORMAT} on this machine")
    table = eventformat.print_flags(LIVE_FORMAT.read_text(), "gfp_flags")
    if not os.uname().release.startswith("6.18."):
        requirements.skip("tracefs", f"the hand-read bit table is for 6.18 kernels, not {os.uname().release}")
    single = {name: value for name, value in table.items() if name in GFP_BITS_6_18}
    assert single == {name: 1 << bit for name, bit in GFP_BITS_6_18.items()}
    # Composites are unions of single bits: GFP_ATOMIC = HIGH | KSWAPD_RECLAIM on 6.x.
    assert table["GFP_ATOMIC"] == (1 << 5) | (1 << 11)
    assert list(table)[0] == "GFP_TRANSHUGE"  # table order is kept: composites first


def test_old_style_format_table():
    table = eventformat.print_flags(FORMAT_4_19, "gfp_flags")
    assert table == {"GFP_ATOMIC": 0x480020, "__GFP_DIRECT_RECLAIM": 0x200000,
                     "__GFP_KSWAPD_RECLAIM": 0x400000, "__GFP_HIGH": 0x20}
    with pytest.raises(CaptureError):
        eventformat.print_flags(FORMAT_4_19, "order")


def test_high_order_filter_takes_its_bit_from_the_format(tmp_path):
    """A fake tracefs with the 4.19 table: the filter must use that kernel's bit."""
    event = tmp_path / "events" / "kmem" / "mm_page_alloc"
    event.mkdir(parents=True)
    (event / "format").write_text(FORMAT_4_19)
    (tmp_path / "events" / "kmem" / "mm_page_alloc_extfrag").mkdir()
    specs, missing, stack = presets.resolve(str(tmp_path), "high-order", [])
    assert specs[0].filter == "order > 0 || !(gfp_flags & 0x200000)"
    assert missing == ["compaction"] and not stack
    assert [s.name for s in specs] == ["kmem:mm_page_alloc", "kmem:mm_page_alloc_extfrag"]


def test_light_preset_has_no_event_on_the_allocators_fast_path():
    """light is what a host can leave on: no event that fires per page allocated or freed
    (those cost a page-fault-bound workload 6% and more even when a filter drops them)."""
    per_page = {("kmem", "mm_page_alloc"), ("kmem", "mm_page_free"),
                ("kmem", "mm_page_alloc_zone_locked"), ("kmem", "mm_page_pcpu_drain"),
                ("kmem", "mm_page_free_batched"), ("kmem", "*")}
    events = {entry[:2] for entry in presets.PRESETS["light"]["events"]}
    assert not events & per_page, events & per_page
    assert ("kmem", "mm_page_alloc_extfrag") in events and ("compaction", "*") in events


def test_event_arguments_and_overrides(tmp_path):
    for name in ("mm_page_alloc", "mm_page_free"):
        (tmp_path / "events" / "kmem" / name).mkdir(parents=True)
    (tmp_path / "events" / "kmem" / "mm_page_alloc" / "format").write_text(FORMAT_4_19)
    spec = presets.parse_event_arg("kmem:mm_page_alloc:order >= 9")
    assert (spec.system, spec.event, spec.filter) == ("kmem", "mm_page_alloc", "order >= 9")
    assert spec.trace_cmd_args() == ["-e", "kmem:mm_page_alloc", "-f", "order >= 9"]
    assert presets.parse_event_arg("compaction").trace_cmd_args() == ["-e", "compaction"]
    specs, _, _ = presets.resolve(str(tmp_path), "default", [spec])
    allocs = [s for s in specs if s.name == "kmem:mm_page_alloc"]
    assert len(allocs) == 1 and allocs[0].filter == "order >= 9"
    with pytest.raises(CaptureError, match="no event kmem:nope"):
        presets.resolve(str(tmp_path), None, [presets.parse_event_arg("kmem:nope")])
    with pytest.raises(CaptureError):
        presets.parse_event_arg(":x")


def test_every_preset_is_documented_with_purpose_and_rate():
    text = presets.describe()
    for name, preset in presets.PRESETS.items():
        assert name in text and preset["purpose"] and preset["rate"] and preset["buffer_kb"] > 0


@pytest.mark.parametrize("text, seconds", [("30s", 30), ("2m", 120), ("500ms", 0.5), ("1.5", 1.5),
                                            ("1h", 3600)])
def test_durations(text, seconds):
    assert units.parse_duration(text) == seconds


@pytest.mark.parametrize("text, size", [("2G", 2 << 30), ("512M", 512 << 20), ("64k", 64 << 10),
                                        ("1000", 1000), ("1GiB", 1 << 30)])
def test_sizes(text, size):
    assert units.parse_size(text) == size


def test_bad_units_are_capture_errors():
    for bad in ("abc", "5x", ""):
        with pytest.raises(CaptureError):
            units.parse_duration(bad)
        with pytest.raises(CaptureError):
            units.parse_size(bad)


def test_host_flags_follow_what_the_host_refuses():
    assert tracefs.trace_cmd_flags({"ftrace_enabled_writable": False,
                                    "ftrace_pid_filter_usable": False}) == ["-d", "--no-filter"]
    assert tracefs.trace_cmd_flags({"ftrace_enabled_writable": True,
                                    "ftrace_pid_filter_usable": True}) == []
    assert tracefs.trace_cmd_flags({"ftrace_enabled_writable": None,
                                    "ftrace_pid_filter_usable": False}) == ["--no-filter"]


def test_report_stat_blocks_parse_per_cpu():
    from kmemscope.capture.tracecmd import parse_report_stat
    text = ("cpus=2\n\nKernel buffer statistics:\n  Note: ...\n\nCPU: 0\nentries: 626\n"
            "overrun: 14489\ncommit overrun: 0\nbytes: 27736\noldest event ts:   906.735481\n"
            "dropped events: 0\nread events: 718918\n\nCPU: 1\nentries: 0\noverrun: 1505\n"
            "dropped events: 3\nread events: 233175\n\n\nCPU0 data recorded at offset=0x1000\n")
    stats = parse_report_stat(text)
    assert stats[0]["overrun"] == 14489 and stats[0]["read_events"] == 718918
    assert stats[1] == {"entries": 0, "overrun": 1505, "dropped_events": 3, "read_events": 233175}
    assert stats[0]["oldest_event_ts"] == 906.735481


def _record(*args):
    return subprocess.run([sys.executable, "-m", "kmemscope.capture", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, words", [
    (["--duration", "soon", "-o", "x"], ["bad duration"]),
    (["--bogus"], ["unrecognized arguments: --bogus"]),
    (["--duration", "1s"], ["no output given", "-o BUNDLE"]),
    (["-o", "x", "--label", "novalue"], ["bad label"]),
    (["-o", "x", "--preset", "heavy"], ["invalid choice"]),
])
def test_command_line_errors_are_one_line(args, words):
    result = _record(*args)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kmemscope: error: "), result.stderr
    for word in words:
        assert word in lines[0]


def test_help_and_list_presets_exit_zero():
    assert _record("--help").returncode == 0
    listed = _record("--list-presets")
    assert listed.returncode == 0 and "atomic-origins" in listed.stdout


def _imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module


def test_capture_imports_only_the_standard_library_and_what_the_pyz_holds(tmp_path):
    """Every import of capture/ is the standard library's or a module the record-only .pyz
    ships (its own listing, read from a fresh build)."""
    import zipfile

    pyz = tmp_path / "record.pyz"
    subprocess.run([sys.executable, str(ROOT / "capture" / "build_pyz.py"), str(pyz)], check=True,
                   capture_output=True, timeout=120)
    shipped = {n[:-len(".py")].replace("/", ".").removesuffix(".__init__")
               for n in zipfile.ZipFile(pyz).namelist() if n.endswith(".py")}
    assert "kmemscope.capture.recorder" in shipped, sorted(shipped)
    stdlib = set(sys.stdlib_module_names)
    for path in sorted((ROOT / "capture").glob("*.py")):
        for name in _imports(path):
            assert name.split(".")[0] in stdlib or name in shipped, \
                "%s imports %s, which the .pyz does not hold" % (path.name, name)


def test_importing_capture_pulls_no_heavy_module():
    code = ("import sys, kmemscope.capture.command, kmemscope.capture.recorder\n"
            "heavy = [m for m in sys.modules if m.split('.')[0] in ('pyarrow', 'duckdb', 'click', 'rich')]\n"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("argv, command", [
    (["-o", "B", "--", "sleep", "1", "-x"], ["sleep", "1", "-x"]),
    # `kmemscope record` goes through click, which swallows the `--`.
    (["-o", "B", "sleep", "1", "-x"], ["sleep", "1", "-x"]),
    (["-o", "B", "-e", "kmem:mm_page_alloc", "true"], ["true"]),
    (["-o", "B", "--duration", "5s"], []),
])
def test_command_follows_dashdash_or_the_first_non_option(argv, command):
    from kmemscope.capture.command import parse_command_line
    args, got = parse_command_line(argv)
    assert args.output == "B" and got == command


def test_a_missing_trace_cmd_is_one_clear_line(tmp_path):
    result = _record("-o", str(tmp_path / "b"), "--trace-cmd", "/nonexistent/trace-cmd")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    # Without root the root check speaks first; with root, the missing tool does.
    assert result.stderr.startswith(("kmemscope: error: trace-cmd is not installed",
                                     "kmemscope: error: recording needs root"))
    assert not (tmp_path / "b").exists()


# ---------------------------------------------------------------- ring buffer sizes

TRACEFS_DATA = ROOT / "tests" / "data" / "tracefs"
FRESH = TRACEFS_DATA / "fresh-boot-6.18"
TRACED = TRACEFS_DATA / "after-record-6.18"


def _reading(directory, name):
    return (directory / name).read_text().rstrip("\n")


def test_buffer_size_readings_of_a_fresh_and_a_traced_kernel():
    assert tracefs.parse_buffer_size(_reading(FRESH, "buffer_size_kb")) == (7, 1408)
    assert tracefs.parse_buffer_size(_reading(FRESH, "buffer_total_size_kb")) == (14, 2816)
    assert tracefs.parse_buffer_size(_reading(FRESH, "per_cpu_cpu0_buffer_size_kb")) == (7, None)
    assert tracefs.parse_buffer_size(_reading(TRACED, "buffer_size_kb")) == (1410, None)
    assert tracefs.parse_buffer_size(_reading(TRACED, "buffer_total_size_kb")) == (2820, None)
    assert tracefs.parse_buffer_size("32771\n") == (32771, None)
    for bad in ("X", "", "7 (expanded:)", "-1", "1.5"):
        with pytest.raises(ValueError):
            tracefs.parse_buffer_size(bad)


def test_header_page_gives_the_data_bytes_per_sub_buffer():
    assert tracefs.parse_data_size(_reading(FRESH, "events_header_page")) == 4080
    assert tracefs.parse_data_size("") is None and tracefs.parse_data_size(None) is None


def _resize_table():
    rows = []
    for line in (TRACEFS_DATA / "resize-6.18.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            rows.append(tuple(int(w) for w in line.split()))
    return rows


@pytest.mark.parametrize("data_bytes, written, read_back", _resize_table())
def test_resized_size_matches_what_the_kernel_read_back(data_bytes, written, read_back):
    assert tracefs.resized_kb(written, data_bytes) == read_back
    # Writing back what was read keeps the size (what restoring a snapshot does).
    assert tracefs.resized_kb(read_back, data_bytes) == read_back


def test_effective_size_of_a_fresh_boot_is_what_a_tracer_would_get():
    data = tracefs.parse_data_size(_reading(FRESH, "events_header_page"))
    per_cpu = {0: _reading(FRESH, "per_cpu_cpu0_buffer_size_kb"),
               1: _reading(FRESH, "per_cpu_cpu1_buffer_size_kb")}
    top = _reading(FRESH, "buffer_size_kb")
    # The per-CPU files read 7; the buffer grows to the kernel's 1408 KiB request, 1410 read back
    # (after-record-6.18 is what the same machine read once it had traced).
    expected = int(_reading(TRACED, "per_cpu_cpu0_buffer_size_kb"))
    assert tracefs.effective_buffer_kb(top, per_cpu, data) == {0: expected, 1: expected}
    assert tracefs.effective_buffer_kb(top, per_cpu) == {0: 1408, 1: 1408}  # no header_page
    # Traced: the per-CPU files are the truth; 'X' means they differ.
    assert tracefs.effective_buffer_kb("8195", {0: "8195", 1: "8195"}, data) == {0: 8195, 1: 8195}
    assert tracefs.effective_buffer_kb("X", {0: "8195", 1: "2003"}, data) == {0: 8195, 1: 2003}
    assert tracefs.effective_buffer_kb(None, {0: None, 1: "junk"}, data) == {0: None, 1: None}


def _fake_tracefs(root, source):
    """A directory laid out like tracefs, holding the files read from a real one."""
    for name in ("tracing_on", "current_tracer", "buffer_percent", "saved_cmdlines_size",
                 "tracing_cpumask", "trace_clock", "buffer_size_kb", "buffer_total_size_kb"):
        (root / name).write_text((source / name).read_text())
    (root / "events").mkdir()
    (root / "events" / "enable").write_text(_reading(source, "events_enable") + "\n")
    (root / "events" / "header_page").write_text((source / "events_header_page").read_text())
    for cpu in (0, 1):
        (root / "per_cpu" / ("cpu%d" % cpu)).mkdir(parents=True)
        (root / "per_cpu" / ("cpu%d" % cpu) / "buffer_size_kb").write_text(
            (source / ("per_cpu_cpu%d_buffer_size_kb" % cpu)).read_text())
    (root / "options").mkdir()
    for line in (source / "options.txt").read_text().splitlines():
        name, value = line.split()
        (root / "options" / name).write_text(value + "\n")
    return root


def _files(root):
    return {str(p.relative_to(root)): p.read_text().strip() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_restore_on_a_fresh_boot_that_never_traced_writes_nothing(tmp_path):
    from kmemscope.capture import state
    fake = _fake_tracefs(tmp_path, FRESH)
    before = _files(fake)
    snap = state.snapshot(str(fake), ["kmem"])
    assert snap["buffer_size_kb"] == {"0": "1410", "1": "1410"}
    assert snap["buffer_size_kb_text"] == "7 (expanded: 1408)"
    assert state.restore(snap) == []
    # Same values everywhere (restore stops and restarts tracing_on, which expands nothing);
    # above all no buffer size was written, so the token buffer stays unexpanded.
    assert _files(fake) == before
    assert (fake / "per_cpu" / "cpu0" / "buffer_size_kb").read_text() == "7\n"


def test_restore_after_tracing_a_fresh_boot_leaves_the_size_a_tracer_would_get(tmp_path):
    from kmemscope.capture import state
    fake = _fake_tracefs(tmp_path, FRESH)
    snap = state.snapshot(str(fake), ["kmem"])
    # What trace-cmd -b 8192 leaves behind (8195 read back, see resize-6.18.txt).
    for name in ("buffer_size_kb", "per_cpu/cpu0/buffer_size_kb", "per_cpu/cpu1/buffer_size_kb"):
        (fake / name).write_text("8195\n")
    (fake / "trace_clock").write_text("local global counter uptime perf [mono] mono_raw boot tai x86-tsc\n")
    assert state.restore(snap) == []
    # Not the token 7 the per-CPU files read at boot, and what the real machine read afterwards.
    for cpu in (0, 1):
        assert (fake / "per_cpu" / ("cpu%d" % cpu) / "buffer_size_kb").read_text() == \
            _reading(TRACED, "per_cpu_cpu%d_buffer_size_kb" % cpu)
    assert tracefs.selected((fake / "trace_clock").read_text()) == "local"


def test_buffer_writes_compare_sizes_not_text():
    from kmemscope.capture.state import buffer_writes
    saved = {"0": "1410", "1": "1410"}
    assert buffer_writes(saved, {0: 1410, 1: 1410}) == {}
    assert buffer_writes(saved, {0: 8195, 1: 1410}) == {"0": 1410}
    assert buffer_writes({"0": None, "1": "X"}, {0: 8195, 1: 8195}) == {}
    # A state file written before sizes were saved this way holds the raw per-CPU text.
    assert buffer_writes({"0": "8195"}, {0: 1410}) == {"0": 8195}


# ---------------------------------------------------------------- free space

def test_free_space_refusal_shows_the_margin_and_the_room_to_start():
    from kmemscope.capture.recorder import START_ROOM, free_space_refusal
    assert START_ROOM == 64 << 20
    # 1 GiB + 40 MiB free is more than --min-free 1G, yet short of what record needs.
    text = free_space_refusal((1 << 30) + (40 << 20), "/var/tmp", 1 << 30)
    assert text == ("only 1.0 GiB free under /var/tmp, 24.0 MiB short of the 1.1 GiB that "
                    "record needs there: the --min-free margin 1.0 GiB + 64.0 MiB to start")
    assert free_space_refusal(200 << 20, "/x", 160 << 20) == (
        "only 200.0 MiB free under /x, 24.0 MiB short of the 224.0 MiB that record needs there: "
        "the --min-free margin 160.0 MiB + 64.0 MiB to start")
    assert free_space_refusal((1 << 30) + START_ROOM, "/x", 1 << 30) is None


def test_size_limit_names_the_lower_of_max_size_and_free_space():
    from kmemscope.capture.recorder import size_limit_text, trace_room
    assert size_limit_text(2 << 30, 10 << 30, "/o", 1 << 30) == "at most 2.0 GiB"
    # 3 GiB free, 1 GiB kept free: 2 GiB to share between the per-CPU files and trace.dat.
    assert trace_room(3 << 30, 1 << 30) == 1 << 30
    assert size_limit_text(2 << 30, 3 << 30, "/o", 1 << 30) == (
        "at most 1.0 GiB of trace data: 3.0 GiB free under /o minus the --min-free margin 1.0 GiB, "
        "halved because trace.dat is merged from per-CPU copies")
    assert trace_room(100 << 20, 1 << 30) == 0


@pytest.mark.parametrize("value", ["9" * 5000, "x", "", "²", "-1", "1.5"])
def test_a_pagetypeinfo_layout_value_that_is_no_small_number_is_unknown(value):
    from kmemscope.capture.hostinfo import pagetypeinfo_layout

    text = (f"Page block order: {value}\nPages per block: {value}\n"
            "Number of blocks type     Unmovable      Movable\n")
    assert pagetypeinfo_layout(text) == (None, None, ["Unmovable", "Movable"])
    assert pagetypeinfo_layout("Page block order: 9\nPages per block:  512\n") == (9, 512, [])


def test_standard_preset_keeps_what_it_says_and_no_order_0_blocking_allocation(tmp_path):
    """standard, between light and default: the analyses its description keeps get every event
    table their sections need from the queries' own headers (the catalog), and each one it gives
    up lacks one or gets it only filtered. Its filter, resolved against the 4.19 format and
    evaluated here in plain Python, drops exactly the order-0 blocking allocations; no other
    event that fires per page is recorded."""
    import re as re_

    from kmemscope.queries import catalog

    preset = presets.PRESETS["standard"]
    events = {entry[1] if entry[1] != "*" else entry[0] + ":*": entry for entry in preset["events"]}
    per_page = {"mm_page_free", "mm_page_alloc_zone_locked", "mm_page_pcpu_drain",
                "mm_page_free_batched", "kmem:*"}
    assert not per_page & set(events)

    event = tmp_path / "events" / "kmem" / "mm_page_alloc"
    event.mkdir(parents=True)
    (event / "format").write_text(FORMAT_4_19)
    specs, _, _ = presets.resolve(str(tmp_path), "standard", [])
    flt = specs[0].filter
    assert specs[0].name == "kmem:mm_page_alloc" and flt
    python = flt.replace("||", " or ").replace("&&", " and ").replace("!(", " not (")
    for order in range(11):
        for gfp in (0, 0x200000, 0x480020, 0x200000 | 0x20):
            kept = eval(python, {}, {"order": order, "gfp_flags": gfp})
            assert bool(kept) == (order > 0 or not gfp & 0x200000), (order, hex(gfp))

    def recorded(table):
        """'whole', 'filtered' or None: how the preset records an event table (procfs and
        other tables that no event fills count as whole)."""
        if table in events:
            return "filtered" if len(events[table]) > 2 else "whole"
        if table.startswith("mm_compaction_"):
            return "whole" if "compaction:*" in events else None
        if table.startswith("mm_") or table == "kernel_stack":
            return None
        return "whole"

    purpose = preset["purpose"]
    kept_text = purpose[purpose.index("Keeps "):purpose.index("gives up ")]
    given_text = purpose[purpose.index("gives up "):]
    names = [n for n, _ in catalog.list_queries()]

    def named(text):
        return [n for n in names if re_.search(r"(?<![\w.])%s(?![\w.])" % re_.escape(n), text)]

    kept, given = named(kept_text), named(given_text)
    assert len(kept) >= 6 and len(given) >= 5, (kept, given)
    for name in kept:
        for sec in catalog.describe(name)["sections"]:
            assert all(recorded(t) for t in sec["requires"]), (name, sec["query"])
            assert not sec["any_of"] or any(recorded(t) for t in sec["any_of"]), (name, sec["query"])
    for name in given:
        secs = catalog.describe(name)["sections"]
        assert any(any(recorded(t) != "whole" for t in sec["requires"]) or
                   (sec["any_of"] and all(recorded(t) != "whole" for t in sec["any_of"]))
                   for sec in secs), name


# ---------------------------------------------------------------- the command's rusage

def test_the_command_is_reaped_with_its_rusage(tmp_path):
    """record's COMMAND is reaped with wait4: what it used is its own (the command's reading
    of itself just before it exits, plus its exit), through poll() as the recorder polls."""
    import json
    import time

    from capture_helpers import RUSAGE_WORKLOAD, assert_rusage_is_the_commands_own
    from kmemscope.capture.workload_command import Command

    script, own = tmp_path / "busy.py", tmp_path / "own.json"
    script.write_text(RUSAGE_WORKLOAD)
    command = Command([sys.executable, str(script), str(own), "0.5"])
    deadline = time.monotonic() + 60
    while command.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert command.returncode == 0
    got = command.rusage()
    assert_rusage_is_the_commands_own(got, json.loads(own.read_text()))
    assert got["system_s"] > 0.1 and got["max_rss_kb"] > 64 << 10
    assert command.poll() == 0 and command.proc.poll() == 0   # Popen waits no more


def test_a_command_stopped_at_the_end_still_gives_its_rusage():
    from kmemscope.capture.workload_command import Command

    command = Command([sys.executable, "-c", "import time; time.sleep(100)"])
    assert command.poll() is None
    command.terminate()
    assert command.wait(30) == -15
    assert command.rusage()["max_rss_kb"] > 0
    command.kill()                         # reaped: no signal goes to a reused pid
