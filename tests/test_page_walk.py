"""The decoder's own ring-buffer page walk against libtraceevent's kbuffer, record by record.

The decoder walks each page's records itself (parsers/native/decoder.c `walk_page`) instead of
through kbuffer's calls per record, which were a fifth of a parse's CPU. kbuffer is the
reference: trace-cmd report reads pages with it. Every trace here is decoded twice, once each
way (`_tracedat._kbuffer_walk`), on one thread so that batches come in one order, and the two
must agree exactly: the same tables with the same rows and timestamps, the same counts of
unknown records and lost-event marks. Real traces from three kernels and both file versions,
and damaged ones (tests/fuzzlib.py's page, chunk and event-header mutations: type_len, time
deltas, time extends, absolute time stamps, padding, lengths, page headers, duplicated and
zeroed pages): a damaged trace either gives the same rows both ways or is refused both ways.
"""
import re
import struct
import subprocess

import pytest

import requirements
from conftest import EXAMPLES, PUBLIC_FIXTURES

import fuzzlib

REAL = [EXAMPLES / "kmem-compaction" / "trace.dat", EXAMPLES / "memory-pressure" / "trace.dat",
        PUBLIC_FIXTURES / "trappy_trace_idle_v6_le_l8_6cpu.dat",
        PUBLIC_FIXTURES / "langraph_v7_zstd148_le_l8_4cpu_5.15.dat",
        PUBLIC_FIXTURES / "trappy_tests_trace_v6_le_l4_8cpu_thermal.dat"]
PAGE_FAMILIES = ["event-header", "event-header", "page-header", "page-zero", "page-dup", "chunk"]
DAMAGED = 90


def _decode(path, kbuffer):
    """("ok", stats, {table: pa.Table}) or ("refused",) for one walk of the trace at path."""
    import pyarrow as pa

    from kmemscope.parsers import _tracedat
    from kmemscope.parsers.tracedat import TraceFile, TraceFileError

    before = _tracedat._kbuffer_walk(kbuffer)
    try:
        trace = TraceFile(path)
        batches = {}
        stats = trace.decode(lambda i: (lambda table, b: batches.setdefault(table, []).append(b)),
                             threads=1)
    except TraceFileError:
        return ("refused",)
    finally:
        _tracedat._kbuffer_walk(before)
    counts = [(s["events"], s["unknown_events"], s["lost"], s["min_ts"], s["max_ts"])
              for s in stats if s]
    return ("ok", counts, {t: pa.Table.from_batches(b) for t, b in batches.items()})


def _same(path):
    own, ref = _decode(path, kbuffer=False), _decode(path, kbuffer=True)
    assert own[0] == ref[0], f"{path}: own walk {own[0]}, kbuffer {ref[0]}"
    if own[0] == "ok":
        assert own[1] == ref[1], (path, own[1], ref[1])
        assert sorted(own[2]) == sorted(ref[2])
        for table in own[2]:
            assert own[2][table].equals(ref[2][table]), f"{path}: table {table} differs"
    return own


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.parent.name if p.name == "trace.dat" else p.stem)
def test_real_traces_decode_alike_both_ways(path):
    if not path.is_file():
        requirements.skip("fixtures", f"{path} is missing")
    result = _same(path)
    assert result[0] == "ok" and sum(t.num_rows for t in result[2].values()) > 0


# slow: hundreds of damaged traces decoded twice (~5 s); the real traces' walk stays in make check
@pytest.mark.slow
def test_damaged_pages_decode_alike_or_are_refused_both_ways(tmp_path):
    seeds = [fuzzlib.Seed(p.name, p.read_bytes()) for p in REAL[:4] if p.is_file()]
    if len(seeds) < 4 and requirements.required("fixtures"):
        requirements.skip("fixtures", "a public fixture this test mutates is missing")
    outcomes = []
    cuts = len(fuzzlib.truncations(seeds))
    for i in range(cuts, cuts + DAMAGED):
        data, family, seed, how = fuzzlib.make_structural(20261126, i, seeds, families=PAGE_FAMILIES,
                                                          include_bytes=False)
        path = tmp_path / f"damaged-{i}.dat"
        path.write_bytes(data)
        try:
            outcomes.append(_same(path)[0])
        except AssertionError as exc:
            raise AssertionError(f"input {i} ({family} of {seed}: {how}): {exc}") from None
        path.unlink()
    # The mutations must reach the walk: most damaged traces still decode.
    assert outcomes.count("ok") > DAMAGED // 2, outcomes


# ---------------------------------------------------------------- a page written by hand

def _word(type_len, delta):
    """A little-endian event header: type_len in the low 5 bits, time_delta above."""
    return struct.pack("<I", (delta << 5) | type_len)


def test_a_hand_written_page_walks_as_the_kernel_wrote_it(tmp_path):
    """One page of a real trace rewritten with every kind of header the kernel writes: a record,
    a time extend, a discarded record (padding with a time delta), an absolute time stamp, a
    record whose length is in array[0]. Its records' times, computed here from the ring
    buffer's rules, must be what both walks and `trace-cmd report -t` give."""
    from kmemscope.parsers import _tracedat
    from kmemscope.parsers import layout as layout_mod

    v6 = tmp_path / "v6.dat"
    subprocess.run(["trace-cmd", "convert", "--file-version", "6", "-i", str(REAL[0]), "-o", str(v6)],
                   check=True, capture_output=True)
    lay = layout_mod.read_layout(str(v6), _tracedat.decompress)
    assert lay.version == 6 and lay.long_size == 8 and not lay.big_endian
    seg = next(s for s in layout_mod.segments(lay) if s.length >= 4096)
    data = bytearray(v6.read_bytes())
    page = data[seg.offset:seg.offset + 4096]
    (page_ts,) = struct.unpack_from("<Q", page, 0)
    first = struct.unpack_from("<I", page, 16)[0]
    assert 1 <= first & 31 <= 28, "the page should start with a plain record"
    payload = bytes(page[20:20 + 4 * (first & 31)])
    n = len(payload) // 4

    body, expected, ts = b"", [], page_ts
    body += _word(n, 100) + payload
    ts += 100
    expected.append(ts)
    body += _word(30, 5) + struct.pack("<I", 3)          # time extend: (3 << 27) + 5
    ts += (3 << 27) + 5
    body += _word(n, 7) + payload
    ts += 7
    expected.append(ts)
    # A discarded record: padding whose array[0] counts the bytes after its header.
    body += _word(29, 11) + struct.pack("<I", len(payload)) + payload[4:]
    ts += 11
    body += _word(n, 13) + payload
    ts += 13
    expected.append(ts)
    body += _word(31, 17) + struct.pack("<I", 0x40)      # absolute: (0x40 << 27) + 17
    ts = ((0x40 << 27) + 17) | (ts & (0xF8 << 56))
    body += _word(n, 19) + payload
    ts += 19
    expected.append(ts)
    body += _word(0, 23) + struct.pack("<I", len(payload) + 4) + payload   # length in array[0]
    ts += 23
    expected.append(ts)
    body += _word(n, 0) + payload
    expected.append(ts)
    assert len(body) <= 4096 - 16
    page[8:16] = struct.pack("<Q", len(body))
    page[16:] = body + b"\0" * (4096 - 16 - len(body))
    data[seg.offset:seg.offset + 4096] = page
    crafted = tmp_path / "crafted.dat"
    crafted.write_bytes(bytes(data))

    report = subprocess.run(["trace-cmd", "report", "-t", "-R", "--cpu", str(seg.cpu), "-i", str(crafted)],
                            capture_output=True, text=True, check=True).stdout
    stamps = [int(m.group(1).replace(".", "")) for m in re.finditer(r"\]\s+(\d+\.\d{9}):", report)]
    assert stamps[:len(expected)] == expected, (stamps[:8], expected)

    for kbuffer in (False, True):
        result = _decode(crafted, kbuffer)
        assert result[0] == "ok"
        rows = [(ts, cpu) for table in result[2].values()
                for ts, cpu in zip(table.column("ts").to_pylist(), table.column("cpu").to_pylist())]
        mine = [ts - lay.ts_offset for ts, cpu in rows if cpu == seg.cpu]
        assert mine[:len(expected)] == expected, ("kbuffer" if kbuffer else "own walk", mine[:8])
