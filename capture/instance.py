"""A flight recorder's own tracefs instances: what they should hold, and what changed.

The flight recorder keeps its seconds before a trigger in a tracefs instance of
its own, so that another tool's use of the top-level buffer (`trace-cmd
record`, `trace-cmd reset`, echo 0 > tracing_on) does not touch them. Another
tool can still remove or change the instance itself (`trace-cmd reset -a -d`,
a script writing its files): settings() reads what the recorder checks, and
drift() says what differs from what it set up, for the recorder to restore
and to count as a blind stretch.
"""
import os

from kmemscope.capture import tracefs as tfs


def settings(inst, filtered):
    """What a recorder checks of instance directory `inst`, or None when it does not exist.

    events: the enabled 'system:event' names (set_event: one read, not one open per
    event); filters: {'system:event': filter text} of the events in `filtered` (an idle
    instance's events are off, their filters still set). About ten reads in all.
    """
    if not os.path.isdir(inst):
        return None

    def attempt(name):
        try:
            return tfs.read(inst, name)
        except OSError as exc:
            return "<%s>" % exc.strerror

    try:
        events = tfs.set_events(inst)
    except OSError as exc:
        events = ["<%s>" % exc.strerror]
    filters = {e: attempt("events/%s/filter" % e.replace(":", "/")) for e in filtered}
    clock = attempt("trace_clock")
    return {"tracing_on": attempt("tracing_on"), "trace_clock": tfs.selected(clock),
            "buffer_size_kb": attempt("buffer_size_kb"),
            "overwrite": attempt("options/overwrite"), "events": events, "filters": filters}


def spec_events(tracefs, specs):
    """{'system:event': the filter texts that read as its spec asks} of the events `specs`
    name on this kernel (a whole system's events from the catalog's directories; the
    kernel leaves an event of a filtered system unfiltered when the filter names a field
    it lacks)."""
    out = {}
    for spec in specs:
        texts = (spec.filter, "(%s)" % spec.filter) if spec.filter else ("none",)  # type: tuple
        if spec.event != "*":
            if os.path.isdir(os.path.join(tracefs, "events", spec.system, spec.event)):
                out[spec.name] = texts
            continue
        try:
            names = sorted(os.listdir(os.path.join(tracefs, "events", spec.system)))
        except OSError:
            continue
        for name in names:
            if os.path.isdir(os.path.join(tracefs, "events", spec.system, name)):
                out["%s:%s" % (spec.system, name)] = texts + (("none",) if spec.filter else ())
    return out


def wanted(events, buffer_kb, tracing_on, overwrite, enabled):
    """The settings() a recorder asks for, from its options alone (never read back: a
    change that lands while it sets an instance up must not become what it wants).

    events: spec_events(); buffer_kb: KiB per CPU asked for (the kernel rounds it up
    to whole sub-buffers: buffer_fits() allows that); enabled: whether the events are on.
    """
    return {"tracing_on": "1" if tracing_on else "0", "trace_clock": "mono",
            "buffer_size_kb": int(buffer_kb), "overwrite": "1" if overwrite else "0",
            "events": sorted(events) if enabled else [],
            "filters": {e: f for e, f in events.items()}}


# What the kernel may add to a buffer size asked for: whole sub-buffers (4 KiB pages
# hold 4080 data bytes, so up to one page more; larger sub-buffers round further).
ROUNDING_SLACK_KB = 64


def buffer_fits(asked_kb, text):
    """True when buffer_size_kb text `text` is what asking for asked_kb KiB gives."""
    try:
        got = tfs.parse_buffer_size(text)[0]
    except (ValueError, TypeError):
        return False
    return got is not None and asked_kb <= int(got) <= asked_kb + ROUNDING_SLACK_KB


def filter_fits(asked, text):
    """True when filter text `text` is one of spec_events()' texts `asked`."""
    return text in asked


def drift(want, now):
    """What differs between wanted() and a settings() reading, as short phrases ([] when none)."""
    if now is None:
        return ["the instance was removed"]
    out = []
    for key, what in (("tracing_on", "tracing_on"), ("trace_clock", "trace_clock"),
                      ("overwrite", "options/overwrite")):
        if want[key] != now[key]:
            out.append("%s %s (was %s)" % (what, now[key], want[key]))
    if not buffer_fits(want["buffer_size_kb"], now["buffer_size_kb"]):
        out.append("buffer_size_kb %s (was %s)" % (now["buffer_size_kb"], want["buffer_size_kb"]))
    gone = sorted(set(want["events"]) - set(now["events"]))
    added = sorted(set(now["events"]) - set(want["events"]))
    if gone:
        out.append("events disabled: " + ", ".join(gone))
    if added:
        out.append("events enabled: " + ", ".join(added))
    changed = sorted(e for e in set(want["filters"]) & set(now["filters"])
                     if not filter_fits(want["filters"][e], now["filters"][e]))
    if changed:
        out.append("filters changed: " + ", ".join(
            "%s (%s)" % (e, now["filters"][e].splitlines()[0][:80] if now["filters"][e] else "")
            for e in changed))
    return out


def only_tracing_on(want, now):
    """True when tracing_on alone differs: writing it back restores the instance."""
    return now is not None and drift(dict(want, tracing_on=now["tracing_on"]), now) == [] \
        and want["tracing_on"] != now["tracing_on"]


def blind_in(blind, start_ns, end_ns):
    """The blind stretches [{from_mono_ns, to_mono_ns, what}] that overlap [start_ns, end_ns],
    clipped to it."""
    out = []
    for b in blind:
        lo, hi = max(b["from_mono_ns"], start_ns), min(b["to_mono_ns"], end_ns)
        if lo < hi:
            out.append(dict(b, from_mono_ns=lo, to_mono_ns=hi))
    return out
