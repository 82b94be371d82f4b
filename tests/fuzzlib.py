"""Mutated trace.dat inputs for tests/test_fuzz.py, and the worker process that parses them.

Input i of a run is a pure function of (master seed, i, seed files): the test, the worker and
anyone reproducing a failure regenerate the same bytes with `make_test_input`. Mutations are aimed
at the metadata (everything before the first CPU's data), at the ring-buffer pages, or
anywhere, a third each, so that both libtracecmd's metadata parsing and kmemscope's page
decoding see damage.

`make_structural` (used by tests/fuzz_long.py, and for every third input of the test)
damages one structure of the file at a time instead: see "structural mutations" below.

Worker protocol (python fuzzlib.py worker SPEC.json): for each i in SPEC's list it prints
`start <i>` before parsing and one JSON line after; if the process dies in between, the parent
knows which input killed it.
"""
import json
import os
import random
import re
import resource
import struct
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path


def data_offset(path):
    """Where the first CPU's ring-buffer data starts, from `trace-cmd dump --flyrecord`."""
    out = subprocess.run(["trace-cmd", "dump", "--flyrecord", "-i", str(path)],
                         capture_output=True, text=True).stdout
    offs = [int(m.group(1)) for m in re.finditer(r"^\s+(\d+)\s+\d*\s*\[offset, size of cpu", out, re.M)]
    offs += [int(m.group(1)) for m in re.finditer(r"^\s+\d+ (\d+)\s+\d+\s+\[id, data offset and size\]",
                                                  out, re.M)]
    return min(offs) if offs else None


def _region(rng, n, split):
    """(lo, hi) of the part of the file to damage: metadata, pages or all."""
    which = rng.randrange(3)
    if split and which == 0:
        return 0, split
    if split and which == 1:
        return split, n
    return 0, n


def make_input(master, i, seeds):
    """The bytes of input i; `seeds` is [(bytes, data offset or None), ...]. Returns (bytes, how)."""
    rng = random.Random(f"{master}:{i}")
    data, split = seeds[rng.randrange(len(seeds))]
    b = bytearray(data)
    n = len(b)
    hows = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        lo, hi = _region(rng, len(b), split if split and split < len(b) else None)
        if hi <= lo:
            lo, hi = 0, len(b)
        kind = rng.choice(("flip", "flip", "bytes", "ints", "zero", "truncate", "splice", "insert"))
        pos = rng.randrange(lo, hi) if hi > lo else 0
        if kind == "flip":
            for _ in range(rng.choice((1, 2, 4, 16, 64))):
                p = rng.randrange(lo, hi)
                b[p] ^= 1 << rng.randrange(8)
        elif kind == "bytes":
            for _ in range(rng.choice((1, 4, 32))):
                b[rng.randrange(lo, hi)] = rng.randrange(256)
        elif kind == "ints":           # lengths and offsets: extremes at 4-byte alignment
            p = pos & ~3
            val = rng.choice((0, 1, 0x7fffffff, 0x80000000, 0xffffffff, 0xfffffff0, n, n * 2))
            b[p:p + 4] = val.to_bytes(4, "little")
            b = b[:n] if len(b) > n else b
        elif kind == "zero":
            ln = rng.choice((1, 8, 64, 4096, 65536))
            b[pos:pos + ln] = bytes(min(ln, len(b) - pos))
        elif kind == "truncate":
            b = b[:pos]
        elif kind == "splice":
            src = rng.randrange(len(b)) if b else 0
            ln = rng.choice((8, 64, 4096))
            chunk = bytes(b[src:src + ln])
            b[pos:pos + len(chunk)] = chunk
        elif kind == "insert":
            b[pos:pos] = rng.randbytes(rng.choice((1, 4, 4096)))
        hows.append(f"{kind}@{pos}")
    return bytes(b), ",".join(hows)


# ---------------------------------------------------------------- structural mutations
#
# The byte-level mutations above rarely get past the first consistency check. The
# structural ones below know where a (valid) seed keeps each field, as
# `man 5 trace-cmd.dat.v6` / `trace-cmd.dat.v7` describe it, and damage one field or
# one structure at a time: header fields, v7 section and option headers, the CPU
# data table, compressed chunks, whole ring-buffer pages, page headers and event
# headers. Where a mutation changes the length of the data (a duplicated page, a
# recompressed chunk), every offset and size that covers it is fixed up, so the
# damage reaches the page decoder instead of the first bounds check.

MISSED_EVENTS, MISSED_STORED = 1 << 31, 1 << 30
COMMIT_MASK = (1 << 27) - 1        # bytes used; the bits above are flags
V7_SECTION_IDS = (0, 3, 15, 16, 17, 18, 19, 20, 21, 22)
V7_POINTER_OPTIONS = (16, 17, 18, 19, 20, 21)     # option data = u64 offset of a section
TRUNCATE_STEP, TRUNCATE_SPAN = 4096, 65536


@dataclass
class CpuData:
    buffer: str
    cpu: int
    offset: int            # file offset of the pages, or of the chunk count when compressed
    size: int
    offset_pos: int        # where the u64 offset field is in the file
    size_pos: int          # where the u64 size field is
    page_size: int
    section_size_pos: int = None   # v7: size field of the buffer's flyrecord section
    cpu_id_pos: int = None         # v7: u32 CPU id in the BUFFER option


@dataclass
class Structure:
    """Positions of a valid trace.dat's fields (all offsets absolute)."""
    version: int
    endian: str
    long_size: int
    page_size: int
    version_pos: int
    compression: str = "none"
    pointers: list = field(default_factory=list)    # u64 fields holding file offsets
    sections: list = field(default_factory=list)    # v7 section header positions
    options: list = field(default_factory=list)     # (header pos, id); v6 ids are u16 too
    labels: list = field(default_factory=list)      # v6: (pos, text) of section labels
    counts: list = field(default_factory=list)      # (pos, fmt, what): counts and sizes of metadata
    cpus: list = field(default_factory=list)
    commit_off: int = 8
    commit_size: int = 8
    data_off: int = 16

    @property
    def compressed(self):
        return self.version >= 7 and self.compression not in ("", "none")

    def get(self, b, pos, fmt):
        return struct.unpack_from(self.endian + fmt, b, pos)[0]

    def put(self, b, pos, fmt, value):
        bits = struct.calcsize(fmt) * 8
        struct.pack_into(self.endian + fmt, b, pos, value & ((1 << bits) - 1))


def _cstr(b, pos):
    end = b.index(b"\0", pos)
    return b[pos:end].decode("utf-8", "replace"), end + 1


def _page_header_layout(s, text):
    """Commit field and data offsets from the recorded header_page format."""
    m = re.search(r"commit;\s*offset:(\d+);\s*size:(\d+);", text)
    d = re.search(r"char data;\s*offset:(\d+);", text)
    if m and d:
        s.commit_off, s.commit_size, s.data_off = int(m.group(1)), int(m.group(2)), int(d.group(1))


def _inflate(s, data, usize):
    if s.compression == "zstd":
        import pyarrow as pa
        return pa.decompress(data, decompressed_size=usize, codec="zstd", asbytes=True)
    if s.compression == "zlib":
        return zlib.decompress(data)
    raise ValueError(f"cannot inflate {s.compression}")


def _deflate(s, data):
    if s.compression == "zstd":
        import pyarrow as pa
        return pa.compress(bytes(data), codec="zstd", asbytes=True)
    if s.compression == "zlib":
        return zlib.compress(bytes(data))
    raise ValueError(f"cannot deflate {s.compression}")


def structure(b):
    """Parse a valid v6 or v7 trace.dat (a seed) into a Structure; seeds are trusted."""
    vstr, pos = _cstr(b, 10)
    version = int(vstr)
    endian = ">" if b[pos] else "<"
    s = Structure(version, endian, b[pos + 1], struct.unpack_from(endian + "I", b, pos + 2)[0], 10)
    if s.long_size == 4:
        s.commit_size, s.data_off = 4, 12
    pos += 6
    if version == 6:
        _structure_v6(s, b, pos)
    else:
        _structure_v7(s, b, pos)
    return s


def _structure_v6(s, b, pos):
    for label in (b"header_page\0", b"header_event\0"):
        s.labels.append((pos, label))
        pos += len(label)
        s.counts.append((pos, "Q", label[:-1].decode() + " size"))
        n = s.get(b, pos, "Q")
        if label == b"header_page\0":
            _page_header_layout(s, b[pos + 8:pos + 8 + n].decode("utf-8", "replace"))
        pos += 8 + n
    s.counts.append((pos, "I", "ftrace format count"))
    count = s.get(b, pos, "I")
    pos += 4
    for _ in range(count):
        s.counts.append((pos, "Q", "ftrace format size"))
        pos += 8 + s.get(b, pos, "Q")
    s.counts.append((pos, "I", "event system count"))
    systems = s.get(b, pos, "I")
    pos += 4
    for _ in range(systems):
        _, pos = _cstr(b, pos)
        s.counts.append((pos, "I", "event format count"))
        count = s.get(b, pos, "I")
        pos += 4
        for _ in range(count):
            s.counts.append((pos, "Q", "event format size"))
            pos += 8 + s.get(b, pos, "Q")
    for what, fmt in (("kallsyms size", "I"), ("printk size", "I"), ("cmdlines size", "Q")):
        s.counts.append((pos, fmt, what))
        pos += struct.calcsize(fmt) + s.get(b, pos, fmt)
    s.counts.append((pos, "I", "CPU count"))
    cpus = s.get(b, pos, "I")
    pos += 4
    buffers = []
    if b[pos:pos + 10] == b"options  \0":
        s.labels.append((pos, b"options  \0"))
        pos += 10
        while True:
            opt_id = s.get(b, pos, "H")
            s.options.append((pos, opt_id))
            if opt_id == 0:
                pos += 2
                break
            n = s.get(b, pos + 2, "I")
            if opt_id == 3:
                s.pointers.append(pos + 6)
                buffers.append((s.get(b, pos + 6, "Q"), _cstr(b, pos + 14)[0]))
            pos += 6 + n
    s.labels.append((pos, b[pos:pos + 10]))
    pos += 10
    tables = [("", pos)]
    for offset, name in buffers:
        if b[offset:offset + 10] == b"flyrecord\0":
            offset += 10
        tables.append((name, offset))
    for name, table in tables:
        for cpu in range(cpus):
            at = table + 16 * cpu
            s.pointers.append(at)
            s.cpus.append(CpuData(name, cpu, s.get(b, at, "Q"), s.get(b, at + 8, "Q"), at, at + 8,
                                  s.page_size))


def _structure_v7(s, b, pos):
    s.compression, pos = _cstr(b, pos)
    _, pos = _cstr(b, pos)
    s.pointers.append(pos)
    nxt, seen = s.get(b, pos, "Q"), set()
    while nxt and nxt not in seen:
        seen.add(nxt)
        sec = nxt
        s.sections.append(sec)
        flags, size = s.get(b, sec + 2, "H"), s.get(b, sec + 8, "Q")
        nxt = 0
        if flags & 1:          # compressed options: their fields have no file position
            continue
        at, end = sec + 16, sec + 16 + size
        while at + 6 <= end:
            opt_id, n = s.get(b, at, "H"), s.get(b, at + 2, "I")
            s.options.append((at, opt_id))
            data = at + 6
            if opt_id == 0:
                s.pointers.append(data)
                nxt = s.get(b, data, "Q")
                break
            if opt_id in V7_POINTER_OPTIONS:
                s.pointers.append(data)
                target = s.get(b, data, "Q")
                s.sections.append(target)
                if opt_id == 16:
                    _v7_header_info(s, b, target)
            elif opt_id == 3:
                _v7_buffer(s, b, data)
            at = data + n
    s.sections = sorted(set(s.sections))


def _v7_header_info(s, b, sec):
    flags, size = s.get(b, sec + 2, "H"), s.get(b, sec + 8, "Q")
    body = b[sec + 16:sec + 16 + size]
    if flags & 1:
        csize, usize = struct.unpack_from(s.endian + "II", body, 0)
        body = _inflate(s, bytes(body[8:8 + csize]), usize)
    body = bytes(body)
    if body.startswith(b"header_page\0"):
        n = struct.unpack_from(s.endian + "Q", body, 12)[0]
        _page_header_layout(s, body[20:20 + n].decode("utf-8", "replace"))


def _v7_buffer(s, b, data):
    s.pointers.append(data)
    sec = s.get(b, data, "Q")
    s.sections.append(sec)
    name, at = _cstr(b, data + 8)
    _, at = _cstr(b, at)
    page_size = s.get(b, at, "I")
    s.counts.append((at, "I", "buffer page size"))
    s.counts.append((at + 4, "I", "buffer CPU count"))
    ncpus = s.get(b, at + 4, "I")
    for i in range(ncpus):
        e = at + 8 + 20 * i
        s.pointers.append(e + 4)
        s.cpus.append(CpuData(name, s.get(b, e, "I"), s.get(b, e + 4, "Q"), s.get(b, e + 12, "Q"),
                              e + 4, e + 12, page_size, sec + 8, e))


def chunks(b, s, cpu):
    """[(record pos, csize, usize)] of a compressed CPU's data."""
    count = s.get(b, cpu.offset, "I")
    out, pos = [], cpu.offset + 4
    for _ in range(count):
        csize, usize = s.get(b, pos, "I"), s.get(b, pos + 4, "I")
        out.append((pos, csize, usize))
        pos += 8 + csize
    return out


def _splice(b, s, at, old_len, new, grow=(), keep=()):
    """Replace b[at:at+old_len] by `new`, moving every offset that points past it and
    adding the length change to the size fields in `grow` (positions before the edit)."""
    delta = len(new) - old_len
    if delta == 0:
        b[at:at + old_len] = new
        return b
    moved = lambda p: p + delta if p >= at + old_len else p   # noqa: E731
    fixes = []
    for p in s.pointers:
        v = s.get(b, p, "Q")
        if p not in keep and v and v >= at + old_len:
            fixes.append((moved(p), "Q", v + delta))
    for p in grow:
        fixes.append((moved(p), "Q", s.get(b, p, "Q") + delta))
    b[at:at + old_len] = new
    for p, fmt, v in fixes:
        s.put(b, p, fmt, v)
    return b


def _cpus_with_pages(s, b):
    out = [c for c in s.cpus if c.size >= c.page_size and c.offset + c.size <= len(b) + 4]
    if s.compressed:
        out = [c for c in out if s.get(b, c.offset, "I") > 0]
    return out


class _Pages:
    """A run of whole ring-buffer pages of one CPU, editable in place: all of an
    uncompressed CPU's pages, or one decompressed chunk. `store` writes them back
    (recompressing, and fixing sizes and offsets if the length changed)."""

    def __init__(self, rng, b, s):
        self.b, self.s = b, s
        cpus = _cpus_with_pages(s, b)
        if not cpus:
            raise _NotApplicable
        self.cpu = c = rng.choice(cpus)
        self.page = c.page_size
        if s.compressed:
            ch = chunks(b, s, c)
            self.chunk = rng.randrange(len(ch))
            self.pos, self.csize, usize = ch[self.chunk]
            self.data = bytearray(_inflate(s, bytes(b[self.pos + 8:self.pos + 8 + self.csize]), usize))
            self.where = f"cpu{c.cpu} chunk{self.chunk}"
        else:
            self.pos, self.len = c.offset, c.size - c.size % c.page_size
            self.data = bytearray(b[self.pos:self.pos + self.len])
            self.where = f"cpu{c.cpu}"
        if len(self.data) < self.page:
            raise _NotApplicable

    @property
    def n(self):
        return len(self.data) // self.page

    def at(self, k):
        return k * self.page

    def store(self):
        b, s, c = self.b, self.s, self.cpu
        grow = [c.size_pos] + ([c.section_size_pos] if c.section_size_pos is not None else [])
        if s.compressed:
            comp = _deflate(s, self.data)
            rec = struct.pack(s.endian + "II", len(comp), len(self.data)) + comp
            return _splice(b, s, self.pos, 8 + self.csize, rec, grow, keep=(c.offset_pos,))
        return _splice(b, s, self.pos, self.len, self.data, grow, keep=(c.offset_pos,))


class _NotApplicable(Exception):
    """The chosen seed lacks the structure this mutation needs."""


def _u64_extremes(rng, orig, n, page):
    return rng.choice((0, 1, n - 1, n, n + 1, n + page, (1 << 31) - 1, 1 << 31, (1 << 32) - 1,
                       1 << 32, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, orig + 1, orig - 1,
                       orig + page, orig - page, orig * 2, orig // 2, orig + (page // 2)))


def _u32_extremes(rng, orig, page=4096):
    return rng.choice((0, 1, 2, 0x7fffffff, 0x80000000, 0xffffffff, 0xfffffff0, orig + 1,
                       max(orig - 1, 0), orig * 2, orig // 2, page, 1 << 20))


def mut_page_dup(rng, b, s):
    p = _Pages(rng, b, s)
    src = rng.randrange(p.n)
    page = bytes(p.data[p.at(src):p.at(src) + p.page])
    how = rng.choice(("copy", "copy", "insert", "insert", "insert-raw", "copy-run"))
    if how == "copy":
        dst = rng.randrange(p.n)
        p.data[p.at(dst):p.at(dst) + p.page] = page
        desc = f"page {src} copied over page {dst}"
    elif how == "copy-run":
        k = rng.randrange(1, max(2, p.n // 2 + 1))
        run = bytes(p.data[p.at(src):p.at(src) + k * p.page])
        dst = rng.randrange(p.n)
        p.data[p.at(dst):p.at(dst) + len(run)] = run
        p.data = p.data[:p.at(p.n)]
        desc = f"{len(run) // p.page} pages from {src} copied over page {dst}"
    elif how == "insert":
        dst = rng.randrange(p.n + 1)
        p.data[p.at(dst):p.at(dst)] = page
        desc = f"page {src} duplicated before page {dst} (sizes fixed up)"
    else:                      # the file's table is not told: later offsets are off by a page
        if s.compressed:
            raise _NotApplicable
        dst = rng.randrange(1, p.n + 1)
        b[p.pos + p.at(dst):p.pos + p.at(dst)] = page
        return b, f"{p.where}: page {src} inserted before page {dst}, offsets not fixed"
    return p.store(), f"{p.where}: {desc}"


def mut_page_zero(rng, b, s):
    if rng.random() < 0.5:
        p = _Pages(rng, b, s)
        k = rng.randrange(p.n)
        cnt = rng.choice((1, 1, 2, p.n))
        p.data[p.at(k):p.at(k + cnt)] = bytes(len(p.data[p.at(k):p.at(k + cnt)]))
        return p.store(), f"{p.where}: {cnt} page(s) from {k} zeroed"
    page = s.page_size if 512 <= s.page_size <= 1 << 20 else 4096
    start = rng.randrange(max(1, len(b) // page)) * page
    cnt = rng.choice((1, 1, 2, 4, 16))
    end = min(len(b), start + cnt * page)
    b[start:end] = bytes(end - start)
    return b, f"file bytes {start}..{end} zeroed (page-aligned)"


def mut_header(rng, b, s):
    vpos = s.version_pos
    vend = b.index(b"\0", vpos)
    what = rng.choice(("endian", "long size", "page size", "page size", "version"))
    if what == "endian":
        v = rng.choice((b[vend + 1] ^ 1, 2, 0x80, 0xff))
        b[vend + 1] = v
    elif what == "long size":
        v = rng.choice((4 if b[vend + 2] == 8 else 8, 0, 1, 2, 7, 16, 0xff))
        b[vend + 2] = v
    elif what == "page size":
        v = rng.choice((0, 1, 511, 512, 2048, 4095, 4097, 8192, 16384, 65536, 1 << 20, (1 << 20) + 1,
                        1 << 21, 0x7fffffff, 0xffffffff, int.from_bytes(b[vend + 3:vend + 7], "big")))
        s.put(b, vend + 3, "I", v)
    else:
        v = rng.choice((b"6", b"7", b"8", b"5", b"0", b"", b"07", b"7x", b"-7", b"99999999999999"))
        b[vpos:vend] = v
        v = v.decode()
    return b, f"header {what} set to {v!r}"


def mut_section(rng, b, s):
    if s.version < 7:
        # v6 has no section headers: damage its labels and metadata sizes instead.
        if rng.random() < 0.4:
            pos, label = rng.choice(s.labels)
            k = rng.randrange(len(label))
            b[pos + k] ^= 1 << rng.randrange(8)
            return b, f"label {label!r} at {pos}: byte {k} flipped"
        pos, fmt, what = rng.choice(s.counts)
        v = _u64_extremes(rng, s.get(b, pos, fmt), len(b), s.page_size)
        s.put(b, pos, fmt, v)
        return b, f"{what} at {pos} set to {v & ((1 << (8 * struct.calcsize(fmt))) - 1)}"
    sec = rng.choice(s.sections)
    if sec + 16 > len(b):
        raise _NotApplicable
    what = rng.choice(("id", "flags", "flags", "string id", "size", "size"))
    if what == "id":
        v = rng.choice(V7_SECTION_IDS + (0xffff, 1, 23, s.get(b, sec, "H") ^ 1))
        s.put(b, sec, "H", v)
    elif what == "flags":
        v = rng.choice((s.get(b, sec + 2, "H") ^ 1, 0xffff, 2, 0x8000))
        s.put(b, sec + 2, "H", v)
    elif what == "string id":
        v = rng.choice((0, 0xffffffff, s.get(b, sec + 4, "I") + 1))
        s.put(b, sec + 4, "I", v)
    else:
        v = _u64_extremes(rng, s.get(b, sec + 8, "Q"), len(b), s.page_size)
        s.put(b, sec + 8, "Q", v)
    return b, f"section at {sec}: {what} set to {v & 0xffffffffffffffff}"


def mut_option(rng, b, s):
    if not s.options:
        raise _NotApplicable
    pos, opt_id = rng.choice(s.options)
    what = rng.choice(("id", "size", "size", "data") if opt_id or s.version >= 7 else ("id",))
    if what == "id":
        v = rng.choice((0, 3, 8, 16, 18, 21, 22, 23, 0x7fff, 0xffff, opt_id ^ 1))
        s.put(b, pos, "H", v)
    elif what == "size":
        n = s.get(b, pos + 2, "I")
        v = rng.choice((0, 1, 3, 7, n - 1, n + 1, n * 2, 0x7fffffff, 0x80000000, 0xffffffff, len(b)))
        s.put(b, pos + 2, "I", v)
    else:
        n = s.get(b, pos + 2, "I")
        if n >= 8 and (opt_id in V7_POINTER_OPTIONS or opt_id in (0, 3)):
            ptrs = [q for q in s.pointers if q != pos + 6]
            v = rng.choice((_u64_extremes(rng, s.get(b, pos + 6, "Q"), len(b), s.page_size),
                            s.get(b, rng.choice(ptrs), "Q") if ptrs else 0, pos - 16, 16))
            s.put(b, pos + 6, "Q", v)
        elif opt_id == 8 and n >= 4:      # CPUCOUNT
            v = _u32_extremes(rng, s.get(b, pos + 6, "I"))
            s.put(b, pos + 6, "I", v)
        elif n:
            k = rng.randrange(n)
            v = rng.choice((0, 0xff, ord("[")))
            b[pos + 6 + k] = v
            what = f"data byte {k}"
        else:
            raise _NotApplicable
    return b, f"option {opt_id} at {pos}: {what} set to {v & 0xffffffffffffffff}"


def mut_cpu_table(rng, b, s):
    if not s.cpus:
        raise _NotApplicable
    c = rng.choice(s.cpus)
    others = [o for o in s.cpus if o is not c]
    choices = ["offset", "offset", "size", "size", "same data"]
    if c.cpu_id_pos is not None:
        choices += ["cpu id"]
    choices += ["count"] if any("CPU count" in w for _, _, w in s.counts) else []
    what = rng.choice(choices)
    if what == "offset":
        v = _u64_extremes(rng, c.offset, len(b), c.page_size)
        s.put(b, c.offset_pos, "Q", v)
    elif what == "size":
        v = _u64_extremes(rng, c.size, len(b), c.page_size)
        s.put(b, c.size_pos, "Q", v)
    elif what == "same data":
        if not others:
            raise _NotApplicable
        o = rng.choice(others)
        s.put(b, c.offset_pos, "Q", o.offset)
        s.put(b, c.size_pos, "Q", o.size)
        v = f"cpu{o.cpu}'s"
    elif what == "cpu id":
        v = rng.choice((0xffffffff, 0x7fffffff, 4096, 1024, c.cpu + 1,
                        others[0].cpu if others else 0))
        s.put(b, c.cpu_id_pos, "I", v)
    else:
        pos, fmt, w = rng.choice([x for x in s.counts if "CPU count" in x[2] or "page size" in x[2]])
        v = _u32_extremes(rng, s.get(b, pos, fmt), c.page_size)
        s.put(b, pos, fmt, v)
        return b, f"{w} set to {v}"
    return b, f"cpu{c.cpu} of buffer {c.buffer or 'top'}: {what} set to {v}"


def mut_chunk(rng, b, s):
    if not s.compressed:
        raise _NotApplicable
    cpus = _cpus_with_pages(s, b)
    if not cpus:
        raise _NotApplicable
    c = rng.choice(cpus)
    ch = chunks(b, s, c)
    k = rng.randrange(len(ch))
    pos, csize, usize = ch[k]
    grow = [c.size_pos] + ([c.section_size_pos] if c.section_size_pos is not None else [])
    what = rng.choice(("count", "csize", "usize", "usize", "duplicate", "drop", "swap", "garbage"))
    if what == "count":
        v = rng.choice((0, len(ch) - 1, len(ch) + 1, len(ch) * 2, 0x7fffffff, 0xffffffff))
        s.put(b, c.offset, "I", v)
    elif what == "csize":
        v = _u32_extremes(rng, csize, c.page_size)
        s.put(b, pos, "I", v)
    elif what == "usize":
        v = rng.choice((0, 1, usize - 1, usize + 1, usize + c.page_size, usize - c.page_size,
                        usize * 2, c.page_size // 2, 0x7fffffff, 0xffffffff))
        s.put(b, pos + 4, "I", v)
    elif what in ("duplicate", "drop"):
        j = rng.randrange(len(ch))
        jp, jc, _ = ch[j]
        rec = bytes(b[jp:jp + 8 + jc])
        count = len(ch) + (1 if what == "duplicate" else -1)
        if what == "duplicate":
            b = _splice(b, s, pos, 0, rec, grow, keep=(c.offset_pos,))
        else:
            b = _splice(b, s, jp, 8 + jc, b"", grow, keep=(c.offset_pos,))
        s.put(b, c.offset, "I", count)
        v = f"chunk {j} (now {count} chunks)"
    elif what == "swap":
        j = rng.randrange(len(ch))
        v = ch[j][2]
        s.put(b, pos + 4, "I", v)
        s.put(b, ch[j][0] + 4, "I", usize)
    else:
        n = rng.choice((1, 4, 64, csize))
        at = pos + 8 + rng.randrange(max(1, csize))
        b[at:at + n] = rng.randbytes(len(b[at:min(at + n, pos + 8 + csize)]))
        v = f"{n} random bytes at {at}"
    return b, f"cpu{c.cpu} chunk {k}: {what} {v}"


def mut_page_header(rng, b, s):
    p = _Pages(rng, b, s)
    k = rng.randrange(p.n)
    at = p.at(k)
    cfmt = "I" if s.commit_size == 4 else "Q"
    cpos = at + s.commit_off
    room = p.page - s.data_off
    commit = s.get(p.data, cpos, cfmt)
    used = commit & COMMIT_MASK
    what = rng.choice(("commit", "commit", "missed", "missed", "ts", "ts", "order"))
    if what == "commit":
        v = rng.choice((0, 1, 3, room - 1, room, room + 1, p.page, used + 4, 0xfffff, COMMIT_MASK,
                        (1 << 27) | used, (1 << 29) | used, 0xffffffff, (1 << 63) | used))
        s.put(p.data, cpos, cfmt, v)
        desc = f"commit {used} -> {v}"
    elif what == "missed":
        flag = rng.choice((MISSED_EVENTS, MISSED_STORED, MISSED_EVENTS | MISSED_STORED))
        new_used = rng.choice((used, used, room, room - 4))
        s.put(p.data, cpos, cfmt, flag | new_used)
        desc = f"missed-events flags {flag:#x}, commit {new_used}"
        if flag & MISSED_STORED and new_used + s.data_off + s.long_size <= p.page:
            count = rng.choice((0, 1, 1000, (1 << 31), (1 << 63), (1 << 64) - 1))
            s.put(p.data, at + s.data_off + new_used, "Q" if s.long_size == 8 else "I", count)
            desc += f", stored count {count}"
    elif what == "ts":
        ts = s.get(p.data, at, "Q")
        prev = s.get(p.data, p.at(k - 1), "Q") if k else ts
        v = rng.choice((0, 1, prev - 1, prev - 1_000_000_000, ts // 2, (1 << 63), (1 << 64) - 1,
                        ts - 1))
        s.put(p.data, at, "Q", v)
        desc = f"timestamp {ts} -> {v & 0xffffffffffffffff} (previous page {prev})"
    else:
        # Pages out of time order: reverse them, or swap two.
        if p.n < 2:
            raise _NotApplicable
        pages = [bytes(p.data[p.at(j):p.at(j + 1)]) for j in range(p.n)]
        if rng.random() < 0.5:
            pages.reverse()
            desc = f"{p.n} pages in reverse order"
        else:
            j = rng.randrange(p.n)
            pages[k], pages[j] = pages[j], pages[k]
            desc = f"pages {k} and {j} swapped"
        p.data[:p.at(p.n)] = b"".join(pages)
        return p.store(), f"{p.where}: {desc}"
    return p.store(), f"{p.where} page {k}: {desc}"


def _events(s, page, data_off, used, limit=16):
    """Offsets of the first event headers of a page (kbuffer's walk)."""
    out, pos, end = [], data_off, min(len(page), data_off + used)
    while pos + 4 <= end and len(out) < limit:
        out.append(pos)
        hdr = s.get(page, pos, "I")
        type_len = (hdr >> 27) if s.endian == ">" else hdr & 0x1f
        if type_len == 29:                         # padding
            pos += 8 + (s.get(page, pos + 4, "I") if pos + 8 <= end else 0)
        elif type_len in (30, 31):                 # time extend, absolute time stamp
            pos += 8
        elif type_len == 0:
            pos += 4 + (s.get(page, pos + 4, "I") if pos + 8 <= end else 4)
        else:
            pos += 4 + 4 * type_len
    return out


def mut_event_header(rng, b, s):
    p = _Pages(rng, b, s)
    k = rng.randrange(p.n)
    at = p.at(k)
    cfmt = "I" if s.commit_size == 4 else "Q"
    used = s.get(p.data, at + s.commit_off, cfmt) & COMMIT_MASK
    evs = _events(s, p.data[at:at + p.page], s.data_off, used)
    if not evs:
        raise _NotApplicable
    e = at + rng.choice(evs)
    if s.endian == ">":
        raise _NotApplicable
    hdr = s.get(p.data, e, "I")
    delta = hdr >> 5
    what = rng.choice(("type_len", "type_len", "delta", "length"))
    if what == "type_len":
        t = rng.choice((0, 1, 28, 29, 30, 31))
        s.put(p.data, e, "I", (delta << 5) | t)
        desc = f"type_len -> {t}"
    elif what == "delta":
        d = rng.choice(((1 << 27) - 1, 0, 1 << 26))
        s.put(p.data, e, "I", (d << 5) | (hdr & 0x1f))
        desc = f"time delta -> {d}"
    else:
        v = rng.choice((0, 1, 3, 0x7fffffff, 0xffffffff, p.page, p.page - 4))
        s.put(p.data, e, "I", (delta << 5) | rng.choice((0, 29, 30, 31)))
        if e + 8 <= len(p.data):
            s.put(p.data, e + 4, "I", v)
        desc = f"array[0] -> {v}"
    return p.store(), f"{p.where} page {k} event at +{e - at}: {desc}"


# Family name -> mutator; "truncate" is the deterministic set, not drawn at random.
FAMILIES = {
    "page-dup": mut_page_dup,
    "page-zero": mut_page_zero,
    "header": mut_header,
    "section": mut_section,
    "option": mut_option,
    "cpu-table": mut_cpu_table,
    "chunk": mut_chunk,
    "page-header": mut_page_header,
    "event-header": mut_event_header,
}


class Seed:
    """A valid trace.dat to mutate: its name, bytes and structure."""

    def __init__(self, name, data):
        self.name, self.data = name, bytes(data)
        self.structure = structure(self.data)
        offs = [c.offset for c in self.structure.cpus if c.size]
        self.split = min(offs) if offs else None


def truncations(seeds):
    """The deterministic inputs: each seed cut at every 4 KiB of its first 64 KiB."""
    return [(seed, cut) for seed in seeds
            for cut in range(TRUNCATE_STEP, TRUNCATE_SPAN + 1, TRUNCATE_STEP) if cut < len(seed.data)]


def make_structural(master, i, seeds, families=None, include_bytes=True):
    """Input i of a structural run: (bytes, family, seed name, how).

    Inputs 0..len(truncations(seeds))-1 are the truncations; later ones draw a family
    (and the byte-level mutations of `make_input`, as family "bytes") and a seed."""
    cuts = truncations(seeds)
    if i < len(cuts):
        seed, cut = cuts[i]
        return seed.data[:cut], "truncate", seed.name, f"truncated to {cut} bytes"
    names = list(families or FAMILIES) + (["bytes"] if include_bytes else [])
    rng = random.Random(f"{master}:structural:{i}")
    for attempt in range(64):
        family = rng.choice(names)
        seed = rng.choice(seeds)
        if family == "bytes":
            data, how = make_input(f"{master}:{attempt}", i, [(seed.data, seed.split)])
            return data, family, seed.name, how
        try:
            out, how = FAMILIES[family](rng, bytearray(seed.data), seed.structure)
        except _NotApplicable:
            continue
        return bytes(out), family, seed.name, how
    raise RuntimeError(f"input {i}: no mutation applies to these seeds")


_STRUCTURED = {}


def make_test_input(master, i, seeds, every=3):
    """The in-suite fuzz test's input i: byte-level, except every `every`-th input, which is
    structural (`seeds` as `load_seeds` returns them). Returns (bytes, how)."""
    if i % every != every - 1:
        return make_input(master, i, seeds)
    key = tuple(id(d) for d, _ in seeds)
    if key not in _STRUCTURED:
        _STRUCTURED[key] = [Seed(str(k), d) for k, (d, _) in enumerate(seeds)]
    data, family, seed, how = make_structural(master, i, _STRUCTURED[key], include_bytes=False)
    return data, f"{family} seed{seed}: {how}"


def load_seeds(paths):
    return [(Path(p).read_bytes(), data_offset(p)) for p in paths]


def worker(spec_path):
    """Parse each input of the spec in this process (no isolation): a crash ends the process."""
    spec = json.loads(Path(spec_path).read_text())
    # A corrupt length must not make the test machine swap: cap this process's memory.
    limit = spec.get("memory_limit")
    if limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    from kmemscope.common.errors import KmemscopeError
    from kmemscope.parsers.tracedat import TraceFile

    seeds = load_seeds(spec["seeds"])
    tmp = Path(tempfile.mkdtemp(prefix="kmemscope-fuzz-", dir=spec.get("tmp")))
    path, ds = tmp / "input.dat", tmp / "ds"
    for i in spec["inputs"]:
        data, _ = make_test_input(spec["master"], i, seeds)
        path.write_bytes(data)
        print(f"start {i}", flush=True)
        try:
            # Everything native that `parse` runs on the input: libtracecmd's open,
            # the layout, page decoding on two threads, and the Arrow import of
            # every batch. Writing Parquet is pyarrow's job and is left out to
            # fit thousands of inputs in the time bound.
            trace = TraceFile(path)
            trace.metadata()
            stats = trace.decode(lambda _index: (lambda table, batch: batch.validate(full=True)),
                                 threads=2)
            res = {"i": i, "result": "ok", "events": sum(st["events"] for st in stats)}
        except KmemscopeError as exc:
            res = {"i": i, "result": "error", "type": type(exc).__name__, "message": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - anything else is a finding
            res = {"i": i, "result": "exception", "type": type(exc).__name__, "message": repr(exc)[:2000]}
        print(json.dumps(res), flush=True)
        for p in ds.glob("*/run_id=*"):
            # Keep the dataset small: drop the run that a mutated input may have added.
            for f in p.glob("*"):
                f.unlink()
            p.rmdir()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        worker(sys.argv[2])
    else:
        sys.exit("usage: fuzzlib.py worker SPEC.json")
