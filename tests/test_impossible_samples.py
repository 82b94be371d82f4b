"""A bundle whose cost samples no kernel writes (a kernel thread's CPU time of 2^63-1 ticks,
an mTHP counter that leaps beyond 64 bits) makes that run's affected rows n/a with a note;
the command succeeds and every other value stands.

The dataset: two committed example bundles (examples/ab-defrag-mode-cost), one edited here
after copying. Oracle: each value recounted in plain Python from the bundles' procfs
sample text.
"""
import shutil

import pytest

import requirements
from conftest import EXAMPLES
from kmrun import kmemscope, rows_of

COST = EXAMPLES / "ab-defrag-mode-cost"
BIG = 2**63 - 1


def _samples(path):
    """[{key: [numbers]}] of a procfs sample file: each sample's lines, keyed by all but
    their last two (kthreads: utime, stime) or last one (mthp: value) tokens."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("#kmemscope-sample"):
            out.append({})
        elif line.strip():
            parts = line.split()
            out[-1][" ".join(parts[:-2 if path.name == "kthreads" else -1])] = \
                [int(p) for p in parts[-2 if path.name == "kthreads" else -1:]]
    return out


def _cpu_s(path, thread):
    samples = [s[thread] for s in _samples(path) if thread in s]
    return (sum(samples[-1]) - sum(samples[0])) / 100      # USER_HZ of the manifest: 100


def _edit_last(path, key, new):
    """Replace the line of `key` in the file's last sample with `key new`."""
    text = path.read_text()
    at = text.rindex(f"\n{key} ") + 1
    end = text.index("\n", at)
    path.write_text(text[:at] + f"{key} {new}" + text[end:])


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    for run in ("run1-defrag0", "run1-defrag1"):
        if not (COST / run).is_dir():
            requirements.skip("setup", f"the committed example {COST / run} is missing")
        shutil.copytree(COST / run, root / run)
    bad = root / "run1-defrag1" / "procfs"
    _edit_last(bad / "kthreads", "45 kswapd0", f"{BIG} {BIG}")
    _edit_last(bad / "mthp", "16 anon_fault_alloc", str(BIG))
    text = (bad / "mthp").read_text()        # first sample: a counter far below zero
    (bad / "mthp").write_text(text.replace("\n16 anon_fault_alloc 0\n",
                                           f"\n16 anon_fault_alloc {-BIG}\n", 1))
    # sizes and counters no kernel names, moving in every sample: left out of compare
    samples = (bad / "mthp").read_text().split("#kmemscope-sample")
    (bad / "mthp").write_text("#kmemscope-sample".join(
        [samples[0]] + [body + f"123456789 anon_fault_alloc {i}\n16 2nd_counter {i}\n"
                        for i, body in enumerate(samples[1:])]))
    kmemscope("parse", "-q", root / "run1-defrag0", root / "run1-defrag1", "-o", root / "ds")
    return root


def test_compare_succeeds_and_says_which_run_is_impossible(hostile):
    proc = kmemscope("compare", hostile / "ds", "--by", "kernel", "--format", "csv")
    assert "impossible" not in proc.stdout          # csv holds rows only; notes go to stderr
    notes = [line for line in proc.stderr.splitlines() if "impossible" in line]
    assert any(line.startswith("kmemscope: note: cost.kswapd_cpu_s: n/a for 1 run")
               for line in notes), notes
    assert any("mthp.16kB.anon_fault_alloc: n/a for 1 run" in line for line in notes), notes


def test_the_impossible_value_is_null_and_every_other_value_stands(hostile):
    rows = {r["labels"]["kernel"]: r for r in
            rows_of(kmemscope("query", "cost", hostile / "ds", "--format", "json"))}
    good, bad = hostile / "run1-defrag0" / "procfs", hostile / "run1-defrag1" / "procfs"
    assert rows["defrag1"]["kswapd_cpu_s"] is None
    assert rows["defrag1"]["impossible"] == "kswapd_cpu_s"
    assert rows["defrag1"]["kcompactd_cpu_s"] == pytest.approx(_cpu_s(bad / "kthreads", "36 kcompactd0"))
    assert rows["defrag0"]["impossible"] is None
    for column, thread in (("kswapd_cpu_s", "45 kswapd0"), ("kcompactd_cpu_s", "36 kcompactd0")):
        assert rows["defrag0"][column] == pytest.approx(_cpu_s(good / "kthreads", thread))
    mthp = rows_of(kmemscope("query", "cost.mthp", hostile / "ds", "--format", "json"))
    for r in mthp:
        if r["size_kb"] != 16 or r["counter"] != "anon_fault_alloc":
            continue
        procfs = good if r["labels"]["kernel"] == "defrag0" else bad
        values = [s[f"16 {r['counter']}"][0] for s in _samples(procfs / "mthp")]
        expected = values[-1] - values[0]
        assert r["delta"] == (expected if -BIG <= expected <= BIG else None)
    kthreads = rows_of(kmemscope("query", "cost.kthreads", hostile / "ds", "--format", "json"))
    assert [r["cpu_s"] for r in kthreads if r["labels"]["kernel"] == "defrag1"
            and r["comm"] == "kswapd0"] == [None]


def test_every_mthp_row_compare_lists_can_be_asked_for_by_name(hostile):
    proc = kmemscope("compare", hostile / "ds", "--by", "kernel", "--metrics", "mthp",
                     "--format", "csv")
    names = sorted({line.split(",")[1].strip('"') for line in proc.stdout.splitlines()
                    if line.startswith('"kernel","mthp.')})
    assert names and not any("123456789" in n or ".2nd_counter" in n for n in names), names
    assert "2 size and counter pairs that no kernel names left out" in proc.stdout + proc.stderr
    asked = kmemscope("compare", hostile / "ds", "--by", "kernel", "--metrics", ",".join(names),
                      "--format", "csv", check=False)
    assert asked.returncode == 0, asked.stderr
