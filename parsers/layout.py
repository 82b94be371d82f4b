"""Where a trace.dat keeps its ring-buffer pages and its metadata: the file's table of contents.

kmemscope reads trace.dat itself, as `man 5 trace-cmd.dat.v6` and `trace-cmd.dat.v7`
describe it: this module reads the header and options of format versions 6 and 7,
splits each CPU's data into independent segments (runs of whole pages, or of whole
compressed chunks) that worker threads can decode in any order, and reads the
metadata (read_metadata: the ring buffer's page header, event formats, printk
formats, cmdlines and the kallsyms text) that the native decoder hands to
libtraceevent's public parsers. libtracecmd is not used: its public API opens a file
only whole (every kallsyms symbol parsed, 60-70 ms, though only stacks need them) and
keeps the CPU data's location private.

Every read is checked against the file's size; a file that lies about its own
layout raises TraceFileError with what was wrong and where.
"""
import os
import re
import struct
from dataclasses import dataclass, field

from kmemscope.capture.tracefs import selected
from kmemscope.common.errors import TraceFileError

MAGIC = b"\x17\x08\x44tracing"

# Option ids shared by v6 and v7 (trace-cmd.dat.v7(5)).
OPT_DONE, OPT_DATE, OPT_CPUSTAT, OPT_BUFFER, OPT_TRACECLOCK, OPT_UNAME = 0, 1, 2, 3, 4, 5
OPT_OFFSET, OPT_CPUCOUNT, OPT_VERSION, OPT_TRACEID, OPT_TSC2NSEC = 7, 8, 9, 11, 14
# v7: the metadata sections, each an option holding its section's offset. A v6 file keeps
# the same parts, in this order, between its header and its CPU count.
OPT_HEADER_INFO, OPT_FTRACE_EVENTS, OPT_EVENT_FORMATS, OPT_KALLSYMS, OPT_PRINTK, OPT_CMDLINES = \
    range(16, 22)
METADATA_PARTS = {OPT_HEADER_INFO: "header info", OPT_FTRACE_EVENTS: "ftrace formats",
                  OPT_EVENT_FORMATS: "event formats", OPT_KALLSYMS: "kallsyms",
                  OPT_PRINTK: "printk formats", OPT_CMDLINES: "cmdlines"}

SECTION_OPTIONS = 0
SECTION_FLYRECORD = 3
SECTION_FLAG_COMPRESSED = 1

# Uncompressed segments are cut at this many bytes of pages; compressed ones at
# this many bytes of uncompressed chunk data. Small enough that two threads share
# a trace whose data sits almost all on one CPU, large enough to keep per-segment
# overhead (a Python call, a fresh Arrow batch) negligible.
SEGMENT_BYTES = 8 << 20

# Ring-buffer page header: the low 27 bits of `commit` count bytes of events, the
# bits above are flags (missed events). A compressed chunk holds at most this much.
COMMIT_MASK = (1 << 27) - 1
MAX_CHUNK_BYTES = 1 << 30
# Far above any kernel's NR_CPUS; a larger CPU count is a corrupt field.
MAX_CPUS = 1 << 16

# A decompressed options section is a few hundred bytes; a length beyond this is corrupt.
MAX_OPTIONS_BYTES = 64 << 20


@dataclass
class Segment:
    """A run of pages of one CPU that can be decoded on its own."""
    buffer: str          # trace instance name, "" for the top buffer
    cpu: int
    offset: int          # file offset of the first page, or of the first chunk header
    length: int          # bytes of pages (uncompressed) or of chunk records (compressed)
    chunks: int          # number of compressed chunks, 0 when uncompressed
    data_bytes: int      # uncompressed size, for progress and load balancing


@dataclass
class Buffer:
    name: str
    clock: str
    page_size: int
    cpus: list = field(default_factory=list)   # (cpu, offset, size)
    chunks: dict = field(default_factory=dict)  # (cpu, offset) -> [(pos, csize, usize)], compressed


@dataclass
class Layout:
    path: str
    file_size: int
    version: int
    big_endian: bool
    long_size: int
    page_size: int
    compression: str = "none"
    compression_version: str = ""
    uname: str = ""
    tracecmd_version: str = ""
    trace_clock: str = ""
    clock_option: bool = False      # the file has a TRACECLOCK option (v6: the clock follows the CPU table)
    cpu_count: int = 0
    cpustats: list = field(default_factory=list)
    ts_offset: int = 0
    buffers: list = field(default_factory=list)
    # option id (OPT_HEADER_INFO...) -> (offset, size, compressed) of that part's bytes
    parts: dict = field(default_factory=dict)

    @property
    def data_bytes(self):
        return sum(size for b in self.buffers for _, _, size in b.cpus)

    @property
    def compressed(self):
        """CPU data stored in compressed chunks (v7 with a compression other than none);
        otherwise it is plain ring-buffer pages."""
        return self.version >= 7 and self.compression not in ("", "none")


class _Reader:
    """Bounds-checked reads at absolute offsets in the file's byte order.

    Small reads come from a window of the file read once: the header, options and CPU
    tables are hundreds of small fields close together. (The chunk tables, thousands of
    8-byte headers a few KiB apart, are read natively: _chunk_table.)"""

    WINDOW = 256 << 10

    def __init__(self, path, fobj, size, big_endian=False):
        self.path, self.f, self.size = path, fobj, size
        self.endian = ">" if big_endian else "<"
        self.window_at, self.window = 0, b""

    def read(self, offset, n, what):
        if offset < 0 or n < 0 or offset + n > self.size:
            raise TraceFileError(f"{self.path}: truncated or corrupt: {what} at offset {offset} "
                                 f"({n} bytes) lies beyond the end of the file ({self.size} bytes)")
        start = offset - self.window_at
        if 0 <= start and start + n <= len(self.window):
            return self.window[start:start + n]
        self.f.seek(offset)
        if n > self.WINDOW // 4:
            data = self.f.read(n)
        else:
            self.window_at, self.window = offset, self.f.read(self.WINDOW)
            data = self.window[:n]
        if len(data) != n:
            raise TraceFileError(f"{self.path}: short read of {what} at offset {offset}")
        return data

    def unpack(self, fmt, offset, what):
        st = struct.Struct(self.endian + fmt)
        return st.unpack(self.read(offset, st.size, what))

    def cstring(self, offset, what, limit=4096):
        data = self.read(offset, min(limit, self.size - offset), what)
        end = data.find(b"\0")
        if end < 0:
            raise TraceFileError(f"{self.path}: corrupt: unterminated {what} at offset {offset}")
        return data[:end].decode("utf-8", "replace"), offset + end + 1


def _cstrings(blob):
    return [s.decode("utf-8", "replace") for s in blob.split(b"\0")]


def read_layout(path, decompress=None):
    """Return the Layout of the trace.dat at `path`.

    `decompress(proto, data, out_size)` inflates a compressed options section;
    trace-cmd writes options uncompressed, so it is needed only for files that
    other writers produce.
    """
    try:
        size = os.path.getsize(path)
        f = open(path, "rb")
    except FileNotFoundError:
        raise TraceFileError(f"{path}: no such file", "check the path") from None
    except IsADirectoryError:
        raise TraceFileError(f"{path}: is a directory without a trace.dat",
                             "give a trace.dat or a bundle directory") from None
    except OSError as exc:
        raise TraceFileError(f"{path}: cannot open: {exc.strerror}") from None
    with f:
        if size == 0:
            raise TraceFileError(f"{path}: the file is empty", "was the recording interrupted?")
        head = f.read(64)
        if not head.startswith(MAGIC):
            raise TraceFileError(f"{path}: not a trace-cmd trace.dat (bad magic)",
                                 "give a file written by `trace-cmd record` or `kmemscope record`")
        r = _Reader(path, f, size)
        version_str, pos = r.cstring(len(MAGIC), "version string", 16)
        try:
            version = int(version_str)
        except ValueError:
            raise TraceFileError(f"{path}: corrupt: version {version_str!r} is not a number") from None
        if version not in (6, 7):
            raise TraceFileError(f"{path}: trace.dat version {version} is not supported",
                                 "kmemscope reads versions 6 and 7")
        endian, long_size = r.read(pos, 2, "endian and long size")
        r = _Reader(path, f, size, big_endian=bool(endian))
        (page_size,) = r.unpack("I", pos + 2, "page size")
        if long_size not in (4, 8) or not 512 <= page_size <= (1 << 20):
            raise TraceFileError(f"{path}: corrupt header: long size {long_size}, page size {page_size}")
        layout = Layout(path, size, version, bool(endian), long_size, page_size)
        pos += 6
        if version == 6:
            _read_v6(r, layout, pos)
        else:
            _read_v7(r, layout, pos, decompress)
        for buf in layout.buffers:
            for cpu, offset, nbytes in buf.cpus:
                if offset + nbytes > size + (4 if layout.version >= 7 else 0):
                    raise TraceFileError(
                        f"{path}: truncated: CPU {cpu} data of buffer {buf.name or 'top'} ends at "
                        f"{offset + nbytes} but the file has {size} bytes")
                if offset % buf.page_size and not layout.compressed:
                    # trace-cmd writes uncompressed pages page-aligned, and trace-cmd
                    # report refuses them otherwise ("failed to init data").
                    raise TraceFileError(
                        f"{path}: corrupt: CPU {cpu} data of buffer {buf.name or 'top'} starts at "
                        f"offset {offset}, not on a {buf.page_size}-byte page boundary")
                _check_cpu_data(r, layout, buf, cpu, offset, nbytes, decompress)
    return layout


def _check_cpu_data(r, layout, buf, cpu, offset, nbytes, decompress=None):
    """Check what is read first of a CPU's data (the chunk table, the first chunk, the
    first page's header), so that a corrupt value is this module's one-line error before
    any decoding starts. (libtracecmd's full open, in 3.1, crashed in its own clean-up when
    a first chunk did not decompress; kmemscope no longer uses libtracecmd.)"""
    where = f"CPU {cpu} of buffer {buf.name or 'top'}"
    if layout.compressed:
        (count,) = r.unpack("I", offset, f"{where} chunk count")
        if count > nbytes // 8:
            raise TraceFileError(f"{r.path}: corrupt: {where} claims {count} compressed chunks "
                                 f"in {nbytes} bytes")
        chunks = _chunk_table(r, buf, where, offset + 4, offset + 4 + nbytes, count)
        buf.chunks[cpu, offset] = chunks
        if chunks and decompress is not None:
            at, csize, usize = chunks[0]
            try:
                first = decompress(layout.compression, r.read(at + 8, csize, f"{where} chunk 0"), usize)
            except TraceFileError:
                raise
            except Exception as exc:  # the decompressor's own error type
                raise TraceFileError(f"{r.path}: corrupt: {where}: its first compressed chunk "
                                     f"(at offset {at}) does not decompress: {exc}") from None
            _check_first_page(r, layout, buf, first, 0, f"{where}, chunk at offset {at}")
        return
    if nbytes >= buf.page_size:
        _check_first_page(r, layout, buf, r.read(offset, buf.page_size, f"{where} first page"),
                          offset, where)


class ChunkTable:
    """The (pos, csize, usize) of each chunk of a CPU's compressed data, as the native
    walk packed them: three uint64 a chunk, not three Python ints."""

    def __init__(self, packed):
        self.flat = memoryview(packed).cast("Q")

    def __len__(self):
        return len(self.flat) // 3

    def __getitem__(self, i):
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        return tuple(self.flat[3 * i:3 * i + 3])

    def __iter__(self):
        flat = self.flat
        return (tuple(flat[i:i + 3]) for i in range(0, len(flat), 3))


def _chunk_table(r, buf, where, pos, end, count):
    """Walk the chunk headers from `pos` (natively: one 256 KiB read for dozens of
    headers) and check each: within the file, within its CPU's data, a whole number of
    pages when inflated."""
    from kmemscope.parsers import _tracedat

    try:
        packed, fault = _tracedat.chunk_table(r.f.fileno(), pos, end, r.size, count,
                                              r.endian == ">", buf.page_size, MAX_CHUNK_BYTES)
    except _tracedat.TraceFileError as exc:     # its memory ran out
        raise TraceFileError(f"{r.path}: {exc}") from None
    if fault is None:
        return ChunkTable(packed)
    kind, i, at, usize = fault
    what = f"{where} chunk {i} header"
    if kind == "past_eof":
        raise TraceFileError(f"{r.path}: truncated or corrupt: {what} at offset {at} (8 bytes) "
                             f"lies beyond the end of the file ({r.size} bytes)")
    if kind == "short_read":
        raise TraceFileError(f"{r.path}: short read of {what} at offset {at}")
    if kind == "past_section":
        raise TraceFileError(f"{r.path}: truncated: {where} chunk {i} runs past the end "
                             "of its data")
    raise TraceFileError(f"{r.path}: corrupt: {where} chunk {i} claims {usize} bytes "
                         f"uncompressed (not a multiple of the {buf.page_size}-byte page)")


def _check_first_page(r, layout, buf, data, offset, where):
    """The commit word of the page at the start of `data` (file offset `offset`, or the
    offset in a decompressed chunk) must fit its page."""
    lsize = 4 if layout.long_size == 4 else 8
    if len(data) < 8 + lsize:
        return
    (commit,) = struct.unpack_from(r.endian + ("I" if lsize == 4 else "Q"), data, 8)
    if commit & COMMIT_MASK > buf.page_size - 8 - lsize:
        raise TraceFileError(f"{r.path}: corrupt ring-buffer page at file offset {offset} "
                             f"({where}): it claims {commit & COMMIT_MASK} bytes of events in a "
                             f"{buf.page_size}-byte page")


def _apply_option(layout, r, opt_id, data, buffer_opts):
    if opt_id == OPT_UNAME:
        layout.uname = _cstrings(data)[0]
    elif opt_id == OPT_VERSION:
        layout.tracecmd_version = _cstrings(data)[0]
    elif opt_id == OPT_TRACECLOCK:
        # The file stores tracefs's trace_clock, with the chosen clock in brackets.
        layout.trace_clock = selected(_cstrings(data)[0])
        layout.clock_option = True
    elif opt_id == OPT_CPUCOUNT and len(data) >= 4:
        (layout.cpu_count,) = struct.unpack(r.endian + "I", data[:4])
        if layout.cpu_count > MAX_CPUS:
            raise TraceFileError(f"{layout.path}: corrupt: CPUCOUNT option says {layout.cpu_count} CPUs")
    elif opt_id == OPT_CPUSTAT:
        layout.cpustats.append(_cstrings(data)[0])
    elif opt_id == OPT_OFFSET:
        try:
            layout.ts_offset = int(_cstrings(data)[0].strip(), 0)
        except ValueError:
            pass
    elif opt_id == OPT_BUFFER:
        buffer_opts.append(data)


def _read_v6(r, layout, pos):
    path = layout.path
    start = pos
    for label in (b"header_page\0", b"header_event\0"):
        if r.read(pos, len(label), "header label") != label:
            raise TraceFileError(f"{path}: corrupt: expected {label[:-1].decode()} at offset {pos}")
        pos += len(label)
        (n,) = r.unpack("Q", pos, label[:-1].decode())
        pos += 8 + n
    layout.parts[OPT_HEADER_INFO], start = (start, pos - start, False), pos
    (count,) = r.unpack("I", pos, "ftrace format count")
    pos += 4
    for _ in range(count):
        (n,) = r.unpack("Q", pos, "ftrace format")
        pos += 8 + n
    layout.parts[OPT_FTRACE_EVENTS], start = (start, pos - start, False), pos
    (systems,) = r.unpack("I", pos, "event system count")
    pos += 4
    for _ in range(systems):
        _, pos = r.cstring(pos, "event system name")
        (count,) = r.unpack("I", pos, "event format count")
        pos += 4
        for _ in range(count):
            (n,) = r.unpack("Q", pos, "event format")
            pos += 8 + n
    layout.parts[OPT_EVENT_FORMATS], start = (start, pos - start, False), pos
    for part, what, fmt in ((OPT_KALLSYMS, "kallsyms", "I"), (OPT_PRINTK, "printk formats", "I"),
                            (OPT_CMDLINES, "cmdlines", "Q")):
        (n,) = r.unpack(fmt, pos, what)
        pos += struct.calcsize(fmt) + n
        layout.parts[part], start = (start, pos - start, False), pos
    if pos > r.size:
        raise TraceFileError(f"{path}: truncated: the metadata runs past the end of the file")
    (cpus,) = r.unpack("I", pos, "CPU count")
    if cpus > MAX_CPUS:
        raise TraceFileError(f"{path}: corrupt: the header says {cpus} CPUs")
    pos += 4
    layout.cpu_count = cpus
    buffer_opts: list = []
    label = r.read(pos, 10, "section label")
    if label == b"options  \0":
        pos += 10
        while True:
            (opt_id,) = r.unpack("H", pos, "option id")
            pos += 2
            if opt_id == OPT_DONE:
                break
            (n,) = r.unpack("I", pos, "option size")
            data = r.read(pos + 4, n, f"option {opt_id}")
            pos += 4 + n
            _apply_option(layout, r, opt_id, data, buffer_opts)
        label = r.read(pos, 10, "section label")
    pos += 10
    if label == b"latency  \0":
        return  # latency-tracer text: no ring-buffer pages
    if label != b"flyrecord\0":
        raise TraceFileError(f"{path}: corrupt: expected flyrecord at offset {pos - 10}")
    if layout.clock_option:
        layout.trace_clock = _v6_trace_clock(r, pos + 16 * cpus, layout.trace_clock)
    top = Buffer("", layout.trace_clock, layout.page_size)
    top.cpus = _v6_cpu_table(r, pos, cpus)
    layout.buffers.append(top)
    for data in buffer_opts:
        if len(data) < 9:
            raise TraceFileError(f"{path}: corrupt BUFFER option")
        (offset,) = struct.unpack(r.endian + "Q", data[:8])
        name = _cstrings(data[8:])[0]
        # An instance's CPU table sits behind a "flyrecord" label of its own.
        if r.read(offset, 10, f"buffer {name} label") == b"flyrecord\0":
            offset += 10
        buf = Buffer(name, layout.trace_clock, layout.page_size)
        buf.cpus = _v6_cpu_table(r, offset, cpus)
        layout.buffers.append(buf)


def _v6_trace_clock(r, pos, current, limit=4096):
    """The clock of a v6 file whose TRACECLOCK option is set: tracefs's trace_clock text
    (size, then "[local] global ...") follows the CPU table. Read as libtracecmd reads it:
    the first space-separated word that opens with "[" names the clock, no such word keeps
    `current`, and a text that cannot be read means "local"."""
    try:
        (n,) = r.unpack("Q", pos, "trace clock size")
        if n > limit:
            return "local"
        text = r.read(pos + 8, n, "trace clock").split(b"\0", 1)[0].decode("utf-8", "replace")
    except TraceFileError:
        return "local"
    for word in text.split(" "):
        if word.startswith("["):
            name = re.split(r"[\[\]]", word)[1].split()
            return name[0] if name else current
    return current


def _v6_cpu_table(r, pos, cpus):
    table = []
    for cpu in range(cpus):
        offset, size = r.unpack("QQ", pos + 16 * cpu, f"CPU {cpu} data offset")
        if size:
            table.append((cpu, offset, size))
    return table


def _read_v7(r, layout, pos, decompress):
    path = layout.path
    layout.compression, pos = r.cstring(pos, "compression name", 64)
    layout.compression_version, pos = r.cstring(pos, "compression version", 64)
    (next_options,) = r.unpack("Q", pos, "first options offset")
    buffer_opts: list = []
    seen: set = set()
    while next_options:
        if next_options in seen:
            raise TraceFileError(f"{path}: corrupt: options sections form a loop")
        seen.add(next_options)
        sec_id, flags, _sid, sec_size = r.unpack("HHIQ", next_options, "options section header")
        if sec_id != SECTION_OPTIONS:
            raise TraceFileError(f"{path}: corrupt: section at {next_options} is not an options section")
        body_at = next_options + 16
        body = r.read(body_at, sec_size, "options section")
        if flags & SECTION_FLAG_COMPRESSED:
            if decompress is None or len(body) < 8:
                raise TraceFileError(f"{path}: compressed options section cannot be read")
            csize, usize = struct.unpack(r.endian + "II", body[:8])
            if usize > MAX_OPTIONS_BYTES:
                raise TraceFileError(f"{path}: corrupt: options section at {next_options} claims "
                                     f"{usize} bytes uncompressed")
            try:
                body = decompress(layout.compression, body[8:8 + csize], usize)
            except Exception as exc:  # the decompressor's own error type, or a bad name
                raise TraceFileError(f"{path}: corrupt: compressed options section at "
                                     f"{next_options} cannot be read: {exc}") from None
        next_options = 0
        at = 0
        while at + 6 <= len(body):
            opt_id, n = struct.unpack_from(r.endian + "HI", body, at)
            data = body[at + 6:at + 6 + n]
            if len(data) != n:
                raise TraceFileError(f"{path}: corrupt: option {opt_id} overruns its section")
            at += 6 + n
            if opt_id == OPT_DONE:
                if n >= 8:
                    (next_options,) = struct.unpack(r.endian + "Q", data[:8])
                break
            if opt_id in METADATA_PARTS:
                _v7_part(r, layout, opt_id, data)
            else:
                _apply_option(layout, r, opt_id, data, buffer_opts)
    for data in buffer_opts:
        buf, section = _v7_buffer(r, data, path)
        _check_flyrecord_section(r, layout, buf, section)
        layout.buffers.append(buf)
    if not layout.trace_clock:
        # no TRACECLOCK option: the top buffer's clock, as libtracecmd and trace-cmd report take it
        layout.trace_clock = next((b.clock for b in layout.buffers if not b.name), "")


def _v7_part(r, layout, opt_id, data):
    """A metadata option: the offset of its section, whose header must name the same part."""
    what = METADATA_PARTS[opt_id]
    if len(data) < 8:
        raise TraceFileError(f"{layout.path}: corrupt: the {what} option holds no offset")
    (at,) = struct.unpack(r.endian + "Q", data[:8])
    sec_id, flags, _sid, size = r.unpack("HHIQ", at, f"{what} section header")
    if sec_id != opt_id:
        raise TraceFileError(f"{layout.path}: corrupt: the {what} section at {at} has id {sec_id}")
    r.read(at + 16, 0, f"{what} section")
    if at + 16 + size > r.size:
        raise TraceFileError(f"{layout.path}: truncated or corrupt: the {what} section at {at} "
                             f"({size} bytes) lies beyond the end of the file ({r.size} bytes)")
    layout.parts[opt_id] = (at + 16, size, bool(flags & SECTION_FLAG_COMPRESSED))


def _check_flyrecord_section(r, layout, buf, at):
    """The BUFFER option points at its data's section header: libtracecmd trusts its id
    and compression flag, so check them against the file's compression here."""
    sec_id, flags = r.unpack("HH", at, f"buffer {buf.name or 'top'} section header")
    compressed = layout.compressed
    if sec_id != SECTION_FLYRECORD or flags not in (SECTION_FLAG_COMPRESSED if compressed else 0,):
        raise TraceFileError(f"{layout.path}: corrupt: buffer {buf.name or 'top'} section at {at} has "
                             f"id {sec_id} and flags {flags:#x}, not a "
                             f"{'compressed ' if compressed else ''}flyrecord section")


def _v7_buffer(r, data, path):
    try:
        (section,) = struct.unpack_from(r.endian + "Q", data, 0)
        parts = data[8:].split(b"\0", 2)
        name, clock = parts[0].decode(), parts[1].decode()
        rest = parts[2]
        page_size, ncpus = struct.unpack_from(r.endian + "II", rest, 0)
        if not 512 <= page_size <= (1 << 20):
            raise TraceFileError(f"{path}: corrupt BUFFER option: page size {page_size}")
        buf = Buffer(name, clock, page_size)
        for i in range(ncpus):
            cpu, offset, size = struct.unpack_from(r.endian + "IQQ", rest, 8 + 20 * i)
            if cpu >= MAX_CPUS:
                raise TraceFileError(f"{path}: corrupt BUFFER option: CPU id {cpu}")
            if size:
                buf.cpus.append((cpu, offset, size))
    except (struct.error, IndexError, UnicodeDecodeError):
        raise TraceFileError(f"{path}: corrupt BUFFER option") from None
    return buf, section


def segments(layout, segment_bytes=SEGMENT_BYTES):
    """Split every buffer's CPU data into independently decodable segments."""
    out = []
    compressed = layout.compressed
    for buf in layout.buffers:
        page = buf.page_size
        for cpu, offset, size in buf.cpus:
            if not compressed:
                usable = size - size % page
                step = max(page, segment_bytes - segment_bytes % page)
                for start in range(0, usable, step):
                    n = min(step, usable - start)
                    out.append(Segment(buf.name, cpu, offset + start, n, 0, n))
                continue
            # read_layout checked the chunk headers (the recorded size counts the
            # chunk records, not the count before them).
            flat = buf.chunks[cpu, offset].flat
            pos = offset + 4
            seg_start, seg_chunks, seg_bytes = pos, 0, 0
            last = len(flat) - 3
            for i in range(0, len(flat), 3):
                pos += 8 + flat[i + 1]
                seg_chunks += 1
                seg_bytes += flat[i + 2]
                if seg_bytes >= segment_bytes or i == last:
                    out.append(Segment(buf.name, cpu, seg_start, pos - seg_start,
                                       seg_chunks, seg_bytes))
                    seg_start, seg_chunks, seg_bytes = pos, 0, 0
    # Largest first, so the last segments to finish are small ones.
    out.sort(key=lambda s: -s.data_bytes)
    return out


@dataclass
class Metadata:
    """What libtraceevent parses of a trace.dat, as its parsers take it (read_metadata)."""
    header_page: bytes = b""
    formats: list = field(default_factory=list)    # (system, format text): ftrace's first
    kallsyms: bytes = b""
    printk: bytes = b""
    cmdlines: bytes = b""


def read_metadata(layout, decompress=None):
    """The metadata parts of the file of `layout` (its `parts`), every size checked
    against the part that holds it; a v7 section compressed as a block is inflated with
    `decompress(proto, data, out_size)`."""
    path = layout.path
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise TraceFileError(f"{path}: cannot open: {exc.strerror}") from None
    with f:
        r = _Reader(path, f, layout.file_size, layout.big_endian)
        meta = Metadata()
        for part, what in METADATA_PARTS.items():
            if part not in layout.parts:
                if part in (OPT_HEADER_INFO, OPT_EVENT_FORMATS):
                    raise TraceFileError(f"{path}: corrupt: the file has no {what}")
                continue
            offset, size, compressed = layout.parts[part]
            body = _Part(path, what, r.endian, r.read(offset, size, what))
            if compressed:
                body = _Part(path, what, r.endian, _inflate(body, layout, decompress))
            _read_part(meta, part, body)
    return meta


# The metadata's largest part, kallsyms, is some 10 MiB; a size far beyond is corrupt.
MAX_PART_BYTES = 1 << 30


def _inflate(body, layout, decompress):
    csize, usize = body.unpack("II", "compressed block sizes")
    if decompress is None or usize > MAX_PART_BYTES:
        raise TraceFileError(f"{layout.path}: corrupt: the {body.what} section claims "
                             f"{usize} bytes uncompressed")
    data = body.take(csize, "compressed block")
    try:
        return decompress(layout.compression, data, usize)
    except MemoryError:
        raise TraceFileError(f"{layout.path}: out of memory reading the file's metadata") from None
    except Exception as exc:  # the decompressor's own error type, or a bad name
        raise TraceFileError(f"{layout.path}: corrupt: the {body.what} section does not "
                             f"decompress: {exc}") from None


class _Part:
    """Sequential, bounds-checked reads of one metadata part held in memory."""

    def __init__(self, path, what, endian, data):
        self.path, self.what, self.endian, self.data, self.at = path, what, endian, data, 0

    def take(self, n, what):
        if n < 0 or self.at + n > len(self.data):
            raise TraceFileError(f"{self.path}: corrupt: {what} ({n} bytes) runs past the end "
                                 f"of the {self.what} ({len(self.data)} bytes)")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def unpack(self, fmt, what):
        st = struct.Struct(self.endian + fmt)
        return st.unpack(self.take(st.size, what))

    def sized(self, fmt, what):
        (n,) = self.unpack(fmt, f"{what} size")
        return self.take(n, what)

    def cstring(self, what):
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise TraceFileError(f"{self.path}: corrupt: unterminated {what} in the {self.what}")
        text = self.data[self.at:end].decode("utf-8", "replace")
        self.at = end + 1
        return text


def _read_part(meta, part, body):
    """One part's contents, laid out alike in v6 and v7 (trace-cmd.dat.v6(5))."""
    if part == OPT_HEADER_INFO:
        for label in (b"header_page\0", b"header_event\0"):
            if body.take(len(label), "header label") != label:
                raise TraceFileError(f"{body.path}: corrupt: expected {label[:-1].decode()}")
            blob = body.sized("Q", label[:-1].decode())
            if label == b"header_page\0":
                meta.header_page = blob
    elif part == OPT_FTRACE_EVENTS:
        (count,) = body.unpack("I", "ftrace format count")
        meta.formats += [("ftrace", body.sized("Q", "ftrace format")) for _ in range(count)]
    elif part == OPT_EVENT_FORMATS:
        (systems,) = body.unpack("I", "event system count")
        for _ in range(systems):
            system = body.cstring("event system name")
            (count,) = body.unpack("I", "event format count")
            meta.formats += [(system, body.sized("Q", "event format")) for _ in range(count)]
    elif part == OPT_KALLSYMS:
        meta.kallsyms = body.sized("I", "kallsyms")
    elif part == OPT_PRINTK:
        meta.printk = body.sized("I", "printk formats")
    elif part == OPT_CMDLINES:
        # trace-cmd writes saved_cmdlines' size as it stood before copying the file, which
        # can shrink meanwhile (a task exits): the section then holds fewer bytes than its
        # size says, and trace-cmd report reads what is there. So does this.
        (n,) = body.unpack("Q", "cmdlines size")
        meta.cmdlines = body.take(min(n, len(body.data) - body.at), "cmdlines")
