"""Bad input to `kmemscope parse` (the real command line, in a subprocess).

Truncated, empty, random, not-a-trace and byte-flipped files, wrong paths and a dataset path
that is a file: the command exits non-zero with exactly one line on stderr starting
`kmemscope: error:`, no traceback, not killed by a signal, and an existing dataset is left
byte for byte as it was. The inputs are derived from real traces: the committed example and,
where present, a public fixture.
"""
import hashlib
import os
import random
import subprocess
from pathlib import Path

import pytest

import requirements

from conftest import EXAMPLES, PUBLIC_FIXTURES
from kmrun import kmemscope
from oracle_compare import event_counts, read_table_files, work_dirs_left

EXAMPLE = EXAMPLES / "kmem-compaction" / "trace.dat"
SMALL_V6 = PUBLIC_FIXTURES / "trappy_trace_idle_v6_le_l8_6cpu.dat"


def seed_trace():
    for p in (SMALL_V6, EXAMPLE):
        if p.is_file():
            return p
    requirements.skip("setup", "no real trace to derive bad inputs from (examples/ and public fixtures absent)")


def tree_digest(root):
    """sha256 over every file's relative path and content under `root`."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            h.update(str(p.relative_to(root)).encode() + b"\0")
            h.update(p.read_bytes())
        h.update(f"dir:{Path(dirpath).relative_to(root)}:{sorted(dirnames)}".encode())
    return h.hexdigest()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """An existing dataset with one good run in it."""
    ds = tmp_path_factory.mktemp("bad-input") / "ds"
    kmemscope("parse", "-q", seed_trace(), "-o", ds)
    return ds


def assert_clean_failure(proc):
    assert proc.returncode > 0, f"exit status {proc.returncode} (negative: killed by a signal)"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, f"stderr is not one line: {proc.stderr!r}"
    assert lines[0].startswith("kmemscope: error: "), lines[0]
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert not proc.stdout.strip(), f"stdout: {proc.stdout!r}"


def parse_must_fail(path, dataset):
    before = tree_digest(dataset)
    proc = kmemscope("parse", "-q", path, "-o", dataset, check=False, timeout=120)
    assert_clean_failure(proc)
    assert tree_digest(dataset) == before, "the dataset changed"
    return proc


def _bad_files(tmp):
    data = seed_trace().read_bytes()
    n = len(data)
    rng = random.Random(20240611)
    print(f"bad inputs derived from {seed_trace()} ({n} bytes), seed 20240611")
    files = {"empty": b"", "one-byte": data[:1], "magic-only": data[:10],
             "random-4k": bytes(rng.randrange(256) for _ in range(4096)),
             "random-1m": os.urandom(0) + rng.randbytes(1 << 20),
             "text": b"this is not a trace.dat\n" * 100,
             "elf": Path("/bin/true").read_bytes()[:65536]}
    for frac in (0.001, 0.01, 0.1, 0.5, 0.9, 0.999):
        files[f"truncated-{frac}"] = data[:int(n * frac)]
    files["truncated-minus-1"] = data[:-1]
    files["header-zeroed"] = b"\0" * 64 + data[64:]
    flipped = bytearray(data)
    for off in (0, 3, 8, 12, 20, 24, 40):           # magic, version, endianness, long and page size
        flipped[off] ^= 0xff
    files["header-flipped"] = bytes(flipped)
    out = {}
    for name, content in files.items():
        p = tmp / f"{name}.dat"
        p.write_bytes(content)
        out[name] = p
    return out


BAD = ["empty", "one-byte", "magic-only", "random-4k", "random-1m", "text", "elf",
       "truncated-0.001", "truncated-0.01", "truncated-0.1", "truncated-0.5", "truncated-0.9",
       "truncated-0.999", "truncated-minus-1", "header-zeroed", "header-flipped"]


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    return _bad_files(tmp_path_factory.mktemp("bad-files"))


@pytest.mark.parametrize("name", BAD)
def test_bad_trace_gives_one_line_error_and_leaves_dataset_unchanged(name, bad_files, dataset):
    parse_must_fail(bad_files[name], dataset)


def test_many_byte_flipped_files_never_crash_the_command(dataset, tmp_path):
    """Flips that land in the metadata and in the pages: any outcome but a crash or a traceback."""
    data = seed_trace().read_bytes()
    rng = random.Random(7)
    for k in range(6):
        b = bytearray(data)
        for _ in range(64):
            b[rng.randrange(len(b))] = rng.randrange(256)
        p = tmp_path / f"flip{k}.dat"
        p.write_bytes(bytes(b))
        before = tree_digest(dataset)
        proc = kmemscope("parse", "-q", p, "-o", dataset, check=False, timeout=120)
        if proc.returncode:
            assert_clean_failure(proc)
            assert tree_digest(dataset) == before
        else:
            assert proc.stderr == "", proc.stderr


def test_missing_path(dataset, tmp_path):
    proc = parse_must_fail(tmp_path / "no-such-file.dat", dataset)
    assert "no-such-file.dat" in proc.stderr


def test_directory_without_trace_dat(dataset, tmp_path):
    d = tmp_path / "bundle"
    d.mkdir()
    (d / "manifest.json").write_text("{}")
    parse_must_fail(d, dataset)


def test_dataset_path_that_is_a_file(tmp_path):
    target = tmp_path / "not-a-dir"
    target.write_text("x")
    proc = kmemscope("parse", "-q", seed_trace(), "-o", target, check=False)
    assert_clean_failure(proc)
    assert target.read_text() == "x"


def test_parsing_the_same_file_twice_replaces_its_run(tmp_path):
    ds = tmp_path / "ds"
    trace = seed_trace()
    kmemscope("parse", "-q", trace, "-o", ds)
    first = event_counts(ds)
    kmemscope("parse", "-q", trace, "-o", ds)
    runs = [r for t in read_table_files(ds, "runs") for r in t.to_pylist()]
    assert len(runs) == 1, f"{len(runs)} runs after parsing the same file twice"
    assert event_counts(ds) == first
    # event tables + runs, print_flags, lost_events, event_tables
    assert len(list(ds.glob("*/run_id=*"))) == len(first) + 4
    assert not work_dirs_left(ds), "work directories left behind"


def test_a_dead_decoder_s_last_log_line_is_quoted_printable_and_short(tmp_path):
    from kmemscope.parsers.ingest import _last_log_line

    log = tmp_path / "decoder.log"
    assert _last_log_line(log) is None
    log.write_bytes(b"mmap: Invalid argument\n\n" + b"Can not mmap file, will read\x1b[31m " + b"x" * 400 + b"\n\n")
    line = _last_log_line(log)
    assert line.startswith("Can not mmap file, will read?[31m") and len(line) == 160


def test_a_first_compressed_chunk_that_does_not_decompress_is_named(dataset, tmp_path):
    """libtracecmd 3.1's full open decompresses each CPU's first chunk of a v7 file, and on
    failure crashes in its own clean-up (found by `make fuzz`; the decoder now opens files for
    their headers only): the layout check inflates that chunk first and says which CPU's
    chunk is corrupt, in one line, before any decoding."""
    from kmemscope.parsers import _tracedat, layout as layout_mod

    trace = EXAMPLES / "memory-pressure" / "trace.dat"
    if not trace.is_file():
        requirements.skip("setup", f"{trace} is missing")
    lay = layout_mod.read_layout(str(trace), _tracedat.decompress)
    assert lay.version == 7 and lay.compression == "zstd"
    (at, csize, _), *_ = next(iter(lay.buffers[0].chunks.values()))
    data = bytearray(trace.read_bytes())
    data[at + 8] ^= 0x5a        # the zstd frame's magic number
    bad = tmp_path / "bad-chunk.dat"
    bad.write_bytes(bytes(data))
    proc = parse_must_fail(bad, dataset)
    assert "first compressed chunk" in proc.stderr and "does not decompress" in proc.stderr, proc.stderr
    assert "decoder died" not in proc.stderr


@pytest.mark.parametrize("shift", [2048, 8])
def test_uncompressed_cpu_data_off_a_page_boundary_is_refused(dataset, tmp_path, shift):
    """trace-cmd writes uncompressed CPU data page-aligned, and `trace-cmd report` refuses a
    file whose CPU table points off a page ("failed to init data"; found by `make fuzz`, where
    libtracecmd's set-up of such a v6 file crashed). The decoder no longer has libtracecmd set
    the data up: the layout check names the CPU and its offset in one line."""
    import struct

    if not SMALL_V6.is_file():
        requirements.skip("fixtures", f"{SMALL_V6} is missing")
    data = bytearray(SMALL_V6.read_bytes())
    table = data.index(b"flyrecord\0") + 10
    cpu3 = table + 16 * 3
    (offset,) = struct.unpack_from("<Q", data, cpu3)
    assert offset % 4096 == 0
    struct.pack_into("<Q", data, cpu3, offset + shift)
    bad = tmp_path / "misaligned.dat"
    bad.write_bytes(bytes(data))
    proc = parse_must_fail(bad, dataset)
    assert (f"CPU 3 data of buffer top starts at offset {offset + shift}, not on a 4096-byte page "
            "boundary") in proc.stderr, proc.stderr
    report = subprocess.run(["trace-cmd", "report", "-i", str(bad)], capture_output=True, text=True,
                            timeout=60)
    assert "failed to init data" in report.stderr or report.returncode != 0, report.stderr


@pytest.mark.parametrize("error", [OSError(5, "Input/output error"), MemoryError()],
                         ids=["EIO", "out of memory"])
def test_a_failure_while_hashing_the_trace_is_the_parse_s_one_error(tmp_path, monkeypatch, error):
    """The trace is hashed (its run id) on a helper thread beside the decode; its failure
    is reported by the parse like any other, not lost in the thread (a KeyError after)."""
    import kmemscope
    from kmemscope.parsers import ingest

    def fails(path):
        raise error

    monkeypatch.setattr(ingest, "file_sha256", fails)      # the decoder child is forked from here
    with pytest.raises(kmemscope.KmemscopeError) as raised:
        kmemscope.parse([EXAMPLES / "kmem-compaction"], tmp_path / "ds")
    assert "KeyError" not in str(raised.value) and "sha" not in str(raised.value), raised.value
    assert not (tmp_path / "ds").exists()           # the dataset it made is removed again
