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

The before-trigger events are in the recorder's own instance (window.before_buffer;
bundles of older recorders kept them in the top-level buffer, ""). A window may
also be incomplete for reasons no counter shows: something else changed the
recorder's instances for a while (window.blind), or the --after buffer filled
(window.after_kept_s). window_note() says so in a line for the runs table.
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
    before_buffer: str = ""       # the buffer that held the seconds before the trigger


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
    before = window.get("before_buffer", "")
    if not isinstance(before, str):
        raise TraceFileError(f"{source}: the flight bundle's manifest has no valid "
                             "window.before_buffer", "parse it with --whole-bundle to keep every event")
    return Window(start_ns=start, end_ns=max(start, end), trigger_ns=trigger, before_buffer=before)


def window_note(manifest):
    """'incomplete: ...' when a flight bundle's manifest says its window is not whole, else None.

    Names the blind stretches (seconds from the trigger and what happened), what the
    ring buffer overwrote or had not traced yet, and the share of --after kept.
    """
    window = (manifest or {}).get("window") if isinstance(manifest, dict) else None
    if not isinstance(window, dict) or window.get("complete") is not False:
        return None
    trigger, parts = window.get("trigger_mono_ns"), []
    for b in window.get("blind") or []:
        if not isinstance(b, dict) or not isinstance(trigger, int):
            continue
        lo, hi = b.get("from_mono_ns"), b.get("to_mono_ns")
        if isinstance(lo, int) and isinstance(hi, int):
            parts.append(f"blind {(lo - trigger) / 1e9:+.1f} s to {(hi - trigger) / 1e9:+.1f} s "
                         f"({str(b.get('what', ''))[:200]})")
    missing = window.get("missing_s")
    if isinstance(missing, (int, float)) and missing > 0:
        parts.append(f"first {missing:g} s of the window not held")
    kept, after = window.get("after_kept_s"), window.get("after_s")
    if isinstance(kept, (int, float)) and isinstance(after, (int, float)) and kept < after:
        parts.append(f"--after buffer full after {kept:g} of {after:g} s")
    return "incomplete: " + ("; ".join(parts) if parts else "see the bundle's manifest")


def dropped_in_window(cpustats, cpus, window, parse_cpu_stats):
    """Events the flight bundle's buffers dropped (all inside its window), from the per-CPU
    counters trace-cmd saved: the top level's come first, `cpus` of them, and belong to
    another tool when the recorder kept its window in an instance."""
    texts = cpustats[cpus:] if window.before_buffer else cpustats
    return sum(parse_cpu_stats(t).get("dropped_events", 0) for t in texts)


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

    The earliest marker of each CPU's before-trigger buffer counts what was overwritten
    before that CPU's data begins, so before the window: it is left out.
    """
    first: dict = {}
    for name, cpu, ts, _ in lost:
        if name == window.before_buffer and ts is not None and ((name, cpu) not in first or ts < first[(name, cpu)]):
            first[(name, cpu)] = ts
    out = []
    for name, cpu, ts, missed in lost:
        if ts is None or first.get((name, cpu)) == ts:
            continue
        if window.start_ns <= ts <= window.end_ns:
            out.append((name, cpu, ts, missed))
    return out


class Kept:
    """What a parse keeps of a run, in one object: a flight bundle's window, or (window None)
    everything. The decode asks it for its sinks; the run's tables ask it what was lost,
    which times the run spans, what the buffers dropped and what the manifest says of it."""

    def __init__(self, window, make_sink):
        self.window = window
        self.trimming = TrimmingSinks(make_sink, window) if window else None
        self.make_sink = self.trimming or make_sink

    @property
    def trimmed(self):
        return self.trimming.trimmed if self.trimming else 0

    def lost(self, lost):
        """The missed-event markers that count against the run."""
        return lost_in_window(lost, self.window) if self.window else lost

    def ts_range(self, stats):
        """(first, last) event time of the decode's per-CPU stats, inside the window."""
        firsts = [st["min_ts"] for st in stats if st["min_ts"] is not None]
        lasts = [st["max_ts"] for st in stats if st["max_ts"] is not None]
        if self.window:
            firsts = [max(t, self.window.start_ns) for t in firsts]
            lasts = [min(t, self.window.end_ns) for t in lasts]
        return (min(firsts) if firsts else None, max(lasts) if lasts else None)

    def dropped(self, cpustats, cpus, parse_cpu_stats):
        """Events the --after buffer dropped, all inside the window (0 for a whole run)."""
        return dropped_in_window(cpustats, cpus, self.window, parse_cpu_stats) if self.window else 0

    def manifest(self, manifest, missed):
        """The run's manifest, with what parse kept of a flight bundle."""
        if not self.window or self.trimming is None:
            return manifest
        return dict(manifest, parse_window={
            "start_mono_ns": self.window.start_ns, "end_mono_ns": self.window.end_ns,
            "trimmed_before": self.trimming.trimmed_before,
            "trimmed_after": self.trimming.trimmed_after,
            "lost_in_window": missed, "note": window_note(manifest)})
