"""Notes name each run once: a note folded over runs counts the runs it names, no more.

`compare` reads several analyses and each says the same thing about a run that lacks
something; folded into one line, that line must name each run once and count the runs the
dataset has. Oracle: the dataset's run folders (`runs/run_id=*`), listed here.
"""
import re
from pathlib import Path

from kmrun import kmemscope

from kmemscope.queries.sides import condense_notes

FOLDED = re.compile(r"(\d+) runs \(([^)]*)\)")


def run_ids(ds):
    return {p.name[len("run_id="):] for p in (Path(ds) / "runs").glob("run_id=*")}


def check_folded(lines, runs):
    folded = 0
    for line in lines:
        for count, shown in FOLDED.findall(line):
            ids = [i for i in shown.replace(" ...", "").split(", ") if i]
            folded += 1
            assert len(ids) == len(set(ids)), line
            assert set(ids) <= runs, line
            assert int(count) <= len(runs), line
    return folded


def test_compare_notes_count_each_run_once(examples_ab):
    runs = run_ids(examples_ab)
    assert len(runs) == 3
    out = kmemscope("compare", examples_ab, "--by", "kernel").stdout
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    # the examples predate the cost samples: every run lacks them, one note names all three
    cost = [n for n in notes if "no cost samples" in n]
    assert len(cost) == 1 and cost[0].startswith("note: 3 runs ("), cost
    assert check_folded(notes, runs) >= 1


def test_query_notes_count_each_run_once(examples_ab):
    runs = run_ids(examples_ab)
    err = kmemscope("query", "summary", examples_ab).stderr
    check_folded(err.splitlines(), runs)
    assert len(err.splitlines()) == len(set(err.splitlines()))


def test_condense_names_a_run_once_however_often_it_is_said():
    notes = ["run aa has no x events: counted as none"] * 3 + [
        "run bb has no x events: counted as none", "run aa has no x events: counted as none",
        "other note", "other note"]
    assert condense_notes(notes) == ["2 runs (aa, bb) have no x events: counted as none",
                                     "other note"]
    assert condense_notes(["run b142 has no y", "run b142 has no y"]) == ["run b142 has no y"]
