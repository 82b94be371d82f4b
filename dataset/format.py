"""The dataset format version (DATASET/_kmemscope.json) and the canonical column types.

Format 1: a dataset without `_kmemscope.json` (written before the file existed).
  Every column has the type of its field in the trace's own event format, so
  runs of different kernels give one table different schemas (gfp_flags is 4
  bytes up to 5.15 and 8 after; pfn is 4 bytes on 32-bit kernels).
Format 2: the columns kmemscope knows (dataset/schema.py TABLE_COLUMNS) are
  stored with their canonical type whatever the kernel, so each known table has
  one schema across runs. Other columns keep the trace's types.

Compatibility (docs/dataset-format.md, "Which kmemscope reads which dataset"):
readers (dataset/reader.py) accept formats OLDEST_FORMAT to FORMAT. A newer
format is refused in one line naming both formats and the writer, with "upgrade
kmemscope"; a format older than OLDEST_FORMAT (none yet: every format so far is
read) would be refused in one line saying to parse the traces again. A change
that an older kmemscope would misread raises FORMAT; one it reads correctly
(a new table, a new optional file) does not. The writer field is information
only: a dataset made by kmemscope 0.2.0 (format 2) is read as format 2.

Writers call `ensure_format(dataset)` with the dataset's commit
lock held, before a run becomes visible: a new dataset gets format FORMAT; one
that already holds runs and has no file stays format 1 (its old runs are not
rewritten; its new runs are canonical all the same).

The file is untrusted input: it is read only when it is a regular file of at
most MAX_FILE_BYTES, and only the fields below, with these types, are accepted.
"""
import errno
import json
import os
import stat
from pathlib import Path

from kmemscope.common.errors import DatasetError
from kmemscope.common.text import printable

from .safefs import HINT_LINK, RUN_PREFIX, Dir

FORMAT_FILE = "_kmemscope.json"
FORMAT = 2             # the format this kmemscope writes and the newest it reads
LEGACY_FORMAT = 1      # a dataset without FORMAT_FILE
OLDEST_FORMAT = 1      # the oldest format this kmemscope reads; older ones are parsed again
MAX_FILE_BYTES = 4096
MAX_WRITER_CHARS = 200
RUNS_DIR = "runs"


def _writer():
    from kmemscope.common.version import __version__

    return f"kmemscope {__version__}"


def _shown(value, limit=40):
    """A value from the file, short and printable, for an error message."""
    text = repr(value)
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= limit else text[:limit] + "..."


def _bad(path, what):
    return DatasetError(f"{path}: not a valid kmemscope dataset format file: {what}",
                        f"restore it from a copy, or delete it to read the dataset as format "
                        f"{LEGACY_FORMAT}")


def _read_bytes(path):
    """The file's bytes, or None when it does not exist; only a small regular file is read."""
    try:
        # O_NONBLOCK: a FIFO put in its place must not hang the reader; O_NOFOLLOW: a link
        # is not followed out of the dataset.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DatasetError(f"{printable(path)} is a symbolic link where the dataset's "
                               "format file belongs", HINT_LINK) from None
        raise DatasetError(f"{path}: cannot read: {exc.strerror or exc}",
                           "check the dataset's permissions") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _bad(path, "not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise _bad(path, f"{st.st_size} bytes, more than {MAX_FILE_BYTES}")
        data = os.read(fd, MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read: {exc.strerror or exc}",
                           "check the dataset's permissions") from None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise _bad(path, f"more than {MAX_FILE_BYTES} bytes")
    return data


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("a field appears twice")
    return dict(pairs)


def _reject_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def parse_format(data, path=FORMAT_FILE):
    """Validate the bytes of a format file -> {"format": int, "writer": str or None}."""
    try:
        doc = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates,
                         parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise _bad(path, "not UTF-8 text") from None
    except (ValueError, RecursionError) as exc:
        raise _bad(path, f"not JSON ({_shown(str(exc), 80)})") from None
    if not isinstance(doc, dict):
        raise _bad(path, f"a JSON {type(doc).__name__}, not an object")
    if "format" not in doc:
        raise _bad(path, "no \"format\" field")
    version = doc["format"]
    if type(version) is not int or version < LEGACY_FORMAT:   # bool is not a version
        raise _bad(path, f"\"format\" is {_shown(version)}, not a whole number >= {LEGACY_FORMAT}")
    if version > FORMAT or version < OLDEST_FORMAT:
        # A newer kmemscope may add fields: the version alone decides.
        raise unreadable(path, version, doc.get("writer"))
    unknown = sorted(set(doc) - {"format", "writer"})
    if unknown:
        raise _bad(path, f"unexpected field {_shown(unknown[0])}")
    writer = doc.get("writer")
    if writer is not None and (not isinstance(writer, str) or len(writer) > MAX_WRITER_CHARS
                               or not writer.isprintable()):
        raise _bad(path, f"\"writer\" is {_shown(writer)}, not a short printable string")
    return {"format": version, "writer": writer}


def _written_by(writer):
    """The error's ` (written by kmemscope X)` from the file's writer field, when that is a
    short printable string; nothing otherwise (the field is untrusted, and only information)."""
    if isinstance(writer, str) and 0 < len(writer) <= 40 and writer.isprintable():
        return f" (written by {writer})"
    return ""


def unreadable(path, version, writer=None):
    """The one-line error for a dataset of a `version` this kmemscope does not read: a newer
    one asks for an upgrade, an older one for a new parse of its traces."""
    where = str(path)       # a path or a URL: no Path() that would fold "s3://"
    dataset = where[:-len(FORMAT_FILE)].rstrip("/") if where.endswith(FORMAT_FILE) else where
    dataset = dataset or "."
    what = f"{dataset} is a kmemscope dataset of format {version}{_written_by(writer)}"
    reads = f"{_writer()} reads formats {OLDEST_FORMAT} to {FORMAT}"
    if version > FORMAT:
        return DatasetError(f"{what}; {reads}",
                            "upgrade kmemscope to read it or to add runs to it")
    return DatasetError(f"{what}, which is no longer read; {reads}",
                        "parse its traces again into a new dataset")


def read_format(dataset):
    """The dataset's format, validated: LEGACY_FORMAT without a file; raises DatasetError
    for a damaged file or a format this kmemscope does not read (newer than FORMAT, older
    than OLDEST_FORMAT)."""
    path = Path(dataset) / FORMAT_FILE
    data = _read_bytes(path)
    if data is None:
        # No file: a dataset of format 1 when it holds runs, else a new one (ensure_format
        # gives it a file).
        if LEGACY_FORMAT < OLDEST_FORMAT and _holds_runs(dataset):
            raise unreadable(path, LEGACY_FORMAT)
        return LEGACY_FORMAT
    return parse_format(data, path)["format"]


def _holds_runs(dataset):
    runs = Path(dataset) / RUNS_DIR
    try:
        return any(p.name.startswith(RUN_PREFIX) for p in runs.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return False


def write_format(dataset, version=FORMAT):
    """Write FORMAT_FILE atomically (a temporary file renamed over it, both synced)."""
    body = json.dumps({"format": int(version), "writer": _writer()}, sort_keys=True) + "\n"
    with Dir.root(dataset) as root:
        root.write_atomic(FORMAT_FILE, lambda f: f.write(body.encode()))
        try:
            os.fsync(root.fd)
        except OSError:
            pass


def ensure_format(dataset):
    """Make `dataset` ready to take a run written by this kmemscope; returns its format.

    Call with the dataset's commit lock held (dataset/commit.py dataset_lock),
    before the run's partitions are moved in. A dataset with a file is checked
    (a newer format is refused: this kmemscope would write runs it does not
    describe); a dataset with no run yet gets a FORMAT file; a dataset of runs
    written before format files stays format 1.
    """
    version = read_format(dataset)
    if (Path(dataset) / FORMAT_FILE).exists() or _holds_runs(dataset):
        return version
    write_format(dataset, FORMAT)
    return FORMAT


# ---------------------------------------------------------------- canonical column types

def _arrow_types():
    import pyarrow as pa

    return {"TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INTEGER": pa.int32(),
            "BIGINT": pa.int64(), "UTINYINT": pa.uint8(), "USMALLINT": pa.uint16(),
            "UINTEGER": pa.uint32(), "UBIGINT": pa.uint64()}


def _known_columns():
    from kmemscope.dataset.schema import TABLE_COLUMNS

    return TABLE_COLUMNS


def lossless(src, dst):
    """True when every value of integer type `src` is a value of integer type `dst`."""
    import pyarrow.types as t

    if not (t.is_integer(src) and t.is_integer(dst)):
        return False
    if t.is_signed_integer(src) == t.is_signed_integer(dst):
        return dst.bit_width >= src.bit_width
    # unsigned -> signed needs a wider type; signed -> unsigned never (negatives)
    return t.is_unsigned_integer(src) and dst.bit_width > src.bit_width


def canonical_schema(table, schema):
    """`schema` with kmemscope's known integer columns of `table` at their canonical Arrow type.

    Only casts that keep every value are made: a column whose recorded type is
    wider, or signed where the canonical is unsigned, keeps its type (readers
    widen it per run, as for format 1). Strings, lists and maps are written by
    kmemscope itself with their canonical types, and left alone.
    """
    import pyarrow as pa

    known = _known_columns().get(table)
    if not known:
        return schema
    arrow = _arrow_types()
    fields = []
    for f in schema:
        target = arrow.get(known.get(f.name, ""))
        if target is not None and f.type != target and lossless(f.type, target):
            f = f.with_type(target)
        fields.append(f)
    return pa.schema(fields, metadata=schema.metadata)


def to_canonical(table, data):
    """Cast a RecordBatch or Table of dataset table `table` to canonical_schema()."""
    check_fits(table, data.schema)
    target = canonical_schema(table, data.schema)
    if target.equals(data.schema):
        return data
    return data.cast(target)       # safe cast: widening only, never fails


class Canonicalizer:
    """to_canonical() for a stream of batches: the target schema is worked out once per table,
    and a schema that does not fit (unfit_reason) raises UnfitTable."""

    def __init__(self):
        self._targets = {}     # table -> (input schema, target schema)

    def __call__(self, table, batch):
        cached = self._targets.get(table)
        if cached is None or not cached[0].equals(batch.schema):
            check_fits(table, batch.schema)
            cached = self._targets[table] = (batch.schema, canonical_schema(table, batch.schema))
        source, target = cached
        return batch if target.equals(source) else batch.cast(target)


# ---------------------------------------------------------------- schemas that do not fit
#
# One run whose table has a known column of another kind (a char array where
# `order` belongs), a column named like the partition column, or a field that
# pushed a common column aside (`ts`) would make every query over the table fail
# or answer wrongly, for all runs. Parse refuses such a run; readers leave such
# a run out with a note (dataset/reader.py unfit_runs).

PARTITION_COLUMN = "run_id"
_COMMON = ("ts", "cpu", "pid", "comm")     # what the decoder renames common_<name> on a clash


class UnfitTable(DatasetError):
    """A table's schema that kmemscope's analyses cannot read beside other runs."""


def _kind_ok(duck, arrow_type):
    """True when an Arrow column of `arrow_type` reads as DuckDB type `duck` (TABLE_COLUMNS)."""
    import pyarrow.types as t

    if t.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if duck in _arrow_types():
        return t.is_integer(arrow_type)
    if duck == "VARCHAR":
        return t.is_string(arrow_type) or t.is_large_string(arrow_type)
    if duck == "DOUBLE":
        return t.is_floating(arrow_type) or t.is_integer(arrow_type)
    if duck == "BOOLEAN":
        return t.is_boolean(arrow_type)
    if duck.endswith("[]"):
        return ((t.is_list(arrow_type) or t.is_large_list(arrow_type))
                and _kind_ok(duck[:-2], arrow_type.value_type))
    if duck.startswith("MAP("):
        key, _, value = duck[4:-1].partition(", ")
        return (t.is_map(arrow_type) and _kind_ok(key, arrow_type.key_type)
                and _kind_ok(value, arrow_type.item_type))
    return True


def _kind_name(duck):
    if duck in _arrow_types():
        return f"an integer ({duck})"
    return {"VARCHAR": "a string", "DOUBLE": "a number", "BOOLEAN": "a boolean"}.get(duck, duck)


# The column a reader names each row's file in (reader.scan_sql), never a table's own.
FILE_COLUMN = "kmemscope_source_file"


def unfit_reason(table, names, types):
    """Why a table of columns `names` with Arrow `types` cannot be read with other runs, or None."""
    seen = set()
    for name in names:
        if name in seen:
            return f"it has two columns named {_shown(name)}"
        seen.add(name)
    if PARTITION_COLUMN in seen:
        return f"it has a column named {PARTITION_COLUMN}, the dataset's partition column"
    if FILE_COLUMN in seen:
        return f"it has a column named {FILE_COLUMN}, the name readers give each row's file"
    known = _known_columns().get(table)
    if not known:
        return None
    for common in _COMMON:
        if common in known and f"common_{common}" in seen:
            return (f"its field {common} takes the name of the event's common column "
                    f"{common}")
    for name, typ in zip(names, types):
        duck = known.get(name)
        if duck is not None and not _kind_ok(duck, typ):
            return (f"its field {_shown(name)} is {_shown(str(typ))} where {_kind_name(duck)} "
                    "belongs")
    return None


def check_fits(table, schema):
    """Raise UnfitTable when `schema` of dataset table `table` does not fit (unfit_reason)."""
    why = unfit_reason(table, schema.names, schema.types)
    if why:
        raise UnfitTable(f"table {table} does not fit the dataset: {why}",
                         "the trace's event format is altered or of a kind kmemscope cannot "
                         "read: the run is refused")
