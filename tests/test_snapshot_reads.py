"""A command reads the committed state it listed, whatever a parse commits meanwhile
(dataset/snapshot.py, docs/safety.md "A run replaced while a command reads it").

The oracle of every test: the same question asked of each committed state with no writer
running. The deterministic tests list, replace a run, then read; the concurrency test
(slow) runs readers in a loop while another process re-parses the same trace with other
labels and other procfs samples, and checks every answer against the states' answers.
"""
import shutil

import pytest

import kmemscope
import requirements
from conftest import EXAMPLES
from kmemscope.api import REREAD_NOTE
from kmemscope.dataset.handle import DatasetRef

COST = EXAMPLES / "ab-defrag-mode-cost"
# run -> its label in the dataset as first parsed
RUNS = {"run1-defrag0": "0", "run1-defrag1": "1", "run2-defrag0": "0", "run2-defrag1": "1"}
REPLACED = "run1-defrag1"


def fewer_samples(bundle, into):
    """A copy of `bundle` whose procfs files lack their last sample: the same trace (the
    same run id), so parsing it replaces the run, with other vmstat, PSI and CPU values."""
    shutil.copytree(bundle, into)
    for f in (into / "procfs").iterdir():
        text = f.read_text()
        last = text.rfind("#kmemscope-sample ")
        if last > 0:
            f.write_text(text[:last])
    return into


def parse_ab(ds):
    for run, label in RUNS.items():
        kmemscope.parse([COST / run], ds, labels={"defrag": label})


def records(comparison):
    return sorted(comparison.records, key=lambda r: (r.metric, r.side))


@pytest.fixture()
def ab_cost(tmp_path):
    if not COST.is_dir():
        requirements.skip("setup", f"the committed example {COST} is missing")
    ds = tmp_path / "ds"
    parse_ab(ds)
    return ds, fewer_samples(COST / REPLACED, tmp_path / "variant")


def test_a_run_replaced_after_the_listing_is_compared_as_listed(ab_cost):
    """List, replace a run (another label, other samples), then compare: every row equals
    the state listed, stalls.* and the direct-compaction cost rows included, with no note;
    the state after the replacement answers otherwise (the replacement matters)."""
    ds, variant = ab_cost
    want = kmemscope.open(ds).compare("defrag")
    assert any(r.metric.startswith("stalls.") for r in want.records)
    cost = [r for r in want.records if r.metric == "cost.direct_compaction_ms"]
    assert cost and all(r.value is not None for r in cost)
    ref = DatasetRef.of(ds)
    ref.listing
    kmemscope.parse([variant], ds, labels={"defrag": "0"})
    got = kmemscope.open(ref).compare("defrag")
    assert records(got) == records(want)
    assert REREAD_NOTE not in got.notes and got.notes == want.notes
    after = kmemscope.open(ds).compare("defrag")
    assert records(after) != records(want)
    assert {r.side: r.runs for r in after.records if r.metric == "cost.direct_compaction_ms"} \
        == {"0": 3, "1": 1}


def test_sql_and_query_read_the_listed_state_after_a_replacement(ab_cost):
    """sql and query through a handle listed before the replacement answer as before it:
    the replaced run is neither left out nor read with the new run's files or labels."""
    ds, variant = ab_cost
    sql = ("SELECT run_id, labels['defrag'] AS defrag, (SELECT count(*) FROM mm_page_alloc a "
           "WHERE a.run_id = r.run_id) AS allocs FROM runs r ORDER BY run_id")
    before = kmemscope.open(ds)
    want_sql, want_cost = before.sql(sql).rows(), before.query("cost").arrow()
    ref = DatasetRef.of(ds)
    ref.listing
    kmemscope.parse([variant], ds, labels={"defrag": "0"})
    opened = kmemscope.open(ref)
    assert opened.sql(sql).rows() == want_sql
    got_cost = opened.query("cost")
    assert got_cost.arrow().equals(want_cost) and REREAD_NOTE not in got_cost.notes
    assert kmemscope.open(ds).sql(sql).rows() != want_sql


def test_verify_deep_checks_the_state_it_listed(ab_cost):
    """verify --deep while the dataset changes between its walk and its derivations checks
    the files it pinned: a replacement is no damage."""
    from kmemscope.dataset import verify as verify_mod

    ds, variant = ab_cost
    kmemscope.open(ds).compare("defrag")            # caches to check deeply
    ref = DatasetRef.of(ds)
    walked = verify_mod.verify
    calls = []

    def replace_then_derive(result, ref_, recorded, recompute):
        if not calls:
            kmemscope.parse([variant], ds, labels={"defrag": "0"})
        calls.append(1)
        return rederive(result, ref_, recorded, recompute)

    rederive = verify_mod._rederive
    verify_mod._rederive = replace_then_derive
    try:
        result = kmemscope.verify(ref, deep=True)
    finally:
        verify_mod._rederive = rederive
    assert calls and walked is verify_mod.verify
    assert result.ok, result.problems
    assert kmemscope.verify(ds, deep=True).ok


def test_a_child_process_reads_the_listing_its_command_shared(ab_cost):
    """The report's notebook kernels read the state the report listed: a process started
    inside shared_with_children lists the dataset from the parent's pins, so a run replaced
    after the listing is read as listed there, on every call."""
    import json
    import subprocess
    import sys

    from kmemscope.api import shared_with_children

    ds, variant = ab_cost
    sql = "SELECT run_id, labels['defrag'] AS defrag, events FROM runs ORDER BY run_id"
    want = kmemscope.open(ds).sql(sql).rows()
    ref = DatasetRef.of(ds)
    ref.listing
    kmemscope.parse([variant], ds, labels={"defrag": "0"})
    child = ("import json, sys, kmemscope\n"
             "ds = kmemscope.open(sys.argv[1])\n"
             "print(json.dumps([ds.sql(sys.argv[2]).rows(), ds.sql(sys.argv[2]).rows()]))\n")
    with shared_with_children(ref):
        out = subprocess.run([sys.executable, "-c", child, str(ds), sql], check=True,
                             capture_output=True, text=True, timeout=120).stdout
    first, second = json.loads(out)
    assert first == second == json.loads(json.dumps(want))
    alone = subprocess.run([sys.executable, "-c", child, str(ds), sql], check=True,
                           capture_output=True, text=True, timeout=120).stdout
    assert json.loads(alone)[0] != first           # without it: the state committed now


def test_a_child_pins_the_shared_listing_once_for_all_its_calls(ab_cost):
    """A notebook kernel makes a listing per call; the listing it is given cannot change while
    its command lives, so it opens and links the shared files once: the links the child makes
    over five calls are as many as the files the command shared (read from the exported file
    itself), not five times as many."""
    import json
    import os
    import subprocess
    import sys

    from kmemscope.api import shared_with_children
    from kmemscope.dataset import snapshot

    ds, _variant = ab_cost
    ref = DatasetRef.of(ds)
    ref.listing
    child = ("import os, sys, kmemscope\n"
             "made = []\n"
             "link = os.symlink\n"
             "os.symlink = lambda *a, **k: (made.append(a[1]), link(*a, **k))[1]\n"
             "ds = kmemscope.open(sys.argv[1])\n"
             "counts = [ds.sql('SELECT count(*) AS n FROM mm_page_alloc').rows() for _ in range(5)]\n"
             "print(len(made), len({str(c) for c in counts}))\n")
    with shared_with_children(ref):
        with open(os.environ[snapshot.ENV]) as f:
            shared = len(json.load(f)["pins"])
        out = subprocess.run([sys.executable, "-c", child, str(ds)], check=True,
                             capture_output=True, text=True, timeout=120).stdout
    links, answers = map(int, out.split())
    assert shared > 20 and answers == 1
    assert links == shared, (links, shared)


# The writer of the concurrency test: parses the replaced run's two versions in turn until
# told to stop, and counts its commits in a file.
WRITER = """
import pathlib, sys, kmemscope
ds, original, variant, stop, count = sys.argv[1:]
n = 0
while not pathlib.Path(stop).exists():
    for bundle, label in ((variant, "0"), (original, "1")):
        kmemscope.parse([bundle], ds, labels={"defrag": label})
        n += 1
        pathlib.Path(count).write_text(str(n))
"""

def report(ds):
    """The HTML of `kmemscope report DATASET --compare defrag` (byte for byte the same for one
    state: the oracle compares the bytes)."""
    import tempfile

    from kmemscope.notebooks.report import build_report

    with tempfile.TemporaryDirectory() as tmp:
        out = build_report(str(ds.path), f"{tmp}/report.html", compare="defrag")
        return out.read_bytes()


READERS = {
    "sql": lambda ds: ds.sql(
        "SELECT r.run_id, r.labels['defrag'] AS defrag, count(a.ts) AS allocs FROM runs r "
        "LEFT JOIN mm_page_alloc a USING (run_id) GROUP BY ALL ORDER BY r.run_id").rows(),
    "query cost": lambda ds: ds.query("cost").arrow().to_pylist(),
    "compare": lambda ds: [(r.metric, r.side, r.runs, r.n, r.value, r.stddev)
                           for r in records(ds.compare("defrag"))],
}


# The reader that keeps one Dataset open for all its rounds: its calls reuse a snapshot while
# the dataset's folders are unchanged (DatasetRef.again), and list again after a commit.
KEPT = "sql, one open Dataset"


@pytest.mark.slow
def test_readers_answer_for_a_committed_state_while_a_parse_replaces_runs(ab_cost, tmp_path,
                                                                          monkeypatch):
    """sql, query and compare in a loop while another process parses the same trace again
    and again, with another label and other procfs samples each time: every answer is the
    answer of one of the two committed states, each computed alone beforehand (the oracle).
    KMEMSCOPE_SNAPSHOT_ROUNDS sets the rounds of each reader (40 for a measurement), and
    KMEMSCOPE_SNAPSHOT_REPORT_ROUNDS those of `report` (minutes each: none in the suite, where
    test_a_child_process_reads_the_listing_its_command_shared checks how its kernels list).
    One more reader keeps one Dataset open for all its rounds, its snapshot kept between calls
    from the first moment its folders are unchanged (no settling time here: a snapshot kept
    too long is still one committed state, which the oracle accepts)."""
    import os
    import subprocess
    import sys
    import time

    from kmemscope.dataset import reader

    monkeypatch.setattr(reader, "SETTLED_NS", 0)
    ds, variant = ab_cost
    rounds = {name: int(os.environ.get("KMEMSCOPE_SNAPSHOT_ROUNDS", "3")) for name in READERS}
    readers = dict(READERS)
    if int(os.environ.get("KMEMSCOPE_SNAPSHOT_REPORT_ROUNDS", "0")):
        readers["report"] = report
        rounds["report"] = int(os.environ["KMEMSCOPE_SNAPSHOT_REPORT_ROUNDS"])
    oracle = {name: [] for name in readers}
    for bundle, label in ((variant, "0"), (COST / REPLACED, "1")):
        kmemscope.parse([bundle], ds, labels={"defrag": label})
        for name, read in readers.items():
            oracle[name].append(read(kmemscope.open(ds)))
    for name, (a, b) in oracle.items():
        assert a != b, f"{name}: both states answer alike, the test would prove nothing"
    readers[KEPT], oracle[KEPT], rounds[KEPT] = readers["sql"], oracle["sql"], rounds["sql"]
    kept = kmemscope.open(ds)
    stop, count = tmp_path / "stop", tmp_path / "commits"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(ds), str(COST / REPLACED),
                               str(variant), str(stop), str(count)])
    seen = {name: [0, 0] for name in readers}
    wrong = []
    try:
        deadline = time.monotonic() + 60
        while not count.exists():       # the writer is committing before the first read
            assert writer.poll() is None and time.monotonic() < deadline, "the writer died"
            time.sleep(0.05)
        first, started = int(count.read_text()), time.monotonic()
        for i in range(max(rounds.values())):
            for name, read in readers.items():
                if i >= rounds[name]:
                    continue
                got = read(kept if name == KEPT else kmemscope.open(ds))
                if got in oracle[name]:
                    seen[name][oracle[name].index(got)] += 1
                else:
                    wrong.append(name)
        commits, took = int(count.read_text()) - first, time.monotonic() - started
    finally:
        stop.touch()
        writer.wait(timeout=120)
    assert writer.returncode == 0
    print(f"rounds {rounds}: {commits} commits in {took:.0f} s meanwhile; answers per state "
          f"(variant, original): {seen}; answers of no state: {len(wrong)}")
    assert not wrong, f"answers of no committed state: {wrong}"
    assert commits >= max(rounds.values()), "the writer did not commit while the readers read"
