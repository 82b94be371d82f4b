"""Decode a trace.dat into Arrow record batches, one stream per event table.

`TraceFile` joins the two halves of the native decoder: the file's table of
contents and metadata as `layout` reads them from the file format, and
libtraceevent's view of the event formats and symbols (`_tracedat.Trace`). `TraceFile.decode` runs one worker thread per core; each
pulls segments off a shared queue, decodes them with the GIL released, and
hands finished batches to a sink owned by that thread, so Parquet encoding of
one thread's batches overlaps with decoding on the other.

Kernel stacks are interned across the threads: every decoder of one decode
shares one `_tracedat.Stacks`, which gives each distinct stack an id (1, 2, ...
in the order the decode met it) and one row of the `stacks` table; a
kernel_stack row carries only that id.
"""
import fnmatch
import os
import queue
import threading
from dataclasses import dataclass

from kmemscope.common.errors import TraceFileError
from kmemscope.parsers import _tracedat, layout as layout_mod
from kmemscope.parsers.tablenames import name_tables

BATCH_ROWS = 1 << 17
STACKS_TABLE = "stacks"     # one row per distinct kernel stack of the run


@dataclass
class EventTable:
    event_id: int
    system: str
    event: str
    table: str


def _parse_uname(uname):
    """trace-cmd stores `uname -s -n -r -m` as one string."""
    parts = (uname or "").split()
    if len(parts) >= 4:
        return {"host": parts[1], "kernel_release": parts[2], "arch": parts[-1]}
    return {"host": None, "kernel_release": None, "arch": None}


def _load_arrow():
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401  (the first batch's writer needs it)
    except (ImportError, MemoryError):
        # Said where it is needed: the first batch imports it again. A MemoryError (a
        # decoder under its address-space limit) must end here: threading's excepthook
        # would print it, allocate, and could fail again while handling it, which CPython
        # answers with a fatal error (SIGABRT) of the whole decoder.
        pass


class _Loaded:
    """A loader that ran on the calling thread: nothing to join."""

    def join(self):
        pass


def _arrow_loader():
    """pyarrow loading on a helper thread (joined before the first batch), or loaded here
    under an address-space limit: there an import that runs out of memory on a helper
    thread can spin in CPython's import machinery holding the GIL (seen: a decoder at
    100% CPU for minutes), while on this thread it fails as this open's MemoryError."""
    import resource

    if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
        return helper_thread(_load_arrow, "kmemscope-load-arrow")
    import pyarrow.parquet  # noqa: F401
    return _Loaded()


def helper_thread(target, name):
    """A started helper thread with a 1 MiB stack. glibc keeps an ended thread's stack for
    the next thread that fits in it: a helper's 8 MiB stack handed to a decoder thread
    under a memory limit lets that thread start and then fail to allocate, and Python's
    Thread.start() waits for it forever. A decoder thread never fits in this one."""
    old = threading.stack_size(1 << 20)
    try:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
    finally:
        threading.stack_size(old)
    return thread


def open_native(layout):
    """The native decoder's Trace of the file of `layout`: its metadata, as layout reads it,
    given to libtraceevent."""
    metadata = layout_mod.read_metadata(layout, _tracedat.decompress)
    try:
        return _tracedat.Trace(layout.path, metadata, layout.cpu_count, layout.long_size,
                               layout.big_endian)
    except _tracedat.TraceFileError as exc:
        raise TraceFileError(str(exc)) from None


class TraceFile:
    """A trace.dat opened for decoding."""

    def __init__(self, path):
        self.path = str(path)
        self._segments = None
        # kmemscope's own checks first: libtraceevent never sees a file they reject.
        self.layout = layout_mod.read_layout(self.path, _tracedat.decompress)
        # pyarrow, which decoding needs, loads under the GIL (a few hundredths of a
        # second) while libtraceevent parses the file's metadata without it, and on
        # while the decoder threads start (they need it only to hand over their
        # first batches): decode() joins it then. An open that fails joins it at
        # once, so that no thread of it outlives the error.
        self._arrow_loader = _arrow_loader()
        try:
            self._open_native()
        except BaseException:
            self._arrow_loader.join()
            raise

    def _open_native(self):
        """libtraceevent's view of the file, and what it says of the recorded events."""
        self.native = open_native(self.layout)
        try:
            self.tables = self._name_tables()
            self.print_flags = self.native.print_flags()
        except _tracedat.TraceFileError as exc:
            raise TraceFileError(str(exc)) from None
        except UnicodeDecodeError:
            raise TraceFileError(f"{self.path}: corrupt: event formats hold names that are "
                                 "not text") from None

    def _name_tables(self):
        """Tables named after events, in a safe alphabet (parsers/tablenames.py)."""
        formats = [(event_id, system, name) for event_id, system, name, _cols in self.native.events()]
        names = name_tables(formats)
        return {event_id: EventTable(event_id, system, name, names[event_id])
                for event_id, system, name in formats}

    def select(self, patterns):
        """Event ids whose `system:event` or `event` matches any glob in `patterns`."""
        if not patterns:
            return None
        chosen = set()
        for t in self.tables.values():
            for pat in patterns:
                if fnmatch.fnmatchcase(f"{t.system}:{t.event}", pat) or fnmatch.fnmatchcase(t.event, pat):
                    chosen.add(t.event_id)
        return chosen

    def metadata(self):
        lay = self.layout
        meta = _parse_uname(lay.uname)
        meta.update(
            cpus=lay.cpu_count,
            trace_clock=lay.trace_clock or "local",
            file_version=lay.version,
            compression="none" if lay.version < 7 else lay.compression,
            compression_version=lay.compression_version or None,
            long_size=lay.long_size,
            page_size=lay.page_size,
            big_endian=lay.big_endian,
            tracecmd_version=lay.tracecmd_version or None,
            uname=lay.uname or None,
            instances=[b.name for b in lay.buffers if b.name],
        )
        return meta

    def segments(self):
        if self._segments is None:
            self._segments = layout_mod.segments(self.layout)
        return self._segments

    def data_bytes(self):
        """Bytes of ring-buffer pages to decode (after decompression): progress's total."""
        return sum(seg.data_bytes for seg in self.segments())

    def decode(self, make_sink, event_ids=None, threads=None, progress=None):
        """Decode every segment; returns per-thread stats.

        make_sink(worker_index) -> callable(table_name, record_batch) that the
        worker thread calls for each batch (made at the worker's first batch; a
        worker that decodes no event makes none); the last batches of the stacks
        table go to a sink of index `threads` made on the calling thread.
        `progress(bytes)` is called as segments finish. Errors in any worker stop
        all of them and re-raise.
        """
        segments = self.segments()
        n = max(1, min(threads or os.cpu_count() or 1, len(segments) or 1))
        work: queue.SimpleQueue = queue.SimpleQueue()
        for seg in segments:
            work.put(seg)
        stop = threading.Event()
        errors: list = []
        stats: list = [None] * n
        tables = {eid: t.table for eid, t in self.tables.items()}
        buffers = {b.name: b for b in self.layout.buffers}
        compression = "none" if self.layout.version < 7 else self.layout.compression
        stacks = _tracedat.Stacks()

        def emit(index, sinks, batches, table=None):
            if not batches:
                return
            # pyarrow is loaded (by the open's loader thread), and the sink made,
            # by the first batch, not before decoding starts: the other workers
            # decode on, without the GIL, while it loads.
            self._arrow_loader.join()
            import pyarrow as pa

            sink = sinks.get(index)
            if sink is None:
                sink = sinks[index] = make_sink(index)
            for batch in batches:
                name = table or tables[batch[0]]
                sink(name, pa.RecordBatch._import_from_c_capsule(*batch[-2:]))

        def worker(index):
            try:
                sinks: dict = {}
                decoders: dict = {}
                while not stop.is_set():
                    try:
                        seg = work.get_nowait()
                    except queue.Empty:
                        break
                    dec = decoders.get(seg.buffer)
                    if dec is None:
                        buf = buffers[seg.buffer]
                        dec = decoders[seg.buffer] = _tracedat.Decoder(
                            self.native, self.path, buf.page_size, compression,
                            batch_rows=BATCH_ROWS, ts_offset=self.layout.ts_offset,
                            event_ids=event_ids, stacks=stacks)
                    emit(index, sinks, dec.decode(seg.cpu, seg.offset, seg.length, seg.chunks))
                    emit(index, sinks, stacks.take(), STACKS_TABLE)
                    if progress:
                        progress(seg.data_bytes)
                result: dict = {"events": 0, "unknown_events": 0, "lost": [], "min_ts": None,
                                "max_ts": None}
                for name, dec in decoders.items():
                    emit(index, sinks, dec.finish())
                    s = dec.stats()
                    result["events"] += s["events"]
                    result["unknown_events"] += s["unknown_events"]
                    result["lost"] += [(name, cpu, ts, missed) for cpu, ts, missed in s["lost"]]
                    if s["min_ts"] is not None:
                        lo, hi = result["min_ts"], result["max_ts"]
                        result["min_ts"] = s["min_ts"] if lo is None else min(lo, s["min_ts"])
                        result["max_ts"] = s["max_ts"] if hi is None else max(hi, s["max_ts"])
                stats[index] = result
            except BaseException as exc:  # re-raised on the calling thread
                stop.set()
                errors.append(exc)

        pool = [threading.Thread(target=worker, args=(i,), name=f"kmemscope-decode-{i}")
                for i in range(n)]
        try:
            for t in pool:
                t.start()
        except BaseException:
            stop.set()          # the started workers stop after their segment
            raise
        finally:
            for t in pool:
                if t.ident is not None:
                    t.join()
            self._arrow_loader.join()
        if not errors:
            try:
                emit(n, {}, stacks.finish(), STACKS_TABLE)
            except BaseException as exc:
                errors.append(exc)
        if errors:
            first = errors[0]
            if isinstance(first, _tracedat.TraceFileError):
                raise TraceFileError(f"{self.path}: {first}") from None
            raise first
        return stats
