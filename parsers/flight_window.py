"""A flight recorder bundle's window: which of its events a run keeps.

A flight bundle holds whatever each CPU's ring buffer held when its trigger
came: a quiet CPU's events reach back much further than a busy one's, whose
oldest events the buffer overwrote. Rates over such a span mix seconds where
only some CPUs have data. So a run of a flight bundle keeps the events inside
its window only:

    [max(trigger - keep, the instant from which every CPU has data, tracing start),
     trigger + after]

taken from the manifest the recorder wrote (capture/flight.py, `window`). The
rest is trimmed, counted as such, and not lost. The ring buffer marks the
first page it kept on each CPU with the number of events it overwrote before:
those were all before the window (it starts where every CPU has data), so only
the markers of later pages inside the window count as lost, plus the events the
--after buffer dropped. `kmemscope parse --whole-bundle` keeps everything.
"""
import threading
from dataclasses import dataclass

from kmemscope.common.errors import TraceFileError

_MAX_NS = (1 << 63) - 1


@dataclass
class Window:
    start_ns: int
    end_ns: int
    trigger_ns: int


def _ns(window, key, source, required=True):
    value = window.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_NS:
        raise TraceFileError(f"{source}: the flight bundle's manifest has no valid window.{key}",
                             "parse it with --whole-bundle to keep every event")
    return value


def _seconds(window, key, source):
    value = window.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1e7:
        raise TraceFileError(f"{source}: the flight bundle's manifest has no valid window.{key}",
                             "parse it with --whole-bundle to keep every event")
    return value


def window_of(manifest, source):
    """The Window of a flight bundle's manifest; None for any other bundle or trace."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("trigger"), dict):
        return None
    window = manifest.get("window")
    if not isinstance(window, dict):
        return None
    trigger = _ns(window, "trigger_mono_ns", source)
    keep, after = _seconds(window, "keep_s", source), _seconds(window, "after_s", source)
    start = max(0, trigger - int(keep * 1e9))
    for key in ("covered_from_mono_ns", "tracing_since_mono_ns"):
        later = _ns(window, key, source, required=False)
        if later is not None:
            start = max(start, later)
    end = min(_MAX_NS, trigger + int(after * 1e9))
    return Window(start_ns=start, end_ns=max(start, end), trigger_ns=trigger)


class TrimmingSinks:
    """make_sink for TraceFile.decode that passes on only the rows inside the window.

    trimmed_before / trimmed_after count the rows left out on each side.
    """

    def __init__(self, make_sink, window):
        self.make_sink, self.window = make_sink, window
        self.trimmed_before = self.trimmed_after = 0
        self._lock = threading.Lock()

    def __call__(self, index):
        sink = self.make_sink(index)

        def trimmed(table, batch):
            import pyarrow.compute as pc

            if batch.schema.get_field_index("ts") < 0:    # the stacks table: no time
                sink(table, batch)
                return
            ts = batch.column(batch.schema.get_field_index("ts"))
            before = pc.sum(pc.less(ts, self.window.start_ns)).as_py() or 0
            after = pc.sum(pc.greater(ts, self.window.end_ns)).as_py() or 0
            if before or after:
                with self._lock:
                    self.trimmed_before += before
                    self.trimmed_after += after
                keep = pc.and_(pc.greater_equal(ts, self.window.start_ns),
                               pc.less_equal(ts, self.window.end_ns))
                batch = batch.filter(keep)
                if batch.num_rows == 0:
                    return
            sink(table, batch)
        return trimmed

    @property
    def trimmed(self):
        return self.trimmed_before + self.trimmed_after


def lost_in_window(lost, window):
    """The ring buffer's missed-event markers [(buffer, cpu, ts, missed)] that lie in the window.

    The earliest marker of each CPU's top-level buffer counts what was overwritten
    before that CPU's data begins, so before the window: it is left out.
    """
    first: dict = {}
    for name, cpu, ts, _ in lost:
        if name == "" and ts is not None and ((name, cpu) not in first or ts < first[(name, cpu)]):
            first[(name, cpu)] = ts
    out = []
    for name, cpu, ts, missed in lost:
        if ts is None or first.get((name, cpu)) == ts:
            continue
        if window.start_ns <= ts <= window.end_ns:
            out.append((name, cpu, ts, missed))
    return out
