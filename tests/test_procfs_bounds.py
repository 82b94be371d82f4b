"""A bundle's /proc samples are read as streams: memory follows what is kept, not what a file
claims; past a bound the samples before it are kept with a note naming the file and the bound,
and the trace's tables are as a parse without the samples gives them. A number that does not
fit its column is one error line naming the file and the line.

Bombs are built here from the thp-faults example bundle's own files. Oracles: the example's
sample text split in plain Python, the events a parse of the bare trace.dat counts, and the
peak RSS the kernel reports for the parse's process (hostile.run_measured: VmHWM).
"""
import json
import re
import shutil
import subprocess

import pytest

import hostile
from conftest import EXAMPLES
from kmrun import KMEMSCOPE, kmemscope, rows_of

BUNDLE = EXAMPLES / "thp-faults"
# thp-faults parses at about 150 MiB; the bombs took 2.8-5.5 GB before streaming.
PEAK_MIB = 400


def bundle_with(tmp_path, procfs, name="b.tar.zst"):
    """The example bundle packed with its procfs/ files replaced by `procfs` (write_tar's
    member contents)."""
    members = {"b/trace.dat": (BUNDLE / "trace.dat").read_bytes(),
               "b/manifest.json": (BUNDLE / "manifest.json").read_bytes()}
    members.update({f"b/procfs/{n}": c for n, c in procfs.items()})
    return hostile.write_tar(tmp_path / name, members, "zst" if name.endswith("zst") else "gz")


def first_sample(name):
    """(header line, body) of the first sample of the example's procfs/<name>."""
    text = (BUNDLE / "procfs" / name).read_text()
    heads = [m.start() for m in re.finditer(r"^#kmemscope-sample ", text, re.M)]
    head_end = text.index("\n", heads[0]) + 1
    return text[heads[0]:head_end], text[head_end:heads[1]]


def events_of(ds):
    return rows_of(kmemscope("sql", ds, "SELECT events FROM runs", "--format", "json"))


def parse_measured(archive, ds):
    code, _out, err, peak, _s = hostile.run_measured(
        [*KMEMSCOPE, "parse", str(archive), "-o", str(ds)], 600)
    assert code == 0, err
    notes = [ln for ln in err.splitlines() if "kmemscope: note:" in ln]
    return notes, peak


@pytest.fixture(scope="module")
def bare_events(tmp_path_factory):
    ds = tmp_path_factory.mktemp("bare") / "ds"
    kmemscope("parse", "-q", BUNDLE / "trace.dat", "-o", ds)
    return events_of(ds)


@pytest.mark.parametrize("name, line, size", [
    # one sample of 240 MiB of counters (1.07 MB as .tar.zst: 5.49 GB RSS before)
    ("vmstat", b"pgalloc_normal 123456\n", 240 << 20),
    # one sample of a million zones (3.47 GB RSS before)
    ("buddyinfo", b"Node 0, zone   Normal   1   2   3   4   5   6   7   8   9  10  11\n", 40 << 20),
])
def test_a_sample_past_the_line_bound_is_cut_with_a_note_in_bounded_memory(
        tmp_path, bare_events, name, line, size):
    from kmemscope.parsers import procfs

    head, _body = first_sample(name)
    archive = bundle_with(tmp_path, {name: (size, line, head.encode())})
    assert archive.stat().st_size < 2 << 20
    notes, peak = parse_measured(archive, tmp_path / "ds")
    said = [n for n in notes if f"procfs/{name}" in n]
    assert len(said) == 1 and f"more than {procfs.MAX_SAMPLE_LINES} lines" in said[0], notes
    assert peak < PEAK_MIB, f"peak RSS {peak:.0f} MiB"
    assert events_of(tmp_path / "ds") == bare_events       # the trace's run is whole
    table = "vmstat" if name == "vmstat" else "buddyinfo"
    rows = kmemscope("sql", tmp_path / "ds", f"SELECT count(*) AS n FROM {table}",
                     "--format", "json").stdout
    assert rows_of(rows) == [{"n": 0}]     # the one sample is past the bound: none kept


# slow: 64 MiB of samples parsed (~5 s); the line bound's own tests stay in make check
@pytest.mark.slow
def test_many_real_samples_are_all_kept_in_bounded_memory(tmp_path):
    """64 MiB of real vmstat samples (2.8 GB RSS before): every row kept, counted in Python."""
    head, body = first_sample("vmstat")
    mono = int(re.search(r"mono_ns=(\d+)", head).group(1))
    sample = (head + body).encode()
    copies = (64 << 20) // len(sample)
    # The same sample again and again, each a microsecond after the last.
    text = b"".join(sample.replace(str(mono).encode(), str(mono + i * 1000).encode(), 1)
                    for i in range(copies))
    archive = bundle_with(tmp_path, {"vmstat": text})
    _notes, peak = parse_measured(archive, tmp_path / "ds")
    assert peak < PEAK_MIB, f"peak RSS {peak:.0f} MiB"
    counters = [ln.split() for ln in body.splitlines()]
    expected = {"rows": copies * len(counters), "samples": copies,
                "total": copies * sum(int(v) for _n, v in counters)}
    got = rows_of(kmemscope("sql", tmp_path / "ds", "SELECT count(*) AS rows, count(DISTINCT ts)"
                            " AS samples, CAST(sum(value) AS BIGINT) AS total FROM vmstat", "--format", "json"))
    assert got == [expected]


def test_rows_past_the_row_bound_keep_the_samples_before_it(tmp_path, monkeypatch):
    from kmemscope.parsers import ingest, procfs

    head, body = first_sample("vmstat")
    per_sample = len(body.splitlines())
    bundle = tmp_path / "bundle"
    shutil.copytree(BUNDLE, bundle)
    monkeypatch.setattr(procfs, "MAX_ROWS", 3 * per_sample + 1)
    summary = ingest.ingest(bundle, tmp_path / "ds", isolate=False)
    samples = (BUNDLE / "procfs" / "vmstat").read_text().count("#kmemscope-sample ")
    assert samples > 3
    assert summary.tables["vmstat"] == 3 * per_sample
    assert any("procfs/vmstat" in n and f"more than {3 * per_sample + 1:,} rows" in n
               and "the 3 samples before it are kept" in n for n in summary.notes), summary.notes


@pytest.mark.parametrize("name, bad", [
    ("vmstat", "pgfault 99999999999999999999\n"),
    ("buddyinfo", "Node 0, zone   Normal   1 2 3 99999999999999999999 5\n"),
    ("buddyinfo", "Node 9999999999, zone   Normal   1 2 3 4 5\n"),
    ("pagetypeinfo", "Free pages count per migrate type at order " + "9" * 400 + "\n"),
])
def test_an_out_of_range_number_is_one_line_naming_the_file_and_line(tmp_path, name, bad):
    bundle = tmp_path / "bundle"
    shutil.copytree(BUNDLE, bundle)
    lines = (bundle / "procfs" / name).read_text().splitlines(keepends=True)
    at = 3          # inside the first sample
    lines.insert(at, bad)
    (bundle / "procfs" / name).write_text("".join(lines))
    proc = subprocess.run([*KMEMSCOPE, "parse", str(bundle), "-o", str(tmp_path / "ds")],
                          capture_output=True, text=True, timeout=300)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(err) == 1, proc.stderr
    assert "internal error" not in err[0] and "Traceback" not in proc.stderr
    assert f"procfs/{name}: line {at + 1}:" in err[0], err[0]
    assert len(err[0]) < 400, err[0]          # a 400-digit number is clipped


def test_an_oversized_pageblock_order_is_clipped_in_its_error(tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(BUNDLE, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["pageblock_order"] = 10 ** 400
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    proc = subprocess.run([*KMEMSCOPE, "parse", str(bundle), "-o", str(tmp_path / "ds")],
                          capture_output=True, text=True, timeout=300)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(err) == 1, proc.stderr
    assert "pageblock_order" in err[0] and "out of range" in err[0]
    assert "0" * 100 not in err[0] and len(err[0]) < 400, err[0]


HUGE = "9" * 100_000        # 23 times the digits Python's int() converts from text


@pytest.mark.parametrize("parse, line", [
    ("parse_vmstat", f"pgfault {HUGE}"),
    ("parse_buddyinfo", f"Node 0, zone   Normal   1 2 {HUGE}"),
    ("parse_buddyinfo", f"Node {HUGE}, zone   Normal   1 2"),
    ("parse_pagetypeinfo", f"Free pages count per migrate type at order 0 {HUGE}"),
    ("parse_pagetypeinfo", "Free pages count per migrate type at order 0 1\n"
                           f"Node 0, zone Normal, type Movable 1 >{HUGE}"),
    ("parse_extfrag", f"Node 0, zone   Normal {HUGE}.000"),
    ("parse_pressure", f"some avg10=0.00 avg60=0.00 avg300=0.00 total={HUGE}"),
    ("parse_cpu_stat", f"cpu{HUGE} 1 2 3 4"),
    ("parse_cpu_stat", f"cpu1 1 2 3 {HUGE}"),
    ("parse_kthreads", f"45 kswapd0 0 {HUGE}"),
    ("parse_mthp", f"2048 anon_fault_alloc {HUGE}"),
], ids=lambda v: v if v.startswith("parse_") else v.split()[0][:6])
def test_a_number_of_any_length_is_out_of_range_never_python_s_int_error(parse, line):
    """Every parser of a /proc text, as a pure function over text of any size (a /proc copy
    given to parse --procfs-start is not read a bounded line at a time): the number is out of
    range at its own line, shown clipped."""
    from kmemscope.parsers import procfs

    body = "\n" + line + "\n"
    with pytest.raises(procfs.OutOfRange) as caught:
        getattr(procfs, parse)(body)
    assert caught.value.index == body.splitlines().index(line.splitlines()[-1])
    assert len(str(caught.value)) < 120 and "characters)" in str(caught.value)


def test_a_sample_header_time_past_int64_is_one_line_naming_the_file_and_line():
    from kmemscope.common.errors import TraceFileError
    from kmemscope.parsers import procfs

    text = ("#kmemscope-sample mono_ns=5 realtime_ns=5\nnr_free_pages 1\n"
            f"#kmemscope-sample mono_ns={2 ** 63} realtime_ns=5\nnr_free_pages 2\n")
    with pytest.raises(TraceFileError) as caught:
        procfs.read_bundle_procfs({"vmstat": text.encode()}, [])
    assert str(caught.value).startswith(f"procfs/vmstat: line 3: a sample header's time (ns): "
                                        f"{2 ** 63} is out of range"), str(caught.value)
