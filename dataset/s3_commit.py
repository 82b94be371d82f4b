"""Writing runs into an s3:// dataset, safe with several ingesters at once.

    kmemscope parse bundles/* -o s3://bucket/fleet/ds

An object store has no rename and no lock, which the local commit (dataset/commit.py)
is made of; what it has is single-object atomic PUTs and conditional writes
(`If-None-Match: *`: create only if absent; `If-Match: <etag>`: replace only if
unchanged). The protocol, per input:

 1. The trace's digest names its run (run_id = sha256[:16], as a local parse names it).
    A run whose `runs` partition is in the dataset is skipped ("already in the
    dataset") unless force.
 2. Claim the run: PUT `_ingest/<run_id>` with If-None-Match. Only one ingester gets
    it, so each trace is decoded and uploaded once. The holder rewrites its claim
    (If-Match its own ETag) every CLAIM_TTL/5 seconds; a claim not rewritten for
    CLAIM_TTL seconds (by the server's clock: its Date against the claim's
    Last-Modified) is an ingester that died, and the next one takes it over with
    If-Match on the stale ETag (two takers: one wins). A loser waits, bounded, for the
    holder's run: it is then "already in the dataset"; a claim released or gone stale
    meanwhile is taken over.
 3. Decode into a private local dataset (a ScratchFolder) with the local parse, so the
    files are byte for byte what a local parse writes.
 4. Hide and clear: the run's `runs` partition is deleted first (a replacement: readers
    stop seeing the old run), then every other key of the run (a dead ingester's half
    upload, or the old run's partitions and derived caches).
 5. Upload every table's partition under the local layout's keys, `runs` last, and in
    `runs` its record (_files.json) before its Parquet file: the run appears when that
    one object appears, whole.
 6. Release the claim.

Readers (storage.list_tables) count a run only when its runs partition is listed,
unchanged, both before and after the listing of the other tables, so neither a
listing that spans pages nor a replacement in progress shows half a run.

The dataset's `_kmemscope.json` is created once with If-None-Match; an existing one must
state the format this kmemscope writes.
"""
import json
import os
import socket
import threading
import time
import uuid
from email.utils import parsedate_to_datetime
from pathlib import Path

from kmemscope.common.errors import DatasetError, KmemscopeError

from . import storage
from .digests import DIGESTS
from .safefs import RUN_PREFIX, RUNS_TABLE, SAFE_TABLE, is_data_file

CLAIMS = "_ingest"
# Seconds a claim lives without being rewritten before another ingester may take it over.
# KMEMSCOPE_S3_CLAIM_TTL_S sets it (every ingester of a dataset should use the same).
DEFAULT_CLAIM_TTL_S = 600.0
# How long an ingester waits for another's claimed run before it gives up on that input.
WAIT_FOR_OTHER_S = 3600.0
# Test hook: seconds to pause after the tables are uploaded, before the runs partition.
_PAUSE_BEFORE_RUNS = "KMEMSCOPE_TEST_S3_PAUSE_BEFORE_RUNS_S"


def claim_ttl():
    try:
        ttl = float(os.environ.get("KMEMSCOPE_S3_CLAIM_TTL_S", DEFAULT_CLAIM_TTL_S))
    except ValueError:
        raise KmemscopeError("KMEMSCOPE_S3_CLAIM_TTL_S must be a number of seconds") from None
    if not 1 <= ttl <= 86400:
        raise KmemscopeError("KMEMSCOPE_S3_CLAIM_TTL_S must be between 1 and 86400 seconds")
    return ttl


def _error_code(exc):
    """The S3 error code behind an s3fs exception (s3fs keeps botocore's as the cause)."""
    seen = 0
    while exc is not None and seen < 5:
        response = getattr(exc, "response", None)
        if isinstance(response, dict):
            return (response.get("Error") or {}).get("Code")
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _precondition_failed(exc):
    """True for a conditional write refused: the object is there or changed (412), or another
    conditional write of it is in flight (S3's 409 ConditionalRequestConflict: this one lost)."""
    return isinstance(exc, FileExistsError) or _error_code(exc) in (
        "PreconditionFailed", "412", "ConditionalRequestConflict", "409")


class Bucket:
    """One dataset prefix in a bucket: keys relative to the dataset, written through s3fs."""

    def __init__(self, dataset):
        self.dataset = dataset
        self.bucket, self.prefix = storage.split(dataset)
        self.fs = storage.filesystem()

    def key(self, rel):
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def path(self, rel=""):
        """bucket/key as s3fs names it."""
        key = self.key(rel) if rel else self.prefix
        return f"{self.bucket}/{key}" if key else self.bucket

    def call(self, method, **kwargs):
        """An S3 call; a failure other than a precondition is one DatasetError line."""
        try:
            return self.fs.call_s3(method, Bucket=self.bucket, **kwargs)
        except Exception as exc:
            if _precondition_failed(exc):
                raise
            raise _write_error(self.dataset, exc) from None

    def put(self, rel, body, **conditions):
        return self.call("put_object", Key=self.key(rel), Body=body, **conditions)

    def head(self, rel):
        """(ETag, Last-Modified, the server's Date) of `rel`, or None when absent."""
        try:
            h = self.fs.call_s3("head_object", Bucket=self.bucket, Key=self.key(rel))
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise _write_error(self.dataset, exc) from None
        return h.get("ETag"), h.get("LastModified"), _server_date(h)

    def get(self, rel, limit):
        """The first limit+1 bytes of `rel`, or None when absent."""
        try:
            return self.fs.cat_file(self.path(rel), start=0, end=limit + 1)
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise _write_error(self.dataset, exc) from None

    def find(self, rel):
        """{key relative to the dataset} of every object under `rel`/: ListObjectsV2 page by
        page (one request for a partition; s3fs's find asks a HEAD first)."""
        out, token = set(), None
        strip = len(self.key("")) if self.prefix else 0
        while True:
            kwargs: dict = {"ContinuationToken": token} if token else {}
            page = self.call("list_objects_v2", Prefix=self.key(rel) + "/", **kwargs)
            out |= {o["Key"][strip:] for o in page.get("Contents", [])}
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return out

    def folders(self, rel=""):
        """Names of the 'folders' directly under `rel` (delimited listings, page by page)."""
        out, token = [], None
        base = f"{self.key(rel)}/" if rel else (f"{self.prefix}/" if self.prefix else "")
        while True:
            kwargs: dict = {"ContinuationToken": token} if token else {}
            page = self.call("list_objects_v2", Prefix=base, Delimiter="/", **kwargs)
            out += [p["Prefix"][len(base):].rstrip("/") for p in page.get("CommonPrefixes", [])]
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return out

    def delete(self, rels):
        rels = sorted(rels)
        if rels:
            try:
                self.fs.rm([self.path(r) for r in rels])
            except FileNotFoundError:
                pass
            except Exception as exc:
                raise _write_error(self.dataset, exc) from None

    def upload(self, files):
        """Upload {rel: local path}, many at once (s3fs runs the PUTs concurrently)."""
        if files:
            rels = sorted(files)
            try:
                self.fs.put([str(files[r]) for r in rels], [self.path(r) for r in rels])
            except Exception as exc:
                raise _write_error(self.dataset, exc) from None


def _server_date(response):
    """The server's clock from a response's Date header (aware datetime), or None."""
    date = (response.get("ResponseMetadata") or {}).get("HTTPHeaders", {}).get("date")
    try:
        return parsedate_to_datetime(date) if date else None
    except (TypeError, ValueError):
        return None


def _write_error(dataset, exc):
    """One line for a failed call of the object store while writing (DatasetError)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    bucket = storage.split(dataset)[0]
    if isinstance(exc, FileNotFoundError) and "bucket" in text.lower():
        what = f"cannot be written: no bucket {bucket} (or no access to it)"
    elif isinstance(exc, PermissionError) or "credential" in text.lower() \
            or "AccessDenied" in text or "Forbidden" in text:
        what = f"cannot be written: access denied: {storage._shown(text, 200)}"
    else:
        what = f"cannot be written: {storage._shown(text, 200)}"
    return DatasetError(f"dataset {storage._shown(dataset)} {what}", storage.S3_HINT)


# ---------------------------------------------------------------- the format file

# Datasets (endpoint, bucket/prefix) whose format file this process wrote or checked: once
# per process, not per input.
_FORMAT_CHECKED: set = set()


def ensure_format(b):
    """Create the dataset's format file once (If-None-Match), or check the one there."""
    from .format import FORMAT, FORMAT_FILE, MAX_FILE_BYTES, _writer, parse_format

    where_key = (os.environ.get("AWS_ENDPOINT_URL"), b.path())
    if where_key in _FORMAT_CHECKED:
        return
    body = (json.dumps({"format": int(FORMAT), "writer": _writer()}, sort_keys=True)
            + "\n").encode()
    try:
        b.put(FORMAT_FILE, body, IfNoneMatch="*")
    except Exception as exc:
        if not _precondition_failed(exc):
            raise _write_error(b.dataset, exc) from None
        data = b.get(FORMAT_FILE, MAX_FILE_BYTES)
        where = f"{b.dataset.rstrip('/')}/{FORMAT_FILE}"
        if data is None or len(data) > MAX_FILE_BYTES:
            raise DatasetError(f"{where}: not a valid kmemscope dataset format file") from None
        found = parse_format(data, where)["format"]
        if found != FORMAT:
            raise DatasetError(f"{where}: dataset format {found}; this kmemscope adds runs of "
                               f"format {FORMAT} only", "write to another prefix") from None
    _FORMAT_CHECKED.add(where_key)


# ---------------------------------------------------------------- claims

class Claim:
    """This ingester's claim on one run id: rewritten in the background while held."""

    def __init__(self, b, run_id, etag, ttl):
        self.b, self.run_id, self.etag, self.ttl = b, run_id, etag, ttl
        self.lost = None                   # why the claim was lost, once it is
        # a rewrite and a check take turns: a check between a rewrite's PUT and its new ETag
        # would take this ingester's own rewrite for a takeover
        self._turn = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="kmemscope-s3-claim",
                                        daemon=True)
        self._thread.start()

    @property
    def rel(self):
        return f"{CLAIMS}/{self.run_id}"

    def _keep(self):
        while not self._stop.wait(self.ttl / 5):
            try:
                with self._turn:
                    self.etag = self.b.put(self.rel, _claim_body(), IfMatch=self.etag)["ETag"]
            except Exception as exc:
                if _precondition_failed(exc):
                    self.lost = "another ingester took its claim over"
                    return
                # a failed rewrite is retried at the next beat; the claim holds until stale

    def check(self):
        """Raise when the claim is no longer this ingester's (before the run is shown)."""
        with self._turn:
            if self.lost is None:
                now = self.b.head(self.rel)
                if now is None or now[0] != self.etag:
                    self.lost = "its claim was removed or taken over"
        if self.lost:
            raise KmemscopeError(f"run {self.run_id}: {self.lost} before the run was shown; "
                                 "this ingester leaves it to that one")

    def release(self):
        self._stop.set()
        self._thread.join()
        if self.lost is None:
            try:
                now = self.b.head(self.rel)
                if now is not None and now[0] == self.etag:
                    self.b.delete([self.rel])
            except KmemscopeError:
                pass                 # left to go stale


def _claim_body():
    return json.dumps({"host": socket.gethostname()[:64], "pid": os.getpid(),
                       "owner": uuid.uuid4().hex, "at": round(time.time(), 3)}).encode()


def try_claim(b, run_id, ttl):
    """A Claim of run `run_id`, or None while another live ingester holds it."""
    rel = f"{CLAIMS}/{run_id}"
    try:
        return Claim(b, run_id, b.put(rel, _claim_body(), IfNoneMatch="*")["ETag"], ttl)
    except Exception as exc:
        if not _precondition_failed(exc):
            raise
    held = b.head(rel)
    if held is None:
        return try_claim_again(b, run_id, ttl)
    etag, modified, server_now = held
    age = _age(modified, server_now)
    if age is None or age <= ttl:
        return None
    try:          # a dead ingester's: take it over, unless another taker was first
        return Claim(b, run_id, b.put(rel, _claim_body(), IfMatch=etag)["ETag"], ttl)
    except Exception as exc:
        if not _precondition_failed(exc):
            raise
        return None


def try_claim_again(b, run_id, ttl):
    """The claim went between the refused PUT and the HEAD: one more attempt."""
    try:
        return Claim(b, run_id, b.put(f"{CLAIMS}/{run_id}", _claim_body(),
                                      IfNoneMatch="*")["ETag"], ttl)
    except Exception as exc:
        if not _precondition_failed(exc):
            raise
        return None


def _age(modified, server_now):
    """Seconds since `modified`, by the server's clock when it gave one (a host whose clock
    is off does not take over live claims), else by this host's."""
    if modified is None:
        return None
    now = server_now.timestamp() if server_now is not None else time.time()
    return now - modified.timestamp()


# ---------------------------------------------------------------- the run's keys

def committed(b, run_id):
    """True when run `run_id`'s runs partition holds a Parquet file."""
    return any(is_data_file(k.rsplit("/", 1)[-1])
               for k in b.find(f"{RUNS_TABLE}/{RUN_PREFIX}{run_id}"))


def run_keys(b, run_id):
    """Every key of run `run_id`: its partitions in each table and in each derived cache."""
    part = f"{RUN_PREFIX}{run_id}"
    from concurrent.futures import ThreadPoolExecutor

    top = b.folders()
    folders = [t for t in top if SAFE_TABLE.fullmatch(t)]
    if "_derived" in top:
        folders += [f"_derived/{c}" for c in b.folders("_derived") if SAFE_TABLE.fullmatch(c)]
    with ThreadPoolExecutor(8) as pool:       # a request each: listed side by side
        found = list(pool.map(lambda folder: b.find(f"{folder}/{part}"), folders))
    return set().union(*found)


def local_run_files(local, run_id):
    """{key relative to the dataset: local file} of run `run_id` in local dataset `local`."""
    part = f"{RUN_PREFIX}{run_id}"
    out = {}
    for table in sorted(os.listdir(local)):
        folder = Path(local) / table / part
        if table.startswith((".", "_")) or not SAFE_TABLE.fullmatch(table) \
                or not folder.is_dir():
            continue
        for name in sorted(os.listdir(folder)):
            if is_data_file(name) or (table == RUNS_TABLE and name == DIGESTS):
                out[f"{table}/{part}/{name}"] = folder / name
    return out


def publish(b, run_id, files, claim):
    """Steps 4-5: hide and clear the run's old keys, upload `files` with `runs` last;
    True when an old run was replaced."""
    runs_prefix = f"{RUNS_TABLE}/{RUN_PREFIX}{run_id}/"
    hide = b.find(runs_prefix.rstrip("/"))
    b.delete(hide)                                   # the old run disappears whole
    b.delete(run_keys(b, run_id) - set(files))       # then what it (or a dead upload) left
    b.upload({k: f for k, f in files.items() if not k.startswith(runs_prefix)})
    pause = os.environ.get(_PAUSE_BEFORE_RUNS)
    if pause:
        time.sleep(float(pause))
    claim.check()
    runs = {k: f for k, f in files.items() if k.startswith(runs_prefix)}
    record = {k: f for k, f in runs.items() if k.endswith("/" + DIGESTS)}
    b.upload(record)
    b.upload({k: f for k, f in runs.items() if k not in record})    # the run appears
    return bool(hide)


def refuse_derive(derive):
    if derive:
        raise KmemscopeError("--derive builds derived tables into a local dataset; an s3 "
                             "dataset's are built by each query that needs them",
                             "parse without --derive")
