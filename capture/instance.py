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


def settings(inst, filtered=None):
    """What a recorder checks of instance directory `inst`, or None when it does not exist.

    events: the enabled 'system:event' names ('1*', soft mode, counts as on);
    filters: {'system:event': filter text} of those events, or of `filtered` when
    given (an idle instance's events are off, their filters still set).
    """
    if not os.path.isdir(inst):
        return None

    def attempt(name):
        try:
            return tfs.read(inst, name)
        except OSError as exc:
            return "<%s>" % exc.strerror

    events = tfs.enabled_events(inst)
    filters = {e: attempt("events/%s/filter" % e.replace(":", "/"))
               for e in (events if filtered is None else filtered)}
    clock = attempt("trace_clock")
    return {"tracing_on": attempt("tracing_on"), "trace_clock": tfs.selected(clock),
            "buffer_size_kb": attempt("buffer_size_kb"),
            "overwrite": attempt("options/overwrite"), "events": events, "filters": filters}


def drift(want, now):
    """What differs between two settings() readings, as short phrases ([] when none)."""
    if now is None:
        return ["the instance was removed"]
    out = []
    for key, what in (("tracing_on", "tracing_on"), ("trace_clock", "trace_clock"),
                      ("buffer_size_kb", "buffer_size_kb"), ("overwrite", "options/overwrite")):
        if want[key] != now[key]:
            out.append("%s %s (was %s)" % (what, now[key], want[key]))
    gone = sorted(set(want["events"]) - set(now["events"]))
    added = sorted(set(now["events"]) - set(want["events"]))
    if gone:
        out.append("events disabled: " + ", ".join(gone))
    if added:
        out.append("events enabled: " + ", ".join(added))
    changed = sorted(e for e in set(want["filters"]) & set(now["filters"])
                     if want["filters"][e] != now["filters"][e])
    if changed:
        out.append("filters changed: " + ", ".join(changed))
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
