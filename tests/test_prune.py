"""`kmemscope prune`: runs retired whole, by age, id or label, and nothing else touched.

Oracles: which runs are old comes from each bundle's manifest.json read here with json (its
`start.realtime_ns`), the run ids from sha256 of each trace.dat; what is removed is the
dataset's file tree walked before and after (every path of a removed run gone, every other
path still there, byte for byte where it is a file); `verify --deep` re-derives every cache
that remains. A reader that listed before the removal answers as a reader of the state before.
"""
import hashlib
import json
import os
import shutil
import time

import pytest

import kmemscope
import requirements
from conftest import EXAMPLES
from kmrun import kmemscope as run, one_error_line

AB = EXAMPLES / "ab-defrag-mode"
BUNDLES = sorted(AB.iterdir()) + [EXAMPLES / "kmem-compaction", EXAMPLES / "thp-faults"] \
    if AB.is_dir() else []


def run_id_of(bundle):
    return hashlib.sha256((bundle / "trace.dat").read_bytes()).hexdigest()[:16]


def started_ns(bundle):
    return json.loads((bundle / "manifest.json").read_text())["start"]["realtime_ns"]


def tree(ds):
    """{relative path: sha256 of a file, or None for a folder} of the whole dataset but its
    lock file."""
    out = {}
    for dirpath, dirs, files in os.walk(ds):
        rel = os.path.relpath(dirpath, ds)
        for d in dirs:
            out[os.path.normpath(os.path.join(rel, d))] = None
        for f in files:
            if f != ".kmemscope.lock":
                path = os.path.join(dirpath, f)
                out[os.path.normpath(os.path.join(rel, f))] = hashlib.sha256(
                    open(path, "rb").read()).hexdigest()
    return out


def of_runs(paths, runs):
    return {p for p in paths if any(f"run_id={r}" in p for r in runs)}


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    """The ten bundles parsed, with the derived caches and kept rows `summary` builds."""
    if len(BUNDLES) != 10:
        requirements.skip("setup", f"the committed examples under {EXAMPLES} are missing")
    ds = tmp_path_factory.mktemp("prune") / "ds"
    kmemscope.parse(BUNDLES, ds)
    kmemscope.open(ds).query("summary")
    assert any((ds / "_derived").iterdir())
    return ds


@pytest.fixture()
def ds(parsed, tmp_path):
    copy = tmp_path / "ds"
    shutil.copytree(parsed, copy)
    return copy


def test_older_than_removes_exactly_the_runs_started_before_the_cut(ds):
    """The cut falls between the examples' recording days (2026-11-23 and -26): the three
    runs recorded before it go, the eight after stay; no path of a gone run remains, every
    other path is as it was, verify --deep passes."""
    cut_s = time.time() - time.mktime(time.strptime("2026-11-25", "%Y-%m-%d"))
    old = {run_id_of(b) for b in BUNDLES if started_ns(b) < (time.time() - cut_s) * 1e9}
    assert 0 < len(old) < len(BUNDLES)             # the test proves something either way
    before = tree(ds)
    assert of_runs(before, old)
    listed = run("prune", ds, "--older-than", f"{int(cut_s)}s", "--dry-run")
    assert {line.split()[0] for line in listed.stdout.splitlines()} == old
    assert tree(ds) == before                       # a dry run removes nothing
    done = run("prune", ds, "--older-than", f"{int(cut_s)}s")
    assert {line.split()[0] for line in done.stdout.splitlines()} == old
    after = tree(ds)
    assert not of_runs(after, old)
    assert after == {p: h for p, h in before.items() if p in after}     # nothing else changed
    kept_paths = set(before) - of_runs(before, old)
    # every path of a kept run is still there; only folders that held nothing else may go
    assert {p for p in kept_paths if before[p] is not None} <= set(after)
    assert not [p for p in after if p.startswith(".parse-")]
    assert run("verify", "--deep", ds).returncode == 0
    runs = kmemscope.open(ds).runs.rows()
    assert sorted(r["run_id"] for r in runs) == sorted({run_id_of(b) for b in BUNDLES} - old)


def test_by_run_and_by_label_together_and_from_python(ds):
    """--run and --label select what both select; the Python API gives the same."""
    defrag1 = {run_id_of(b) for b in BUNDLES if b.name.endswith("defrag1")}
    one = sorted(defrag1)[0]
    other = run_id_of(EXAMPLES / "thp-faults")
    gone = run("prune", ds, "--run", one[:8], "--run", other, "--label", "kernel=defrag1")
    assert gone.stdout.split() [0] == one and len(gone.stdout.splitlines()) == 1
    assert not of_runs(tree(ds), [one]) and of_runs(tree(ds), [other])
    result = kmemscope.open(ds).prune(label="kernel=defrag1")
    assert {r.run_id for r in result.runs} == defrag1 - {one}
    assert not of_runs(tree(ds), defrag1)
    assert run("verify", "--deep", ds).returncode == 0


def test_a_reader_that_listed_before_the_removal_answers_for_what_it_listed(ds):
    from kmemscope.dataset.handle import DatasetRef

    want = kmemscope.open(ds).query("summary").arrow().to_pylist()
    ref = DatasetRef.of(ds)
    ref.listing
    kmemscope.prune(ds, label="kernel=defrag0")
    got = kmemscope.open(ref).query("summary").arrow().to_pylist()
    assert got == want
    after = kmemscope.open(ds).query("summary").arrow().to_pylist()
    assert len(after) < len(want)


def test_a_removal_cut_short_is_finished_by_the_next_writer(ds, monkeypatch):
    """The removal dies after hiding a run (its caches not yet moved): readers no longer list
    it, and the next writer's recovery finishes it (no path of it left, verify passes)."""
    from kmemscope.dataset import commit

    victim = run_id_of(EXAMPLES / "kmem-compaction")

    def die(*args):
        raise OSError(5, "cut short")

    monkeypatch.setattr(commit, "_drop_caches", die)
    with pytest.raises(kmemscope.DatasetError):
        kmemscope.prune(ds, run=victim)
    monkeypatch.undo()
    assert of_runs(tree(ds), [victim])                  # left behind for now...
    assert victim not in {r["run_id"] for r in kmemscope.open(ds).runs.rows()}
    kmemscope.prune(ds, run=run_id_of(EXAMPLES / "thp-faults"))
    assert not of_runs(tree(ds), [victim])              # ...and finished by the next writer
    assert not [p for p in os.listdir(ds) if p.startswith(".parse-")]
    assert run("verify", ds).returncode == 0


@pytest.mark.parametrize("args, says", [
    ((), "which runs"),
    (("--older-than", "soon"), "is not an age"),
    (("--run", "ffffffffffff"), "no run"),
])
def test_bad_requests_are_one_line_and_remove_nothing(ds, args, says):
    before = tree(ds)
    line = one_error_line(run("prune", ds, *args, check=False))
    assert says in line
    assert tree(ds) == before


def test_an_s3_dataset_or_a_missing_one_is_refused(tmp_path):
    assert "not an s3://" in one_error_line(run("prune", "s3://bucket/ds", "--older-than", "1d",
                                                check=False))
    assert "holds no runs" in one_error_line(run("prune", tmp_path / "none", "--older-than",
                                                 "1d", check=False))
