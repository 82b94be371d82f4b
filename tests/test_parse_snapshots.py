"""A bare trace.dat parsed with /proc snapshots taken before and after it
(`parse trace.dat --procfs-start DIR --procfs-end DIR`), as mmtests' monitors and hand captures
keep them.

The snapshots are the first and last samples of the example bundles' own procfs files, written
as plain /proc copies with the mtimes of their sample headers' wall clock. Oracle: the
counters' increases recounted in Python from those two files, and their interval from the
files' mtimes.
"""
import json
import os
import re
import shutil

import pytest

from conftest import EXAMPLES
from kmrun import kmemscope, rows_of

THP = EXAMPLES / "thp-faults"
OTHER = EXAMPLES / "kmem-compaction"
FILES = ("vmstat", "pagetypeinfo", "buddyinfo")


def snapshots_of(bundle, dest):
    """dest/start and dest/end: the bundle's first and last /proc samples, as copies taken at
    their samples' wall-clock times; returns (start, end)."""
    start, end = dest / "start", dest / "end"
    for d in (start, end):
        d.mkdir(parents=True)
    for name in FILES:
        text = (bundle / "procfs" / name).read_text()
        parts = re.split(r"^#kmemscope-sample mono_ns=\d+ realtime_ns=(\d+)\n", text, flags=re.M)
        samples = list(zip(parts[1::2], parts[2::2]))
        for folder, (realtime, body) in ((start, samples[0]), (end, samples[-1])):
            (folder / name).write_text(body)
            os.utime(folder / name, ns=(int(realtime), int(realtime)))
    return start, end


def counters(path):
    return {name: int(value) for name, value in (ln.split() for ln in path.read_text().splitlines())}


def failure(*args):
    proc = kmemscope(*args, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(("kmemscope: error: ", "Error: ")) and "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("snapshots")
    ds = root / "ds"
    start, end = snapshots_of(THP, root / "thp")
    kmemscope("parse", "-q", THP / "trace.dat", "-o", ds, "--label", "kernel=a",
              "--procfs-start", start, "--procfs-end", end)
    o_start, o_end = snapshots_of(OTHER, root / "other")
    kmemscope("parse", "-q", OTHER / "trace.dat", "-o", ds, "--label", "kernel=b",
              "--procfs-start", o_start, "--procfs-end", o_end)
    return ds, start, end


def test_compare_s_vmstat_rows_are_the_snapshots_deltas(dataset):
    ds, start, end = dataset
    before, after = counters(start / "vmstat"), counters(end / "vmstat")
    interval_s = (os.stat(end / "vmstat").st_mtime_ns - os.stat(start / "vmstat").st_mtime_ns) / 1e9
    out = json.loads(kmemscope("compare", ds, "--by", "kernel", "--metrics", "vmstat",
                               "--format", "json").stdout)
    rows = {r["metric"][len("vmstat."):]: r for r in out["rows"] if r["side"] == "a"}
    checked = [c for c in rows if c in before]
    assert len(checked) >= 15, sorted(rows)
    for counter in checked:
        assert rows[counter]["value"] == after[counter] - before[counter], counter
    # and the rates: per minute of the snapshots' interval
    names = ",".join(f"vmstat.{c}/min" for c in checked[:5])
    rates = json.loads(kmemscope("compare", ds, "--by", "kernel", "--metrics", names,
                                 "--format", "json").stdout)
    for r in rates["rows"]:
        if r["side"] == "a":
            c = r["metric"][len("vmstat."):-len("/min")]
            assert r["value"] == pytest.approx(60 * (after[c] - before[c]) / interval_s, rel=1e-9)
    assert not any("[trace]" in n or "no vmstat samples" in n for n in out["notes"]), out["notes"]


def test_the_snapshots_sit_around_the_trace_with_their_own_interval(dataset):
    ds, start, end = dataset
    rows = rows_of(kmemscope("sql", ds, "SELECT r.first_ts, r.last_ts, min(v.ts) AS lo, "
                             "max(v.ts) AS hi, count(DISTINCT v.ts) AS n FROM runs r JOIN vmstat v "
                             "USING (run_id) WHERE r.labels['kernel'] = 'a' GROUP BY ALL",
                             "--format", "json"))
    (r,) = rows
    interval = os.stat(end / "vmstat").st_mtime_ns - os.stat(start / "vmstat").st_mtime_ns
    assert r["n"] == 2 and r["hi"] - r["lo"] == interval
    assert r["lo"] <= r["first_ts"] and r["hi"] >= r["last_ts"]
    assert abs((r["lo"] + r["hi"]) - (r["first_ts"] + r["last_ts"])) <= 2


def test_snapshots_that_do_not_fit_are_refused_in_one_line(tmp_path):
    start, end = snapshots_of(THP, tmp_path / "snap")
    trace, ds = THP / "trace.dat", tmp_path / "ds"
    # swapped: the end is older, and the counters went backwards
    assert "older than the start" in failure("parse", trace, "-o", ds, "--procfs-start", end,
                                             "--procfs-end", start)
    assert "went backwards" in failure("parse", trace, "-o", ds, "--procfs-start", end,
                                       "--procfs-end", start, "--procfs-times", "100,200")
    # taken closer together than the trace is long
    assert "not taken before and after" in failure("parse", trace, "-o", ds, "--procfs-start",
                                                   start, "--procfs-end", end,
                                                   "--procfs-times", "100,101")
    # another boot, another host
    (start / "boot_id").write_text("aaaa\n")
    (end / "boot_id").write_text("bbbb\n")
    assert "two boots" in failure("parse", trace, "-o", ds, "--procfs-start", start,
                                  "--procfs-end", end)
    (end / "boot_id").write_text("aaaa\n")
    (start / "hostname").write_text("elsewhere\n")
    assert "host elsewhere" in failure("parse", trace, "-o", ds, "--procfs-start", start,
                                       "--procfs-end", end)
    (start / "hostname").unlink()
    # a file that is not that /proc file
    shutil.copy(start / "buddyinfo", start / "vmstat")
    assert "is not a copy of /proc/vmstat" in failure("parse", trace, "-o", ds, "--procfs-start",
                                                      start, "--procfs-end", end)
    # a bundle has its own samples; one flag alone is a usage error
    assert "bare trace.dat" in failure("parse", THP, "-o", ds, "--procfs-start", start,
                                       "--procfs-end", end)
    assert "go together" in failure("parse", trace, "-o", ds, "--procfs-start", start)
    assert not ds.exists()


@pytest.mark.parametrize("digits", [100_000, 4_000])
def test_a_huge_number_in_a_copy_is_one_clipped_line_naming_the_file_and_line(tmp_path, digits):
    """Past the 4 KiB line bound of a bundle's sample files the line is refused as such;
    under it, the number is out of range; both name the copy and the line."""
    start, end = snapshots_of(THP, tmp_path / "snap")
    lines = (start / "vmstat").read_text().splitlines(keepends=True)
    name = lines[2].split()[0]
    lines[2] = f"{name} {'9' * digits}\n"
    (start / "vmstat").write_text("".join(lines))
    os.utime(start / "vmstat", ns=(os.stat(end / "vmstat").st_mtime_ns - 10 ** 9,) * 2)
    err = failure("parse", THP / "trace.dat", "-o", tmp_path / "ds", "--procfs-start", start,
                  "--procfs-end", end)
    assert f"{start / 'vmstat'}: line 3" in err, err
    assert ("longer than 4096 bytes" if digits > 4096 else "out of range") in err, err
    assert len(err) < 400 and "int" not in err.replace("print", ""), err
    assert not (tmp_path / "ds").exists()
