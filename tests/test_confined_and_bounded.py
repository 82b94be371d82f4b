"""A hostile dataset can neither make a writer write outside it, nor break the other runs
with an odd folder name, nor pass a forged cache off as answers, nor run a reader out of
memory or time, nor reach the terminal with escape sequences.

Every hostile layout is built here at run time (tests/hostile.py) from the committed
example bundles. Oracles: the file system outside the dataset (hostile.tree_state before
and after), row counts and per-pfn counts read with plain pyarrow, the peak RSS the kernel
reports for the command's process (os.wait4), and the bytes written to the terminal.
"""
import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

import hostile
from conftest import EXAMPLES
from kmrun import kmemscope, KMEMSCOPE, one_error_line, rows_of

ALLOCS = EXAMPLES / "thp-faults"          # its run has mm_page_alloc events
OTHER = EXAMPLES / "memory-pressure"
ESC_TITLE = "\x1b]0;pwned\x07"            # sets the terminal's title when printed raw


def run(*args, timeout=300):
    return kmemscope(*args, check=False, timeout=timeout)


def measured(*args, timeout=900):
    """Run one command -> (returncode, stdout, stderr, its peak RSS in MiB)."""
    return hostile.run_measured([*KMEMSCOPE, *map(str, args)], timeout)[:4]


def pfn_allocs_oracle(ds, run_id):
    """Allocations per pfn of a run, counted in plain Python from the part files."""
    import pyarrow.parquet as pq

    counts = Counter()
    for f in (Path(ds) / "mm_page_alloc" / f"run_id={run_id}").glob("*.parquet"):
        for pfn in pq.read_table(f, columns=["pfn"]).column(0).to_pylist():
            if pfn not in (2**64 - 1, 2**32 - 1):
                counts[pfn] += 1
    return counts


def hot(ds, *extra):
    proc = run("query", "hot_pfns", ds, "--param", "top_n=5", "--format", "json", *extra)
    assert proc.returncode == 0, proc.stderr
    return proc, rows_of(proc)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    ds = tmp_path_factory.mktemp("confined") / "ds"
    kmemscope("parse", "-q", ALLOCS, "-o", ds, "--label", "kernel=a")
    kmemscope("parse", "-q", OTHER, "-o", ds, "--label", "kernel=b")
    runs = rows_of(kmemscope("sql", ds, "SELECT run_id, source FROM runs",
                             "--format", "json"))
    allocs = next(r["run_id"] for r in runs if "thp-faults" in r["source"])
    other = next(r["run_id"] for r in runs if r["run_id"] != allocs)
    return ds, allocs, other


@pytest.fixture
def ds(base, tmp_path):
    src, allocs, other = base
    dest = tmp_path / "ds"
    shutil.copytree(src, dest, symlinks=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.parquet").write_bytes(b"someone else's file\n")
    (outside / "notes.txt").write_text("precious\n")
    return dest, allocs, other, outside


# ---------------------------------------------------------------- 1. metrics import confined

@pytest.mark.parametrize("where", ["run folder", "table folder"])
def test_metrics_import_never_deletes_or_writes_through_a_linked_folder(ds, tmp_path, where):
    ds, allocs, _other, outside = ds
    table = ds / "run_metrics"
    if where == "run folder":
        table.mkdir(exist_ok=True)
        os.symlink(outside, table / f"run_id={allocs}")
    else:
        if table.exists():
            shutil.rmtree(table)
        os.symlink(outside, table)
    before = hostile.tree_state(outside)
    metrics = tmp_path / "m.csv"
    metrics.write_text(f"run,metric,value,unit,better\n{allocs},tps,1,tps,higher\n")
    line = one_error_line(run("metrics", "import", ds, metrics))
    assert "symbolic link" in line and "run_metrics" in line, line
    assert hostile.tree_state(outside) == before


# ---------------------------------------------------------------- 2. the derived cache race

@pytest.mark.slow   # builds and reads a row bomb, or rebuilds derived tables in a loop
def test_a_derived_folder_swapped_with_a_link_during_rebuilds_writes_nothing_outside(ds):
    ds, allocs, _other, outside = ds
    _proc, honest = hot(ds)
    before = hostile.tree_state(outside)
    part = ds / "_derived" / "page_pairs" / f"run_id={allocs}"
    swaps = answered = attempts = 0
    # At least 12 races; then on until one answers (each answers about one time in three:
    # the query reads the cache by its path, which the swap takes away as often as not).
    while attempts < 12 or (answered == 0 and attempts < 60):
        attempts += 1
        shutil.rmtree(ds / "_derived", ignore_errors=True)
        part.mkdir(parents=True)
        with hostile.Swapper(part, outside) as swapper:
            proc = run("query", "hot_pfns", ds, "--param", "top_n=5", "--format", "json")
        swaps += swapper.swaps
        # The reader may lose its own cache file to the swap (one clean line); it never
        # answers otherwise than the honest run, and never writes through the link.
        if proc.returncode == 0:
            assert rows_of(proc) == honest
            answered += 1
        else:
            assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
            assert proc.stderr.strip().splitlines()[-1].startswith("kmemscope: error: ")
        assert hostile.tree_state(outside) == before, "a cache file was written outside"
    assert swaps > 0, "the race never ran"
    assert answered > 0, f"none of {attempts} attempts answered"


# ---------------------------------------------------------------- 3. names

@pytest.mark.parametrize("name", ["a=b", "NULL", "__HIVE_DEFAULT_PARTITION__", "abc%27",
                                  "x" + ESC_TITLE])
def test_an_odd_run_folder_is_left_out_with_a_note_and_the_runs_answer(ds, name):
    ds, allocs, other, _outside = ds
    for table in ("runs", "mm_page_alloc"):
        odd = ds / table / f"run_id={name}"
        odd.mkdir()
        for f in (ds / table / f"run_id={allocs}").glob("*.parquet"):
            shutil.copy(f, odd / f.name)
    oracle = sum(pfn_allocs_oracle(ds, allocs).values())
    for args in (("info", ds), ("sql", ds, "SELECT run_id FROM runs ORDER BY 1", "--format",
                                "json"), ("query", "summary", ds, "--format", "json")):
        proc = run(*args)
        assert proc.returncode == 0, proc.stderr
        assert "is left out" in proc.stderr and "\x1b" not in proc.stderr, proc.stderr
        if args[0] == "sql":
            assert rows_of(proc) == [{"run_id": r} for r in sorted([allocs, other])]
        if args[0] == "query":
            got = {r["run_id"]: r["allocs"] for r in rows_of(proc)}
            assert set(got) == {allocs, other} and got[allocs] >= oracle, got
        if args[0] != "info":      # the json carries the notes stderr shows, word for word
            shown = [line.split("note: ", 1)[1] for line in proc.stderr.splitlines()
                     if line.startswith("kmemscope: note: ")]
            assert json.loads(proc.stdout)["notes"] == shown and shown


# ---------------------------------------------------------------- 4. forged caches

def _forge(path, factor):
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    i = t.schema.get_field_index("allocs")
    forged = t.set_column(i, t.schema.field(i), pc.multiply(t["allocs"], factor))
    pq.write_table(forged.replace_schema_metadata(t.schema.metadata), path)


def test_a_forged_cache_is_reported_by_verify_and_never_changes_answers(ds):
    ds, allocs, _other, _outside = ds
    oracle = pfn_allocs_oracle(ds, allocs)
    _proc, first = hot(ds)
    assert [r["allocs"] for r in first if r["run_id"] == allocs] == \
        sorted(oracle.values(), reverse=True)[:5]
    cache = ds / "_derived" / "pfn_allocs" / f"run_id={allocs}" / "part-0.parquet"
    assert cache.is_file()
    _forge(cache, 1000)
    proc = run("verify", ds)
    assert proc.returncode == 1
    assert f"changed\t_derived/pfn_allocs/run_id={allocs}/part-0.parquet" in proc.stdout
    _proc, after = hot(ds)
    assert after == first, "the forged cache was used"


def test_a_cache_forged_with_its_record_is_found_by_verify_deep(ds):
    """A forger who rewrites the run's recorded digests too (the limit docs/safety.md
    states): verify's size and sha256 checks agree, --deep derives again and finds it."""
    import hashlib

    ds, allocs, _other, _outside = ds
    hot(ds)
    cache = ds / "_derived" / "pfn_allocs" / f"run_id={allocs}" / "part-0.parquet"
    _forge(cache, 1000)
    digests = ds / "runs" / f"run_id={allocs}" / "_files.json"
    doc = json.loads(digests.read_text())
    key = f"_derived/pfn_allocs/run_id={allocs}/part-0.parquet"
    doc["derived"][key].update(sha256=hashlib.sha256(cache.read_bytes()).hexdigest(),
                               bytes=cache.stat().st_size)
    digests.write_text(json.dumps(doc))
    assert run("verify", ds).returncode == 0
    proc = run("verify", "--deep", ds)
    assert proc.returncode == 1
    assert f"changed\t{key} (its rows differ" in proc.stdout, proc.stdout


def test_verify_reports_a_cache_no_run_recorded(ds):
    ds, allocs, _other, _outside = ds
    stray = ds / "_derived" / "pfn_allocs" / f"run_id={allocs}" / "part-9.parquet"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"PAR1")
    proc = run("verify", ds)
    assert proc.returncode == 1 and f"extra\t_derived/pfn_allocs/run_id={allocs}/part-9.parquet" \
        in proc.stdout, proc.stdout


# ---------------------------------------------------------------- 5. verify bounded

def test_verify_tells_a_huge_part_file_by_its_size_without_hashing_it(ds):
    ds, allocs, _other, _outside = ds
    part = next((ds / "mm_page_alloc" / f"run_id={allocs}").glob("*.parquet"))
    recorded = json.loads((ds / "runs" / f"run_id={allocs}" / "_files.json").read_text())
    want = recorded["files"][f"mm_page_alloc/{part.name}"]["bytes"]
    hostile.sparse_part(part, 64 << 30)
    proc = run("verify", ds, timeout=120)
    assert proc.returncode == 1
    rel = f"mm_page_alloc/run_id={allocs}/{part.name}"
    assert f"changed\t{rel} ({64 << 30} bytes, {want} recorded)" in proc.stdout, proc.stdout


@pytest.mark.slow   # builds and reads a row bomb, or rebuilds derived tables in a loop
def test_verify_of_a_run_without_digests_reads_a_row_bomb_in_bounded_memory(ds):
    ds, allocs, _other, _outside = ds
    hostile.row_bomb(ds, "mm_page_alloc", allocs, 40_000_000)
    (ds / "runs" / f"run_id={allocs}" / "_files.json").unlink()
    code, out, err, rss = measured("verify", ds)
    assert code == 1 and f"unrecorded\trun {allocs}" in out, (out, err)
    # pyarrow decodes one batch of 65,536 rows at a time: the whole table would be 2.4 GB+
    assert rss < 700, f"verify peaked at {rss:.0f} MiB"


# ---------------------------------------------------------------- 6. every reader bounded

@pytest.mark.slow   # builds and reads a row bomb, or rebuilds derived tables in a loop
def test_a_row_bomb_query_stays_within_its_memory_limit(ds):
    ds, allocs, _other, _outside = ds
    hostile.row_bomb(ds, "mm_page_alloc", allocs, 40_000_000)
    code, out, err, rss = measured("query", "hot_pfns", ds, "--run", allocs,
                                   "--memory-limit", "500MB", "--format", "json")
    if code:
        assert err.strip().splitlines()[-1].startswith("kmemscope: error: "), err
        assert "internal error" not in err
    else:
        assert rows_of(out)[0]["allocs"] == 40_000_000
    assert rss < 1500, f"the query peaked at {rss:.0f} MiB with a 500 MB limit"


@pytest.mark.parametrize("verb", [("info", "{ds}"), ("query", "summary", "{ds}"),
                                  ("compare", "{ds}", "--by", "kernel"),
                                  ("sql", "--read-only", "{ds}", "SELECT 1 AS one"),
                                  ("verify", "{ds}")])
def test_the_timeout_covers_opening_the_dataset(ds, verb):
    """A table of 20,000 columns takes a reader well past 0.01 s to open: before the limit
    covered the opening, each of these answered (sql ran `SELECT 1` once it was open)."""
    ds, allocs, _other, _outside = ds
    hostile.wide_table(ds, "wide", allocs, 20_000)
    args = [a.format(ds=ds) for a in verb]
    line = one_error_line(run(*args, "--timeout", "0.01"))
    assert "ran longer than 0.01 s and was stopped" in line, line


def test_a_runs_file_with_a_huge_host_is_left_out_not_read(ds, tmp_path):
    ds, allocs, other, _outside = ds
    hostile.long_host(ds, allocs, 64 << 20)
    code, out, err, rss = measured("info", ds, "--format", "json")
    assert code == 0, err
    assert f"run {allocs} is left out" in err, err
    assert [r["run_id"] for r in json.loads(out)["runs"]] == [other]
    assert rss < 600, f"info peaked at {rss:.0f} MiB"
    metrics = tmp_path / "m.csv"
    metrics.write_text(f"run,metric,value,unit,better\n{other},tps,1,tps,higher\n")
    code, out, err, rss = measured("metrics", "import", ds, metrics)
    assert code == 0, err
    assert rss < 600, f"metrics import peaked at {rss:.0f} MiB"


# ---------------------------------------------------------------- 7. terminal escapes

def test_no_control_character_reaches_the_terminal(ds, tmp_path):
    ds, allocs, _other, _outside = ds
    (ds / f"evil{ESC_TITLE}" / "run_id=0123456789abcdef").mkdir(parents=True)
    link = ds / "mm_page_free" / f"run_id={ESC_TITLE}"
    link.parent.mkdir(exist_ok=True)
    bundle = tmp_path / "bundle"
    shutil.copytree(OTHER, bundle)
    kmemscope("parse", "-q", bundle, "-o", ds, "--label", f"kernel=c{ESC_TITLE}")
    outputs = [run("info", ds), run("verify", ds), run("query", "summary", ds),
               run("compare", ds, "--by", "kernel", "--baseline", "a"),
               run("compare", ds, "--by", "kernel", "--format", "mmtests")]
    os.symlink(tmp_path, link)
    outputs += [run("info", ds), run("sql", ds, "SELECT 1")]
    for proc in outputs:
        assert "Traceback" not in proc.stderr
        for text in (proc.stdout, proc.stderr):
            assert "\x1b" not in text and "\x07" not in text, text
    assert any("\\x1b]0;pwned\\x07" in p.stdout + p.stderr for p in outputs[:4])
    assert "symbolic link" in outputs[-1].stderr
