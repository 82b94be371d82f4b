"""The chunk table of compressed trace data, walked natively, against a recount in Python.

A v7 file keeps each CPU's compressed data as a count and then, per chunk, an 8-byte header
(compressed size, uncompressed size) before the chunk's bytes. parsers/native/chunks.c walks
those headers in 256 KiB reads (libtracecmd's open made a read and an lseek per chunk: 110,000
system calls on a 170 MB trace); parsers/layout.py words its faults. Here every chunk of real
traces is compared with a plain struct walk of the same bytes, and damaged tables (a chunk
running past its CPU's data, an uncompressed size that is no whole number of pages, a header
cut off by the end of the file, a big-endian file) are refused with the chunk they name.
"""
import struct

import pytest

import requirements
from conftest import EXAMPLES, PUBLIC_FIXTURES

COMPRESSED = [EXAMPLES / "kmem-compaction" / "trace.dat", EXAMPLES / "memory-pressure" / "trace.dat",
              EXAMPLES / "thp-faults" / "trace.dat",
              PUBLIC_FIXTURES / "langraph_v7_zstd148_le_l8_4cpu_5.15.dat"]


def _recount(data, offset, endian="<"):
    """The chunks of the CPU data at `offset`, read one header at a time."""
    (count,) = struct.unpack_from(endian + "I", data, offset)
    pos, out = offset + 4, []
    for _ in range(count):
        csize, usize = struct.unpack_from(endian + "II", data, pos)
        out.append((pos, csize, usize))
        pos += 8 + csize
    return out


def _layout(path):
    from kmemscope.parsers import _tracedat, layout

    return layout.read_layout(str(path), _tracedat.decompress)


@pytest.mark.parametrize("path", COMPRESSED, ids=lambda p: p.parent.name if p.name == "trace.dat" else p.name)
def test_every_chunk_of_a_real_trace_matches_a_recount(path):
    if not path.is_file():
        requirements.skip("fixtures", f"{path} is missing")
    lay = _layout(path)
    assert lay.version == 7 and lay.compression not in ("", "none")
    data = path.read_bytes()
    walked = 0
    for buf in lay.buffers:
        for cpu, offset, _size in buf.cpus:
            table = buf.chunks[cpu, offset]
            assert list(table) == _recount(data, offset), (buf.name, cpu)
            assert len(table) and table[0] == _recount(data, offset)[0] and table[-1] == list(table)[-1]
            walked += len(table)
    assert walked > 0


def _damaged(tmp_path, path, mutate):
    """A copy of `path` with mutate(bytearray, chunks of the first CPU) applied."""
    if not path.is_file():
        requirements.skip("fixtures", f"{path} is missing")
    lay = _layout(path)
    buf = lay.buffers[0]
    cpu, offset, _size = max(buf.cpus, key=lambda c: len(buf.chunks[c[0], c[1]]))
    chunks = list(buf.chunks[cpu, offset])
    assert len(chunks) > 3, "the example trace should have several chunks on its busiest CPU"
    data = bytearray(path.read_bytes())
    mutate(data, chunks)
    bad = tmp_path / "bad.dat"
    bad.write_bytes(bytes(data))
    return bad, cpu


def test_a_chunk_that_runs_past_its_cpus_data_is_named(tmp_path):
    from kmemscope.common.errors import TraceFileError

    def grow(data, chunks):
        pos = chunks[2][0]
        struct.pack_into("<I", data, pos, (1 << 31))
    bad, cpu = _damaged(tmp_path, EXAMPLES / "kmem-compaction" / "trace.dat", grow)
    with pytest.raises(TraceFileError, match=rf"truncated: CPU {cpu} of buffer top chunk 2 runs past "
                                             "the end of its data"):
        _layout(bad)


@pytest.mark.parametrize("usize", [0, 4095, 3 * 4096 + 1, (1 << 31)])
def test_an_uncompressed_size_that_is_no_whole_page_count_is_named(tmp_path, usize):
    from kmemscope.common.errors import TraceFileError

    def odd(data, chunks):
        struct.pack_into("<I", data, chunks[3][0] + 4, usize)
    bad, cpu = _damaged(tmp_path, EXAMPLES / "kmem-compaction" / "trace.dat", odd)
    with pytest.raises(TraceFileError, match=rf"CPU {cpu} of buffer top chunk 3 claims {usize} bytes "
                                             "uncompressed"):
        _layout(bad)


def test_a_header_past_the_end_of_the_file_is_refused_without_reading_beyond_it(tmp_path):
    """The walk is given the file's size: a table whose last header would lie past it
    stops there (the walk's own bound, called directly: the layout refuses such a file
    earlier, from the CPU data's recorded size)."""
    from kmemscope.parsers import _tracedat

    body = struct.pack("<II", 4, 4096) + b"abcd" + struct.pack("<II", 4, 4096) + b"efgh"
    f = tmp_path / "table.bin"
    f.write_bytes(body + b"\0\0\0")          # a third header would need 8 bytes: 3 are there
    with open(f, "rb") as fh:
        packed, fault = _tracedat.chunk_table(fh.fileno(), 0, 1 << 20, len(body) + 3, 3, False,
                                              4096, 1 << 30)
    assert fault == ("past_eof", 2, len(body), 0)
    assert list(memoryview(packed).cast("Q")) == [0, 4, 4096, 12, 4, 4096]


@pytest.mark.parametrize("csize", [None, 1, 2], ids=["varied", "9-byte-records", "10-byte-records"])
def test_big_endian_headers_across_many_reads(tmp_path, csize):
    """A big-endian table of 70,000 chunks gives what a recount gives. The walk reads 256 KiB
    at a time from the first header on: with records of 9 or 10 bytes some header starts 1
    or 4 bytes before the end of a read (2**18 mod 9 == 1, mod 10 == 4) and must be read
    again whole."""
    from kmemscope.parsers import _tracedat, layout

    count = 70_000
    parts, expect, pos = [struct.pack(">I", count)], [], 4
    for i in range(count):
        size, usize = (7 + i % 23 if csize is None else csize), 4096 * (1 + i % 5)
        parts.append(struct.pack(">II", size, usize) + bytes(size))
        expect.append((pos, size, usize))
        pos += 8 + size
    data = b"".join(parts)
    assert _recount(data, 0, ">") == expect
    f = tmp_path / "be.bin"
    f.write_bytes(data)
    with open(f, "rb") as fh:
        packed, fault = _tracedat.chunk_table(fh.fileno(), 4, len(data), len(data), count, True,
                                              4096, 1 << 30)
    assert fault is None
    assert list(layout.ChunkTable(packed)) == expect
