"""The native decoder (parsers/_tracedat.c, parsers/native/) when memory runs out, and its build.

The decoder routes every allocation it makes through a test hook (parsers/native/alloc.h): armed
with N, the Nth allocation from then on fails (or, persistent, it and every later one). The
sweeps below count the allocations a real decode makes, then fail each one in turn, in a child
process so that a crash shows up as a signal with the allocation number that caused it. Every
failure must end in the module's DecoderMemoryError (a MemoryError and a TraceFileError), and
every batch handed out before it must still be valid Arrow data. A second check lowers the
process's address-space limit (RLIMIT_AS) so that real allocations fail anywhere, libtracecmd's
and pyarrow's included; the command line is checked end to end with KMEMSCOPE_FAIL_ALLOC.
"""
import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import requirements
from kmrun import kmemscope, one_error_line

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "kmem-compaction" / "trace.dat"
PUBLIC = ROOT.parent / "shared" / "fixtures" / "public"
# Public traces whose events have string, stack and __data_loc columns (the example has only
# integers), one v7 zstd and one v6 uncompressed; used when present.
RICH_FIXTURES = ["langraph_v7_zstd148_le_l8_4cpu_5.15.dat", "lisa_sched_load_v6_le_l8_6cpu.dat"]


def _child(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, __file__, *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout)


def _check_sweep(proc):
    assert proc.returncode == 0, (
        f"sweep child exited with {proc.returncode} (negative: killed by a signal); "
        f"last lines:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary.startswith("swept "), proc.stdout[-2000:]
    return summary


# ---------------------------------------------------------------- allocation-failure sweeps

@pytest.mark.slow   # an allocation-failure sweep: a decode per failing allocation
@pytest.mark.parametrize("persistent", [False, True], ids=["one-failure", "all-after"])
def test_every_allocation_of_a_decode_fails_cleanly(persistent):
    traces = [EXAMPLE] + [PUBLIC / f for f in RICH_FIXTURES if (PUBLIC / f).is_file()]
    for trace in traces:
        summary = _check_sweep(_child("sweep-decode", trace, int(persistent)))
        print(trace.name, summary)


@pytest.mark.slow   # an allocation-failure sweep: a decode per failing allocation
def test_allocations_while_opening_a_trace_fail_cleanly():
    # Opening parses the formats with libtraceevent first (most of a second), so this sweep
    # fails the first allocations (every kind of site: the plan table, the first events'
    # plans, columns and names) and then a spread over the rest, not every one.
    _check_sweep(_child("sweep-open", EXAMPLE, 40, 12))


@pytest.mark.slow   # an allocation-failure sweep: a decode per failing allocation
def test_parse_command_reports_decoder_out_of_memory_in_one_line(tmp_path):
    counts = _child("count", EXAMPLE)
    assert counts.returncode == 0, counts.stderr
    opening, decoding = map(int, counts.stdout.split())
    ds = tmp_path / "ds"
    kmemscope("parse", "-q", ROOT / "examples" / "memory-pressure", "-o", ds, timeout=300)
    before = _tree_digest(ds)
    # Opening is on one thread, so these hit known sites; decoding runs one thread per core
    # and which allocation comes Nth varies, but one fails all the same.
    for spec in ["1", "3", str(opening // 2), str(opening + 1), str(opening + decoding // 2),
                 f"{opening + decoding - 5}+"]:
        env = dict(os.environ, KMEMSCOPE_FAIL_ALLOC=spec)
        proc = kmemscope("parse", EXAMPLE, "-o", ds, env=env, check=False, timeout=300)
        assert "out of memory" in one_error_line(proc), spec
        for bad in ("internal error", "died", "Traceback", "signal"):
            assert bad not in proc.stderr, (spec, proc.stderr)
        assert _tree_digest(ds) == before, f"{spec}: the failed parse changed the dataset"


def _tree_digest(root):
    import hashlib

    h = hashlib.sha256()
    for p in sorted(Path(root).rglob("*")):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.mark.slow   # an allocation-failure sweep: a decode per failing allocation
def test_address_space_limit_never_crashes_the_decoder():
    # Each child lowers RLIMIT_AS to what it has mapped plus `extra` MiB and decodes the
    # example on one thread: libtracecmd, libtraceevent, pyarrow and the decoder all see
    # real allocation failures. Errors are fine; a signal is not.
    outcomes = []
    for phase, extra in [("open", 2), ("open", 24), ("decode", 0), ("decode", 12), ("decode", 40),
                         ("decode", 64), ("decode", 4096)]:
        proc = _child("rlimit", EXAMPLE, phase, extra, timeout=300)
        assert proc.returncode == 0, (phase, extra, proc.returncode, proc.stderr[-2000:])
        outcome = proc.stdout.strip().splitlines()[-1]
        assert outcome.startswith(("ok ", "failed ")), (phase, extra, proc.stdout, proc.stderr)
        outcomes.append(outcome)
    # The widest limit decodes everything, and at least one limit made the decode fail.
    assert outcomes[-1] == f"ok {_child_rows(EXAMPLE)}", outcomes
    assert any(o.startswith("failed ") for o in outcomes), outcomes


def _child_rows(trace):
    proc = _child("rows", trace)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


def test_misuse_from_python_raises_instead_of_crashing():
    proc = _child("misuse", EXAMPLE)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert proc.stdout.strip().splitlines()[-1] == "misuse: all raised", proc.stdout


# ---------------------------------------------------------------- full memos

def _report_stacks(trace):
    """(cpu, ts ns, addresses) of every kernel_stack record in `trace-cmd report -t`."""
    import re

    line_re = re.compile(r"^\s*.*-\d+\s+\[(\d+)\]\s+(\d+\.\d+):\s+(\w+):")
    frame_re = re.compile(r"^=> (?:\S+ \()?([0-9a-f]+)\)?$")
    text = subprocess.run(["trace-cmd", "report", "-t", "-i", str(trace)], capture_output=True,
                          text=True, check=True).stdout
    out, current = [], None
    for line in text.splitlines():
        m = frame_re.match(line.strip()) if current is not None else None
        if m:
            current[2].append(int(m.group(1), 16))
            continue
        if current is not None:
            out.append((current[0], current[1], tuple(current[2])))
            current = None
        m = line_re.match(line)
        if m and m.group(3) == "kernel_stack":
            current = (int(m.group(1)), int(m.group(2).replace(".", "")), [])
    if current is not None:
        out.append((current[0], current[1], tuple(current[2])))
    return out


def test_a_full_stack_memo_still_gives_every_record_its_own_stack(tmp_path):
    """The decoder built with MEMO_MAX_BYTES=20000: its memos fill after a few hundred
    stacks, and every stack met after that gets a new id and stacks row each time. Every
    kernel_stack record of a public trace with 20,700 stacks must still name a row holding
    exactly its addresses (oracle: trace-cmd report -t), and no id two rows."""
    import json
    from collections import Counter

    trace = PUBLIC / RICH_FIXTURES[0]
    if not trace.is_file():
        requirements.skip("fixtures", f"{trace.name} is not in {PUBLIC}")
    gcc, pkg = shutil.which("gcc"), shutil.which("pkg-config")
    if not gcc or not pkg:
        requirements.skip("setup", "gcc or pkg-config is not installed (make setup)")
    import sysconfig

    libs = _setup_list("NATIVE_LIBS")
    flags = subprocess.run([pkg, "--cflags", "--libs", *libs], capture_output=True, text=True,
                           check=True).stdout.split()
    so = tmp_path / ("_tracedat" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([gcc, "-shared", "-fPIC", "-DMEMO_MAX_BYTES=20000", *_setup_list("NATIVE_CFLAGS"),
                    f"-I{sysconfig.get_paths()['include']}", f"-I{ROOT / 'parsers' / 'native'}",
                    *[str(ROOT / f) for f in _setup_list("NATIVE_SOURCES")], *flags, "-o", str(so)],
                   check=True, capture_output=True, text=True)
    proc = _child("small-memo", trace, so)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    ids = [sid for sid, _ in got["stacks"]]
    assert sorted(ids) == list(range(1, len(ids) + 1))       # 1..n, each once
    by_id = dict((sid, tuple(a)) for sid, a in got["stacks"])
    mine = Counter((cpu, ts, by_id[sid]) for cpu, ts, sid in got["records"])
    assert mine == Counter(_report_stacks(trace))
    # The memo was full: some stack is held under more than one id.
    assert len(set(by_id.values())) < len(by_id) < len(got["records"])


# ---------------------------------------------------------------- build checks

def _setup_list(name):
    """A literal (a list, a version) assigned at the top of setup.py (so the checks follow
    the real build)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"setup.py has no {name}")


def test_extension_exports_only_its_init_function():
    if not shutil.which("nm"):
        requirements.skip("setup", "nm (binutils) is not installed")
    from kmemscope.parsers import _tracedat

    out = subprocess.run(["nm", "-D", "--defined-only", _tracedat.__file__], capture_output=True,
                         text=True, check=True).stdout
    symbols = sorted(line.split()[-1] for line in out.splitlines() if line.strip())
    # no library function is overridden (libtraceevent's tep_parse_kallsyms once was)
    assert symbols == ["PyInit__tracedat"], symbols


def test_the_decoder_uses_only_libtraceevents_public_api():
    """No libtracecmd (whose public API cannot open a file without parsing every kallsyms
    symbol): the module does not link it, and every libtraceevent function it calls is
    declared in libtraceevent's installed public headers, so no private symbol is declared
    by hand. The oracle: the linker's view of the built module (readelf, nm)."""
    import re

    if not shutil.which("nm") or not shutil.which("readelf") or not shutil.which("pkg-config"):
        requirements.skip("setup", "nm, readelf (binutils) or pkg-config is not installed")
    from kmemscope.parsers import _tracedat

    so = _tracedat.__file__
    needed = subprocess.run(["readelf", "-d", so], capture_output=True, text=True,
                            check=True).stdout
    assert "libtracecmd" not in needed, needed
    undefined = subprocess.run(["nm", "-D", "--undefined-only", so], capture_output=True,
                               text=True, check=True).stdout.split()
    calls = sorted({s.split("@")[0] for s in undefined if re.match(r"(tep|kbuffer|tracecmd)_", s)})
    assert calls, "the module calls no libtraceevent function?"
    flags = subprocess.run(["pkg-config", "--cflags-only-I", "libtraceevent"], capture_output=True,
                           text=True, check=True).stdout.split()
    folders = [Path(f[2:]) for f in flags] + [Path("/usr/include/traceevent")]
    public = "".join(h.read_text() for d in folders if d.is_dir() for h in d.glob("*.h"))
    private = [c for c in calls if not re.search(rf"\b{c}\s*\(", public)]
    assert not private, f"called but not in libtraceevent's public headers: {private}"


def test_the_build_names_the_libtraceevent_versions_it_supports(tmp_path):
    """An older libtraceevent than setup.py's LIBTRACEEVENT_SUPPORTED: one line, no build."""
    fake = tmp_path / "pkg-config"
    fake.write_text("#!/bin/sh\ncase \"$1\" in --modversion) echo 1.1.0;; *) exit 1;; esac\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    proc = subprocess.run([sys.executable, "setup.py", "--name"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    supported = _setup_list("LIBTRACEEVENT_SUPPORTED")
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        f"kmemscope: error: libtraceevent 1.1.0: the decoder supports libtraceevent "
        f"{supported} and later (run `make setup`)"], proc.stderr


def test_sources_compile_without_warnings():
    import sysconfig

    gcc, pkg = shutil.which("gcc"), shutil.which("pkg-config")
    if not gcc or not pkg:
        requirements.skip("setup", "gcc or pkg-config is not installed (make setup)")
    libs = _setup_list("NATIVE_LIBS")
    cflags = subprocess.run([pkg, "--cflags", *libs], capture_output=True, text=True)
    if cflags.returncode:
        requirements.skip("setup", f"pkg-config cannot find {' '.join(libs)} (make setup)")
    flags = _setup_list("NATIVE_CFLAGS")
    for wanted in ("-Wall", "-Wextra", "-Wshadow", "-fvisibility=hidden", "-O2", "-std=gnu11"):
        assert wanted in flags, f"setup.py's NATIVE_CFLAGS lacks {wanted}"
    assert "-Wno-unused-function" not in flags
    for source in _setup_list("NATIVE_SOURCES"):
        proc = subprocess.run([gcc, "-fsyntax-only", "-fPIC", "-Werror", *flags, *cflags.stdout.split(),
                               f"-I{sysconfig.get_paths()['include']}", f"-I{ROOT / 'parsers' / 'native'}",
                               str(ROOT / source)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{source}:\n{proc.stderr}"


# ---------------------------------------------------------------- the children

def _open(path):
    from kmemscope.parsers.tracedat import TraceFile

    return TraceFile(path)


def _decoders(tf, batch_rows):
    """Decoders over a prefix of every segment: its first compressed chunk, or 16 pages."""
    from kmemscope.parsers import _tracedat

    lay = tf.layout
    compression = "none" if lay.version < 7 else lay.compression
    pages = {b.name: b.page_size for b in lay.buffers}
    work = []
    for seg in tf.segments():
        if seg.chunks:
            work.append((seg, (seg.cpu, seg.offset, seg.length, 1)))
        else:
            work.append((seg, (seg.cpu, seg.offset, min(seg.length, 16 * pages[seg.buffer]), 0)))

    stacks = _tracedat.Stacks()     # one stacks table for every decoder, as a parse has

    def make(seg):
        return _tracedat.Decoder(tf.native, tf.path, pages[seg.buffer], compression,
                                 batch_rows=batch_rows, ts_offset=lay.ts_offset, stacks=stacks)
    make.stacks = stacks
    return work, make


def _import(batches, rows):
    """Take batches into pyarrow as the parser does, and check every buffer and offset.
    Batches of the stacks table, (schema, array), count as event id "stacks"."""
    import pyarrow as pa

    for batch in batches:
        event_id = batch[0] if len(batch) == 3 else "stacks"
        batch = pa.RecordBatch._import_from_c_capsule(*batch[-2:])
        batch.validate(full=True)
        rows[event_id] = rows.get(event_id, 0) + batch.num_rows


def _decode_prefix(tf, batch_rows=512):
    """Decode the prefix; returns rows per event id. Lets any exception through."""
    work, make = _decoders(tf, batch_rows)
    rows, decoders = {}, {}
    for seg, args in work:
        dec = decoders.get(seg.buffer) or decoders.setdefault(seg.buffer, make(seg))
        _import(dec.decode(*args), rows)
        _import(make.stacks.take(), rows)
    for dec in decoders.values():
        _import(dec.finish(), rows)
    _import(make.stacks.finish(), rows)
    return rows, decoders


def _is_decoder_oom(exc):
    from kmemscope.parsers import _tracedat

    return (isinstance(exc, _tracedat.DecoderMemoryError) and isinstance(exc, MemoryError)
            and "out of memory" in str(exc))


def main_sweep_decode(path, persistent):
    from kmemscope.parsers import _tracedat

    persistent = bool(int(persistent))
    tf = _open(path)
    _tracedat._alloc_fault(-1)
    baseline, _ = _decode_prefix(tf)
    total = _tracedat._alloc_fault(0)
    assert total > 0 and sum(baseline.values()) > 0, (total, baseline)
    failures = 0
    for n in range(1, total + 2):
        print(n, flush=True)
        _tracedat._alloc_fault(n, persistent)
        decoders = {}
        try:
            rows, decoders = _decode_prefix(tf)
        except Exception as exc:
            counted = _tracedat._alloc_fault(0)
            assert _is_decoder_oom(exc), f"allocation {n}: {exc!r}"
            assert counted >= n, f"allocation {n}: failed after only {counted} allocations"
            failures += 1
            continue
        counted = _tracedat._alloc_fault(0)
        # A failed allocation must never go unnoticed, and a clean run must decode everything.
        assert counted < n, f"allocation {n} of {counted} failed, yet the decode succeeded"
        assert rows == baseline, f"allocation hook {n}: rows {rows} != {baseline}"
    # After a failure part-way through, a decoder refuses to go on instead of exporting the
    # half-appended record.
    work, make = _decoders(tf, 512)
    seg, args = work[0]
    dec = make(seg)
    _tracedat._alloc_fault(3, True)
    try:
        dec.decode(*args)
    except MemoryError:
        pass
    finally:
        _tracedat._alloc_fault(0)
    for call in (lambda: dec.decode(*args), dec.finish):
        try:
            call()
        except _tracedat.TraceFileError as exc:
            assert "earlier error" in str(exc), exc
        else:
            raise AssertionError("a failed decoder went on decoding")
    dec.stats()
    print(f"swept {total} allocations of {path.name}: {failures} failed cleanly, "
          f"{sum(baseline.values())} rows when none fails")


def main_sweep_open(path, first, spread):
    from kmemscope.common.errors import TraceFileError
    from kmemscope.parsers import _tracedat

    _tracedat._alloc_fault(-1)
    _open(path)
    total = _tracedat._alloc_fault(0)
    first, spread = int(first), int(spread)
    numbers = sorted(set(range(1, min(first, total) + 1))
                     | {1 + i * (total - 1) // spread for i in range(spread + 1)} | {total + 1})
    for n in numbers:
        print(n, flush=True)
        for persistent in (False, True):
            _tracedat._alloc_fault(n, persistent)
            try:
                _open(path)
            except TraceFileError as exc:
                assert _tracedat._alloc_fault(0) >= n
                assert "out of memory" in str(exc), f"allocation {n}: {exc}"
            else:
                assert _tracedat._alloc_fault(0) < n, f"allocation {n} failed, yet the open succeeded"
    print(f"swept {len(numbers)} of {total} allocations opening {path.name}")


def main_count(path):
    """Allocations made opening the trace, then decoding it the way `kmemscope parse` does."""
    from kmemscope.parsers import _tracedat

    _tracedat._alloc_fault(-1)
    tf = _open(path)
    opening = _tracedat._alloc_fault(-1)
    tf.decode(lambda i: (lambda table, batch: None))
    print(opening, _tracedat._alloc_fault(0))


def main_rows(path):
    tf = _open(path)
    rows = []
    tf.decode(lambda i: (lambda table, batch: rows.append(batch.num_rows)), threads=1)
    print(sum(rows))


def main_misuse(path):
    """Objects used before or twice initialised, and segments outside the file."""
    from kmemscope.parsers import _tracedat as t

    from kmemscope.parsers import layout

    p = str(path)
    lay = layout.read_layout(p, t.decompress)
    page = lay.buffers[0].page_size
    args = (p, layout.read_metadata(lay, t.decompress), lay.cpu_count, lay.long_size,
            lay.big_endian)

    def trace():
        return t.Trace(*args)

    blank_trace, blank_decoder = t.Trace.__new__(t.Trace), t.Decoder.__new__(t.Decoder)
    blank_stacks = t.Stacks.__new__(t.Stacks)
    cases = [
        (RuntimeError, blank_stacks.take), (RuntimeError, blank_stacks.finish),
        (RuntimeError, blank_stacks.count), (RuntimeError, lambda: t.Stacks().__init__()),
        (TypeError, lambda: t.Decoder(trace(), p, page, "zstd", stacks="not a Stacks")),
        (TypeError, lambda: t.Decoder(trace(), p, page, "zstd", stacks=blank_stacks)),
        (RuntimeError, blank_trace.events),
        (RuntimeError, blank_trace.print_flags),
        (RuntimeError, lambda: blank_decoder.decode(0, 0, 0, 0)),
        (RuntimeError, blank_decoder.finish), (RuntimeError, blank_decoder.stats),
        (RuntimeError, lambda: t.Decoder(blank_trace, p, page, "zstd")),
        (RuntimeError, lambda: trace().__init__(*args)),
        (ValueError, lambda: t.Trace(p, args[1], 4, 3, False)),
        (AttributeError, lambda: t.Trace(p, "not metadata", 4, 8, False)),
        (t.TraceFileError, lambda: t.Decoder(trace(), p, page, "zstd").decode(0, 1 << 40, 100, 1)),
        (t.TraceFileError, lambda: t.Decoder(trace(), p, page, "zstd").decode(0, 0, 1 << 62, 1)),
        (TypeError, lambda: t.Decoder(trace(), p, page, "zstd", event_ids=["x"])),
        (ValueError, lambda: t.Decoder(trace(), p, page, "zstd", batch_rows=0)),
    ]
    for i, (expected, call) in enumerate(cases):
        try:
            call()
        except expected as exc:
            print(i, type(exc).__name__, exc)
        else:
            raise AssertionError(f"case {i} did not raise {expected.__name__}")
    print("misuse: all raised")


def main_rlimit(path, phase, extra):
    import resource

    def vm_size():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmSize:"))

    import pyarrow  # noqa: F401  (loaded before the limit: this checks decoding, not imports)

    tf = _open(path) if phase == "decode" else None
    limit = vm_size() + (int(extra) << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    rows = []
    try:
        if tf is None:
            tf = _open(path)
        tf.decode(lambda i: (lambda table, batch: rows.append(batch.num_rows)), threads=1)
    except Exception as exc:  # any error is fine (MemoryError, no thread...): a signal is not
        print(f"failed {type(exc).__name__}: {exc}")
    else:
        print(f"ok {sum(rows)}")


def main_small_memo(path, so):
    """Decode with the extension at `so` (built with a small MEMO_MAX_BYTES); print the
    kernel_stack records (cpu, ts, stack_id) and the stacks rows (stack_id, addresses)."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("kmemscope.parsers._tracedat", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["kmemscope.parsers._tracedat"] = mod
    import kmemscope.parsers

    kmemscope.parsers._tracedat = mod
    from kmemscope.parsers.tracedat import TraceFile

    tf = TraceFile(path)
    assert tf.native.__class__ is mod.Trace
    records, stacks = [], []

    def sink(table, batch):
        if table == "kernel_stack":
            records.extend(zip(*(batch.column(c).to_pylist() for c in ("cpu", "ts", "stack_id"))))
        elif table == "stacks":
            stacks.extend(zip(batch.column("stack_id").to_pylist(),
                              batch.column("addresses").to_pylist()))
    tf.decode(lambda i: sink, threads=2)
    print(json.dumps({"records": records, "stacks": stacks}))


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    {"sweep-decode": main_sweep_decode, "sweep-open": main_sweep_open, "count": main_count,
     "rows": main_rows, "rlimit": main_rlimit, "misuse": main_misuse,
     "small-memo": main_small_memo}[mode](Path(rest[0]), *rest[1:])
