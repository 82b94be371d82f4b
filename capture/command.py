"""`kmemscope record`: the argparse front end over recorder.py.

The click CLI forwards `kmemscope record ARGS...` here verbatim, and the .pyz
and `python3 -m kmemscope.capture` call main() directly. Only this module
prints; errors are one line: `kmemscope: error: <what> (<what to do>)`.
"""
import argparse
import os
import re
import sys
import traceback

from kmemscope.capture import bench_metrics, cleanup, lock, pack, presets
from kmemscope.capture.flight import FlightOptions, FlightRecorder
from kmemscope.capture.triggers import parse_trigger
from kmemscope.common.errors import CaptureError
from kmemscope.common.version import __version__
from kmemscope.capture.recorder import Interrupted, Options, Recorder, check_host
from kmemscope.capture.units import parse_duration, parse_size

PROG = "kmemscope record"

EPILOG = """\
examples:
  kmemscope record -o /var/tmp/run1 --duration 60s --label kernel=vanilla
  kmemscope record -o /var/tmp/run2 --preset light --duration 10m
  kmemscope record -o /var/tmp/run3 -e kmem:mm_page_alloc:'order >= 9' -- ./workload
  kmemscope record --cleanup        # after a record was killed with SIGKILL
  kmemscope record --flight -o /var/tmp/flight --keep 30s --after 5s \\
      --trigger 'psi.memory.some>10%%@2s' --trigger 'vmstat.compact_stall>50/s@5s'
                                    # flight recorder: a bundle per trigger; kill -USR1 PID for one now

COMMAND goes after `--`. Without COMMAND and --duration, record stops after 30 s (or at Ctrl-C).
Presets (--list-presets shows their events and rates): %s.
""" % ", ".join(presets.PRESETS)


class UsageError(CaptureError):
    """The command line itself is wrong (exit 2, like every kmemscope verb)."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors in kmemscope's one-line form."""

    def error(self, message):
        raise UsageError(message, "see `%s --help`" % PROG)


def build_parser():
    p = _Parser(prog=PROG, usage="%(prog)s -o BUNDLE [options] [-- COMMAND ...]\n"
                "       %(prog)s --cleanup | --list-presets", description="Record the page allocator's trace events and /proc samples "
                "into a bundle that `kmemscope parse` reads.", epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", metavar="BUNDLE", help="bundle directory to create")
    p.add_argument("--preset", choices=list(presets.PRESETS),
                   help="what to record (default: default, unless -e is given)")
    p.add_argument("-e", "--event", dest="events", action="append", default=[],
                   metavar="SYSTEM:EVENT[:FILTER]", help="also record this event (repeatable)")
    p.add_argument("--duration", type=parse_duration, metavar="TIME",
                   help="stop after TIME (30s, 5m; 0: no limit; default 30s without COMMAND)")
    p.add_argument("--max-size", type=parse_size, default=parse_size("2G"), metavar="SIZE",
                   help="stop when the trace data reaches SIZE (default 2G)")
    p.add_argument("--min-free", type=parse_size, default=parse_size("1G"), metavar="SIZE",
                   help="stop before free space under the output falls below SIZE (default 1G)")
    p.add_argument("--interval", type=parse_duration, default=1.0, metavar="TIME",
                   help="procfs sampling interval (default 1s)")
    p.add_argument("--buffer-kb", type=int, metavar="N",
                   help="ring buffer per CPU in KiB (default: the preset's)")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                   help="label the run, e.g. --label kernel=vanilla (repeatable)")
    p.add_argument("--zoneinfo", action="store_true", help="also sample /proc/zoneinfo")
    p.add_argument("--metrics", metavar="FILE",
                   help="a JSON file of benchmark results that COMMAND writes (its path is also "
                        "in $KMEMSCOPE_METRICS_OUT); copied into the bundle as metrics.json")
    p.add_argument("--pack", choices=pack.FORMATS, metavar="gz|zst",
                   help="also write the bundle as one BUNDLE.tar.gz or .tar.zst to copy off the host")
    p.add_argument("--force", action="store_true",
                   help="replace an existing bundle; record even if someone else is tracing")
    p.add_argument("--trace-cmd", default="trace-cmd", metavar="PATH", help=argparse.SUPPRESS)
    f = p.add_argument_group("flight recorder (--flight)")
    f.add_argument("--flight", action="store_true",
                   help="run until stopped, keeping the last --keep seconds in the kernel's ring "
                        "buffer; each trigger writes a bundle BUNDLE/<UTC time>-<reason>/")
    f.add_argument("--keep", type=parse_duration, default=30.0, metavar="TIME",
                   help="events and samples a bundle holds before its trigger (default 30s)")
    f.add_argument("--after", type=parse_duration, default=5.0, metavar="TIME",
                   help="and after it (default 5s)")
    f.add_argument("--trigger", dest="triggers", action="append", default=[], metavar="CONDITION",
                   help="psi.memory.some>PCT%%, psi.memory.full>PCT%%, vmstat.NAME>RATE/s or "
                        "thp.fallback>PCT%%, each optionally @WINDOW (repeatable; SIGUSR1 is "
                        "always a trigger)")
    f.add_argument("--cooldown", type=parse_duration, default=60.0, metavar="TIME",
                   help="ignore triggers for TIME after one (default 60s)")
    f.add_argument("--max-per-hour", type=int, default=6, metavar="N",
                   help="at most N bundles in any hour (default 6)")
    f.add_argument("--max-bundles", type=int, default=10, metavar="N",
                   help="keep the newest N bundles, removing the oldest (default 10)")
    f.add_argument("--max-disk", type=parse_size, metavar="SIZE",
                   help="keep the bundles under SIZE in all, removing the oldest")
    f.add_argument("--max-buffer", type=parse_size, metavar="SIZE",
                   help="kernel memory for the ring buffers of all CPUs at most (default 2%% of "
                        "RAM); they grow to hold --keep only while memory is not short")
    f.add_argument("--measure", type=parse_duration, default=3.0, metavar="TIME",
                   help="measure the event rate for TIME before sizing the buffer (default 3s)")
    p.add_argument("--cleanup", action="store_true",
                   help="restore the tracing state that a killed record left, then exit")
    p.add_argument("--list-presets", action="store_true", help="describe the presets and exit")
    p.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    p.add_argument("--version", action="version", version="%(prog)s " + __version__,
                   help="print the version and exit")
    # COMMAND normally follows `--`; a caller that swallowed the `--` (click
    # does) still gets it right: the first word that is not an option starts it.
    p.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def split_command(argv):
    """(record's own arguments, COMMAND): everything after the first `--` is COMMAND."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def _glue_values(argv):
    """'--after', '-1s' -> '--after=-1s': argparse takes a value that starts with '-' for an
    option and says 'expected one argument'; glued, the value reaches its own check."""
    out, i = [], 0
    while i < len(argv):
        word = argv[i]
        if (word.startswith("--") and "=" not in word and i + 1 < len(argv)
                and re.match(r"^-\d", argv[i + 1])):
            out.append(word + "=" + argv[i + 1])
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def parse_command_line(argv):
    """(argparse namespace, COMMAND argv) from record's arguments."""
    own, command = split_command(argv)
    args = build_parser().parse_args(_glue_values(own))
    if args.command:
        if command:
            raise CaptureError("unexpected arguments before --: " + " ".join(args.command),
                               "see `%s --help`" % PROG)
        command = args.command[1:] if args.command[0] == "--" else args.command
    return args, command


def _labels(items):
    labels = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CaptureError("bad label %r" % item, "write --label KEY=VALUE")
        labels[key.strip()] = value.strip()
    return labels


def options_from_args(args, command):
    if not args.output:
        raise CaptureError("no output given", "pass -o BUNDLE")
    duration = args.duration
    if duration is None and not command:
        duration = 30.0
    if args.buffer_kb is not None and args.buffer_kb <= 0:
        raise CaptureError("--buffer-kb must be positive")
    return Options(output=args.output, preset=args.preset,
                   events=[presets.parse_event_arg(e) for e in args.events],
                   duration=duration or None, max_size=args.max_size, min_free=args.min_free,
                   interval=args.interval, buffer_kb=args.buffer_kb, labels=_labels(args.label),
                   force=args.force, zoneinfo=args.zoneinfo, command=command,
                   trace_cmd=args.trace_cmd)


FLIGHT_ONLY = ("triggers", "cooldown", "max_per_hour", "max_bundles", "max_disk", "max_buffer")


def flight_options_from_args(args, command):
    if not args.output:
        raise CaptureError("no output given", "pass -o DIR (the flight directory)")
    if command:
        raise CaptureError("a flight recorder runs no COMMAND",
                           "start the workload separately, or record once without --flight")
    for name in ("metrics", "pack"):
        if getattr(args, name):
            raise CaptureError("--%s does not apply to --flight" % name, "see `%s --help`" % PROG)
    if args.buffer_kb is not None and args.buffer_kb <= 0:
        raise CaptureError("--buffer-kb must be positive")
    return FlightOptions(
        output=args.output, keep=args.keep, after=args.after,
        trigger_specs=[parse_trigger(t) for t in args.triggers], cooldown=args.cooldown,
        max_bundles=args.max_bundles, max_disk=args.max_disk, max_per_hour=args.max_per_hour,
        measure=args.measure, max_buffer=args.max_buffer, preset=args.preset,
        events=[presets.parse_event_arg(e) for e in args.events], duration=args.duration or None,
        min_free=args.min_free, interval=args.interval, buffer_kb=args.buffer_kb,
        labels=_labels(args.label), force=args.force, zoneinfo=args.zoneinfo,
        trace_cmd=args.trace_cmd)


def say(text):
    if _status_shown[0]:
        sys.stderr.write("\r\x1b[K")        # a message replaces the live status line
        _status_shown[0] = False
    print("kmemscope record: " + text, file=sys.stderr, flush=True)


_status_shown = [False]


def status(text):
    """A live line on a terminal, rewritten in place as the recording runs (not in a log)."""
    if not sys.stderr.isatty():
        return
    sys.stderr.write("\r\x1b[Kkmemscope record: " + text)
    sys.stderr.flush()
    _status_shown[0] = True


def run_cleanup(trace_cmd):
    check_host(trace_cmd)
    directory = lock.state_dir()
    held = lock.RecordLock(directory).acquire()
    try:
        if not cleanup.recover(directory, say):
            say("nothing to clean up: no killed record left state behind")
    finally:
        held.release()
    return 0


def main(argv=None):
    """Entry point: returns the exit status (0 when a bundle was written)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args, command = parse_command_line(argv)
        if args.list_presets:
            print(presets.describe())
            return 0
        if args.cleanup:
            return run_cleanup(args.trace_cmd)
        if args.flight:
            FlightRecorder(flight_options_from_args(args, command), say).run()
            return 0
        for name in FLIGHT_ONLY:
            if getattr(args, name) != build_parser().get_default(name):
                raise UsageError("--%s needs --flight" % name.replace("_", "-"),
                                 "see `%s --help`" % PROG)
        options = options_from_args(args, command)
        metrics = bench_metrics.Expected(args.metrics, command) if args.metrics else None
        Recorder(options, say, status).run()
        if metrics:
            metrics.copy_into(options.output, say)
        if args.pack:
            archive = pack.pack(options.output, args.pack)
            say("packed %s (%.1f MiB)" % (archive, os.path.getsize(archive) / (1 << 20)))
        return 0
    except UsageError as exc:
        print("kmemscope: error: %s" % exc, file=sys.stderr)
        return 2
    except CaptureError as exc:
        print("kmemscope: error: %s" % exc, file=sys.stderr)
        return 1
    except Interrupted:
        print("kmemscope: error: interrupted before recording started (nothing was recorded)",
              file=sys.stderr)
        return 130
    except SystemExit as exc:  # --help and --version exit through argparse
        return exc.code if isinstance(exc.code, int) else 0
    except BrokenPipeError:  # `--list-presets | head`
        return 0
    except KeyboardInterrupt:
        print("kmemscope: error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: still one line, tracing state already restored
        if debug:
            traceback.print_exc()
        print("kmemscope: error: internal error: %s: %s (rerun with --debug and report it)"
              % (type(exc).__name__, exc), file=sys.stderr)
        return 1


def run():
    """console_scripts / zipapp entry point."""
    sys.exit(main())
