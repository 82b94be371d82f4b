"""Ingest that costs nothing twice: `parse` skips an input the dataset holds already.

The oracle of what was decoded is the decoder's own log (KMEMSCOPE_TEST_DECODE_LOG: every
decode appends its input, in whichever process it ran), never a time; the oracle of what the
dataset holds is the runs' ids recomputed here from each trace.dat (sha256, first 16 hex
digits) and `verify`.
"""
import hashlib
import os
import re
import shutil

import pytest

import requirements
from conftest import EXAMPLES
from kmrun import kmemscope, popen

AB = EXAMPLES / "ab-defrag-mode"
# Ten committed bundles, then one new one.
TEN = [AB / d for d in sorted(os.listdir(AB))] if AB.is_dir() else []
TEN += [EXAMPLES / "kmem-compaction", EXAMPLES / "thp-faults"]
NEW = EXAMPLES / "memory-pressure"
SKIPPED = re.compile(r"^(\S+): already in the dataset \(run ([0-9a-f]{16})\); skipped$")


def run_id_of(bundle):
    return hashlib.sha256((bundle / "trace.dat").read_bytes()).hexdigest()[:16]


def runs_of(ds):
    return sorted(p.name.split("=", 1)[1] for p in (ds / "runs").iterdir())


def decoded(log):
    return sorted(log.read_text().splitlines()) if log.exists() else []


@pytest.fixture()
def bundles(tmp_path, monkeypatch):
    """A folder of copies of the ten bundles (tmp_path/bundles/NN-name), and the decode log."""
    if len(TEN) != 10 or not NEW.is_dir():
        requirements.skip("setup", f"the committed examples under {EXAMPLES} are missing")
    folder = tmp_path / "bundles"
    for i, bundle in enumerate(TEN):
        shutil.copytree(bundle, folder / f"{i:02d}-{bundle.name}")
    log = tmp_path / "decoded.log"
    monkeypatch.setenv("KMEMSCOPE_TEST_DECODE_LOG", str(log))
    return folder, log


def test_a_folder_of_ten_committed_bundles_and_a_new_one_decodes_only_the_new_one(
        bundles, tmp_path):
    folder, log = bundles
    ds = tmp_path / "ds"
    first = kmemscope("parse", folder, "-o", ds)
    assert decoded(log) == sorted(str(p) for p in folder.iterdir())
    assert "added 10, skipped 0, refused 0" in first.stderr
    shutil.copytree(NEW, folder / "10-new")
    log.unlink()
    again = kmemscope("parse", folder, "-o", ds)
    assert decoded(log) == [str(folder / "10-new")]
    said = [SKIPPED.match(line) for line in again.stderr.splitlines()]
    skipped = {m.group(1): m.group(2) for m in said if m}
    assert skipped == {str(folder / p.name): run_id_of(folder / p.name)
                       for p in folder.iterdir() if p.name != "10-new"}
    assert len([m for m in said if m]) == 10               # once per input
    assert again.stderr.strip().splitlines()[-1] == "kmemscope: added 1, skipped 10, refused 0"
    assert runs_of(ds) == sorted(run_id_of(p) for p in folder.iterdir())
    assert kmemscope("verify", ds).returncode == 0


def test_other_labels_or_other_samples_parse_again_and_force_parses_the_same(bundles, tmp_path):
    """The key is the input's content and options: a new label or a changed sample file is
    decoded and replaces the run (one run per trace still); --force decodes the same again."""
    folder, log = bundles
    ds = tmp_path / "ds"
    bundle = folder / "08-kmem-compaction"
    kmemscope("parse", bundle, "-o", ds)
    assert "already in the dataset" in kmemscope("parse", bundle, "-o", ds).stderr
    relabelled = kmemscope("parse", bundle, "-o", ds, "--label", "kernel=other")
    assert "replaced" in relabelled.stderr
    vmstat = bundle / "procfs" / "vmstat"
    vmstat.write_text(vmstat.read_text() + "\n")
    assert "replaced" in kmemscope("parse", bundle, "-o", ds, "--label", "kernel=other").stderr
    assert "replaced" in kmemscope("parse", bundle, "-o", ds, "--label", "kernel=other",
                                   "--force").stderr
    assert decoded(log) == [str(bundle)] * 4
    assert runs_of(ds) == [run_id_of(bundle)]
    label = kmemscope("sql", ds, "SELECT labels['kernel'] FROM runs", "--format", "csv").stdout
    assert "other" in label
    assert kmemscope("verify", ds).returncode == 0


def test_the_python_api_says_skipped(bundles, tmp_path):
    import kmemscope as api

    folder, log = bundles
    ds = tmp_path / "ds"
    [first] = api.parse(folder / "09-thp-faults", ds)
    [second] = api.parse(folder / "09-thp-faults", ds)
    assert not first.skipped and second.skipped and second.run_id == first.run_id
    [forced] = api.parse(folder / "09-thp-faults", ds, force=True)
    assert forced.replaced and not forced.skipped
    assert len(decoded(log)) == 2


def test_two_ingesters_at_once_decode_each_trace_once(bundles, tmp_path):
    """Two `parse FOLDER` processes started together on the same four bundles, their decoders
    slowed so that they overlap: each trace is decoded once in all, every run is there once,
    and the two say added and skipped four times between them."""
    folder, log = bundles
    for extra in sorted(folder.iterdir())[4:]:
        shutil.rmtree(extra)
    ds = tmp_path / "ds"
    env = {**os.environ, "KMEMSCOPE_TEST_PAUSE_DECODER_S": "0.02"}
    procs = [popen("parse", folder, "-o", ds, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert decoded(log) == sorted(str(p) for p in folder.iterdir())
    totals = [re.search(r"added (\d+), skipped (\d+), refused 0", err) for _, err in outs]
    assert all(totals), outs
    assert sum(int(m.group(1)) for m in totals) == 4
    assert sum(int(m.group(2)) for m in totals) == 4
    assert runs_of(ds) == sorted(run_id_of(p) for p in folder.iterdir())
    assert not [p for p in ds.iterdir() if p.name.startswith(".parse-")]
    assert kmemscope("verify", ds).returncode == 0


def test_a_folder_without_bundles_is_refused_in_one_line(tmp_path):
    from kmrun import one_error_line

    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README").write_text("not a bundle\n")
    line = one_error_line(kmemscope("parse", tmp_path / "empty", "-o", tmp_path / "ds",
                                    check=False))
    assert "has no trace.dat" in line
    assert not (tmp_path / "ds").exists()
