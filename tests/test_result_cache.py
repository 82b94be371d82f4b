"""Each run's rows of an analysis are kept beside the dataset (queries/result_cache.py).

The oracle is the analysis computed afresh with the cache off: for every section the rows
read back from the cache, alone and mixed with runs computed now, equal those rows in value
and order. Around that: only the runs without kept rows are computed; another parameter,
a changed run or a changed cache file compute afresh; `verify --deep` runs the analysis again.

The rest of the suite runs with the cache off (conftest.py), so that what it checks is the
computation; this file turns it on.
"""
import json
import re
import shutil

import pytest

from kmemscope.common.errors import DatasetError
from kmemscope.queries import result_cache, runner
from parity_data import every_section
from kmemscope.dataset.handle import DatasetRef

SECTIONS = every_section()


@pytest.fixture(autouse=True)
def cache_on(monkeypatch):
    monkeypatch.setenv(result_cache.ENV_SWITCH, "1")


@pytest.fixture
def dataset(examples_dataset, tmp_path):
    """A private copy of the examples dataset (its caches are this test's own)."""
    copy = tmp_path / "ds"
    shutil.copytree(examples_dataset, copy, symlinks=True)
    shutil.rmtree(copy / "_derived", ignore_errors=True)
    _forget_derived(copy)
    return copy


def _forget_derived(ds):
    """Drop the derived caches from the runs' digests (their files were not copied)."""
    from kmemscope.dataset import safefs
    from kmemscope.dataset.digests import _write_digests, read_digests_in

    with safefs.Dir.root(ds) as root:
        for entry in (ds / "runs").iterdir():
            runs = root.walk(["runs", entry.name], "a runs folder")
            with runs:
                doc = read_digests_in(runs)
                if doc and doc.pop("derived", None) is not None:
                    _write_digests(runs, doc)


def _fresh(qname, ds, **kw):
    """The section computed with the cache off: the oracle."""
    import os
    saved = os.environ.get(result_cache.ENV_SWITCH)
    os.environ[result_cache.ENV_SWITCH] = "0"
    try:
        return runner.run_query(qname, ds, **kw)
    finally:
        os.environ[result_cache.ENV_SWITCH] = saved


def _plain(table):
    return table.replace_schema_metadata(None)


def _same(a, b):
    assert a.column_names == b.column_names
    assert a.num_rows == b.num_rows
    assert _plain(a).equals(_plain(b)), (a.slice(0, 3).to_pylist(), b.slice(0, 3).to_pylist())
    assert runner.notes_of(a) == runner.notes_of(b)


def _part_with_rows(ds, name):
    import pyarrow.parquet as pq

    parts = sorted((ds / "_derived" / name).glob("run_id=*/part-0.parquet"))
    return next(p for p in parts if pq.read_metadata(p).num_rows > 0)


class Counting:
    """runner.run_local, counting the runs it is asked to compute."""

    def __init__(self, monkeypatch):
        self.calls = []
        real = runner.run_local

        def counted(plan, *args, **kw):
            self.calls.append(sorted(plan.chosen))
            return real(plan, *args, **kw)

        monkeypatch.setattr(runner, "run_local", counted)


# slow: every section computed three times (~9 s); the tests below keep the cache's rules in make check
@pytest.mark.slow
def test_every_section_reads_back_the_rows_it_computed(dataset, monkeypatch):
    refused = []
    for qname, _a, _s in SECTIONS:
        try:
            oracle = _fresh(qname, dataset)
        except DatasetError as exc:
            # The one refusal these runs earn: they recorded no kernel stacks. Any other
            # error of the oracle (a bug, a typo in a section's SQL) fails the test.
            assert "no kernel_stack events" in str(exc), f"{qname}: {exc}"
            assert not (dataset / "kernel_stack").exists()
            with pytest.raises(DatasetError, match=re.escape(str(exc))):
                runner.run_query(qname, dataset)     # nor may the cache answer
            refused.append(qname)
            continue
        first = runner.run_query(qname, dataset)
        _same(first, oracle)
        counting = Counting(monkeypatch)
        again = runner.run_query(qname, dataset)
        monkeypatch.undo()
        monkeypatch.setenv(result_cache.ENV_SWITCH, "1")
        _same(again, oracle)
        if "run_id" in oracle.column_names:
            assert counting.calls == [], f"{qname}: computed again {counting.calls}"
    assert all(q.startswith("alloc_origins.") for q in refused), refused
    assert len(refused) < len(SECTIONS) // 2, "the oracle answered too few sections to check"


def test_only_runs_without_kept_rows_are_computed(dataset, monkeypatch):
    from kmemscope.dataset import reader

    runs = sorted(reader.table_runs(DatasetRef.of(dataset))["runs"])
    assert len(runs) == 2
    runner.run_query("summary", dataset, run_ids=[runs[0]])     # keeps the first run's rows
    counting = Counting(monkeypatch)
    mixed = runner.run_query("summary", dataset)
    assert counting.calls == [[runs[1]]]
    _same(mixed, _fresh("summary", dataset))


def test_other_parameters_compute_afresh_and_are_kept_apart(dataset, monkeypatch):
    runner.run_query("summary", dataset)
    counting = Counting(monkeypatch)
    forced = runner.run_query("summary", dataset, params={"era": "A"})
    assert len(counting.calls) == 1
    _same(forced, _fresh("summary", dataset, params={"era": "A"}))
    assert set(forced.column("highatomic_era").to_pylist()) == {"A"}
    # the default's rows are asked for again: computed again, as era=A replaced them
    _same(runner.run_query("summary", dataset), _fresh("summary", dataset))


def test_a_run_whose_files_change_is_computed_afresh(dataset, monkeypatch, tmp_path):
    """Importing a benchmark metric writes a run_metrics file into one run and records it in
    the run's digests: that run's kept rows no longer match and it alone is computed again;
    compare's benchmark block then shows the metric."""
    from kmrun import kmemscope

    runner.run_query("run_metrics", dataset)
    target = sorted(p.name.split("=", 1)[1] for p in (dataset / "runs").iterdir())[0]
    rows = tmp_path / "m.csv"
    rows.write_text(f"run,metric,value,unit,better\n{target},tput,5,ops,higher\n")
    kmemscope("metrics", "import", dataset, rows, "-q")
    counting = Counting(monkeypatch)
    got = runner.run_query("run_metrics", dataset)
    assert counting.calls == [[target]]
    _same(got, _fresh("run_metrics", dataset))
    assert ("tput", 5.0) in {(r["metric"], r["value"]) for r in got.to_pylist()}


def test_a_changed_cache_file_is_not_read(dataset, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    oracle = runner.run_query("hot_pfns", dataset)
    part = _part_with_rows(dataset, "result_hot_pfns")
    table = pq.read_table(part)
    forged = table.set_column(table.column_names.index("allocs"), "allocs",
                              pa.compute.multiply(table.column("allocs"), 1000))
    pq.write_table(forged, part)
    counting = Counting(monkeypatch)
    _same(runner.run_query("hot_pfns", dataset), oracle)
    assert len(counting.calls) == 1


def test_kept_rows_declaring_more_than_the_bound_are_computed_again(dataset, monkeypatch):
    oracle = runner.run_query("hot_pfns", dataset)
    monkeypatch.setattr(result_cache, "KEPT_MAX_BYTES", 16)
    counting = Counting(monkeypatch)
    _same(runner.run_query("hot_pfns", dataset), oracle)
    assert counting.calls, "a kept file declaring more than the bound was read"


def test_verify_deep_runs_a_forged_cache_again_and_reports_it(dataset):
    """A forger who also rewrites the run's digests passes `verify`; `verify --deep` runs the
    analysis on the run again and finds the rows differ."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from kmemscope.dataset import safefs
    from kmemscope.dataset.digests import _write_digests, read_digests_in
    from kmemscope.api import verify

    runner.run_query("hot_pfns", dataset)
    assert verify(dataset, deep=True).ok
    part = _part_with_rows(dataset, "result_hot_pfns")
    run = part.parent.name.split("=", 1)[1]
    table = pq.read_table(part)
    pq.write_table(table.set_column(table.column_names.index("allocs"), "allocs",
                                    pa.compute.multiply(table.column("allocs"), 1000)), part)
    data = part.read_bytes()
    with safefs.Dir.root(dataset) as root, root.walk(["runs", f"run_id={run}"], "runs") as runs:
        doc = read_digests_in(runs)
        entry = doc["derived"][f"_derived/result_hot_pfns/run_id={run}/part-0.parquet"]
        entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
        _write_digests(runs, doc)
    assert verify(dataset).ok
    deep = verify(dataset, deep=True)
    assert not deep.ok
    assert any("result_hot_pfns" in path and "rows differ" in path
               for _kind, path in deep.problems), deep.problems


def test_the_switch_turns_the_cache_off(dataset, monkeypatch):
    monkeypatch.setenv(result_cache.ENV_SWITCH, "0")
    runner.run_query("summary", dataset)
    assert not (dataset / "_derived" / "result_summary").exists()
    docs = [json.loads(p.read_text()) for p in (dataset / "runs").glob("run_id=*/_files.json")]
    assert not any(k.startswith("_derived/result_") for d in docs for k in d.get("derived", {}))


def test_the_command_line_prints_the_same_from_kept_rows(dataset):
    import os

    from kmrun import kmemscope

    def run(switch, *args):
        return kmemscope(*args, env=dict(os.environ, **{result_cache.ENV_SWITCH: switch})).stdout

    for args in (("compare", dataset, "--by", "kernel"), ("query", "summary", dataset,
                                                          "--format", "csv")):
        computed = run("0", *args)
        assert computed.strip()
        assert run("1", *args) == computed          # computes and keeps
        assert run("1", *args) == computed          # reads what it kept
    assert (dataset / "_derived" / "result_summary").is_dir()


def _derived_record(ds, run, name):
    doc = json.loads((ds / "runs" / f"run_id={run}" / "_files.json").read_text())
    return doc["derived"][f"_derived/{name}/run_id={run}/part-0.parquet"]


def _set_record(ds, run, name, **fields):
    from kmemscope.dataset import safefs
    from kmemscope.dataset.digests import _write_digests, read_digests_in

    with safefs.Dir.root(ds) as root, root.walk(["runs", f"run_id={run}"], "runs") as runs:
        doc = read_digests_in(runs)
        doc["derived"][f"_derived/{name}/run_id={run}/part-0.parquet"].update(fields)
        _write_digests(runs, doc)


def _runs_with_rows(ds, name):
    import pyarrow.parquet as pq

    return [p.parent.name.split("=", 1)[1]
            for p in sorted((ds / "_derived" / name).glob("run_id=*/part-0.parquet"))
            if pq.read_metadata(p).num_rows > 0]


def test_a_record_given_another_questions_signature_is_caught_by_the_query_and_verify(
        dataset, monkeypatch):
    """The hot_pfns top_n=5 cache left as it is, only its record given top_n=3's signature:
    asked for top_n=3, the query computes it again (3 rows a run, as with the cache off), and
    `verify` reports the file."""
    from kmemscope.api import verify

    runner.run_query("hot_pfns", dataset, params={"top_n": 3})
    runs = _runs_with_rows(dataset, "result_hot_pfns")
    said_three = {r: dict(_derived_record(dataset, r, "result_hot_pfns")) for r in runs}
    runner.run_query("hot_pfns", dataset, params={"top_n": 5})
    for run in runs:
        _set_record(dataset, run, "result_hot_pfns",
                    **{k: v for k, v in said_three[run].items() if k not in ("sha256", "bytes")})
    counting = Counting(monkeypatch)
    got = runner.run_query("hot_pfns", dataset, params={"top_n": 3})
    assert counting.calls, "the forged record's file was read"
    _same(got, _fresh("hot_pfns", dataset, params={"top_n": 3}))
    per_run = {}
    for row in got.to_pylist():
        per_run[row["run_id"]] = per_run.get(row["run_id"], 0) + 1
    assert per_run and max(per_run.values()) <= 3, per_run
    problems = verify(dataset).problems
    assert {p.split(" ")[0] for _k, p in problems} == {
        f"_derived/result_hot_pfns/run_id={r}/part-0.parquet" for r in runs}, problems


def test_verify_deep_asks_the_records_question_not_the_files(dataset):
    """A forger rewrites the top_n=5 file to carry top_n=3's signature (the question stated
    inside it left at top_n=5) and records it as top_n=3's: `verify` finds file and record
    agreeing; `verify --deep` asks the record's question (top_n=3) and finds other rows."""
    import hashlib

    import pyarrow.parquet as pq

    from kmemscope.dataset.derived import SIG_KEY
    from kmemscope.api import verify

    runner.run_query("hot_pfns", dataset, params={"top_n": 3})
    runs = [r for r in _runs_with_rows(dataset, "result_hot_pfns")]
    said_three = {r: dict(_derived_record(dataset, r, "result_hot_pfns")) for r in runs}
    runner.run_query("hot_pfns", dataset, params={"top_n": 5})
    assert verify(dataset, deep=True).ok
    for run in runs:
        part = dataset / "_derived" / "result_hot_pfns" / f"run_id={run}" / "part-0.parquet"
        table = pq.read_table(part)
        meta = dict(table.schema.metadata)
        meta[SIG_KEY] = said_three[run]["from"].encode()
        pq.write_table(table.replace_schema_metadata(meta), part)
        data = part.read_bytes()
        _set_record(dataset, run, "result_hot_pfns", sha256=hashlib.sha256(data).hexdigest(),
                    bytes=len(data), **{k: v for k, v in said_three[run].items()
                                        if k not in ("sha256", "bytes")})
    assert verify(dataset).ok, verify(dataset).problems
    deep = verify(dataset, deep=True)
    assert {p.split(" ")[0] for _k, p in deep.problems if "rows differ" in p} == {
        f"_derived/result_hot_pfns/run_id={r}/part-0.parquet" for r in runs}, deep.problems
