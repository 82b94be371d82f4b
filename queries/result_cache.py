"""Each run's rows of an analysis, kept beside the dataset: a fleet's questions asked again.

Every analysis section computes its rows from one run's tables at a time and orders them by
run_id first (engines/base.py), so its rows over N runs are the runs' own rows one after
the other. A fleet dataset grows by a few runs a day and is asked the same questions
(`summary`, `compare --by kernel`) again and again; at a thousand runs, reading every event
again for each question costs a minute of CPU. So a section's rows of each run are kept
as a derived cache of the run (dataset/derived.py), and a question over N runs reads what
it answered before and computes only the runs it has not:

    DATASET/_derived/result_<analysis>_<section>/run_id=<id>/part-0.parquet

A file holds the run's rows and, in its schema metadata, the run's era facts and
migratetype names (the notes need them). Like every derived cache it is recorded in the
run's digests (sha256, size, and what it was computed from) and trusted only when it
matches them, and when the file states the signature its record gives. The record also
names the question in clear (`asked`: the section and its parameters), which `verify --deep`
asks again. What it was computed from: the whole SQL the section runs (its queries/lib/
modules, prelude and section), the bound parameters, the dataset schema, kmemscope's
version, the Python that decides the run facts, and the recorded sha256 of every file
of the run. A new kmemscope, other parameters, a `metrics import` or a relabelled run
therefore compute afresh; one file per section and run is kept (another parameter
replaces it).

Nothing is kept for a dataset behind a URL, a dataset that cannot be written, a run
without recorded digests, a section with a FILE parameter (the file's contents are not
in the signature), or a section whose rows have no run_id column. KMEMSCOPE_RESULT_CACHE=0
turns the cache off (every question reads every run), e.g. to time the analyses themselves.
"""
import hashlib
import json
import os
import re
from pathlib import Path

from kmemscope.dataset import derived as dv
from kmemscope.dataset.handle import DatasetRef
from kmemscope.dataset.safefs import shown_name
from kmemscope.dataset.schema import DERIVED_COLUMNS, TABLE_COLUMNS
from kmemscope.common.version import __version__

from . import derived_tables, sql_lib
from .engines import PlanRows

RESULT_VERSION = "1"
PREFIX = "result_"
ENV_SWITCH = "KMEMSCOPE_RESULT_CACHE"
FACTS_KEY = b"kmemscope.run_facts"
MTS_KEY = b"kmemscope.migratetypes"
ASKED_KEY = b"kmemscope.result_of"      # {"query": name.section, "params": {name: value}}
_OWN_KEYS = (FACTS_KEY, MTS_KEY, ASKED_KEY, dv.SIG_KEY)
# The most one run's rows of one section may declare to take once read (a run's stalls.each,
# the largest, takes a few MB); a file declaring more is computed again instead.
KEPT_MAX_BYTES = 256 << 20
# The Python whose output is stored beside the rows (run facts, migratetype names).
_FACT_SOURCES = ("runner.py", "eras.py", "result_cache.py")
_source_digest = None


def enabled(plan, ref):
    """True when `plan`'s rows may be kept per run in the dataset of `ref` (a DatasetRef)."""
    return bool(plan.chosen) and enabled_for(plan.analysis, ref)


def enabled_for(analysis, ref):
    """True when an analysis' rows may be kept per run in the dataset of `ref`."""
    if os.environ.get(ENV_SWITCH, "1").strip() in ("0", "no", "off", "false"):
        return False
    return not ref.is_s3 and all(p.type != "FILE" for p in analysis.params.values())


def kept_runs(ref, qname, fp, runs):
    """{run: (signature, its kept (rows, facts, migratetype names) or None)} of the `runs`
    that have recorded digests (the others are never kept), worked out once per command
    (the runner plans with it, then runs with it). Each kept file is read once, checked
    against its run's digests and parsed from those bytes."""
    memo = ref.memo("result_cache")
    name = cache_name(qname)
    todo = [r for r in runs if (name, fp, r) not in memo]
    if todo:
        docs = ref.run_docs(todo)
        wanted = {r: (signature(fp, docs[r]), docs[r]) for r in todo if docs.get(r)}
        found = dv.read_checked(ref, name, wanted, KEPT_MAX_BYTES)
        for run in todo:
            memo[(name, fp, run)] = ((wanted[run][0], _parse(found[run])) if run in wanted
                                     else None)
    return {r: memo[(name, fp, r)] for r in runs if memo[(name, fp, r)] is not None}


def cache_name(qname):
    """The cache's folder under _derived for section `qname` (name.section): named from the
    catalog, never from a dataset or a trace."""
    return PREFIX + re.sub(r"[^a-z0-9_]", "_", qname.lower())


def fingerprint(plan):
    """What the section's rows depend on besides the run's files."""
    return fingerprint_of(plan.qname, plan.modules, plan.analysis.prelude, plan.section.sql,
                          plan.bound)


def fingerprint_of(qname, modules, prelude, section_sql, bound):
    global _source_digest
    if _source_digest is None:
        here = Path(__file__).resolve().parent
        h = hashlib.sha256()
        for name in _FACT_SOURCES:
            h.update((here / name).read_bytes())
        _source_digest = h.hexdigest()
    text = json.dumps({
        "version": RESULT_VERSION, "kmemscope": __version__, "python": _source_digest,
        "query": qname, "modules": sql_lib.script(modules),
        "prelude": prelude, "section": section_sql,
        "params": {k: repr(v) for k, v in sorted(bound.items())},
        "derived": [family.version for family in derived_tables.FAMILIES],
        "schema": [TABLE_COLUMNS, DERIVED_COLUMNS],
    }, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def signature(fp, doc):
    """The run's cache signature: the section's fingerprint and every recorded file digest."""
    files = {k: v["sha256"] for k, v in sorted(doc["files"].items())}
    return json.dumps({"result": fp, "files": files}, sort_keys=True)


def run_cached(plan, dataset, threads, progress, compute, narrow):
    """`compute(plan, dataset, threads, progress)` -> PlanRows over plan.chosen, computing only
    the runs without a current cache (narrow(plan, runs): the plan over those runs)."""
    ref = DatasetRef.of(dataset)
    if not enabled(plan, ref):
        return compute(plan, dataset, threads, progress)
    where = ref.location
    runs = sorted(plan.chosen)
    name = cache_name(plan.qname)
    fp = fingerprint(plan)
    known = kept_runs(ref, plan.qname, fp, runs)
    sigs = {r: sig for r, (sig, _kept) in known.items()}
    found = {r: kept for r, (_sig, kept) in known.items() if kept is not None}
    missing = [r for r in runs if r not in found]
    if not missing:
        return _joined(runs, found, {}, PlanRows)
    if progress and len(missing) > 1 and found:
        progress(f"{plan.qname}: {len(found)} runs answered before, computing {len(missing)}")
    rows = compute(narrow(plan, missing) if found else plan, dataset, threads, progress)
    if "run_id" not in rows.table.column_names:
        if found:       # cannot be: such a section is never kept
            raise AssertionError(f"{plan.qname}: cached rows without run_id")
        return rows
    fresh = _split(rows, missing)
    docs = ref.run_docs(missing)
    keep = [r for r in missing if r in sigs and dv._may_cache_in_dataset(
        where, docs[r], name, r, sigs[r])]
    if keep and dv._target(ref, keep, read_only=False) == Path(where):
        asked = question(plan.qname, plan.bound)
        memo = ref.memo("result_cache")
        for run in keep:
            try:
                _write(where, name, run, sigs[run], fresh[run], asked)
            except OSError as exc:     # the rows answer all the same; the dataset keeps none
                if progress:
                    progress(f"{plan.qname}: run {run}'s rows not kept ({exc.strerror or exc})")
                continue
            memo[(name, fp, run)] = (sigs[run], fresh[run])
    if not found:
        return rows
    return _joined(runs, found, fresh, PlanRows)


def _split(rows, runs):
    """{run: (table of its rows, its facts, its migratetype names)} for `runs`; the rows of a
    run are consecutive (every section's ORDER BY starts with run_id)."""
    table = rows.table
    ids = table.column("run_id").to_pylist()
    spans, start = {}, 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[start]:
            if start < len(ids):
                spans[ids[start]] = (start, i - start)
            start = i
    out = {}
    for run in runs:
        first, length = spans.get(run, (0, 0))
        out[run] = (table.slice(first, length),
                    [f for f in rows.facts if f.get("run_id") == run],
                    [m for m in rows.mts if m.get("run_id") == run])
    return out


def question(qname, bound):
    """What was asked, as the cache's record and file state it: the section and its bound
    parameters (as JSON gives them back)."""
    return json.loads(json.dumps({"query": qname, "params": bound}, default=str))


def _write(dataset, name, run, sig, got, asked):
    """Keep `got` (rows, facts, migratetype names) as run `run`'s file of cache `name`,
    recorded with `asked` (question()); OSError when it could not be kept."""
    import pyarrow as pa

    table, facts, mts = got
    meta = dict(table.schema.metadata or {})
    meta[ASKED_KEY] = json.dumps(asked).encode()
    meta[FACTS_KEY] = json.dumps(facts, default=str).encode()
    meta[MTS_KEY] = json.dumps(mts, default=str).encode()
    table = table.replace_schema_metadata(meta)
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
    path = dv._write((dataset, Path(dataset)), name, run, sig, reader, asked=asked)
    if dv._is_private(path.parents[2]):
        raise OSError(f"{dv.DERIVED_DIR} could not be written")
    return path


def _parse(data):
    """(rows, facts, migratetype names) of a kept file's bytes, or None when there are none or
    they cannot be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if data is None:
        return None
    try:
        # one small file of one row group: reading it on this thread without pre-buffering
        # takes a third of the time of the defaults (a thousand runs, five sections)
        file = pq.ParquetFile(pa.BufferReader(data), pre_buffer=False)
        md = file.metadata
        # A file matching its run's digests may still come from whoever wrote the dataset:
        # what it declares it holds is bounded before it is decompressed.
        if sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups)) \
                > KEPT_MAX_BYTES:
            return None
        table = file.read(use_threads=False)
        meta = table.schema.metadata or {}
        facts = json.loads(meta[FACTS_KEY])
        mts = json.loads(meta[MTS_KEY])
    except (OSError, KeyError, ValueError, pa.ArrowException):
        return None
    keep = {k: v for k, v in meta.items() if k not in _OWN_KEYS}
    return table.replace_schema_metadata(keep or None), facts, mts


def _joined(runs, found, fresh, plan_rows):
    """The runs' rows one after the other in run_id order, as one PlanRows."""
    import pyarrow as pa

    parts = [found[r] if r in found else fresh[r] for r in runs]
    table = pa.concat_tables([p[0] for p in parts], promote_options="permissive")
    facts = [f for p in parts for f in p[1]]
    mts = [m for p in parts for m in p[2]]
    return plan_rows(table, facts, mts)


def same_as_recomputed(dataset, name, run, _path, entry, rows_of_run):
    """True when the kept rows of `run` in cache folder `name` (read through the confined
    walk) are the rows the question its record names gives when asked of the run again
    (`kmemscope verify --deep`). The question is the record's (`entry["asked"]`), never the
    one the file states; a record of an older kmemscope, without one, is answered by the
    file's, which `verify` found signed with the record's signature.

    rows_of_run(qname, dataset, run, params) -> the section's rows of that run, computed
    (runner.rows_of_run)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kmemscope.common.errors import DatasetError, KmemscopeError

    from . import catalog

    data = dv.read_part(DatasetRef.of(dataset), name, run, KEPT_MAX_BYTES)
    try:
        asked = entry["asked"] if "asked" in entry else json.loads(
            (pq.read_schema(pa.BufferReader(data)).metadata or {})[ASKED_KEY])
        qname, params = asked["query"], asked["params"]
        if not isinstance(qname, str) or not isinstance(params, dict):
            raise ValueError(qname)
    except (OSError, KeyError, ValueError, TypeError, pa.ArrowException):
        raise DatasetError("its record does not say which analysis it holds") from None
    try:
        analysis, section = catalog.find_analysis(qname)
    except KmemscopeError:
        raise DatasetError("it names no analysis of this kmemscope "
                           f"({shown_name(qname)})") from None
    if cache_name(analysis.query_name(section)) != name:
        raise DatasetError(f"it names analysis {qname}, not the one of its folder")
    kept = _parse(data)
    if kept is None:
        raise DatasetError("it cannot be read")
    try:
        fresh = rows_of_run(qname, dataset, run, params)
    except KmemscopeError as exc:
        raise DatasetError(f"running {qname} again failed: {exc.args[0]}") from None
    fresh = fresh.replace_schema_metadata(None)
    return kept[0].replace_schema_metadata(None).equals(fresh)

