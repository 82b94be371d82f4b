"""No SQL text is built from values: every f-string or str.format that makes SQL interpolates
only quoted identifiers and literals, or says on its own lines why its pieces are safe.

A name from a trace (an event system called `x'; COPY ...`) or from a user must reach DuckDB
either bound as a parameter or through quote_ident/quote_literal. Composed fragments that
kmemscope builds itself from such quoted parts carry a `# sql-safe: <why>` comment, so a
reviewer reads the reason where the SQL is made. A marker that explains no such SQL
(left behind when the SQL beside it changed) is an error too: each one is a claim a
reviewer relies on.

The folders linted are the project's code folders (tests/project.py: setup.cfg's
package_dir, then benchmarks/ and tools/), so a layer moved or added is linted.
"""
import ast
import json
import re
from pathlib import Path

from conftest import PROJECT_ROOT
from project import code_files
# Text that is SQL: starts like a statement, or selects from something.
SQL_START = re.compile(r"^\s*\(?\s*(SELECT|CREATE|COPY|INSERT|WITH|DROP|ATTACH|DESCRIBE|SET|PRAGMA|"
                       r"EXPORT|INSTALL|LOAD|UPDATE|DELETE)\b", re.I)
SQL_BODY = re.compile(r"\bSELECT\b.*\bFROM\b|\bCREATE\s+(TEMP\s+)?(VIEW|TABLE)\b|\bread_parquet\(",
                      re.I | re.S)
SAFE_CALLS = {"quote_ident", "quote_literal", "int", "float"}
MARKER = "# sql-safe:"


def _sources():
    for path in code_files((".py", ".ipynb")):
        if path.suffix == ".py":
            yield path, path.read_text()
        else:
            cells = json.loads(path.read_text())["cells"]
            yield path, "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def _looks_like_sql(text):
    return bool(SQL_START.match(text) or SQL_BODY.search(text))


def _safe_value(node):
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        return name in SAFE_CALLS
    return isinstance(node, ast.Constant)


_COMPOUND = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor,
             ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match)


def _statements(tree):
    """{node: the first line of the simple statement that holds it} for every node."""
    out = {}
    for stmt in ast.walk(tree):
        if isinstance(stmt, ast.stmt) and not isinstance(stmt, _COMPOUND):
            for node in ast.walk(stmt):
                out[node] = stmt.lineno
    return out


def _span(node, starts):
    """The lines a marker may stand on for `node`: from the line above its statement to
    its last line."""
    first = min(node.lineno, starts.get(node, node.lineno))
    return range(max(1, first - 1), getattr(node, "end_lineno", node.lineno) + 1)


def _marked(lines, node, starts=None):
    return any(MARKER in lines[i - 1] for i in _span(node, starts or {}))


def _interpolated_sql(tree):
    """The nodes that build SQL text with a value that is not quoted or a constant."""
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            literal = "".join(v.value for v in node.values
                              if isinstance(v, ast.Constant) and isinstance(v.value, str))
            values = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "format" and isinstance(node.func.value, ast.Constant)
              and isinstance(node.func.value.value, str)):
            literal = node.func.value.value
            values = list(node.args) + [k.value for k in node.keywords]
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)
              and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)):
            literal, values = node.left.value, [node.right]
        else:
            continue
        if _looks_like_sql(literal) and not all(_safe_value(v) for v in values):
            yield node


def unsafe_sql_strings(text):
    """(line, snippet) of SQL f-strings/format calls with an unexplained interpolation."""
    tree, lines = ast.parse(text), text.splitlines()
    starts = _statements(tree)
    return [(node.lineno, lines[node.lineno - 1].strip()[:100])
            for node in _interpolated_sql(tree) if not _marked(lines, node, starts)]


def _built_text(tree):
    """Every node that builds text from a value that is not a constant: an f-string with a
    field, str.format or % on a literal, or a literal joined with + (what a marker explains,
    whole statements or the fragments they are made of)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            if any(isinstance(v, ast.FormattedValue) for v in node.values):
                yield node
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "format"):
            yield node                      # on a literal or on a named SQL template
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)) and any(
                isinstance(side, (ast.Constant, ast.JoinedStr)) and
                isinstance(getattr(side, "value", ""), str) for side in (node.left, node.right)):
            yield node


def stray_markers(text):
    """Lines of `# sql-safe:` markers beside no text built from values: each marker is a
    claim about the statement on its line or the next, so one left behind when that
    statement changed is found."""
    tree, lines = ast.parse(text), text.splitlines()
    starts = _statements(tree)
    covered = set()
    for node in _built_text(tree):
        covered.update(_span(node, starts))
    return [i for i, line in enumerate(lines, 1) if MARKER in line and i not in covered]


def test_the_lint_finds_sql_built_from_names():
    bad = 'con.execute(f"SELECT \'{name}\' AS t FROM {quote_ident(name)}")\n'
    assert unsafe_sql_strings(bad) == [(1, bad.strip()[:100])]
    assert unsafe_sql_strings('sql = "SELECT * FROM {t}".format(t=name)\n')
    assert unsafe_sql_strings('sql = "SELECT %s FROM runs" % col\n')
    ok = 'con.execute(f"SELECT ? AS t FROM {quote_ident(name)}", [name])\n'
    assert unsafe_sql_strings(ok) == []
    marked = 'con.execute(f"SELECT {cols} FROM t")  # sql-safe: cols joins quote_ident() names\n'
    assert unsafe_sql_strings(marked) == []
    assert unsafe_sql_strings('raise QueryError(f"{path}: every section needs a SELECT")\n') == []


def test_no_sql_is_built_from_unquoted_values():
    problems = [f"{path.relative_to(PROJECT_ROOT)}:{line}: {snippet}"
                for path, text in _sources() for line, snippet in unsafe_sql_strings(text)]
    assert not problems, ("SQL built from values: quote identifiers (quote_ident), bind values, "
                          "or explain with `# sql-safe: <why>`:\n" + "\n".join(problems))


def test_the_lint_finds_a_marker_that_explains_nothing():
    assert stray_markers('x = 1  # sql-safe: nothing here is SQL\n') == [1]
    marked = 'con.execute(f"SELECT {cols} FROM t")  # sql-safe: cols joins quote_ident() names\n'
    assert stray_markers(marked) == []
    above = '# sql-safe: cols joins quote_ident() names\ncon.execute(f"SELECT {cols} FROM t")\n'
    assert stray_markers(above) == []


def test_every_sql_safe_marker_explains_sql_built_from_values():
    problems = [f"{path.relative_to(PROJECT_ROOT)}:{line}"
                for path, text in _sources() for line in stray_markers(text)]
    assert not problems, ("`# sql-safe:` markers beside no SQL built from values (move the "
                          "marker to the SQL it explains, or remove it):\n" + "\n".join(problems))


def test_the_lint_reads_every_code_folder():
    """The folders come from setup.cfg: the dataset layer and the package root, where most
    SQL is built, are linted."""
    seen = {path.relative_to(PROJECT_ROOT).parts[0] for path, _ in _sources()}
    assert {"dataset", "kmemscope", "queries", "parsers", "cli", "notebooks", "common",
            "capture", "benchmarks", "tools"} <= seen, seen

