"""A command makes one dataset handle and lists the dataset once, whatever it runs over it.

The listing is counted where it happens: the walk of a local dataset's folders
(reader._local_tables) and the recursive listing of an s3 prefix
(storage.list_tables) are wrapped with a counter. The verbs run in this process
through click; their output is compared with the same verb run as its own
process (the console script), so a counted run is a run that did its job.
"""
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import kmemscope
from kmemscope.cli.verbs import cli
from kmemscope.dataset import reader, storage
from kmemscope.api import REREAD_NOTE
from kmemscope.dataset.handle import DatasetRef
from kmrun import kmemscope as kmemscope_cli


@pytest.fixture
def listings(monkeypatch):
    """The number of times the dataset has been listed since the test started."""
    count = {"n": 0}

    def counted(fn):
        def wrapper(*args, **kwargs):
            count["n"] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(reader, "_local_tables", counted(reader._local_tables))
    monkeypatch.setattr(storage, "list_tables", counted(storage.list_tables))
    return count


def _in_process(args):
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("args", [
    ["query", "summary", "{ds}", "--format", "json"],
    ["query", "stalls", "{ds}", "--label", "kernel=a", "--format", "csv"],
    ["sql", "{ds}", "SELECT run_id, count(*) AS n FROM mm_page_alloc GROUP BY 1 ORDER BY 1; "
                    "SELECT run_id FROM runs WHERE labels['kernel'] = 'b'", "--format", "jsonl"],
    ["sql", "{ds}", "--read-only", "SELECT count(*) AS n FROM runs", "--format", "csv"],
    ["info", "{ds}", "--format", "json"],
    ["compare", "{ds}", "--by", "kernel", "--format", "json"],
    ["compare", "{ds}", "--by", "kernel", "--metrics", "vmstat.compact_stall", "--over", "minute"],
], ids=lambda a: " ".join(a[:2]))
def test_each_command_lists_the_dataset_once(examples_dataset, listings, args):
    args = [str(examples_dataset) if a == "{ds}" else a for a in args]
    want = kmemscope_cli(*args).stdout          # its own process: what a user sees
    listings["n"] = 0
    got = _in_process(args)
    assert got == want
    assert listings["n"] == 1


def test_a_handle_lists_on_first_use_and_keeps_its_snapshot(examples_dataset, listings):
    ref = DatasetRef.of(examples_dataset)
    assert listings["n"] == 0                   # making a handle reads nothing
    assert DatasetRef.of(ref) is ref
    first = ref.listing
    assert ref.listing is first and listings["n"] == 1
    on_disk = {p.name for p in Path(examples_dataset).iterdir()
               if p.is_dir() and any(p.glob("run_id=*/*.parquet"))}
    assert set(first) == on_disk
    runs = {p.name[len("run_id="):] for p in Path(examples_dataset, "runs").glob("run_id=*")}
    assert set(first["runs"]) == runs


def test_local_or_s3_is_decided_once_without_reading(tmp_path, listings):
    local = DatasetRef.of(str(tmp_path / "nothing-here"))
    assert not local.is_s3 and local.location == tmp_path / "nothing-here"
    remote = DatasetRef.of("s3://bucket-name/some/prefix")
    assert remote.is_s3 and remote.location == "s3://bucket-name/some/prefix"   # no folded //
    assert listings["n"] == 0


def test_an_open_dataset_sees_runs_parsed_after_its_first_call(examples_dataset, tmp_path,
                                                               listings):
    import shutil

    from conftest import EXAMPLES

    ds = tmp_path / "ds"
    shutil.copytree(examples_dataset, ds)
    opened = kmemscope.open(ds)
    before = set(opened.run_ids())
    assert listings["n"] == 1                   # the open's listing served the first call
    added = kmemscope.parse(EXAMPLES / "thp-faults", ds, labels={"kernel": "c"})[0].run_id
    assert added not in before
    assert set(opened.run_ids()) == before | {added}
    assert listings["n"] == 2


def test_a_command_s_handle_is_the_snapshot_of_every_call(examples_dataset, listings):
    ref = DatasetRef.of(examples_dataset)
    opened = kmemscope.open(ref)
    opened.query("summary")
    opened.sql("SELECT count(*) FROM runs")
    assert opened.tables == sorted(ref.listing)
    assert listings["n"] == 1
    doc = json.loads(kmemscope_cli("info", examples_dataset, "--format", "json").stdout)
    assert {t["table"] for t in doc["tables"]} == set(opened.tables)


@pytest.fixture
def questions(monkeypatch):
    """The times "is this dataset local or in s3?" has been asked (storage.is_url, which
    DatasetRef asks once when it is made) since the test started."""
    count = {"n": 0}
    asked = storage.is_url

    def counted(where):
        count["n"] += 1
        return asked(where)

    monkeypatch.setattr(storage, "is_url", counted)
    return count


@pytest.mark.parametrize("args", [
    ["query", "summary", "{ds}", "--format", "json"],
    ["query", "hot_pfns", "{ds}", "--format", "csv"],
    ["sql", "{ds}", "SELECT run_id FROM runs ORDER BY 1; SELECT count(*) AS n FROM mm_page_alloc",
     "--format", "jsonl"],
    ["sql", "{ds}", "--read-only", "SELECT count(*) AS n FROM runs", "--format", "csv"],
    ["info", "{ds}", "--format", "json"],
    ["compare", "{ds}", "--by", "kernel", "--format", "json"],
    ["verify", "{ds}", "--deep"],
    ["metrics", "list", "{ds}", "--format", "csv"],
], ids=lambda a: " ".join(a[:2]))
def test_each_command_decides_local_or_s3_once(examples_dataset, tmp_path, questions, args):
    """The readers, the derived cache and the result cache take the command's handle and
    ask it, never the location again. The oracle for the output: the same verb as its own
    process."""
    import shutil

    ds = tmp_path / "ds"          # a copy: hot_pfns and verify --deep write caches into it
    shutil.copytree(examples_dataset, ds)
    args = [str(ds) if a == "{ds}" else a for a in args]
    want = kmemscope_cli(*args).stdout
    questions["n"] = 0
    got = _in_process(args)
    assert got == want
    assert questions["n"] == 1


def test_a_handle_is_not_a_path(examples_dataset):
    """No __fspath__: a handle given where a path is expected fails at once, not silently
    as the folder (and an s3 handle as a TypeError deep inside)."""
    import os

    ref = DatasetRef.of(examples_dataset)
    with pytest.raises(TypeError):
        os.fspath(ref)
    with pytest.raises(TypeError):
        reader.table_runs(examples_dataset)       # readers take the handle, not a path
    assert reader.table_runs(ref) == ref.listing


def _remove_run(ds, run):
    """A run's partitions removed by hand, its `runs` partition first (as a commit hides it)."""
    shutil.rmtree(ds / "runs" / f"run_id={run}")
    for folder in ds.glob(f"*/run_id={run}"):
        shutil.rmtree(folder)


def _three_runs(tmp_path):
    from conftest import EXAMPLES

    ds = tmp_path / "ds"
    for example, kernel in (("kmem-compaction", "a"), ("thp-faults", "b"),
                            ("memory-pressure", "b")):
        [last] = kmemscope.parse([EXAMPLES / example], ds, labels={"kernel": kernel})
    return ds, last


def test_a_run_removed_after_the_listing_is_still_read_as_listed(tmp_path):
    """A command's handle lists once and holds the files it listed open (dataset/snapshot.py):
    a run removed (or committed again) meanwhile is still read as it was listed, whole, with
    no note; the command answers for the state it started on. A new open sees the removal."""
    ds, gone = _three_runs(tmp_path)
    before = kmemscope.open(ds)
    want_runs = before.sql("SELECT run_id FROM runs ORDER BY run_id").rows()
    want_summary, want_compare = before.query("summary").arrow(), before.compare("kernel").records
    ref = DatasetRef.of(ds)
    ref.listing                                                     # the command's snapshot
    _remove_run(ds, gone.run_id)
    assert ref.outdated()
    opened = kmemscope.open(ref)
    runs = opened.sql("SELECT run_id FROM runs ORDER BY run_id")
    assert runs.rows() == want_runs and len(want_runs) == 3 and REREAD_NOTE not in runs.notes
    again = opened.query("summary")
    assert again.arrow().equals(want_summary) and REREAD_NOTE not in again.notes
    compared = opened.compare("kernel")
    assert compared.records == want_compare and REREAD_NOTE not in compared.notes
    assert len(kmemscope.open(ds).sql("SELECT run_id FROM runs").rows()) == 2


def test_an_unpinned_snapshot_whose_files_went_away_is_read_again_with_a_note(tmp_path):
    """Files the listing could not hold open (beyond the process's open-file limit, here
    all of them: the snapshot closed) are read by their names: a run removed meanwhile
    leaves the listing naming files that are gone. The call is read again on a new snapshot
    and says so, instead of calling the run unreadable or leaving it out."""
    ds, gone = _three_runs(tmp_path)
    ref = DatasetRef.of(ds)
    ref.listing
    ref.snapshot.close()
    _remove_run(ds, gone.run_id)
    assert ref.outdated()
    opened = kmemscope.open(ref)
    runs = opened.sql("SELECT run_id FROM runs ORDER BY run_id")
    fresh = kmemscope.open(ds)
    assert runs.rows() == fresh.sql("SELECT run_id FROM runs ORDER BY run_id").rows()
    assert len(runs.rows()) == 2 and REREAD_NOTE in runs.notes
    again, now = opened.query("summary"), fresh.query("summary")
    assert again.arrow().equals(now.arrow())
    assert REREAD_NOTE in again.notes and REREAD_NOTE not in now.notes
    compared = opened.compare("kernel")
    assert REREAD_NOTE in compared.notes
    assert compared.records == fresh.compare("kernel").records


def test_a_run_parsed_again_after_the_listing_is_read_as_listed(tmp_path):
    """The same trace parsed again replaces its run while a command holds its listing: the
    command answers with the run as listed (its old label), a new open with the new one."""
    from conftest import EXAMPLES

    ds = tmp_path / "ds"
    kmemscope.parse([EXAMPLES / "kmem-compaction"], ds, labels={"kernel": "a"})
    ref = DatasetRef.of(ds)
    ref.listing
    kmemscope.parse([EXAMPLES / "kmem-compaction"], ds, labels={"kernel": "c"})
    sql = "SELECT labels['kernel'] AS kernel, events FROM runs"
    got = kmemscope.open(ref).sql(sql)
    now = kmemscope.open(ds).sql(sql)
    assert [r["kernel"] for r in got.rows()] == ["a"] and REREAD_NOTE not in got.notes
    assert [r["kernel"] for r in now.rows()] == ["c"]
    assert got.rows()[0]["events"] == now.rows()[0]["events"]


def test_a_damaged_file_of_a_current_snapshot_is_not_read_again(tmp_path):
    from conftest import EXAMPLES
    from kmemscope.common.errors import DatasetError

    ds = tmp_path / "ds"
    kmemscope.parse([EXAMPLES / "kmem-compaction"], ds)
    ref = DatasetRef.of(ds)
    part = next(iter(ref.listing["mm_page_alloc"].values()))[0]
    Path(part).write_bytes(b"PAR1 not parquet")
    assert not ref.outdated()
    with pytest.raises(DatasetError, match="cannot be read"):
        kmemscope.open(ref).sql("SELECT count(*) FROM mm_page_alloc")


def test_an_open_dataset_keeps_its_snapshot_until_its_folders_change(tmp_path, listings,
                                                                    monkeypatch):
    """Calls of an open Dataset read one snapshot while nothing in the dataset's folders
    changed (no listing, no file opened again); an imported metric, a recorded cache and a
    parsed run each change a folder, and the next call lists again and reads them. The
    oracles: the listing counter, the imported value as written, the run ids parse returned.
    (Settled at once here: the dataset is parsed just before, within the 2 s a listing waits
    for its folders to be older than.)"""
    from conftest import EXAMPLES

    monkeypatch.setattr(reader, "SETTLED_NS", 0)
    ds, _last = _three_runs(tmp_path)
    listings["n"] = 0
    opened = kmemscope.open(ds)
    runs = opened.run_ids()
    count = "SELECT count(*) AS n FROM mm_page_alloc"
    want = opened.sql(count).rows()
    for _ in range(3):
        assert opened.sql(count).rows() == want
    assert listings["n"] == 1
    metrics = tmp_path / "m.csv"
    metrics.write_text(f"run,metric,value,unit,better\n{runs[0]},tps,12.5,tps,higher\n")
    opened.import_metrics(metrics)                  # lists under its lock, as before
    n = listings["n"]
    got = opened.sql("SELECT run_id, value FROM run_metrics WHERE metric = 'tps'").rows()
    assert got == [{"run_id": runs[0], "value": 12.5}] and listings["n"] == n + 1
    opened.query("summary")                         # records its caches in the runs' folders
    n = listings["n"]
    opened.sql(count)
    assert listings["n"] == n + 1
    added = kmemscope.parse(EXAMPLES / "thp-faults", ds, labels={"kernel": "c"})[0].run_id
    assert set(opened.run_ids()) == set(runs) | {added}
