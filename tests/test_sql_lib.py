"""The shared views of the analyses (queries/lib/): declared dependencies, `_` for internals."""
import re

import pytest

from kmemscope.errors import QueryError
from kmemscope.queries import sql_lib


def _refs(sql, names):
    body = re.sub(r"--[^\n]*", "", sql)
    return {n for n in names if re.search(r"(?<![\w])" + re.escape(n) + r"\b", body)}


def test_every_module_declares_the_modules_whose_views_it_reads():
    mods = sql_lib.modules()
    assert set(mods) >= {"allocs", "compaction", "thp", "vmstat"}
    owner = {v: m.name for m in mods.values() for v in m.defines}
    for m in mods.values():
        read = {owner[v] for v in _refs(m.sql, set(owner) - set(m.defines))}
        assert read == set(m.requires), f"lib/{m.name}.sql reads {sorted(read)}, requires {m.requires}"


def test_modules_run_after_what_they_require():
    order = list(sql_lib.modules())
    for i, name in enumerate(order):
        assert set(sql_lib.modules()[name].requires) <= set(order[:i])
    text = sql_lib.common_sql()
    assert text.index("CREATE TEMP VIEW page_allocs") < text.index("CREATE TEMP VIEW direct_compactions")


def test_analyses_do_not_redefine_a_shared_view():
    from kmemscope.queries import catalog

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
    bad.write_text("-- lib/x: a module.\n-- requires: (none)\n-- views: a_view\n\n"
                   "CREATE TEMP VIEW other_view AS SELECT 1;\n")
    with pytest.raises(QueryError, match="creates"):
        sql_lib.parse_module(bad)
    bad.write_text("-- lib/x: a module.\n-- views: helper\n-- internal: unprefixed\n\n"
                   "CREATE TEMP VIEW helper AS SELECT 1;\nCREATE TEMP VIEW unprefixed AS SELECT 1;\n")
    with pytest.raises(QueryError, match="internal ones always"):
        sql_lib.parse_module(bad)


def test_a_cycle_or_an_unknown_module_is_an_error(tmp_path, monkeypatch):
    for name, req in (("a", "b"), ("b", "a")):
        (tmp_path / f"{name}.sql").write_text(f"-- lib/{name}: m.\n-- requires: {req}\n-- views: v_{name}\n\n"
                                              f"CREATE TEMP VIEW v_{name} AS SELECT 1;\n")
    monkeypatch.setattr(sql_lib, "LIB_DIR", tmp_path)
    sql_lib.modules.cache_clear()
    try:
        with pytest.raises(QueryError, match="require each other"):
            sql_lib.modules()
        (tmp_path / "b.sql").write_text("-- lib/b: m.\n-- requires: nowhere\n-- views: v_b\n\n"
                                        "CREATE TEMP VIEW v_b AS SELECT 1;\n")
        sql_lib.modules.cache_clear()
        with pytest.raises(QueryError, match="no module"):
            sql_lib.modules()
    finally:
        sql_lib.modules.cache_clear()
