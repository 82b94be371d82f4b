"""Run the named analyses in queries/*.sql over a dataset with DuckDB.

An analysis is one .sql file. Its header comment documents it (Perfetto style)
and carries a few machine-read lines:

    -- NAME: one-line description                    (the first line)
    -- @param NAME TYPE DEFAULT [CHOICE|CHOICE] description
    -- @param NAME TYPE DEFAULT [MIN..MAX] description   (a number in that range)
    -- @param NAME FILE DEFAULT description   a regular file of at most 1 MiB, bound
                                 as its absolute path; DEFAULT is relative to queries/
    -- @requires TABLE ...       event tables the answer needs: error if no selected run has them
    -- @optional TABLE ...       tables used when present; an empty stand-in otherwise
    -- @any_of TABLE ...         at least one of these must be present
    -- @procfs TABLE ...         procfs tables (kmemscope record only); missing -> error
    -- @procfs_optional TABLE .. procfs tables whose absence only NULLs some columns (a note)
    -- @derived page_pairs       per-run derived tables (queries/derive.py), made on first use
    -- @uses TABLE ...           tables a @prelude reads: a stand-in if absent, no note
    -- @section NAME: description
    -- @prelude                  statements run before the chosen section (temp views)

The body is one SELECT, or several `@section`s, each one SELECT; `NAME.SECTION`
picks a section, `NAME` the first. Parameters are DuckDB named parameters
(`$top_n`), bound at execution, never pasted into SQL text, also in @prelude
statements (CREATE TABLE ... AS SELECT; a view cannot hold a parameter).

Before the analysis runs, the engine registers per-run facts (queries/eras.py)
and the views of queries/_common.sql. Results are pyarrow Tables that start with
run_id and labels; notes about what a run lacks travel in the schema metadata
under b"kmemscope.notes" (a JSON list of strings; see `notes_of`).
"""
import difflib
import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from kmemscope.errors import DatasetError, QueryError

from . import dataset as ds
from . import derive
from . import eras

QUERY_DIR = Path(__file__).resolve().parent
COMMON_SQL = QUERY_DIR / "_common.sql"
NOTES_KEY = b"kmemscope.notes"
PROCFS_TABLES = ("vmstat", "pagetypeinfo_free", "pagetypeinfo_blocks", "buddyinfo")

# Columns the analyses read, with the type a stand-in gets when a run's format
# lacks the column (an older kernel) or the dataset lacks the table.
_EVENT = {"ts": "BIGINT", "cpu": "INTEGER", "pid": "INTEGER", "comm": "VARCHAR"}
TABLE_COLUMNS = {
    "mm_page_alloc": {**_EVENT, "pfn": "UBIGINT", "order": "UINTEGER",
                      "gfp_flags": "UBIGINT", "migratetype": "INTEGER"},
    "mm_page_free": {**_EVENT, "pfn": "UBIGINT", "order": "UINTEGER"},
    "mm_page_alloc_extfrag": {**_EVENT, "pfn": "UBIGINT", "alloc_order": "INTEGER",
                              "fallback_order": "INTEGER", "alloc_migratetype": "INTEGER",
                              "fallback_migratetype": "INTEGER", "change_ownership": "INTEGER"},
    "mm_page_alloc_zone_locked": {**_EVENT, "pfn": "UBIGINT", "order": "UINTEGER",
                                  "migratetype": "INTEGER", "percpu_refill": "INTEGER"},
    "mm_page_pcpu_drain": {**_EVENT, "pfn": "UBIGINT", "order": "UINTEGER", "migratetype": "INTEGER"},
    "mm_compaction_begin": {**_EVENT, "zone_start": "UBIGINT", "migrate_pfn": "UBIGINT",
                            "free_pfn": "UBIGINT", "zone_end": "UBIGINT", "sync": "UTINYINT"},
    "mm_compaction_end": {**_EVENT, "zone_start": "UBIGINT", "migrate_pfn": "UBIGINT",
                          "free_pfn": "UBIGINT", "zone_end": "UBIGINT", "sync": "UTINYINT",
                          "status": "INTEGER"},
    "mm_compaction_try_to_compact_pages": {**_EVENT, "order": "INTEGER", "gfp_mask": "UBIGINT",
                                           "prio": "INTEGER"},
    "mm_compaction_deferred": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER", "order": "INTEGER",
                               "considered": "UINTEGER", "defer_shift": "UINTEGER",
                               "order_failed": "INTEGER"},
    "mm_compaction_defer_compaction": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER",
                                       "order": "INTEGER", "considered": "UINTEGER",
                                       "defer_shift": "UINTEGER", "order_failed": "INTEGER"},
    "mm_compaction_defer_reset": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER", "order": "INTEGER",
                                  "considered": "UINTEGER", "defer_shift": "UINTEGER",
                                  "order_failed": "INTEGER"},
    "mm_compaction_finished": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER", "order": "INTEGER",
                               "ret": "INTEGER"},
    "mm_compaction_suitable": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER", "order": "INTEGER",
                               "ret": "INTEGER"},
    "mm_compaction_kcompactd_wake": {**_EVENT, "nid": "INTEGER", "order": "INTEGER",
                                     "highest_zoneidx": "UINTEGER"},
    "mm_compaction_wakeup_kcompactd": {**_EVENT, "nid": "INTEGER", "order": "INTEGER",
                                       "highest_zoneidx": "UINTEGER"},
    "mm_vmscan_wakeup_kswapd": {**_EVENT, "nid": "INTEGER", "zid": "INTEGER", "order": "INTEGER",
                                "gfp_flags": "UBIGINT"},
    "mm_vmscan_kswapd_wake": {**_EVENT, "nid": "INTEGER", "zid": "INTEGER", "order": "INTEGER"},
    "mm_vmscan_direct_reclaim_begin": {**_EVENT, "order": "INTEGER", "gfp_flags": "UBIGINT"},
    "mm_vmscan_direct_reclaim_end": {**_EVENT, "nr_reclaimed": "UBIGINT"},
    "runs": {"kernel_release": "VARCHAR", "arch": "VARCHAR", "first_ts": "BIGINT",
             "last_ts": "BIGINT", "pageblock_order": "INTEGER", "manifest": "VARCHAR",
             "migratetypes": "VARCHAR[]", "labels": "MAP(VARCHAR, VARCHAR)",
             "lost_events": "BIGINT", "sha256": "VARCHAR"},
    "print_flags": {"event": "VARCHAR", "field": "VARCHAR", "kind": "VARCHAR",
                    "value": "UBIGINT", "name": "VARCHAR"},
    "lost_events": {"cpu": "INTEGER", "ts": "BIGINT", "missed": "BIGINT"},
    "vmstat": {"ts": "BIGINT", "name": "VARCHAR", "value": "BIGINT"},
    "pagetypeinfo_free": {"ts": "BIGINT", "node": "INTEGER", "zone": "VARCHAR",
                          "migratetype": "VARCHAR", "order": "INTEGER", "count": "BIGINT"},
    "pagetypeinfo_blocks": {"ts": "BIGINT", "node": "INTEGER", "zone": "VARCHAR",
                            "migratetype": "VARCHAR", "blocks": "BIGINT"},
    "buddyinfo": {"ts": "BIGINT", "node": "INTEGER", "zone": "VARCHAR", "order": "INTEGER",
                  "count": "BIGINT"},
}
# Tables that _common.sql reads: always given a view (an empty stand-in if absent).
ALWAYS = ("print_flags", "mm_page_alloc", "vmstat",
          # the direct-compaction outcome model (direct_compactions in _common.sql)
          "mm_compaction_try_to_compact_pages", "mm_compaction_deferred", "mm_compaction_end",
          "mm_compaction_defer_reset", "mm_compaction_finished", "mm_vmscan_direct_reclaim_begin")

_TYPES = {"INTEGER": int, "BIGINT": int, "DOUBLE": float, "VARCHAR": str, "BOOLEAN": None,
          "FILE": str}
MAX_PARAM_FILE = 1 << 20       # a FILE parameter is a small table (a mapping), not data
_SQL_TYPE = {"FILE": "VARCHAR"}
_PARAM_REF = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass
class Param:
    name: str
    type: str
    default: object
    choices: tuple
    doc: str
    bounds: tuple = None        # (min, max) of a number, inclusive

    def describe_range(self):
        lo, hi = self.bounds
        return f"from {lo:g} to {hi:g}" if self.type == "DOUBLE" else f"from {lo} to {hi}"


_REQ_KEYS = ("requires", "optional", "any_of", "procfs", "procfs_optional", "derived", "uses")


@dataclass
class Section:
    name: str
    description: str
    sql: str = ""
    requires: list = field(default_factory=list)
    optional: list = field(default_factory=list)
    any_of: list = field(default_factory=list)
    procfs: list = field(default_factory=list)
    procfs_optional: list = field(default_factory=list)
    derived: list = field(default_factory=list)
    uses: list = field(default_factory=list)


@dataclass
class Analysis:
    name: str
    description: str
    path: Path
    params: dict = field(default_factory=dict)
    common: Section = None           # directives that apply to every section
    prelude: str = ""
    sections: list = field(default_factory=list)

    def needs(self, section):
        """The table requirements of `section`: the file's plus its own."""
        out = Section(section.name, section.description, section.sql)
        for key in _REQ_KEYS:
            setattr(out, key, list(dict.fromkeys(getattr(self.common, key) + getattr(section, key))))
        # A section's @any_of replaces the file's: it names what that section needs.
        out.any_of = list(section.any_of or self.common.any_of)
        return out


def _tables(needs):
    return set(needs.requires + needs.optional + needs.any_of + needs.procfs +
               needs.procfs_optional + needs.uses + list(ALWAYS))


def _check_file(param, text, qname):
    """A FILE parameter: an existing regular file, small, named without glob characters."""
    where = f"parameter {param.name} of {qname}"
    text = str(text)
    # DuckDB's readers expand * ? [ in a path: such a name could read other files.
    if not text or any(c in text for c in "*?[]{}"):
        raise QueryError(f"{where} must name one file (no * ? [ ] {{ }}), not {text!r}")
    try:
        st = os.stat(text)
    except OSError as exc:
        raise QueryError(f"{where}: cannot read {text}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise QueryError(f"{where}: {text} is not a regular file")
    if st.st_size > MAX_PARAM_FILE:
        raise QueryError(f"{where}: {text} is {st.st_size} bytes, more than {MAX_PARAM_FILE}")
    if not os.access(text, os.R_OK):
        raise QueryError(f"{where}: cannot read {text}: permission denied")
    return os.path.abspath(text)


def _convert(param, text, qname):
    if text is None:
        return None
    if param.type == "FILE":
        return _check_file(param, text, qname)
    if param.type == "BOOLEAN":
        if isinstance(text, bool):
            return text
        low = str(text).strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise QueryError(f"parameter {param.name} of {qname} must be true or false, not {text!r}")
    conv = _TYPES[param.type]
    try:
        value = conv(text.strip() if isinstance(text, str) and conv is not str else text)
    except (TypeError, ValueError, OverflowError):
        raise QueryError(f"parameter {param.name} of {qname} must be {param.type.lower()}, "
                         f"not {text!r}") from None
    if conv is float and not math.isfinite(value):
        raise QueryError(f"parameter {param.name} of {qname} must be a finite number, not {text!r}")
    if param.bounds and not param.bounds[0] <= value <= param.bounds[1]:
        raise QueryError(f"parameter {param.name} of {qname} must be {param.describe_range()}, "
                         f"not {text!r}")
    if param.choices and str(value) not in param.choices:
        raise QueryError(f"parameter {param.name} of {qname} must be one of "
                         f"{', '.join(param.choices)}, not {text!r}")
    return value


def parse_analysis(path):
    """Read one .sql file into an Analysis (header directives and sections)."""
    text = Path(path).read_text()
    name = Path(path).stem
    lines = text.splitlines()
    first = lines[0] if lines else ""
    m = re.match(r"--\s*([\w.]+)\s*:\s*(.*)", first)
    if not m or m.group(1) != name:
        raise QueryError(f"{path}: the first line must be `-- {name}: <description>`")
    a = Analysis(name=name, description=m.group(2).strip(), path=Path(path))
    a.common = Section("", a.description)
    target = a.common       # where directives go: the file, or the current section
    prelude, body = False, []

    def flush():
        sql = "\n".join(body).strip()
        if prelude:
            a.prelude = sql
        elif target is not a.common:
            target.sql = sql

    for line in lines:
        d = re.match(r"--\s*@(\w+)\s*(.*)", line)
        if not d:
            if target is a.common and not prelude and not line.startswith("--") and line.strip():
                target = Section("", a.description)     # a body without @section
                a.sections.append(target)
            body.append(line)
            continue
        key, rest = d.group(1), d.group(2).strip()
        if key == "param":
            pm = re.match(r"(\w+)\s+(\w+)\s+(\S+)(?:\s+\[([^\]]*)\])?\s*(.*)", rest)
            if not pm or pm.group(2).upper() not in _TYPES:
                raise QueryError(f"{path}: bad @param line: {line}")
            bracket = pm.group(4)
            choices, bounds = (), None
            if bracket and ".." in bracket:
                conv = _TYPES[pm.group(2).upper()]
                lo, _, hi = bracket.partition("..")
                try:
                    bounds = (conv(lo), conv(hi))
                except (TypeError, ValueError):
                    raise QueryError(f"{path}: bad range in @param line: {line}") from None
            elif bracket:
                choices = tuple(c.strip() for c in bracket.split("|"))
            p = Param(pm.group(1), pm.group(2).upper(), None, choices, pm.group(5), bounds)
            default = pm.group(3)
            if p.type == "FILE" and default != "NULL":
                default = str(QUERY_DIR / default)
            p.default = None if default == "NULL" else _convert(p, default, name)
            a.params[p.name] = p
        elif key in _REQ_KEYS:
            getattr(target, key).extend(rest.replace(",", " ").split())
        elif key in ("section", "prelude"):
            flush()
            body = []
            if key == "prelude":
                prelude = True
            else:
                prelude = False
                sm = re.match(r"(\w+)\s*:?\s*(.*)", rest)
                if not sm:
                    raise QueryError(f"{path}: bad @section line: {line}")
                target = Section(sm.group(1), sm.group(2).strip())
                a.sections.append(target)
        else:
            raise QueryError(f"{path}: unknown directive @{key}")
    flush()
    if not a.sections or not all(sec.sql for sec in a.sections):
        raise QueryError(f"{path}: every section needs a SELECT")
    return a


def load_analyses():
    out = {}
    for path in sorted(QUERY_DIR.glob("*.sql")):
        if not path.name.startswith("_"):
            a = parse_analysis(path)
            out[a.name] = a
    return out


def list_queries():
    """[(name, one-line description)] for every analysis and every extra section."""
    out = []
    for a in load_analyses().values():
        out.append((a.name, a.description))
        for sec in a.sections[1:]:
            out.append((f"{a.name}.{sec.name}", sec.description))
    return out


def describe_query(name):
    """The header comment of an analysis, as written (its documentation)."""
    a, _ = _find(name)
    header = []
    for line in a.path.read_text().splitlines():
        if not line.startswith("--"):
            break
        header.append(line[2:].strip() if line.startswith("-- ") or line == "--" else line[2:])
    return "\n".join(header)


def _find(name):
    analyses = load_analyses()
    base, _, sec = str(name).partition(".")
    a = analyses.get(base)
    if a is None:
        every = [n for an in analyses.values() for n in [an.name] + [f"{an.name}.{s.name}"
                                                                   for s in an.sections if s.name]]
        close = difflib.get_close_matches(str(name), every, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}?" if close else "list them with `kmemscope queries`"
        raise QueryError(f"unknown query {name!r}", hint)
    if not sec:
        return a, a.sections[0]
    for s in a.sections:
        if s.name == sec:
            return a, s
    close = difflib.get_close_matches(sec, [s.name for s in a.sections if s.name], n=1)
    raise QueryError(f"query {base} has no section {sec!r}",
                     (f"did you mean {base}.{close[0]}? " if close else "") +
                     "sections: " + ", ".join(f"{base}.{s.name}" for s in a.sections[1:]))


def label_filter(labels):
    """{key: [values]} from "k=v" strings or a dict: a run matches every key, any of its values.

    `--label kernel=a --label kernel=b` selects the runs of either kernel;
    `--label kernel=a --label host=h1` those of kernel a on host h1.
    """
    if isinstance(labels, str):
        labels = [labels]
    if isinstance(labels, dict):
        return {str(k): [str(x) for x in (v if isinstance(v, (list, tuple, set)) else [v])]
                for k, v in labels.items()}
    wanted = {}
    for item in labels:
        k, sep, v = str(item).partition("=")
        if not sep or not k:
            raise QueryError(f"label filter {item!r} is not k=v")
        wanted.setdefault(k, [])
        if v not in wanted[k]:
            wanted[k].append(v)
    return wanted


def _select_runs(dataset, parts, run_ids, labels):
    if "runs" not in parts:
        raise DatasetError(f"dataset {dataset} has no runs table",
                           "it was not written by `kmemscope parse`")
    all_runs = sorted(parts["runs"])
    chosen = list(all_runs)
    if run_ids:
        chosen = []
        for want in ([run_ids] if isinstance(run_ids, str) else run_ids):
            hits = [r for r in all_runs if r == want] or [r for r in all_runs if r.startswith(str(want))]
            if len(hits) != 1:
                what = "no run" if not hits else f"{len(hits)} runs matching"
                raise QueryError(f"dataset has {what} {want!r}",
                                 "runs: " + ", ".join(all_runs[:20]) + (" ..." if len(all_runs) > 20 else ""))
            if hits[0] not in chosen:
                chosen.append(hits[0])
    if labels:
        wanted = label_filter(labels)
        con = ds.connect(dataset, run_ids=chosen, tables=["runs"])
        rows = con.sql("SELECT run_id, labels FROM runs").fetchall()
        con.close()
        kept = []
        for run_id, lab in rows:
            lab = _as_dict(lab)
            if all(lab.get(k) in values for k, values in wanted.items()):
                kept.append(run_id)
        if not kept:
            shown = ", ".join(f"{k}={'|'.join(v)}" for k, v in wanted.items())
            raise QueryError(f"no run has label {shown}",
                             "see the runs' labels with `kmemscope sql DATASET 'SELECT run_id, labels FROM runs'`")
        chosen = [r for r in chosen if r in kept]
    return chosen


def _as_dict(m):
    if m is None:
        return {}
    if isinstance(m, dict):
        if set(m) == {"key", "value"} and isinstance(m["key"], list):
            return dict(zip(m["key"], m["value"]))
        return m
    return dict(m)


def _check_tables(a, parts, chosen):
    """`a`: a Section holding the effective requirements."""
    """Raise for missing required tables; return notes for partly missing ones."""
    notes = []

    def runs_with(table):
        return [r for r in chosen if r in parts.get(table, {})]

    for t in a.requires:
        have = runs_with(t)
        if not have:
            if t not in parts:
                raise DatasetError(f"dataset has no {t} events",
                                   f"record with the {t} tracepoint enabled")
            raise DatasetError(f"{_runs_text(chosen)} {'has' if len(chosen) == 1 else 'have'} "
                               f"no {t} events", f"record with the {t} tracepoint enabled")
        for r in chosen:
            if r not in have:
                notes.append(f"run {r} has no {t} events: its rows are empty or zero")
    if a.any_of and not any(runs_with(t) for t in a.any_of):
        raise DatasetError(f"{_runs_text(chosen)}: no events of any of {', '.join(a.any_of)}",
                           "record with those tracepoints enabled")
    for t in a.procfs:
        have = runs_with(t)
        if not have:
            raise DatasetError(f"{_runs_text(chosen)} {'has' if len(chosen) == 1 else 'have'} "
                               f"no procfs tables (no {t})", "capture with `kmemscope record`")
        for r in chosen:
            if r not in have:
                notes.append(f"run {r} has no procfs tables (capture with `kmemscope record`): "
                             "it is left out")
    for t in a.procfs_optional:
        for r in chosen:
            if r not in parts.get(t, {}):
                notes.append(f"run {r} has no procfs table {t} (capture with `kmemscope record`): "
                             "the columns from it are NULL")
    for t in a.optional:
        if t.startswith("mm_"):
            for r in chosen:
                if r not in parts.get(t, {}):
                    notes.append(f"run {r} has no {t} events: counted as none")
    return notes


def _runs_text(chosen):
    if len(chosen) == 1:
        return f"run {chosen[0]}"
    return f"runs {', '.join(chosen[:5])}{' ...' if len(chosen) > 5 else ''}"


def _register_facts(con, chosen):
    import pyarrow as pa

    cols = ["run_id", "kernel_release", "arch", "first_ts", "last_ts", "pageblock_order",
            "manifest", "migratetypes"]
    rows = con.sql("SELECT " + ", ".join(cols) + " FROM runs").fetchall()
    facts, mts = eras.run_facts([dict(zip(cols, r)) for r in rows])
    facts_t = pa.Table.from_pylist(facts, schema=pa.schema([
        ("run_id", pa.string()), ("kernel_release", pa.string()),
        ("highatomic_era", pa.string()), ("highatomic_era_note", pa.string()),
        ("extfrag_era", pa.string()), ("pageblock_order", pa.int32()),
        ("pageblock_order_source", pa.string()), ("first_ts", pa.int64()),
        ("last_ts", pa.int64()), ("duration_s", pa.float64())]))
    mts_t = pa.Table.from_pylist(mts, schema=pa.schema([
        ("run_id", pa.string()), ("migratetype", pa.int32()), ("name", pa.string()),
        ("source", pa.string())]))
    meanings = [{"extfrag_era": e, "change_ownership": c, "meaning": m}
                for (e, c), m in eras.OWNERSHIP_MEANING.items()]
    con.register("_facts_in", facts_t)
    con.register("_mts_in", mts_t)
    con.register("_ownership_in", pa.Table.from_pylist(meanings))
    con.execute("CREATE TEMP TABLE run_facts AS SELECT f.run_id, r.labels, f.* EXCLUDE (run_id) "
                "FROM _facts_in AS f JOIN runs AS r USING (run_id)")
    con.execute("CREATE TEMP TABLE migratetype_names AS SELECT * FROM _mts_in")
    con.execute("CREATE TEMP TABLE extfrag_ownership AS SELECT * FROM _ownership_in")
    for name in ("_facts_in", "_mts_in", "_ownership_in"):
        con.unregister(name)
    return facts


def _assumption_notes(con, facts, needs):
    """Notes for per-run facts that were assumed rather than read from the run."""
    notes = []
    if "mm_page_alloc_extfrag" in needs.requires:
        for f in facts:
            if f["pageblock_order_source"].startswith("assumed"):
                notes.append(f"run {f['run_id']}: pageblock_order {f['pageblock_order_source']}")
    if {"mm_page_alloc_extfrag", "mm_page_pcpu_drain", "mm_page_alloc_zone_locked"} & set(needs.requires):
        rows = con.sql("SELECT DISTINCT run_id FROM migratetype_names "
                       "WHERE source LIKE 'KERNEL-ERAS.md%' ORDER BY run_id").fetchall()
        for (run,) in rows:
            notes.append(f"run {run}: no migratetype list in the run (no manifest): names follow "
                         "the upstream enum (0 Unmovable, 1 Movable, 2 Reclaimable, 3 HighAtomic)")
    return notes


def open_run_set(dataset, run_ids=None, labels=None, tables=None, threads=None):
    """Connection over the selected runs with run_facts and _common.sql views.

    Returns (connection, chosen run ids, table partitions). For notebooks and
    ad-hoc SQL that want the same per-run facts as the analyses.
    """
    parts = ds.table_runs(dataset)
    chosen = _select_runs(dataset, parts, run_ids, labels)
    wanted = set(tables) if tables is not None else set(TABLE_COLUMNS) | set(parts)
    wanted |= {"runs", *ALWAYS}
    columns = {t: TABLE_COLUMNS[t] for t in wanted if t in TABLE_COLUMNS}
    con = ds.connect(dataset, threads=threads, run_ids=chosen, columns=columns, tables=wanted)
    facts = _register_facts(con, chosen)
    for stmt in _statements(COMMON_SQL.read_text()):
        con.execute(stmt)
    return con, chosen, parts, facts


def run_query(name, dataset, run_ids=None, labels=None, params=None, threads=None):
    """Run analysis `name` (or `name.section`) over `dataset` -> pyarrow.Table.

    run_ids: a run id (or unique prefix) or a list of them; labels: {k: v} or
    ["k=v", ...]; a run must match all. params: {name: value}, values as
    strings from a command line or typed.
    """
    a, section = _find(name)
    qname = a.name if section is a.sections[0] else f"{a.name}.{section.name}"
    bound = {}
    params = dict(params or {})
    for key in params:
        if key not in a.params:
            known = ", ".join(a.params) or "none"
            raise QueryError(f"query {a.name} has no parameter {key!r}", f"its parameters: {known}")
    for p in a.params.values():
        bound[p.name] = _convert(p, params[p.name], qname) if p.name in params else p.default

    needs = a.needs(section)
    parts = ds.table_runs(dataset)
    chosen = _select_runs(dataset, parts, run_ids, labels)
    notes = _check_tables(needs, parts, chosen)
    con, chosen, parts, facts = open_run_set(dataset, chosen, None, _tables(needs), threads)
    notes += _assumption_notes(con, facts, needs)
    try:
        for name in needs.derived:
            _derived_view(con, dataset, name, chosen, parts, threads)
        # Parameters also live in a one-row table, so prelude views can read them.
        cols = ", ".join(f"CAST(${p.name} AS {_SQL_TYPE.get(p.type, p.type)}) AS {p.name}" for p in a.params.values())
        # sql-safe: parameter names match \w+ in our own .sql headers, types come from _TYPES
        con.execute(f"CREATE TEMP TABLE query_params AS SELECT {cols or '1 AS none'}", bound)
        for stmt in _statements(a.prelude):
            con.execute(stmt, _used(stmt, bound) or None)
        table = ds.query_arrow(con, section.sql, _used(section.sql, bound))
    except Exception as exc:   # duckdb.Error subclasses; keep the first line only
        raise QueryError(f"query {qname} failed: {ds.sql_error_text(exc)}") from exc
    finally:
        con.close()
    meta = dict(table.schema.metadata or {})
    meta[NOTES_KEY] = json.dumps(notes).encode()
    meta[b"kmemscope.query"] = qname.encode()
    return table.replace_schema_metadata(meta)


DERIVED_COLUMNS = {
    "page_pairs": {"pfn": "UBIGINT", "reuse": "BOOLEAN", "interval_ns": "BIGINT",
                   "same_cpu": "BOOLEAN", "order": "UTINYINT", "cpu": "INTEGER"},
    "pfn_allocs": {"pfn": "UBIGINT", "allocs": "BIGINT", "rank": "BIGINT"},
    "alloc_stacks": {"stack_id": "INTEGER", "frames": "VARCHAR[]", "addresses": "UBIGINT[]"},
    "alloc_stack_ids": {"ts": "BIGINT", "cpu": "INTEGER", "pfn": "UBIGINT", "order": "UINTEGER",
                        "stack_id": "INTEGER"},
    "stack_pairing": {"stacks": "BIGINT", "stacks_alloc": "BIGINT", "stacks_other": "BIGINT",
                      "stacks_unpaired": "BIGINT", "stacks_mismatched": "BIGINT",
                      "allocs": "BIGINT", "allocs_with_stack": "BIGINT"},
}


def _derived_view(con, dataset, name, chosen, parts, threads):
    if name not in DERIVED_COLUMNS:
        raise QueryError(f"unknown derived table {name}")
    if name in derive.STACK_TABLES:
        files = derive.stack_files(dataset, name, chosen, parts, threads)
    else:
        files = derive.derived_files(dataset, name, chosen, parts, threads)
    view = ds.quote_ident(name)
    if files:
        listed = ", ".join(ds.quote_literal(f) for f in files.values())
        # sql-safe: view is quote_ident(), listed joins quote_literal() paths
        con.execute(f"CREATE TEMP VIEW {view} AS SELECT * FROM read_parquet([{listed}], "
                    "hive_partitioning = true, hive_types = {'run_id': VARCHAR})")
    else:
        cols = ", ".join(["CAST(NULL AS VARCHAR) AS run_id"] +
                         [f"CAST(NULL AS {t}) AS {ds.quote_ident(c)}"
                          for c, t in DERIVED_COLUMNS[name].items()])
        # sql-safe: view is quote_ident(); cols casts NULL to quote_ident() columns
        con.execute(f"CREATE TEMP VIEW {view} AS SELECT {cols} WHERE false")


def _used(sql, bound):
    names = set(_PARAM_REF.findall(re.sub(r"--[^\n]*", "", sql)))
    return {k: v for k, v in bound.items() if k in names}


def _statements(sql):
    return [s for s in (x.strip() for x in re.sub(r"--[^\n]*", "", sql).split(";")) if s]


def notes_of(table):
    """The notes run_query attached to a result (runs lacking tables, assumptions)."""
    raw = (table.schema.metadata or {}).get(NOTES_KEY)
    return json.loads(raw) if raw else []
