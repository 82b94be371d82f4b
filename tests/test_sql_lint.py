"""No SQL text is built from values: every f-string or str.format that makes SQL interpolates
only quoted identifiers and literals, or says on its own lines why its pieces are safe.

A name from a trace (an event system called `x'; COPY ...`) or from a user must reach DuckDB
either bound as a parameter or through quote_ident/quote_literal. Composed fragments that
kmemscope builds itself from such quoted parts carry a `# sql-safe: <why>` comment, so a
reviewer reads the reason where the SQL is made.
"""
import ast
import json
import re
from pathlib import Path

from conftest import PROJECT_ROOT

CODE_DIRS = ("cli", "parsers", "queries", "notebooks", "capture", "benchmarks")
# Text that is SQL: starts like a statement, or selects from something.
SQL_START = re.compile(r"^\s*\(?\s*(SELECT|CREATE|COPY|INSERT|WITH|DROP|ATTACH|DESCRIBE|SET|PRAGMA|"
                       r"EXPORT|INSTALL|LOAD|UPDATE|DELETE)\b", re.I)
SQL_BODY = re.compile(r"\bSELECT\b.*\bFROM\b|\bCREATE\s+(TEMP\s+)?(VIEW|TABLE)\b|\bread_parquet\(",
                      re.I | re.S)
SAFE_CALLS = {"quote_ident", "quote_literal", "int", "float"}
MARKER = "# sql-safe:"


def _sources():
    for folder in CODE_DIRS:
        for path in sorted((PROJECT_ROOT / folder).rglob("*.py")):
            yield path, path.read_text()
        for path in sorted((PROJECT_ROOT / folder).rglob("*.ipynb")):
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


def _marked(lines, node):
    first, last = node.lineno, getattr(node, "end_lineno", node.lineno)
    return any(MARKER in lines[i - 1] for i in range(max(1, first - 1), last + 1))


def unsafe_sql_strings(text):
    """(line, snippet) of SQL f-strings/format calls with an unexplained interpolation."""
    tree = ast.parse(text)
    lines = text.splitlines()
    found = []
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
        if not _looks_like_sql(literal) or all(_safe_value(v) for v in values):
            continue
        if not _marked(lines, node):
            found.append((node.lineno, lines[node.lineno - 1].strip()[:100]))
    return found


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
