"""Records of an event type whose format the file lacks are counted and reported, not lost silently.

The trace is the example converted to v6 (uncompressed pages) with one record's
event id rewritten to one no format has; the oracle is the unmodified file.
"""
import shutil
import struct
import subprocess


import requirements

from conftest import EXAMPLES
from kmrun import kmemscope
from kmemscope.parsers.layout import read_layout

EXAMPLE = EXAMPLES / "kmem-compaction" / "trace.dat"


def first_record_type_offset(path):
    """File offset of the common_type field of the first record of the first CPU."""
    lay = read_layout(str(path))
    cpu, offset, size = lay.buffers[0].cpus[0]
    with open(path, "rb") as f:
        f.seek(offset)
        page = f.read(lay.page_size)
    pos = 16 if lay.long_size == 8 else 12          # timestamp + commit
    while pos < len(page):
        (word,) = struct.unpack_from("<I", page, pos)
        type_len = word & 0x1f
        if type_len in (30, 31):                     # time extend / absolute timestamp
            pos += 8
        elif type_len == 29:
            requirements.skip("setup", f"{EXAMPLE}: its first page starts with padding (not the committed example?)")
        elif type_len == 0:
            return offset + pos + 8                   # length word follows the header
        else:
            return offset + pos + 4
    requirements.skip("setup", f"{EXAMPLE}: no record in its first page (not the committed example?)")


def test_unknown_event_type_is_counted_and_reported(tmp_path):
    if not EXAMPLE.is_file() or shutil.which("trace-cmd") is None:
        requirements.skip("setup", "needs the committed example trace and trace-cmd (make setup)")
    v6 = tmp_path / "v6.dat"
    subprocess.run(["trace-cmd", "convert", "--file-version", "6", "-i", str(EXAMPLE), "-o", str(v6)],
                   check=True, capture_output=True)
    base = kmemscope("parse", "-q", v6, "-o", tmp_path / "base")
    assert base.returncode == 0
    bad = tmp_path / "unknown.dat"
    data = bytearray(v6.read_bytes())
    at = first_record_type_offset(v6)
    struct.pack_into("<H", data, at, 0xfff0)      # an id no format in the file has
    bad.write_bytes(bytes(data))

    out = kmemscope("parse", "-q", bad, "-o", tmp_path / "ds")
    assert "1 records of event types whose format the file lacks were skipped" in out.stderr
    counts = {}
    for name in ("base", "ds"):
        line = kmemscope("sql", tmp_path / name, "SELECT events, unknown_events FROM runs",
                         "--format", "csv").stdout.splitlines()[1]
        counts[name] = tuple(map(int, line.split(",")))
    assert counts["base"][1] == 0
    assert counts["ds"] == (counts["base"][0] - 1, 1)
