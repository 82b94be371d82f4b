"""The SQL modules of queries/lib/: declared dependencies, derived tables and includes, `_` for
internals, only the included modules run, and each public view's documented columns are the
ones DuckDB reports for it on a real dataset."""
import re

import pytest

from kmemscope.dataset.schema import DERIVED_COLUMNS
from kmemscope.common.errors import QueryError
from kmemscope.queries import catalog, runner, sql_lib

from conftest import EXAMPLES
from kmrun import kmemscope, rows_of


def _refs(sql, names):
    body = re.sub(r"--[^\n]*", "", sql)
    return {n for n in names if re.search(r"(?<![\w])" + re.escape(n) + r"\b", body)}


def test_every_module_declares_the_modules_whose_views_it_reads():
    mods = sql_lib.modules()
    assert set(mods) >= {"allocs", "compaction", "thp", "vmstat"}
    owner = {v: m.name for m in mods.values() for v in m.defines}
    for m in mods.values():
        read = {owner[v] for v in _refs(m.sql, set(owner) - set(m.defines))}
        assert read == set(m.includes), f"lib/{m.name}.sql reads {sorted(read)}, includes {m.includes}"


def test_modules_run_after_what_they_include():
    order = list(sql_lib.modules())
    for i, name in enumerate(order):
        assert set(sql_lib.modules()[name].includes) <= set(order[:i])
    text = sql_lib.common_sql()
    assert text.index("CREATE TEMP VIEW page_allocs") < text.index("CREATE TEMP VIEW direct_compactions")


def test_analyses_do_not_redefine_a_shared_view():
    internal = {v for m in sql_lib.modules().values() for v in m.internal}
    public = sql_lib.public_views()
    for a in catalog.load_analyses().values():
        text = a.prelude + "\n".join(s.sql for s in a.sections)
        made_here = set(re.findall(r"(?i)CREATE\s+(?:OR\s+REPLACE\s+)?TEMP\s+(?:VIEW|TABLE)\s+(\w+)",
                                   text))
        assert not (made_here & public - internal), \
            f"{a.name} redefines a shared view: {sorted(made_here & public)}"


def test_a_header_that_disagrees_with_its_sql_is_an_error(tmp_path):
    bad = tmp_path / "x.sql"
    bad.write_text("-- lib/x: a module.\n-- include: (none)\n-- views: a_view\n\n"
                   "CREATE TEMP VIEW other_view AS SELECT 1;\n")
    with pytest.raises(QueryError, match="creates"):
        sql_lib.parse_module(bad)
    bad.write_text("-- lib/x: a module.\n-- views: helper\n-- internal: unprefixed\n\n"
                   "CREATE TEMP VIEW helper AS SELECT 1;\nCREATE TEMP VIEW unprefixed AS SELECT 1;\n")
    with pytest.raises(QueryError, match="internal ones always"):
        sql_lib.parse_module(bad)


def test_a_module_names_modules_with_include_never_requires(tmp_path):
    """`requires` names tables in an analysis' header: a module that says it is refused, not
    read as modules (nor ignored)."""
    for name, body in (("a", "-- include: (none)\n-- views: v_a\n"),
                       ("b", "-- include: a\n-- views: v_b\n")):
        (tmp_path / f"{name}.sql").write_text(f"-- lib/{name}: m.\n{body}\n"
                                              f"CREATE TEMP VIEW v_{name} AS SELECT 1;\n")
    assert sql_lib.parse_module(tmp_path / "b.sql").includes == ("a",)
    (tmp_path / "c.sql").write_text("-- lib/c: m.\n-- requires: a\n-- views: v_c\n\n"
                                    "CREATE TEMP VIEW v_c AS SELECT 1;\n")
    with pytest.raises(QueryError, match="include"):
        sql_lib.parse_module(tmp_path / "c.sql")


def test_a_cycle_or_an_unknown_module_is_an_error(tmp_path, monkeypatch):
    for name, req in (("a", "b"), ("b", "a")):
        (tmp_path / f"{name}.sql").write_text(f"-- lib/{name}: m.\n-- include: {req}\n-- views: v_{name}\n\n"
                                              f"CREATE TEMP VIEW v_{name} AS SELECT 1;\n")
    monkeypatch.setattr(sql_lib, "LIB_DIR", tmp_path)
    sql_lib.modules.cache_clear()
    try:
        with pytest.raises(QueryError, match="include each other"):
            sql_lib.modules()
        (tmp_path / "b.sql").write_text("-- lib/b: m.\n-- include: nowhere\n-- views: v_b\n\n"
                                        "CREATE TEMP VIEW v_b AS SELECT 1;\n")
        sql_lib.modules.cache_clear()
        with pytest.raises(QueryError, match="no module"):
            sql_lib.modules()
    finally:
        sql_lib.modules.cache_clear()


def test_every_module_declares_the_derived_tables_it_reads():
    for m in sql_lib.modules().values():
        assert _refs(m.sql, set(DERIVED_COLUMNS)) == set(m.derived), f"lib/{m.name}.sql"
    assert sql_lib.modules()["callsites"].derived == ("alloc_stacks",)


def test_every_analysis_includes_the_modules_whose_views_it_reads():
    """What an analysis includes is what its SQL reads, no more; every section runs after the
    modules of every view it reads."""
    owner = {v: m.name for m in sql_lib.modules().values() for v in m.defines}
    for a in catalog.load_analyses().values():
        included = set(a.common.include).union(*(s.include for s in a.sections))
        text = a.prelude + "\n".join(s.sql for s in a.sections)
        read = {owner[v] for v in _refs(text, set(owner))}
        assert read == included, f"{a.name} reads {sorted(read)}, includes {sorted(included)}"
        for sec in a.sections:
            read = {owner[v] for v in _refs(a.prelude + "\n" + sec.sql, set(owner))}
            assert read <= set(a.modules(sec)), a.query_name(sec)


def test_each_kernel_rule_is_written_in_one_module():
    """The frame-skip list, the class rule per era and compaction's begin/end pairing are
    written once in queries/lib/ and nowhere in the analyses."""
    rules = {"callsites": r"'arch_stack_walk'", "allocs": r"THEN 'highatomic_eligible'",
             "compaction": r"FROM mm_compaction_begin"}
    for module, pattern in rules.items():
        where = [str(p.relative_to(catalog.QUERY_DIR))
                 for p in sorted(catalog.QUERY_DIR.glob("**/*.sql")) if re.search(pattern, p.read_text())]
        assert where == [f"lib/{module}.sql"], (pattern, where)


def test_an_unknown_include_or_a_view_read_without_its_include_is_an_error(tmp_path):
    bad = tmp_path / "x.sql"
    bad.write_text("-- x: an analysis\n-- @include allocs, nowhere\n\nSELECT 1 AS run_id\n")
    with pytest.raises(QueryError, match="'nowhere', which is no module"):
        catalog.parse_analysis(bad)
    bad.write_text("-- x: an analysis\n-- @include allocs\n\n"
                   "SELECT run_id FROM page_allocs JOIN vmstat_deltas USING (run_id)\n")
    with pytest.raises(QueryError, match="modules it does not include: vmstat") as err:
        catalog.parse_analysis(bad)
    assert "@include vmstat" in err.value.hint
    bad.write_text("-- x: an analysis\n-- @include allocs, vmstat\n\n"
                   "SELECT run_id FROM page_allocs JOIN vmstat_deltas USING (run_id)\n")
    assert catalog.parse_analysis(bad).modules(catalog.parse_analysis(bad).sections[0]) == \
        ["allocs", "vmstat"]


@pytest.fixture(scope="module")
def example_ds(tmp_path_factory):
    ds = tmp_path_factory.mktemp("lib") / "ds"
    kmemscope("parse", "-q", EXAMPLES / "kmem-compaction", "-o", ds)
    return ds


def _views(backend):
    rows = backend.con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    return {r[0] for r in rows}


def test_only_the_included_modules_and_what_they_require_run(example_ds):
    backend = runner.open_runs(example_ds, modules=["vmstat"])[0]
    try:
        made = _views(backend)
    finally:
        backend.close()
    assert {"vmstat_deltas", "trace_windows"} <= made
    assert not made & {"page_allocs", "direct_compactions", "thp_fault_attempts", "frame_skip"}
    backend = runner.open_runs(example_ds, modules=["compaction"])[0]
    try:
        made = _views(backend)
    finally:
        backend.close()
    assert {"page_allocs", "vmstat_deltas", "direct_compactions", "compaction_run_pairing"} <= made
    assert not made & {"thp_fault_attempts", "stack_frames"}


def test_adhoc_sql_gets_every_module_that_needs_no_derived_table(example_ds):
    out = kmemscope("sql", example_ds, "SELECT table_name FROM information_schema.tables",
                    "--format", "json").stdout
    made = {r["table_name"] for r in rows_of(out)}
    for m in sql_lib.modules().values():
        if m.derived:
            assert not made & set(m.views), m.name
        else:
            assert set(m.views) <= made, m.name


def test_each_public_view_documents_the_columns_it_returns(example_ds):
    every = list(sql_lib.modules())
    backend = runner.open_runs(example_ds, modules=every, derived=sql_lib.derived_of(every))[0]
    try:
        for m in sql_lib.modules().values():
            assert [v.name for v in m.docs] == list(m.views), f"lib/{m.name}.sql: a view lacks docs"
            for view in m.docs:
                assert view.doc, f"{view.name} says nothing about what it holds"
                got = [r[0] for r in backend.con.execute(f"DESCRIBE {view.name}").fetchall()]
                assert [c.name for c in view.columns] == got, view.name
    finally:
        backend.close()
