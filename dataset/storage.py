"""Where a dataset lives: a local directory, or an S3 (or S3-compatible) prefix.

    kmemscope query hot_pfns s3://bucket/prefix/ds

A dataset argument with `s3://` (or `s3a://`) is an object-store dataset; any
other argument is a local path and takes none of this module's code paths.
The objects are read with s3fs (pip install 'kmemscope[s3]'), which follows
the AWS SDK's usual configuration: AWS_ENDPOINT_URL (an S3-compatible server),
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_PROFILE,
AWS_REGION / AWS_DEFAULT_REGION, ~/.aws/config.

Files of an s3 dataset are named by their `s3://bucket/key` URL: DuckDB reads
them through the same s3fs filesystem registered on its connection (no DuckDB
extension is needed), Spark through hadoop-aws as `s3a://bucket/key`
(`spark_conf()` gives the session settings). A URL is untrusted text: the
bucket must be a valid S3 bucket name and the key a plain path; listed keys
that DuckDB or Spark would take for a glob pattern are left out. Readers write
nothing to an s3 dataset; `kmemscope parse -o s3://...` writes runs into one
(dataset/s3_commit.py).
"""
import os
import re
import threading

from kmemscope.common.errors import DatasetError

from .safefs import RUN_FOLDER, SAFE_TABLE, is_data_file

SCHEMES = ("s3://", "s3a://")
HADOOP_AWS = "org.apache.hadoop:hadoop-aws"
# S3 bucket naming rules: 3-63 lowercase letters, digits, dots and hyphens.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
# Characters DuckDB, fsspec or Hadoop read as glob patterns, URL parts or escapes.
_UNSAFE = re.compile(r"[*?\[\]{}\\#%\x00-\x1f\x7f]")
S3_HINT = ("check AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) "
           "and the bucket name")
_fs_lock = threading.Lock()
_fs_cache: dict = {}


def is_url(dataset):
    """True when `dataset` names an object-store dataset (s3:// or s3a://)."""
    return isinstance(dataset, str) and dataset.lower().startswith(SCHEMES)


def is_url_file(path):
    return isinstance(path, str) and path.startswith("s3://")


def split(dataset):
    """Validate an s3 dataset URL -> (bucket, key prefix without slashes at the ends)."""
    scheme, _, rest = dataset.partition("://")
    if scheme.lower() not in ("s3", "s3a"):
        raise DatasetError(f"{dataset!r}: only s3:// datasets are supported")
    bucket, _, key = rest.partition("/")
    key = key.strip("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise DatasetError(f"dataset {_shown(dataset)}: {_shown(bucket)} is not a valid S3 "
                           "bucket name", "3-63 lowercase letters, digits, '.' and '-'")
    parts = key.split("/") if key else []
    if any(p in ("", ".", "..") for p in parts) or _UNSAFE.search(key) or not key.isprintable():
        raise DatasetError(f"dataset {_shown(dataset)}: the key prefix must be a plain path",
                           "no empty, '.' or '..' parts, no *?[]{}\\#% or control characters")
    return bucket, key


def _shown(text, limit=80):
    text = "".join(ch if ch.isprintable() else "?" for ch in str(text))
    return text if len(text) <= limit else text[:limit] + "..."


def url(bucket, key):
    """The canonical s3:// URL of `key` in `bucket`."""
    return f"s3://{bucket}/{key}" if key else f"s3://{bucket}"


def filesystem():
    """The s3fs filesystem (one per process), configured from the AWS environment."""
    try:
        import s3fs
    except ImportError:
        raise DatasetError("s3:// datasets need s3fs", "pip install 'kmemscope[s3]'") from None
    with _fs_lock:
        fs = _fs_cache.get("s3")
        if fs is None:
            # Fail in seconds, not minutes, when the endpoint does not answer.
            # botocore reads AWS_DEFAULT_REGION only; AWS_REGION (what SDKs and Spark's
            # settings here read first) must not send requests to us-east-1 instead.
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
            fs = s3fs.S3FileSystem(
                skip_instance_cache=True,
                client_kwargs={"region_name": region} if region else {},
                config_kwargs={"connect_timeout": 10, "read_timeout": 60,
                               "retries": {"max_attempts": 3, "mode": "standard"}})
            _fs_cache["s3"] = fs
        return fs


def s3_error(dataset, exc):
    """A DatasetError of one line for a failure of the object store."""
    name = type(exc).__name__
    text = " ".join(str(exc).split()) or name
    if isinstance(exc, FileNotFoundError):
        what = "not found"
    elif isinstance(exc, PermissionError) or "credential" in text.lower() \
            or "AccessDenied" in text or "Forbidden" in text:
        what = "access denied"
    else:
        what = "cannot be read"
    return DatasetError(f"dataset {_shown(dataset)} {what}: {_shown(text, 200)}", S3_HINT)


def _guard(dataset, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except DatasetError:
        raise
    except Exception as exc:    # botocore, aiohttp and OSError kinds alike: one line
        raise s3_error(dataset, exc) from None


def list_tables(dataset):
    """{table: {run_id: [file URLs]}} of an s3 dataset, tables and runs as in dataset.table_runs.

    One recursive listing of the prefix between two of its runs table; tables starting
    with "." or "_" are not dataset tables, only `<table>/run_id=<id>/<name>.parquet` keys
    count, and only of the runs whose runs partition both listings found unchanged.
    """
    bucket, key = split(dataset)
    fs = filesystem()
    root = f"{bucket}/{key}" if key else bucket
    fs.invalidate_cache()          # a long-lived process sees runs added since
    if not _guard(dataset, fs.exists, root):
        if key and _guard(dataset, fs.exists, bucket):
            raise DatasetError(f"dataset {_shown(dataset)} does not exist: no object under "
                               f"that prefix", "copy a dataset that `kmemscope parse -o` wrote there")
        raise DatasetError(f"dataset {_shown(dataset)} does not exist: no bucket {bucket} "
                           "(or no access to it)", S3_HINT)
    # A run counts when its runs partition is listed, unchanged, before and after the
    # listing of everything (dataset/s3_commit.py writes it last and deletes it first): a
    # listing over many pages, or a run replaced meanwhile, never shows half a run.
    before = _runs_objects(dataset, fs, root)
    fs.invalidate_cache()
    found = _guard(dataset, fs.find, root, detail=True)
    after = _runs_objects(dataset, fs, root)
    whole = {run for run, objects in before.items() if objects and after.get(run) == objects}
    out: dict = {}
    for path, info in sorted(found.items()):
        rel = path[len(root):].lstrip("/").split("/")
        if len(rel) != 3 or info.get("type", "file") != "file":
            continue
        table, part, name = rel
        if (table.startswith((".", "_")) or not RUN_FOLDER.fullmatch(part)
                or not SAFE_TABLE.fullmatch(table)
                or not is_data_file(name)
                or any(_UNSAFE.search(p) for p in rel)):
            continue
        run = part[len("run_id="):]
        if run in whole:
            file = url(bucket, path[len(bucket) + 1:])
            _sizes[file] = info.get("size")
            out.setdefault(table, {}).setdefault(run, []).append(file)
    return out


def _runs_objects(dataset, fs, root):
    """{run_id: {(key, ETag, size)} of its runs partition's data files}, freshly listed."""
    fs.invalidate_cache()
    found = _guard(dataset, fs.find, f"{root}/runs", detail=True)
    out: dict = {}
    for path, info in found.items():
        rel = path[len(root):].lstrip("/").split("/")
        if len(rel) == 3 and RUN_FOLDER.fullmatch(rel[1]) and is_data_file(rel[2]):
            out.setdefault(rel[1][len("run_id="):], set()).add(
                (path, info.get("ETag"), info.get("size")))
    return out


_sizes: dict = {}


def size(file):
    """Bytes of an s3 file (from the listing when it was listed)."""
    known = _sizes.get(file)
    if known is not None:
        return known
    return _guard(file, filesystem().size, file)


def read_small(dataset, name, limit):
    """Bytes of `name` directly under the dataset prefix, None if absent; at most limit+1 read."""
    bucket, key = split(dataset)
    path = f"{bucket}/{key}/{name}" if key else f"{bucket}/{name}"
    fs = filesystem()
    try:
        with fs.open(path, "rb") as f:
            return f.read(limit + 1)
    except FileNotFoundError:
        return None
    except Exception as exc:
        raise s3_error(dataset, exc) from None


def exists(file):
    return bool(_guard(file, filesystem().exists, file))


def read_schema(file):
    """The Arrow schema of a Parquet file, local or s3 (its footer only)."""
    import pyarrow.parquet as pq

    if not is_url_file(file):
        return pq.read_schema(file)
    return _guard(file, pq.read_schema, file[len("s3://"):], filesystem=filesystem())


def parquet_rows(file):
    """Rows of a Parquet file from its footer, local or s3."""
    import pyarrow.parquet as pq

    if not is_url_file(file):
        return pq.ParquetFile(file).metadata.num_rows
    with _guard(file, filesystem().open, file, "rb") as f:
        return _guard(file, lambda: pq.ParquetFile(f).metadata.num_rows)


def parquet_bytes(file):
    """(rows, uncompressed bytes) a Parquet file's footer declares, local or s3."""
    import pyarrow.parquet as pq

    def declared(meta):
        return meta.num_rows, sum(meta.row_group(i).total_byte_size
                                  for i in range(meta.num_row_groups))

    if not is_url_file(file):
        return declared(pq.ParquetFile(file).metadata)
    with _guard(file, filesystem().open, file, "rb") as f:
        return _guard(file, lambda: declared(pq.ParquetFile(f).metadata))


def register_duckdb(con, files):
    """Let DuckDB connection `con` read the s3:// URLs among `files` (through s3fs)."""
    if any(is_url_file(str(f)) for f in files):
        if "s3" not in con.list_filesystems():
            con.register_filesystem(filesystem())


def spark_path(path):
    """The path Spark reads: s3:// URLs become s3a:// (hadoop-aws); local paths unchanged."""
    text = str(path)
    return "s3a://" + text[len("s3://"):] if is_url_file(text) else text


def hadoop_version():
    """The Hadoop version bundled with pyspark (hadoop-aws must match it), or None."""
    try:
        import pyspark
    except ImportError:
        return None
    from pathlib import Path

    for jar in sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar")):
        return jar.name[len("hadoop-client-api-"):-len(".jar")]
    return None


def spark_conf(environ=None):
    """Spark settings for reading s3a:// from the AWS environment (endpoint, path style).

    Credentials are left to hadoop-aws's default provider chain, which reads
    AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN itself, so no
    secret is copied into the Spark configuration.
    """
    import os

    env = os.environ if environ is None else environ
    conf = {}
    version = hadoop_version()
    if version:
        conf["spark.jars.packages"] = f"{HADOOP_AWS}:{version}"
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        # S3-compatible servers address buckets by path, not by host name.
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = \
            "false" if endpoint.lower().startswith("http://") else "true"
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    elif endpoint:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = "us-east-1"
    # hadoop-aws 3.5's default "analytics" stream keeps an entry per object read for
    # the life of the filesystem; the classic stream reads the ranges asked for.
    conf["spark.hadoop.fs.s3a.input.stream.type"] = "classic"
    # Fail in seconds when the endpoint does not answer.
    conf["spark.hadoop.fs.s3a.attempts.maximum"] = "3"
    conf["spark.hadoop.fs.s3a.retry.limit"] = "2"
    conf["spark.hadoop.fs.s3a.connection.establish.timeout"] = "10s"
    return conf


def list_files(prefix_url):
    """{file URL} of every object under an s3 prefix (empty when there is none)."""
    bucket, key = split(prefix_url)
    root = f"{bucket}/{key}" if key else bucket
    found = _guard(prefix_url, filesystem().find, root)
    return {url(bucket, p[len(bucket) + 1:]) for p in found}
