"""`kmemscope parse -o s3://...`: runs written into an object store, safe with several ingesters.

A moto S3 server runs on a free loopback port for this module (as in test_s3_dataset.py).
moto checks a conditional PUT and then stores the object in two steps with no lock between;
S3 does both at once. The fixture makes moto's PUT handler one step (a lock around it), so
the server under test keeps S3's promise that one of two `If-None-Match: *` PUTs fails.

The oracles: the same bundles parsed into a local dataset (the shared `examples_dataset`,
or a local parse made here): answers byte for byte, and each run's tables and file names,
which every run listed from the bucket must have whole.
"""
import json
import os
import signal
import time
from pathlib import Path

import pytest

import requirements
import kmrun
from s3_server import moto_s3
from conftest import EXAMPLES

try:
    import s3fs
    import moto.server  # noqa: F401
except ImportError as exc:
    requirements.skip("setup", f"{exc.name} is not installed (pip install 'kmemscope[test]')",
                      allow_module_level=True)

import kmemscope  # noqa: E402
from kmemscope.common.errors import DatasetError  # noqa: E402
from kmemscope.dataset import reader, storage  # noqa: E402
from kmemscope.dataset.handle import DatasetRef  # noqa: E402

BUCKET = "kmemscope-write"
FOUR = [EXAMPLES / "ab-defrag-mode" / f"run{i}-defrag0" for i in range(1, 5)]


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server with S3's atomic conditional PUT, and a bucket; yields the
    environment that reaches it (set in this process too while the module runs)."""
    with moto_s3(atomic_puts=True) as env:
        s3fs.S3FileSystem(skip_instance_cache=True).mkdir(BUCKET)
        yield {**{k: v for k, v in os.environ.items()}, **env}


def _keys(prefix):
    """Every key under s3://BUCKET/prefix, relative to it."""
    found = s3fs.S3FileSystem(skip_instance_cache=True).find(f"{BUCKET}/{prefix}")
    return sorted(k[len(f"{BUCKET}/{prefix}/"):] for k in found)


def _rows_by_run(local):
    """{run_id: {table: rows}} of a local dataset's committed runs, from their files' footers
    (walked by hand, not through kmemscope's reader)."""
    import pyarrow.parquet as pq

    out: dict = {}
    for table in Path(local).iterdir():
        if not table.is_dir() or table.name.startswith(("_", ".")):
            continue
        for run in table.iterdir():
            files = [f for f in run.iterdir() if f.name.endswith(".parquet")]
            if run.name.startswith("run_id=") and files:
                out.setdefault(run.name[len("run_id="):], {})[table.name] = sum(
                    pq.ParquetFile(f).metadata.num_rows for f in files)
    return out


def _listed(url):
    """{run_id: {table: {file names}}} as a reader lists the s3 dataset; {} while it holds
    no whole run."""
    try:
        runs = reader.table_runs(DatasetRef.of(url))
    except DatasetError as exc:
        assert "holds no tables" in str(exc) or "does not exist" in str(exc), exc
        return {}
    out: dict = {}
    for table, by_run in runs.items():
        for run, files in by_run.items():
            out.setdefault(run, {})[table] = {str(f).rsplit("/", 1)[1] for f in files}
    return out


_records: dict = {}


def _record(prefix, run):
    """{table: {file name: bytes}} that run `run`'s record in the bucket names (its
    runs/run_id=<id>/_files.json, written by the parse that decoded it), with its rows
    per table: ({table: {name: bytes}}, {table: rows})."""
    key = f"{BUCKET}/{prefix}/runs/run_id={run}/_files.json"
    if key not in _records:
        doc = json.loads(s3fs.S3FileSystem(skip_instance_cache=True).cat(key))
        files: dict = {}
        rows: dict = {}
        for path, facts in doc["files"].items():
            table, name = path.split("/")
            files.setdefault(table, {})[name] = facts["bytes"]
            rows[table] = rows.get(table, 0) + facts["rows"]
        _records[key] = files, rows
    return _records[key]


def _check_whole(prefix, listed, oracle):
    """Every run listed has the tables and rows of the same trace parsed locally, and the
    files its record names: a whole run."""
    for run, tables in listed.items():
        files, rows = _record(prefix, run)
        assert set(tables) == set(oracle[run]), f"run {run} listed with {sorted(tables)}"
        assert tables == {t: set(names) for t, names in files.items()}, run
        assert rows == oracle[run], run


def _expected_keys(prefix, runs):
    """The keys of `runs` under the prefix: their records' files, and the records."""
    return {f"{t}/run_id={r}/{n}" for r in runs for t, names in _record(prefix, r)[0].items()
            for n in names} | {f"runs/run_id={r}/_files.json" for r in runs}


@pytest.fixture(scope="module")
def four_local(tmp_path_factory):
    """The four bundles of the concurrency tests parsed into a local dataset: the oracle."""
    local = tmp_path_factory.mktemp("s3w-local") / "ds"
    kmemscope.parse(FOUR, local)
    return _rows_by_run(local)


@pytest.fixture(scope="module")
def answers(s3):
    """The two examples of `examples_dataset` parsed into the bucket with the same labels."""
    url = f"s3://{BUCKET}/answers/ds"
    for bundle, kernel in (("kmem-compaction", "a"), ("memory-pressure", "b")):
        kmrun.kmemscope("parse", "-q", EXAMPLES / bundle, "-o", url, "--label", f"kernel={kernel}")
    return url


def test_parse_into_s3_answers_as_the_local_parse(s3, answers, examples_dataset):
    url, local = answers, examples_dataset
    oracle = _rows_by_run(local)
    listed = _listed(url)
    assert set(listed) == set(oracle)
    _check_whole("answers/ds", listed, oracle)
    assert set(_keys("answers/ds")) == _expected_keys("answers/ds", oracle) | {"_kmemscope.json"}
    for args in (("query", "hot_pfns", "{}", "--format", "csv"),
                 ("info", "{}", "--format", "json")):
        remote = kmrun.kmemscope(*[url if a == "{}" else a for a in args])
        here = kmrun.kmemscope(*[local if a == "{}" else a for a in args])
        assert remote.stdout == here.stdout, args
    query = "SELECT run_id, count(*) AS n, sum(pfn) AS s FROM mm_page_alloc GROUP BY 1 ORDER BY 1"
    remote = kmrun.rows_of(kmrun.kmemscope("sql", url, query, "--format", "json"))
    assert remote == kmrun.rows_of(kmrun.kmemscope("sql", local, query, "--format", "json"))
    assert remote and remote[0]["n"] > 1000
    # the format file states the format a local parse writes
    assert json.loads(s3fs.S3FileSystem(skip_instance_cache=True).cat(
        f"{BUCKET}/answers/ds/_kmemscope.json"))["format"] == \
        json.loads((local / "_kmemscope.json").read_text())["format"]


@pytest.mark.slow   # two compares (~2 s of CPU each, as test_s3_dataset.py's); make test runs it
def test_compare_of_the_s3_parse_equals_the_local_compare(s3, answers, examples_dataset):
    remote = kmrun.kmemscope("compare", answers, "--by", "kernel", "--format", "json")
    here = kmrun.kmemscope("compare", examples_dataset, "--by", "kernel", "--format", "json")
    assert remote.stdout == here.stdout
    assert {r["side"] for r in json.loads(remote.stdout)["rows"]} == {"a", "b"}


def test_a_committed_run_is_skipped_and_force_replaces_it(s3, tmp_path):
    url = f"s3://{BUCKET}/again/ds"
    bundle = EXAMPLES / "thp-faults"
    [first] = kmemscope.parse(bundle, url)
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    before = fs.find(f"{BUCKET}/again/ds", detail=True)
    again = kmrun.kmemscope("parse", bundle, "-o", url)
    assert f"already in the dataset (run {first.run_id})" in again.stderr
    assert fs.find(f"{BUCKET}/again/ds", detail=True) == before        # nothing written
    [skipped] = kmemscope.parse(bundle, url)
    assert skipped.skipped and skipped.run_id == first.run_id
    # a leftover part of a dead upload (another --threads count) must not join the run
    fs.pipe(f"{BUCKET}/again/ds/mm_page_alloc/run_id={first.run_id}/part-97.parquet", b"junk")
    forced = kmrun.kmemscope("parse", bundle, "-o", url, "--force")
    assert f"run {first.run_id} replaced" in forced.stderr
    after = fs.find(f"{BUCKET}/again/ds", detail=True)
    # the run's keys are those its new record names, and the stray part is gone (not the
    # first parse's names: how many part files a table gets follows the decoder's threads)
    prefix = f"{BUCKET}/again/ds/"
    assert {k[len(prefix):] for k in after} == \
        _expected_keys("again/ds", [first.run_id]) | {"_kmemscope.json"}
    assert not any(k.endswith("/part-97.parquet") for k in after)
    runs_key = f"{BUCKET}/again/ds/runs/run_id={first.run_id}/part-0.parquet"
    assert after[runs_key]["LastModified"] >= before[runs_key]["LastModified"]
    assert not any("_ingest" in k for k in after)          # the claim was released


def test_two_ingesters_add_every_run_once_and_readers_see_whole_runs(s3, four_local):
    """Two processes ingest the same four bundles; a reader lists the dataset meanwhile."""
    url = f"s3://{BUCKET}/two/ds"
    # Each run's tables stay in the bucket a moment before its runs partition shows it.
    env = dict(s3, KMEMSCOPE_TEST_S3_PAUSE_BEFORE_RUNS_S="0.3")
    procs = [kmrun.popen("parse", *FOUR, "-o", url, env=env) for _ in range(2)]
    seen, hidden = [], 0
    try:
        while any(p.poll() is None for p in procs):
            raw = set(_keys("two/ds"))
            listed = _listed(url)
            _check_whole("two/ds", listed, four_local)
            seen.append(len(listed))
            hidden += any(k.startswith("mm_page_alloc/run_id=")
                          and f"runs/run_id={k.split('/')[1][7:]}/part-0.parquet" not in raw
                          for k in raw)
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    stderr = "".join(err for _out, err in outs)
    # each trace decoded once: one ingester added it, the other found it in the dataset
    assert stderr.count(" added: ") == 4, stderr
    assert stderr.count(" already in the dataset") == 4, stderr
    listed = _listed(url)
    assert set(listed) == set(four_local)
    _check_whole("two/ds", listed, four_local)
    assert set(_keys("two/ds")) == _expected_keys("two/ds", four_local) | {"_kmemscope.json"}
    assert hidden, "no listing caught a run's tables before its runs partition"
    assert any(0 < n < 4 for n in seen), seen


def test_a_killed_ingester_leaves_no_half_run_and_the_next_one_redoes_it(s3, four_local,
                                                                          monkeypatch):
    url = f"s3://{BUCKET}/killed/ds"
    one, two = FOUR[0], FOUR[1]
    [shown] = kmemscope.parse(one, url)
    env = dict(s3, KMEMSCOPE_TEST_S3_PAUSE_BEFORE_RUNS_S="60", KMEMSCOPE_S3_CLAIM_TTL_S="2")
    proc = kmrun.popen("parse", two, "-o", url, env=env)
    try:
        deadline = time.monotonic() + 180      # a loaded host uploads slowly
        while True:         # until every table of the run is uploaded, its runs partition not
            keys = set(_keys("killed/ds"))
            tables = {k for k in keys if k.startswith("mm_page_alloc/")
                      and shown.run_id not in k}
            if tables and any(k.startswith("_ingest/") for k in keys):
                run = next(iter(tables)).split("/")[1][len("run_id="):]
                uploaded = {k.split("/")[0] for k in keys if f"run_id={run}/" in k}
                if uploaded == set(four_local[run]) - {"runs"}:
                    break
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert set(_listed(url)) == {shown.run_id}            # the half run is not seen
    # the dead ingester's claim goes stale after 2 s; the next ingester takes it over
    monkeypatch.setenv("KMEMSCOPE_S3_CLAIM_TTL_S", "2")
    redo = kmrun.kmemscope("parse", two, "-o", url)
    assert f"run {run} added" in redo.stderr
    listed = _listed(url)
    assert set(listed) == {shown.run_id, run}
    _check_whole("killed/ds", listed, four_local)
    # the dead ingester's files are gone or overwritten: the bucket holds the two runs only
    assert set(_keys("killed/ds")) == _expected_keys("killed/ds", listed) | {"_kmemscope.json"}


def test_a_reader_never_lists_a_run_replaced_while_it_lists(s3):
    """A replacement deletes the run's runs partition first: a listing taken across it
    leaves the run out rather than show part of its old files."""
    url = f"s3://{BUCKET}/replaced/ds"
    [run] = kmemscope.parse(EXAMPLES / "thp-faults", url)
    assert run.run_id in _listed(url)
    import boto3

    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    events = storage.filesystem().s3.meta.events
    prefixes = []

    def note_prefix(params, **_):
        prefixes.append(params.get("Prefix", ""))

    def replace_between(**_):       # after the first listing of runs/: the run is replaced
        if prefixes[-1].endswith("/runs/") and prefixes.count(prefixes[-1]) == 1:
            for table in ("runs", "mm_page_alloc"):      # boto3: s3fs's loop is busy here
                client.delete_object(Bucket=BUCKET, Key=f"replaced/ds/{table}/run_id="
                                                        f"{run.run_id}/part-0.parquet")

    events.register("before-parameter-build.s3.ListObjectsV2", note_prefix)
    events.register("after-call.s3.ListObjectsV2", replace_between)
    try:
        with pytest.raises(DatasetError, match="holds no tables"):
            reader.table_runs(DatasetRef.of(url))
    finally:
        events.unregister("before-parameter-build.s3.ListObjectsV2", note_prefix)
        events.unregister("after-call.s3.ListObjectsV2", replace_between)
    # the tables the replacement had not reached were listed: only the guard left them out
    assert any(k.startswith(f"vmstat/run_id={run.run_id}/") for k in _keys("replaced/ds"))
    assert prefixes.count("replaced/ds/runs/") == 2       # before and after the listing


def test_a_bad_url_or_missing_bucket_is_one_line(s3):
    before = set(_keys(""))
    for bad in ("s3://Bad_Bucket/ds", f"s3://{BUCKET}/../ds", f"s3://{BUCKET}/ds/*",
                f"s3://{BUCKET}/a//b", f"s3://{BUCKET}/a\tb", "s3://no-such-bucket-here/ds"):
        proc = kmrun.kmemscope("parse", EXAMPLES / "thp-faults", "-o", bad, check=False)
        line = kmrun.one_error_line(proc)
        assert "s3://" in line, bad
        if "no-such" in bad:
            assert "no bucket no-such-bucket-here" in line
    assert set(_keys("")) == before                             # nothing written
    assert not (Path(kmrun.PROJECT_ROOT) / "s3:").exists()     # no local folder made of it


def test_an_unwritable_bucket_is_one_line_and_leaves_no_claim(s3):
    """Every write refused with AccessDenied, as a bucket policy or read-only credentials do."""
    from types import SimpleNamespace

    url = f"s3://{BUCKET}/denied/ds"

    def deny(**_):
        return (SimpleNamespace(status_code=403, headers={}),
                {"Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                 "ResponseMetadata": {"HTTPStatusCode": 403}})

    events = storage.filesystem().s3.meta.events
    writes = ("PutObject", "DeleteObject", "DeleteObjects", "CreateMultipartUpload")
    for op in writes:
        events.register_first(f"before-call.s3.{op}", deny)
    try:
        proc = kmrun.kmemscope("parse", EXAMPLES / "thp-faults", "-o", url, check=False)
    finally:
        for op in writes:
            events.unregister(f"before-call.s3.{op}", deny)
    assert "access denied" in kmrun.one_error_line(proc)
    assert _keys("denied/ds") == []


def test_a_dataset_of_another_format_is_refused(s3):
    url = f"s3://{BUCKET}/other-format/ds"
    s3fs.S3FileSystem(skip_instance_cache=True).pipe(
        f"{BUCKET}/other-format/ds/_kmemscope.json", b'{"format": 99, "writer": "kmemscope 9"}\n')
    proc = kmrun.kmemscope("parse", EXAMPLES / "thp-faults", "-o", url, check=False)
    assert "format 99" in kmrun.one_error_line(proc)
    assert _keys("other-format/ds") == ["_kmemscope.json"]


def test_a_claim_is_one_ingesters_until_it_goes_stale(s3):
    """The claim protocol itself: If-None-Match gives one holder; a live claim is not taken;
    a stale one is taken over with If-Match on its ETag, after which the old holder's
    If-Match fails and it stops before showing its run."""
    from kmemscope.common.errors import KmemscopeError
    from kmemscope.dataset import s3_commit

    b = s3_commit.Bucket(f"s3://{BUCKET}/claims/ds")
    first = s3_commit.try_claim(b, "00aa00aa00aa00aa", ttl=600)
    assert first is not None
    try:
        assert s3_commit.try_claim(b, "00aa00aa00aa00aa", ttl=600) is None      # live
        first._stop.set()                      # its owner stops renewing it: as if dead
        first._thread.join()
        deadline = time.monotonic() + 30
        taken = None
        while taken is None:                   # stale once older than 1 s by the server's clock
            assert time.monotonic() < deadline
            taken = s3_commit.try_claim(b, "00aa00aa00aa00aa", ttl=1)
            time.sleep(0.1)
        assert taken.etag != first.etag
        with pytest.raises(Exception) as refused:    # a second taker with the stale ETag loses
            b.put("_ingest/00aa00aa00aa00aa", b"{}", IfMatch=first.etag)
        assert s3_commit._precondition_failed(refused.value)
        with pytest.raises(KmemscopeError, match="taken over"):
            first.check()
        first.release()                        # not its claim any more: left in place
        assert _keys("claims/ds") == ["_ingest/00aa00aa00aa00aa"]
        taken.release()
        assert _keys("claims/ds") == []
    finally:
        first._stop.set()
