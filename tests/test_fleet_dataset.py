"""benchmarks/fleet_dataset.py: N re-labelled copies of the three parsed example runs.

The oracle is the source dataset itself: `kmemscope info` must count N runs and
`kmemscope query summary` must give each copy exactly the values of the run it
copies (run_id and labels aside).
"""
import json
import math
import sys

import pytest
from conftest import PROJECT_ROOT
from kmrun import kmemscope, rows_of

sys.path.insert(0, str(PROJECT_ROOT / "benchmarks"))
import fleet_dataset  # noqa: E402


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet") / "source"
    runs = fleet_dataset.parse_sources(out)
    assert len(set(runs)) == 3
    return out, runs


def _summary(dataset):
    proc = kmemscope("query", "summary", dataset, "--format", "json")
    return rows_of(proc)


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@pytest.mark.slow   # five copies of the fleet dataset, each summarised
def test_five_copies(source, tmp_path):
    src, runs = source
    made = fleet_dataset.build(src, tmp_path / "fleet", 5, runs)
    assert [s for _, s in made] == [runs[i % 3] for i in range(5)]
    ids = [r for r, _ in made]
    assert len(set(ids)) == 5 and fleet_dataset.DIGIT_ID in ids
    assert all(len(r) == 16 and int(r, 16) >= 0 for r in ids)
    fmt = src / fleet_dataset.FORMAT_FILE
    assert fmt.is_file()
    assert (tmp_path / "fleet" / fleet_dataset.FORMAT_FILE).read_bytes() == fmt.read_bytes()

    info = json.loads(kmemscope("info", tmp_path / "fleet", "--format", "json").stdout)
    assert sorted(r["run_id"] for r in info["runs"]) == sorted(ids)
    by_id = {r["run_id"]: r for r in info["runs"]}
    for i, (run, src_run) in enumerate(made):
        assert by_id[run]["host"] == f"h{i:03d}"
        assert by_id[run]["labels"] == {"kernel": "a" if i % 2 == 0 else "b",
                                        "host": f"h{i:03d}", "copy_of": src_run}

    want = {row["run_id"]: row for row in _summary(src)}
    got = _summary(tmp_path / "fleet")
    assert len(got) == 5
    assert {row["run_id"] for row in got} == set(ids)
    for row in got:
        orig = want[row["labels"]["copy_of"]]
        assert row.keys() == orig.keys()
        for key in row:
            if key not in ("run_id", "labels"):
                assert _same(row[key], orig[key]), (row["run_id"], key, row[key], orig[key])
