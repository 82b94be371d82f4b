"""Read an event's format from tracefs and the flag tables in its print fmt.

Flag bit values differ between kernels (the gfp bits moved in 5.x, 6.3 and
6.10; see queries/KERNEL-ERAS.md section 2), so filters that test a flag
take its value from the live format's `__print_flags` table, never from a
table written for one kernel.
"""
import os

from kmemscope.capture import cexpr
from kmemscope.common.errors import CaptureError


def read_format(tracefs, system, event):
    """Text of events/SYSTEM/EVENT/format under `tracefs`."""
    path = os.path.join(tracefs, "events", system, event, "format")
    try:
        with open(path) as f:
            return f.read()
    except OSError as exc:
        raise CaptureError("cannot read the format of %s:%s: %s" % (system, event, exc.strerror),
                           "check that this kernel has the event: ls %s" % os.path.dirname(path))


def print_fmt(format_text):
    """The `print fmt:` line of a format (everything after the label)."""
    for line in format_text.splitlines():
        if line.startswith("print fmt:"):
            return line[len("print fmt:"):].strip()
    raise CaptureError("event format has no print fmt line")


def _match_close(text, start):
    """Index just past the bracket that closes the one at text[start], skipping strings."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack, i = [], start
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _skip_string(text, i)
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")}]":
            if not stack or stack.pop() != c:
                raise CaptureError("unbalanced brackets in print fmt")
            if not stack:
                return i + 1
        i += 1
    raise CaptureError("unterminated bracket in print fmt")


def _skip_string(text, i):
    """Index just past the C string literal that starts at text[i]."""
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == '"':
            return j + 1
        j += 1
    raise CaptureError("unterminated string in print fmt")


def _split_top(text, sep=","):
    """Split on `sep` where it is outside brackets and strings."""
    parts, depth, i, last = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _skip_string(text, i)
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[last:i])
            last = i + 1
        i += 1
    parts.append(text[last:])
    return [p.strip() for p in parts]


def print_flags(format_text, field):
    """{name: value} from `__print_flags(REC->field, "sep", {value, "NAME"}, ...)`.

    Entries keep their table order (composites first, as the kernel lists them).
    """
    fmt = print_fmt(format_text)
    args = None
    pos = fmt.find("__print_flags(")
    while pos >= 0:
        open_paren = pos + len("__print_flags")
        candidate = _split_top(fmt[open_paren + 1:_match_close(fmt, open_paren) - 1])
        if candidate[0].replace(" ", "") == "REC->" + field:
            args = candidate
            break
        pos = fmt.find("__print_flags(", open_paren)
    if args is None:
        raise CaptureError("the format prints no __print_flags table for field %r" % field)
    table = {}
    for entry in args[2:]:
        if not (entry.startswith("{") and entry.endswith("}")):
            raise CaptureError("unexpected __print_flags entry %r" % entry[:40])
        value_text, _, name_text = entry[1:-1].rpartition(",")
        name_text = name_text.strip()
        if not name_text.startswith('"'):
            break  # the { 0, NULL } / { -1, NULL } terminator
        table[name_text.strip('"')] = cexpr.evaluate(value_text)
    if not table:
        raise CaptureError("empty __print_flags table for field %r" % field)
    return table
