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

The recorder also writes a heartbeat into the instance that records (an ftrace
print event, `kmemscope-heartbeat INSTANCE N`, every 0.1 s) and lists in the
manifest the ones that went in (window.heartbeat.written). Each one written
inside the window must be in the trace: heartbeat_gaps() finds the missing
ones from the data (the instance cleared, its events consumed by a reader,
switched off and on between the recorder's checks) and with_heartbeat_gaps()
adds them to the run's window.blind and makes it incomplete.
"""
import re
import threading
from dataclasses import dataclass

from kmemscope.common.errors import TraceFileError

_MAX_NS = (1 << 63) - 1
HEARTBEAT_PREFIX = "kmemscope-heartbeat "
MAX_HEARTBEATS = 1_000_000      # a manifest listing more is not one the recorder wrote


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


def trace_clock(manifest, from_file):
    """The clock a flight bundle's events were recorded with: its manifest's `clock` (the
    recorder sets its instances to it and checks it stays), since `trace-cmd extract` stores
    the top level's clock in trace.dat, not the instances'. `from_file` for other traces."""
    window = manifest.get("window") if isinstance(manifest, dict) else None
    clock = manifest.get("clock") if isinstance(window, dict) and isinstance(manifest, dict) else None
    if isinstance(window, dict) and isinstance(window.get("before_buffer"), str) and \
            window.get("before_buffer") and isinstance(clock, str) and \
            re.fullmatch(r"[a-z0-9_-]{1,16}", clock):
        return clock
    return from_file


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


def heartbeats_written(manifest, source):
    """{instance: [(seq, mono_ns)]} of the heartbeats a flight bundle's manifest lists as
    written into its instances inside the window; None when it lists none (older bundles)."""
    window = manifest.get("window") if isinstance(manifest, dict) else None
    beat = window.get("heartbeat") if isinstance(window, dict) else None
    if beat is None:
        return None
    written = beat.get("written") if isinstance(beat, dict) else None
    bad = TraceFileError(f"{source}: the flight bundle's manifest has no valid window.heartbeat",
                         "parse it with --whole-bundle to keep every event")
    if not isinstance(written, dict) or len(written) > 16:
        raise bad
    out, total = {}, 0
    for name, rows in written.items():
        if not isinstance(name, str) or not isinstance(rows, list):
            raise bad
        total += len(rows)
        if total > MAX_HEARTBEATS:
            raise bad
        beats = []
        for row in rows:
            if not (isinstance(row, list) and len(row) == 2 and all(
                    isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _MAX_NS for v in row)):
                raise bad
            beats.append((row[0], row[1]))
        out[name] = sorted(beats, key=lambda b: b[1])
    return out


def heartbeat_gaps(manifest, window, seen, source=""):
    """Blind stretches [{from_mono_ns, to_mono_ns, what}] where heartbeats written inside
    `window` are missing from the trace; `seen`: the (instance, seq) found in it.

    A stretch runs from the last heartbeat found before the missing ones (or the window's
    start) to the first found after them (or the end of that instance's part of the
    window: the first instance froze at window.frozen_mono_ns).
    """
    written = heartbeats_written(manifest, source)
    if not written:
        return []
    w = manifest["window"]
    frozen = w.get("frozen_mono_ns")
    out = []
    for name in sorted(written):
        end = window.end_ns
        if name == window.before_buffer and isinstance(frozen, int) and not isinstance(frozen, bool):
            end = min(end, max(window.start_ns, frozen))
        beats = [b for b in written[name] if window.start_ns <= b[1] <= end]
        last_found, missing = window.start_ns, []
        for seq, t in beats + [(None, end)]:
            if seq is not None and (name, seq) not in seen:
                missing.append(seq)
                continue
            if missing:
                out.append({"from_mono_ns": last_found, "to_mono_ns": t,
                            "what": f"{name}: {len(missing)} heartbeat(s) written there are missing "
                                    "from the trace (found by parse)"})
                missing = []
            last_found = t
    return out


def with_heartbeat_gaps(manifest, gaps):
    """The manifest with `gaps` added to window.blind, the window incomplete when any."""
    if not gaps:
        return manifest
    window = dict(manifest["window"])
    blind = [b for b in window.get("blind") or [] if isinstance(b, dict)]
    trigger = window.get("trigger_mono_ns")
    window["blind"] = blind + gaps       # the recorder's own first, then those parse found
    known = window.get("blind_s")
    window["blind_s"] = round((known if isinstance(known, (int, float)) and not isinstance(
        known, bool) else 0) + sum(g["to_mono_ns"] - g["from_mono_ns"] for g in gaps) / 1e9, 3)
    window["complete"] = False
    if isinstance(trigger, int):
        if any(g["from_mono_ns"] < trigger for g in gaps):
            window["before_complete"] = False
        if any(g["to_mono_ns"] > trigger for g in gaps):
            window["after_complete"] = False
    return dict(manifest, window=window)


class TrimmingSinks:
    """make_sink for TraceFile.decode that passes on only the rows inside the window.

    trimmed_before / trimmed_after count the rows left out on each side. With
    `beat_table` (the table of ftrace print events), the recorder's heartbeats in it
    are collected in `beats_seen` as (instance, seq), and kept in the table.
    """

    def __init__(self, make_sink, window, beat_table=None):
        self.make_sink, self.window, self.beat_table = make_sink, window, beat_table
        self.trimmed_before = self.trimmed_after = 0
        self.beats_seen: set = set()
        self._lock = threading.Lock()

    def _collect_beats(self, batch):
        import pyarrow.compute as pc

        at = batch.schema.get_field_index("buf")
        if at < 0:
            return
        texts = batch.column(at)
        try:
            found = batch.filter(pc.starts_with(texts, HEARTBEAT_PREFIX)).column(at).to_pylist()
        except Exception:   # pyarrow.ArrowNotImplementedError: a buf that is not text
            return
        beats = set()
        for text in found:
            parts = text.split()
            if len(parts) == 3 and parts[2].isdigit() and len(parts[2]) < 19:
                beats.add((parts[1], int(parts[2])))
        with self._lock:
            self.beats_seen |= beats

    def __call__(self, index):
        sink = self.make_sink(index)

        def trimmed(table, batch):
            import pyarrow.compute as pc

            if table == self.beat_table:
                self._collect_beats(batch)
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

    def __init__(self, window, make_sink, beat_table=None):
        self.window, self.beat_table = window, beat_table
        self.trimming = TrimmingSinks(make_sink, window, beat_table) if window else None
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

    def manifest(self, manifest, missed, source):
        """The run's manifest, with what parse kept of a flight bundle: its window, and the
        stretches the recorder's heartbeats are missing from (window.blind)."""
        if not self.window or self.trimming is None:
            return manifest
        checked = heartbeats_written(manifest, source) is not None
        beats: dict
        if checked and self.beat_table is not None:
            gaps = heartbeat_gaps(manifest, self.window, self.trimming.beats_seen, source)
            manifest = with_heartbeat_gaps(manifest, gaps)
            beats = {"checked": True, "found": len(self.trimming.beats_seen), "gaps": len(gaps)}
        else:
            beats = {"checked": False, "why": "no heartbeats in the manifest" if not checked
                     else "--events left out ftrace:print"}
        return dict(manifest, parse_window={
            "start_mono_ns": self.window.start_ns, "end_mono_ns": self.window.end_ns,
            "trimmed_before": self.trimming.trimmed_before,
            "trimmed_after": self.trimming.trimmed_after,
            "lost_in_window": missed, "heartbeat": beats, "note": window_note(manifest)})
