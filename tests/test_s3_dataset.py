"""Datasets on an S3-compatible object store, read by `kmemscope info`, `query` and `compare`.

A moto S3 server runs on a free loopback port for this module. Two example
bundles are parsed into a local dataset, and the directory tree is copied into
a bucket as a user would (`aws s3 sync`). The oracles: the same command over
the local directory (byte for byte), and the row counts that `kmemscope.parse`
reported when it wrote the runs. Errors (no bucket, no credentials, no server,
a bad URL) must be one line and exit 1.
"""
import json
import os
from pathlib import Path

import pytest

import requirements
import kmrun
from s3_server import AWS_VARS, ISOLATE, free_port, moto_s3
from conftest import EXAMPLES, SPARK_TEST_CONF, skip_spark_test, skip_without_spark

try:
    import s3fs  # noqa: F401
    import moto.server  # noqa: F401
except ImportError as exc:
    requirements.skip("setup", f"{exc.name} is not installed (pip install 'kmemscope[test]')",
                      allow_module_level=True)

import kmemscope  # noqa: E402
from kmemscope.dataset.handle import DatasetRef

BUCKET = "kmemscope-test"
# hadoop-aws and its dependencies, fetched from Maven Central by the first Spark run on this
# machine and resolved from here by every later one (not a temporary directory).
IVY_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kmemscope-tests" / "ivy"
def _env(**over):
    env = {k: v for k, v in os.environ.items() if k not in AWS_VARS}
    env.update(ISOLATE)
    env.update(over)
    return env


def cli(env, *args, check=True):
    return kmrun.kmemscope(*args, check=check, env=env)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on a free loopback port; yields the environment that reaches it.

    This process's environment points at it too while the module runs (a Spark
    JVM started here inherits it), and is put back afterwards.
    """
    with moto_s3() as env:
        yield _env(**env)


@pytest.fixture(scope="module")
def datasets(s3, tmp_path_factory):
    """(local dataset, its s3:// URL, {run_id: {table: rows}} as parse reported them)."""
    import s3fs

    local = tmp_path_factory.mktemp("s3src") / "ds"
    counts = {}
    for bundle, kernel in (("kmem-compaction", "a"), ("thp-faults", "b")):
        for summary in kmemscope.parse([EXAMPLES / bundle], local, labels={"kernel": kernel}):
            counts[summary.run_id] = dict(summary.tables)
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.mkdir(BUCKET)
    fs.put(str(local), f"{BUCKET}/fleet/ds", recursive=True)
    return local, f"s3://{BUCKET}/fleet/ds", counts


def _bucket_keys():
    import s3fs
    return sorted(s3fs.S3FileSystem(skip_instance_cache=True).find(BUCKET))


def test_info_lists_the_runs_and_rows_of_the_local_dataset(s3, datasets):
    local, url, counts = datasets
    remote = json.loads(cli(s3, "info", url, "--format", "json").stdout)
    here = json.loads(cli(s3, "info", local, "--format", "json").stdout)
    assert remote == here
    assert sorted(r["run_id"] for r in remote["runs"]) == sorted(counts)
    got = {(r["run_id"], r["table"]): r["rows"] for r in remote["rows_per_run"]}
    want = {(run, table): rows for run, tables in counts.items() for table, rows in tables.items()}
    assert got == want
    assert got[(next(r for r in counts if counts[r]["mm_page_alloc"] == 170393),
                "mm_page_alloc")] == 170393
    # the table printout too, byte for byte
    assert cli(s3, "info", url).stdout == cli(s3, "info", local).stdout


def test_query_on_duckdb_equals_the_local_query_and_writes_nothing(s3, datasets, tmp_path):
    local, url, _ = datasets
    before = _bucket_keys()
    remote = cli(s3, "query", "hot_pfns", url, "--format", "csv")
    # Another copy of the local dataset: the first query there writes _derived into it.
    here = cli(s3, "query", "hot_pfns", local, "--format", "csv")
    assert remote.stdout == here.stdout
    assert remote.stdout.count("\n") > 10
    assert _bucket_keys() == before
    # the free/alloc pairs were computed into a private directory, gone at exit
    line = next(l for l in remote.stderr.splitlines() if "cached under" in l)
    private = line.rsplit("cached under ", 1)[1].rstrip(")")
    assert "kmemscope-derived-" in private and not Path(private).exists()
    one = cli(s3, "query", "hot_pfns", url, "--run", "017c", "--format", "csv")
    assert one.stdout == cli(s3, "query", "hot_pfns", local, "--run", "017c",
                             "--format", "csv").stdout


def test_derived_tables_copied_with_the_dataset_are_used(s3, datasets):
    import s3fs

    local, _, _ = datasets
    cli(s3, "query", "hot_pfns", local, "--format", "csv")      # builds local/_derived
    assert (local / "_derived" / "page_pairs").is_dir()
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.put(str(local), f"{BUCKET}/with-derived/ds", recursive=True)
    url = f"s3://{BUCKET}/with-derived/ds"
    remote = cli(s3, "query", "hot_pfns", url, "--format", "csv")
    assert "pairing frees" not in remote.stderr
    assert remote.stdout == cli(s3, "query", "hot_pfns", local, "--format", "csv").stdout


@pytest.mark.slow   # four compares (~2 s of CPU each); info, query and sql over s3 stay in make check
def test_compare_by_kernel_equals_the_local_compare(s3, datasets):
    local, url, _ = datasets
    remote = cli(s3, "compare", url, "--by", "kernel", "--format", "json")
    here = cli(s3, "compare", local, "--by", "kernel", "--format", "json")
    assert json.loads(remote.stdout) == json.loads(here.stdout)
    assert {r["side"] for r in json.loads(remote.stdout)["rows"]} == {"a", "b"}
    assert cli(s3, "compare", url, "--by", "kernel").stdout == \
        cli(s3, "compare", local, "--by", "kernel").stdout


def test_sql_reads_the_bucket_and_read_only_stays_under_the_prefix(s3, datasets):
    local, url, counts = datasets
    query = "SELECT run_id, count(*) AS allocs FROM mm_page_alloc GROUP BY 1 ORDER BY 1"
    remote = kmrun.rows_of(cli(s3, "sql", "--read-only", url, query, "--format", "json"))
    assert {r["run_id"]: r["allocs"] for r in remote} == \
        {run: tables["mm_page_alloc"] for run, tables in counts.items()}
    # a sibling prefix that shares the name's start, and a local file, are refused
    for other in (f"s3://{BUCKET}/fleet/ds-other/x.parquet", str(local / "runs")):
        proc = cli(s3, "sql", "--read-only", url, f"SELECT * FROM read_parquet('{other}/*')",
                   check=False)
        assert "disabled by configuration" in _one_error_line(proc)


def _layout_files(local):
    """{table: {run_id: {file name}}} of a local dataset, walked by hand: what an s3 listing
    of its copy must find (folders starting with '_' or '.' are not tables)."""
    out = {}
    for table in local.iterdir():
        if not table.is_dir() or table.name.startswith(("_", ".")):
            continue
        for run in table.iterdir():
            if run.is_dir() and run.name.startswith("run_id="):
                names = {f.name for f in run.iterdir() if f.name.endswith(".parquet")}
                if names:
                    out.setdefault(table.name, {})[run.name[len("run_id="):]] = names
    return out


# ListObjectsV2 answers at most 1000 keys a page; a dataset of a few files is made to span
# many pages by asking for pages this small (moto honours MaxKeys as S3 does).
PAGE_KEYS = 5


def test_a_listing_over_many_pages_finds_every_file(s3, datasets):
    """kmemscope lists an s3 dataset through every page of ListObjectsV2, not the first."""
    import s3fs
    from kmemscope.dataset import reader, storage

    local, _, _ = datasets
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.put(str(local), f"{BUCKET}/paged/ds", recursive=True)
    url = f"s3://{BUCKET}/paged/ds"
    expected = _layout_files(local)
    n_files = sum(len(names) for runs in expected.values() for names in runs.values())
    assert n_files > 3 * PAGE_KEYS

    pages = []

    def small_pages(params, **_):
        params["MaxKeys"] = PAGE_KEYS

    def count_page(parsed, **_):
        pages.append(len(parsed.get("Contents", [])))

    events = storage.filesystem().s3.meta.events
    events.register("before-parameter-build.s3.ListObjectsV2", small_pages)
    events.register("after-call.s3.ListObjectsV2", count_page)
    try:
        listed = storage.list_tables(url)
        runs = reader.table_runs(DatasetRef.of(url))
    finally:
        events.unregister("before-parameter-build.s3.ListObjectsV2", small_pages)
        events.unregister("after-call.s3.ListObjectsV2", count_page)
    # The listing really went page by page, each page no larger than asked.
    assert len(pages) > n_files // PAGE_KEYS and max(pages) <= PAGE_KEYS
    prefix = f"{url}/"
    got = {table: {run: {f[len(prefix):].split("/")[-1] for f in files}
                   for run, files in table_runs.items()}
           for table, table_runs in listed.items()}
    assert got == expected
    assert all(f.startswith(f"{prefix}{table}/run_id={run}/")
               for table, table_runs in listed.items()
               for run, files in table_runs.items() for f in files)
    assert {t: set(r) for t, r in runs.items()} == {t: set(r) for t, r in expected.items()}


def _one_error_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("kmemscope: error: "), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    return lines[0]


# slow: query's errors come from the storage layer info's do (~6 s, a refused connection
# retried); make test runs both
@pytest.mark.parametrize("verb", [("info",), pytest.param(("query", "hot_pfns"), marks=pytest.mark.slow)])
def test_errors_are_one_line(s3, datasets, verb):
    _, url, _ = datasets
    no_bucket = _one_error_line(cli(s3, *verb, "s3://no-such-bucket/ds", check=False))
    assert "no bucket no-such-bucket" in no_bucket
    no_prefix = _one_error_line(cli(s3, *verb, f"s3://{BUCKET}/nothing/here", check=False))
    assert "does not exist" in no_prefix
    nocreds = {k: v for k, v in s3.items()
               if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    assert "credentials" in _one_error_line(cli(nocreds, *verb, url, check=False))
    down = dict(s3, AWS_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}")
    assert "Could not connect" in _one_error_line(cli(down, *verb, url, check=False))
    for bad in ("s3://Bad_Bucket/ds", f"s3://{BUCKET}/../ds", f"s3://{BUCKET}/ds/*",
                f"s3://{BUCKET}/a//b", "s3://ab/ds"):
        assert "s3://" in _one_error_line(cli(s3, *verb, bad, check=False))


def test_url_validation():
    from kmemscope.common.errors import DatasetError
    from kmemscope.dataset import storage

    assert storage.split("s3://my.bucket-1/a/b/ds/") == ("my.bucket-1", "a/b/ds")
    assert storage.split("s3a://bkt") == ("bkt", "")
    assert storage.spark_path("s3://bkt/ds/t/run_id=1/p.parquet") == "s3a://bkt/ds/t/run_id=1/p.parquet"
    assert storage.spark_path(Path("/x/y")) == "/x/y"
    for bad in ("s3://UPPER/x", "s3://a..b/x", "s3://-bkt/x", "s3://bkt/x/../y",
                "s3://bkt/x?y", "s3://bkt/x#y", "s3://bkt/x\ny", "s3://bkt/x%2e", "gs://bkt/x"):
        with pytest.raises(DatasetError):
            storage.split(bad)
    conf = storage.spark_conf({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
                               "AWS_ACCESS_KEY_ID": "secret-id"})
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert "secret-id" not in json.dumps(conf)        # credentials stay in the environment


def test_spark_gets_the_hadoop_aws_that_matches_pysparks_hadoop():
    from kmemscope.dataset import storage

    skip_without_spark()
    import re
    import zipfile

    import pyspark
    # Hadoop's own build record, inside the client jar pyspark ships (not its file name).
    versions = set()
    for jar in (Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"):
        info = zipfile.ZipFile(jar).read("common-version-info.properties").decode()
        versions.add(re.search(r"^version=(\S+)$", info, re.M).group(1))
    assert len(versions) == 1, versions
    assert storage.spark_conf({})["spark.jars.packages"] == f"org.apache.hadoop:hadoop-aws:{versions.pop()}"


def _spark_cli(s3, *args):
    """kmemscope ... --engine spark in its own process: hadoop-aws can only join a JVM at its
    start, and the pytest run's shared Spark session started without it."""
    skip_without_spark()
    conf = {**SPARK_TEST_CONF, "spark.jars.ivy": str(IVY_CACHE)}
    proc = cli(s3, *args, "--engine", "spark", "--spark-master", "local[2]",
               *[x for k, v in conf.items() for x in ("--spark-conf", f"{k}={v}")],
               check=False)
    if proc.returncode and ("hadoop-aws" in proc.stderr or "could not start Spark" in proc.stderr):
        skip_spark_test(f"Spark with hadoop-aws did not start (Maven Central unreachable?): "
                        f"{proc.stderr.strip()[:300]}")
    assert proc.returncode == 0, proc.stderr
    return proc


def _csv_dicts(text):
    import csv
    import io
    return [{k: _num(v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(text))]


def _num(text):
    try:
        return float(f"{float(text):.9g}")
    except ValueError:
        return text


@pytest.mark.spark
def test_query_and_compare_on_spark_equal_duckdb_over_the_local_copy(s3, datasets):
    local, url, _ = datasets
    remote = _spark_cli(s3, "query", "hot_pfns", url, "--format", "csv")
    here = cli(s3, "query", "hot_pfns", local, "--format", "csv")
    assert _csv_dicts(remote.stdout) == _csv_dicts(here.stdout)
    assert len(_csv_dicts(here.stdout)) > 10
    # compare runs the summary analysis over the bucket on Spark
    remote = _spark_cli(s3, "compare", url, "--by", "kernel", "--format", "json")
    here = cli(s3, "compare", local, "--by", "kernel", "--format", "json")
    assert _rows_of(json.loads(remote.stdout)["rows"]) == _rows_of(json.loads(here.stdout)["rows"])
    assert json.loads(remote.stdout)["notes"] == json.loads(here.stdout)["notes"]
    assert {r["side"] for r in json.loads(remote.stdout)["rows"]} == {"a", "b"}


def _rows(table):
    return _rows_of(table.to_pylist())


def _rows_of(rows):
    """Rows with floats rounded to 9 significant digits (Spark and DuckDB sum in other orders)."""
    return [{k: (float(f"{v:.9g}") if isinstance(v, float) else v) for k, v in row.items()}
            for row in rows]
