"""The test oracle: what `trace-cmd report` prints for a trace.dat, parsed into per-event rows.

Shares no code with kmemscope's parser: everything here comes from the text that the
trace-cmd 3.1.6 command line prints (`trace-cmd dump` for the event formats, `trace-cmd
report` for the events), never from libtracecmd or kmemscope.

Three report passes describe each event; they print the same records in the same order,
so they are joined by position:

- `report -R -t`      comm-pid [cpu] secs.nsecs: event: f1=v1 f2=v2 ...  (full comm, raw fields)
- `report -R -t -l`   comm8-pid cpu-0x<common_flags> secs.nsecs: ...      (exact common_flags)
- `report -t -l`      comm8-pid cpu<lat> secs.nsecs: ...                  (preempt count nibbles;
                      and the pretty text, e.g. the `=> func (addr)` lines of a kernel_stack)

How libtraceevent 1.7 prints a field under -R (print_selected_fields / print_field): an array
or string field raw (a printable char array as text, anything else as ARRAY[xx, xx, ...]);
any other field through the print format's own conversion when the format passes it directly
as an argument (`REC->f`, maybe behind a cast), preceded by "0x" when the literal text just
before ends with "0x"; otherwise raw (pointers and longs in hex, other ints in decimal).
`Plan` records which of these applies, and `canon_text`/`canon_value` reduce the printed text
and a decoded value to the same comparable form: for integers, the value modulo 2**bits, where
bits is what the printed conversion can show.
"""
import re
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field as dc_field

TRACE_CMD = "trace-cmd"


def _run(args):
    proc = subprocess.run([TRACE_CMD, *args], capture_output=True)
    if proc.returncode:
        raise RuntimeError(f"trace-cmd {' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout.decode("utf-8", errors="surrogateescape")


# ---------------------------------------------------------------- event formats (trace-cmd dump)

@dataclass
class Field:
    decl: str        # as written in the format, e.g. "unsigned long caller[8]"
    name: str
    type: str
    offset: int
    size: int
    signed: bool
    is_array: bool = False
    arraylen: int = 0
    is_dynamic: bool = False
    is_string: bool = False
    is_long: bool = False
    is_pointer: bool = False

    @property
    def element_size(self):
        if self.is_dynamic:
            return _type_size(self.type.split("[")[0].replace("__data_loc", "").replace("__rel_loc", ""))
        if self.is_array and self.arraylen:
            return self.size // self.arraylen
        return _type_size(self.type.split("[")[0]) or self.size


_TYPE_SIZES = {"char": 1, "u8": 1, "s8": 1, "short": 2, "u16": 2, "s16": 2, "int": 4, "u32": 4,
               "s32": 4, "long long": 8, "u64": 8, "s64": 8}


def _type_size(t):
    t = t.replace("unsigned", "").replace("signed", "").replace("const", "").strip()
    return _TYPE_SIZES.get(t, 0)


@dataclass
class EventFormat:
    system: str
    name: str
    id: int
    common: list
    fields: list
    print_fmt: str
    plans: dict = dc_field(default_factory=dict)   # field name -> Plan


_FIELD_RE = re.compile(r"^\s*field:(?P<decl>.*?);\s*offset:(?P<offset>\d+);\s*size:(?P<size>\d+);"
                       r"(?:\s*signed:(?P<signed>\d+);)?")


def _parse_decl(decl):
    """Split a C declaration the way libtraceevent's event_read_fields does."""
    d = decl.strip()
    arraylen = 0
    is_array = "[" in d
    if is_array:
        m = re.match(r"^(?P<pre>.*?)(?P<name>\w+)\s*\[(?P<len>[^\]]*)\]\s*(?P<post>\w*)\s*$", d)
        if m and m.group("post"):          # "__data_loc char[] name"
            name = m.group("post")
            typ = f"{m.group('pre')}{m.group('name')}[{m.group('len')}]".strip()
        else:
            name = m.group("name")
            typ = (m.group("pre").strip() + f"[{m.group('len')}]").strip()
        lens = re.findall(r"\w+", m.group("len"))
        if lens:
            try:
                arraylen = int(lens[-1], 0)
            except ValueError:
                arraylen = 0
    else:
        m = re.match(r"^(?P<type>.*?)(?P<name>\w+)\s*$", d)
        name, typ = m.group("name"), m.group("type").strip()
    return name, typ, is_array, arraylen


def _make_field(m):
    name, typ, is_array, arraylen = _parse_decl(m.group("decl"))
    f = Field(decl=m.group("decl"), name=name, type=typ, offset=int(m.group("offset")),
              size=int(m.group("size")), signed=bool(int(m.group("signed") or 0)),
              is_array=is_array, arraylen=arraylen)
    f.is_dynamic = typ.startswith("__data_loc") or typ.startswith("__rel_loc")
    f.is_string = is_array and any(s in typ for s in ("char", "u8", "s8"))
    f.is_long = "long" in typ
    f.is_pointer = "*" in typ.split("[")[0]
    if f.is_dynamic and f.size == 2:       # pre-__data_loc era dynamic strings
        f.is_string = f.is_array = True
    return f


def _parse_format_blocks(text, systems):
    """`name:/ID:/format:/print fmt:` blocks; systems is a list of (system, count) or a single name."""
    events = []
    cur = None
    for line in text.splitlines():
        if line.startswith("name: "):
            cur = {"name": line[6:].strip(), "id": None, "fields": [], "print_fmt": ""}
            events.append(cur)
        elif cur is None:
            continue
        elif line.startswith("ID: "):
            cur["id"] = int(line[4:])
        elif line.startswith("print fmt: "):
            cur["print_fmt"] = line[len("print fmt: "):]
        else:
            m = _FIELD_RE.match(line)
            if m:
                cur["fields"].append(_make_field(m))
    out = []
    if isinstance(systems, str):
        names = [systems] * len(events)
    else:
        names = [s for s, n in systems for _ in range(n)]
        if len(names) != len(events):
            names = [None] * len(events)
    for sysname, ev in zip(names, events):
        common = [f for f in ev["fields"] if f.name.startswith("common_")]
        own = [f for f in ev["fields"] if not f.name.startswith("common_")]
        fmt = EventFormat(system=sysname, name=ev["name"], id=ev["id"], common=common, fields=own,
                          print_fmt=ev["print_fmt"])
        fmt.plans = field_plans(fmt)
        out.append(fmt)
    return out


def event_formats(path):
    """Every event format that trace.dat at `path` carries: {event name: [EventFormat, ...]}."""
    systems = []
    for line in _run(["dump", "--systems", "-i", str(path)]).splitlines():
        m = re.match(r"^\s+(\S+) (\d+) \[system, events\]", line)
        if m:
            systems.append((m.group(1), int(m.group(2))))
    formats = _parse_format_blocks(_run(["dump", "--events", "-i", str(path)]), systems)
    formats += _parse_format_blocks(_run(["dump", "--ftrace-events", "-i", str(path)]), "ftrace")
    by_name = {}
    for f in formats:
        by_name.setdefault(f.name, []).append(f)
    return by_name


# ---------------------------------------------------------------- how -R prints each field

@dataclass
class Plan:
    kind: str            # "raw", "digit", "pointer", "string"
    conv: str = ""       # conversion character: d i u x X o p s
    ptr_ext: str = ""    # %p extension (S s F f ...)
    has_0x: bool = False
    ls: int = 0          # length modifier count as libtraceevent computes it
    cast_bits: int = 64


def _split_print_fmt(pf):
    """'"fmt" "more", arg, arg' -> (format string, [arg text, ...])."""
    i, n, fmt = 0, len(pf), []
    while i < n:
        while i < n and pf[i].isspace():
            i += 1
        if i >= n or pf[i] != '"':
            break
        i += 1
        while i < n and pf[i] != '"':
            if pf[i] == "\\" and i + 1 < n:
                fmt.append(pf[i:i + 2])
                i += 2
                continue
            fmt.append(pf[i])
            i += 1
        i += 1
    rest = pf[i:].strip()
    args = []
    if rest.startswith(","):
        depth, cur, quote = 0, [], None
        for ch in rest[1:]:
            if quote:
                cur.append(ch)
                if ch == quote and (len(cur) < 2 or cur[-2] != "\\"):
                    quote = None
                continue
            if ch in "\"'":
                quote = ch
            elif ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif ch == "," and depth == 0:
                args.append("".join(cur).strip())
                cur = []
                continue
            cur.append(ch)
        if cur:
            args.append("".join(cur).strip())
    return "".join(fmt), args


def _unescape(s):
    return s.replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r").replace("\\\\", "\\")


def _pointer_ext(rest):
    """How many characters after 'p' belong to the conversion (libtraceevent's rules, simplified)."""
    if not rest:
        return ""
    c = rest[0]
    if c in "FSfs":
        return c
    if c in "Mm":
        return rest[:2] if rest[1:2] in ("R", "F") else c
    if c in "Uh":
        return rest[:2] if rest[1:2] in ("L", "l", "B", "b", "C", "D", "N") else c
    if c in "Ii":
        m = re.match(r"[Ii](4|6|S)[pfs]*[hnbl]?c?", rest)
        return m.group(0) if m else c
    return ""


def _parse_cache(fmt, args):
    """The items of libtraceevent's print cache: ("str", text) or ("arg", conv, ext, ls, argtext)."""
    items, i, n, argi = [], 0, len(fmt), 0
    while i < n:
        if fmt[i] == "%" and fmt[i + 1:i + 2] != "%":
            j, ls = i + 1, 0
            while j < n:
                c = fmt[j]
                if c == "h":
                    ls -= 1
                elif c == "l":
                    ls += 1
                elif c == "L":
                    ls = 2
                elif c in "zZ":
                    ls = 1
                elif c in "#.-0123456789":
                    pass
                elif c == "*":
                    argi += 1
                elif c == "p":
                    ext = _pointer_ext(fmt[j + 1:])
                    items.append(("arg", "p", ext, ls, args[argi] if argi < len(args) else ""))
                    argi += 1
                    j += len(ext)
                    break
                elif c in "duixXo":
                    items.append(("arg", c, "", ls, args[argi] if argi < len(args) else ""))
                    argi += 1
                    break
                elif c == "s":
                    items.append(("arg", "s", "", 0, args[argi] if argi < len(args) else ""))
                    argi += 1
                    break
                else:
                    items.append(("str", f">{c}<"))
                    break
                j += 1
            i = j + 1
        else:
            j, buf = i, []
            while j < n:
                if fmt[j] == "\\" and j + 1 < n:
                    buf.append(_unescape(fmt[j:j + 2]))
                    j += 2
                    continue
                if fmt[j] == "%":
                    if fmt[j + 1:j + 2] == "%":
                        buf.append("%")
                        j += 2
                        continue
                    break
                buf.append(fmt[j])
                j += 1
            items.append(("str", "".join(buf)))
            i = j
    return items


_CAST_BITS = {"u8": 8, "s8": 8, "char": 8, "unsigned char": 8, "u16": 16, "s16": 16, "short": 16,
              "unsigned short": 16, "u32": 32, "s32": 32, "int": 32, "unsigned int": 32}


def _strip_outer_parens(a):
    while a.startswith("(") and a.endswith(")"):
        depth = 0
        for k, ch in enumerate(a):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and k != len(a) - 1:
                return a
        a = a[1:-1].strip()
    return a


def _direct_field(arg):
    """If `arg` is REC->name (behind parens and casts): (name, cast bits), else (None, 64)."""
    a, bits = arg.strip(), 64
    for _ in range(8):
        a = _strip_outer_parens(a)
        m = re.match(r"^\(\s*([A-Za-z_][\w\s]*?\**)\s*\)\s*(\S.*)$", a)
        if m and "REC" not in m.group(1) and (m.group(2)[0] in "(_" or m.group(2)[0].isalnum()):
            t = " ".join(m.group(1).split())
            if not t.endswith("*"):
                bits = min(bits, _CAST_BITS.get(t, 64))
            a = m.group(2).strip()
            continue
        break
    m = re.match(r"^REC\s*->\s*(\w+)$", a)
    return (m.group(1), bits) if m else (None, 64)


def field_plans(fmt):
    """Emulate print_selected_fields' walk through the print cache, field by field."""
    plans = {}
    try:
        text, args = _split_print_fmt(fmt.print_fmt)
        items = _parse_cache(text, args)
    except (IndexError, AttributeError):
        items = []
    resolved = [(it, _direct_field(it[4])) if it[0] == "arg" else (it, (None, 64)) for it in items]
    pos = 0
    for f in fmt.fields:
        if not items or f.is_array or f.is_string:
            plans[f.name] = Plan("raw")
            continue
        has_0x, found = False, None
        for step in range(len(items)):
            k = (pos + step) % len(items)
            it, (fname, bits) = resolved[k]
            if it[0] == "str":
                has_0x = len(it[1]) > 1 and it[1].endswith("0x")
                continue
            if fname != f.name:
                has_0x = False
                continue
            found = (k, it, bits)
            break
        if found is None:
            plans[f.name] = Plan("raw")
            continue
        k, it, bits = found
        pos = (k + 1) % len(items)
        _, conv, ext, ls, _ = it
        kind = {"p": "pointer", "s": "string"}.get(conv, "digit")
        plans[f.name] = Plan(kind, conv=conv, ptr_ext=ext, has_0x=has_0x, ls=ls, cast_bits=bits)
    return plans


# ---------------------------------------------------------------- reading the report passes

_HDR = re.compile(r"^\s*(?P<comm>.*)-(?P<pid>-?\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<ts>\d+(?:\.\d+)?): "
                  r"(?P<event>[^\s:]+): (?P<rest>.*)$", re.S)
_HDR_LAT_RAW = re.compile(r"^(?P<comm>.{8})-(?P<pid>-?\d+)\s+(?P<cpu>\d+)-0x(?P<flags>[0-9a-f]+)\s+"
                          r"(?P<ts>\d+(?:\.\d+)?): (?P<event>[^\s:]+): (?P<rest>.*)$", re.S)
_HDR_LAT = re.compile(r"^(?P<comm>.{8})-(?P<pid>-?\d+)\s+(?P<cpu>\d+)(?P<lat>[^\s\d]\S*)\s+"
                      r"(?P<ts>\d+(?:\.\d+)?): (?P<event>[^\s:]+): (?P<rest>.*)$", re.S)
_DROPPED = re.compile(r"^CPU:(\d+) \[(?:(\d+) )?EVENTS DROPPED\]$")


def _ts_ns(text):
    if "." in text:
        sec, frac = text.split(".")
        return int(sec) * 1_000_000_000 + int(frac.ljust(9, "0")[:9])
    return int(text)


# trace-cmd 3.1.6 ends a report early, exit status 0 and nothing on stderr, when an
# allocation fails while it reads: under an address-space limit of 14 MiB `report -t -l` of
# examples/kmem-compaction prints nothing at all (not even its `cpus=` line), at 16 MiB it
# stops after 302295 of its 456381 lines. Its exit status cannot tell a short report from
# a whole one, but the passes can: they print the same records, and a failure only
# shortens one. A pass without its `cpus=` line, or with fewer records than the longest
# pass, is read again (PASS_TRIES times in all), then compared as it is, so that a
# difference that stays is a failure naming both counts.
PASS_TRIES = 3


@dataclass
class Pass:
    rows: list                # row(match, continuation lines, dropped) per record
    whole: bool               # the report began with its `cpus=` line
    stderr: str


def _read_pass(path, opts, header, row):
    """One `trace-cmd report opts -i path`, each record turned into row(match, extra, dropped)
    as it is read (the passes of a large trace are not held as text)."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([TRACE_CMD, "report", *opts, "-i", str(path)],
                                stdout=subprocess.PIPE, stderr=err)
        rows, cur, extra, dropped, whole = [], None, [], [], False
        for raw in proc.stdout:
            line = raw.decode("utf-8", errors="surrogateescape").rstrip("\n")
            m = header.match(line)
            if m:
                if cur is not None:
                    rows.append(row(cur, extra, dropped))
                    dropped = []
                cur, extra = m, []
                continue
            d = _DROPPED.match(line)
            if d:
                dropped.append((int(d.group(1)), int(d.group(2)) if d.group(2) else -1))
            elif cur is not None:
                extra.append(line)
            elif line.startswith("cpus="):
                whole = True
        if cur is not None:
            rows.append(row(cur, extra, dropped))
        proc.stdout.close()
        code = proc.wait()
        err.seek(0)
        stderr = err.read().decode(errors="replace").strip()
    if code:
        raise RuntimeError(f"trace-cmd report {' '.join(opts)} -i {path} exited {code}: {stderr[-500:]}")
    return Pass(rows, whole, stderr)


def _read_passes(path, passes):
    """[Pass] of each (opts, header, row) of `passes`, a short one read again (PASS_TRIES)."""
    got = [_read_pass(path, *p) for p in passes]
    for _ in range(PASS_TRIES - 1):
        longest = max(len(g.rows) for g in got)
        short = [i for i, g in enumerate(got) if not g.whole or len(g.rows) < longest]
        if not short:
            break
        for i in short:
            got[i] = _read_pass(path, *passes[i])
    return got


@dataclass
class Record:
    cpu: int
    ts: int
    pid: int
    comm: str
    event: str
    text: str                 # the -R field text, " f1=v1 f2=v2..."
    flags: int = None         # common_flags (from -R -l)
    preempt: int = None       # common_preempt_count (from -l)
    pretty_extra: tuple = ()  # extra lines of the pretty -l output (stack traces)


@dataclass
class Report:
    path: str
    records: list
    dropped: list             # [(cpu, count or -1), ...] from "CPU:n [.. EVENTS DROPPED]" lines
    formats: dict             # event name -> [EventFormat]

    def counts(self):
        return Counter(r.event for r in self.records)


def _lat_preempt(lat):
    lo = 0 if lat[3] == "." else int(lat[3], 16)
    hi = 0 if lat[4] == "." else int(lat[4], 16)
    return lo | (hi << 4)


def read_report(path, latency=True):
    """All records of trace.dat `path` as trace-cmd report prints them."""
    def main_row(m, extra, dropped):
        text = m.group("rest")
        if extra:
            text = "\n".join([text, *extra])
        return Record(cpu=int(m.group("cpu")), ts=_ts_ns(m.group("ts")), pid=int(m.group("pid")),
                      comm=m.group("comm").lstrip(), event=m.group("event"), text=text), dropped

    def key(m):
        return int(m.group("cpu")), _ts_ns(m.group("ts")), m.group("event")

    passes = [(["-R", "-t"], _HDR, main_row)]
    if latency:
        passes += [(["-R", "-t", "-l"], _HDR_LAT_RAW,
                    lambda m, extra, dropped: (key(m), int(m.group("flags"), 16))),
                   (["-t", "-l"], _HDR_LAT,
                    lambda m, extra, dropped: (key(m), _lat_preempt(m.group("lat")), tuple(extra)))]
    got = _read_passes(path, passes)
    assert all(g.whole for g in got), \
        f"trace-cmd report of {path} stopped before its first line{_stderr_of(got)}"
    records = [r for r, _ in got[0].rows]
    dropped = [d for _, drop in got[0].rows for d in drop]
    if latency:
        raw_l, pretty_l = got[1].rows, got[2].rows
        assert len(raw_l) == len(records), \
            f"report -R -l printed {len(raw_l)} records, report -R {len(records)}{_stderr_of(got)}"
        assert len(pretty_l) == len(records), \
            f"report -l printed {len(pretty_l)} records, report -R {len(records)}{_stderr_of(got)}"
        for n, (r, (k, flags)) in enumerate(zip(records, raw_l), 1):
            assert (r.cpu, r.ts, r.event) == k, f"report -R -l record {n} is not report -R's: {k}"
            r.flags = flags
        for n, (r, (k, preempt, extra)) in enumerate(zip(records, pretty_l), 1):
            assert (r.cpu, r.ts, r.event) == k, f"report -l record {n} is not report -R's: {k}"
            r.preempt = preempt
            if extra:
                r.pretty_extra = extra
    return Report(path=str(path), records=records, dropped=dropped, formats=event_formats(path))


def _stderr_of(passes):
    said = "; ".join(p.stderr[-300:] for p in passes if p.stderr)
    return f" (trace-cmd said: {said})" if said else ""


def split_fields(fmt, text):
    """' f1=v1 f2=v2' -> {f1: 'v1', f2: 'v2'} using the format's field order (values may hold spaces)."""
    out, pos = {}, 0
    names = [f.name for f in fmt.fields]
    text = text.lstrip(" ")
    for k, name in enumerate(names):
        key = f"{name}="
        if not text.startswith(key, pos):
            raise ValueError(f"{fmt.name}: expected {key!r} at {pos} in {text!r}")
        start = pos + len(key)
        if k + 1 < len(names):
            nxt = text.find(f" {names[k + 1]}=", start)
            if nxt < 0:
                raise ValueError(f"{fmt.name}: no {names[k + 1]!r} after {name!r} in {text!r}")
            out[name] = text[start:nxt]
            pos = nxt + 1
        else:
            out[name] = text[start:]
    return out


# ---------------------------------------------------------------- canonical forms

UNCHECKED = object()   # printed as something the text cannot be compared on (a symbol name)


def _bits(fieldfmt, plan):
    bits = 8 * fieldfmt.size
    if plan.kind == "digit":
        bits = min(bits, {-2: 8, -1: 16, 0: 32}.get(plan.ls, 64), plan.cast_bits)
    elif plan.kind == "pointer":
        bits = min(bits, plan.cast_bits)
    return bits


def _array_bytes(text):
    inner = text[len("ARRAY["):-1].strip()
    return bytes(int(x, 16) for x in inner.split(", ")) if inner else b""


def _textual(fieldfmt, plan):
    """A char field that the print format prints with %s (old kernels' `char buf;` of size 0)."""
    return fieldfmt.is_string or (plan.kind == "string" and "char" in fieldfmt.type
                                  and not fieldfmt.is_pointer)


def _symbolic(fieldfmt, plan):
    """Printed through %ps/%pS/%pF: a symbol name that the value alone cannot reproduce."""
    return plan.kind == "pointer" and bool(plan.ptr_ext)


def canon_text(fieldfmt, plan, text):
    """The comparable form of what trace-cmd printed for one field."""
    if _textual(fieldfmt, plan):
        # A printable char array is printed up to its NUL, anything else byte by byte;
        # a field that the format prints with %s (old kernels' `char buf;`) as text.
        if text.startswith("ARRAY[") and text.endswith("]"):
            return ("cstr", _array_bytes(text).split(b"\0", 1)[0])
        return ("cstr", text.encode("utf-8", errors="surrogateescape"))
    if fieldfmt.is_array:
        if text.startswith("ARRAY[") and text.endswith("]"):
            return ("bytes", _array_bytes(text))
        return ("text", text)
    if fieldfmt.size == 0 or _symbolic(fieldfmt, plan):
        return UNCHECKED
    t = text.strip()
    mask = (1 << _bits(fieldfmt, plan)) - 1
    try:
        if t == "(nil)":
            return ("int", 0)
        if t.startswith("0x") or t.startswith("-0x"):
            return ("int", int(t, 16) & mask)
        if plan.kind == "digit" and plan.conv in "xX":
            return ("int", int(t, 16) & mask)
        if plan.kind == "digit" and plan.conv == "o":
            return ("int", int(t, 8) & mask)
        return ("int", int(t, 10) & mask)
    except ValueError:
        return ("text", t)


def canon_value(fieldfmt, plan, value):
    """The comparable form of a decoded value, the same shape canon_text gives its field."""
    if _textual(fieldfmt, plan):
        if isinstance(value, str):
            # trace_marker text keeps its final newline in the record; the report's
            # line-based output cannot show it, so compare without it.
            return ("cstr", value.removesuffix("\n").encode("utf-8", errors="surrogateescape"))
        if isinstance(value, list):
            value = bytes(v & 0xff for v in value)
        if isinstance(value, (bytes, bytearray)):
            return ("cstr", bytes(value).split(b"\0", 1)[0])
        return ("value", value)
    if fieldfmt.is_array:
        if isinstance(value, (bytes, bytearray)):
            return ("bytes", bytes(value))
        if isinstance(value, list):
            es = fieldfmt.element_size or 8
            return ("bytes", b"".join((int(v) & ((1 << (8 * es)) - 1)).to_bytes(es, "little")
                                      for v in value))
        return ("value", value)
    if fieldfmt.size == 0 or _symbolic(fieldfmt, plan):
        return UNCHECKED
    if isinstance(value, (bytes, bytearray)):
        value = int.from_bytes(value, "little")
    if not isinstance(value, int) or isinstance(value, bool):
        return ("value", value)
    return ("int", value & ((1 << _bits(fieldfmt, plan)) - 1))


def main(argv):
    rep = read_report(argv[1], latency="--latency" in argv)
    for name, n in sorted(rep.counts().items()):
        print(f"{n:10d}  {name}")
    print(f"{len(rep.records):10d}  total")


if __name__ == "__main__":
    main(sys.argv)
