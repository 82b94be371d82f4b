"""The decoder's kallsyms index (parsers/native/kallsyms.c) against libtraceevent's own.

The decoder keeps a trace's kallsyms text during the open and indexes it in one pass when the
first kernel stack needs a symbol, instead of libtraceevent's tep_parse_kallsyms (sscanf a line,
three allocations a symbol, a sort) in every open. Its answers must be libtraceevent's, which
trace-cmd report prints: `Trace._resolve(addresses)` against `Trace._resolve(addresses,
reference=True)` (libtraceevent's parse and lookup of the same text), at every symbol of a real
kernel's table and around it, and on texts written here with what the real ones rarely hold:
symbols sharing an address, lines out of address order, the types and names libtraceevent
skips, modules, a hex prefix, capitals, odd spacing, an empty line, and a line it cannot read
(everything after it is dropped).
"""
import random
import re
import struct
import subprocess

import pytest

import requirements
from conftest import EXAMPLES

EXAMPLE = EXAMPLES / "kmem-compaction" / "trace.dat"

ODD_LINES = """\
ffffffff81000000 T alpha
ffffffff81000000 t alpha_alias
ffffffff81000100 T beta
ffffffff81000100 T beta_second
ffffffff81000100 W beta_third
ffffffff81000050 t {unsorted}
0000000000001000 A percpu_offset
ffffffff81000200 a absolute_thing
ffffffff81000300 t $a
ffffffff81000400 T gamma\t[some_module]
ffffffff81000480 t gamma_helper\t[some_module]
0xffffffff81000500 T hex_prefixed
FFFFFFFF81000600 T upper_case
ffffffff81000700   T   spaced_out
ffffffff81000800 Tno_space

ffffffff81000900 T delta
ffffffff81000a00 T epsilon trailing words
ffffffff81000b00 T
ffffffff81000c00 T never_read
"""


def _trace_file(path):
    from kmemscope.parsers.tracedat import TraceFile

    return TraceFile(path).native


def _probes(addresses):
    out = set()
    for a in addresses:
        out.update(x for x in (a - 1, a, a + 1, a + 0x10, a + 0x7f) if 0 <= x < 1 << 64)
    out.update((0, (1 << 64) - 1))
    return sorted(out)


def _agree(trace, probes):
    own = trace._resolve(probes)
    ref = trace._resolve(probes, reference=True)
    wrong = [(hex(a), o, r) for a, o, r in zip(probes, own, ref) if o != r]
    assert not wrong, f"{len(wrong)} of {len(probes)} addresses differ, first: {wrong[:5]}"
    return own


def test_every_symbol_of_a_real_kernel_resolves_as_libtraceevent_does():
    if not EXAMPLE.is_file():
        requirements.skip("setup", f"{EXAMPLE} is missing")
    text = subprocess.run(["trace-cmd", "dump", "--kallsyms", "-i", str(EXAMPLE)], capture_output=True,
                          text=True, check=True).stdout
    addresses = [int(m.group(1), 16) for m in re.finditer(r"^([0-9a-f]{16}) ", text, re.M)]
    assert len(addresses) > 50_000
    trace = _trace_file(EXAMPLE)
    assert trace._kallsyms_waiting()
    rng = random.Random(7)
    lo, hi = min(addresses), max(addresses)
    own = _agree(trace, _probes(addresses) + sorted(rng.randrange(lo, hi) for _ in range(20_000)))
    assert sum(o is not None for o in own) > len(addresses)


def _v6_kallsyms_at(data):
    """(offset of the kallsyms size word, its size) in a version-6 trace.dat's bytes."""
    pos = data.index(b"\0", 10) + 1 + 6          # the version string, endian, long and page size
    for label in (b"header_page\0", b"header_event\0"):
        assert data[pos:pos + len(label)] == label
        pos += len(label)
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]
    count = struct.unpack_from("<I", data, pos)[0]
    pos += 4
    for _ in range(count):
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]
    systems = struct.unpack_from("<I", data, pos)[0]
    pos += 4
    for _ in range(systems):
        pos = data.index(b"\0", pos) + 1
        count = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        for _ in range(count):
            pos += 8 + struct.unpack_from("<Q", data, pos)[0]
    return pos, struct.unpack_from("<I", data, pos)[0]


@pytest.mark.parametrize("order", ["sorted", "unsorted"])
def test_written_kallsyms_resolve_as_libtraceevent_does(tmp_path, order):
    if not EXAMPLE.is_file():
        requirements.skip("setup", f"{EXAMPLE} is missing")
    v6 = tmp_path / "v6.dat"
    subprocess.run(["trace-cmd", "convert", "--file-version", "6", "-i", str(EXAMPLE), "-o", str(v6)],
                   check=True, capture_output=True)
    data = bytearray(v6.read_bytes())
    at, size = _v6_kallsyms_at(data)
    lines = ODD_LINES.format(unsorted="out_of_order").splitlines(keepends=True)
    if order == "sorted":
        lines = [ln for ln in lines if "out_of_order" not in ln]
    text = "".join(lines).encode()
    # Both parsers read the text up to its first NUL: the section keeps its size.
    assert len(text) < size
    data[at + 4:at + 4 + len(text) + 1] = text + b"\0"
    crafted = tmp_path / "crafted.dat"
    crafted.write_bytes(bytes(data))

    trace = _trace_file(crafted)
    addresses = [int(m.group(1), 16) for m in re.finditer(r"^(?:0x)?([0-9a-fA-F]+)", ODD_LINES, re.M)]
    own = _agree(trace, _probes(addresses))
    names = {re.sub(r"\+0x[0-9a-f]+$", "", o) for o in own if o}
    # What libtraceevent keeps and skips, so that the comparison above means something.
    # (0x counts in %16llx's width: that line becomes a symbol named "0" at 0xffffffff810005.)
    assert {"alpha", "beta", "gamma", "gamma_helper", "0", "upper_case", "spaced_out", "no_space",
            "delta", "epsilon"} <= names, names
    assert not names & {"percpu_offset", "absolute_thing", "$a", "never_read"}, names
    assert ("out_of_order" in names) == (order == "unsorted")
