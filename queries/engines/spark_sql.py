"""Translate DuckDB SQL to Spark SQL, for ad-hoc SQL on Spark (`kmemscope sql --engine spark`).

Named analyses do not need it: on Spark each run is one task that runs the
analysis with DuckDB itself (spark_engine.py). Ad-hoc SQL is Spark SQL over the
whole dataset, and it is written in DuckDB's dialect, with the shared views of
queries/lib/ beside the tables: both are translated here.

sqlglot (pinned: the `spark` extra of setup.cfg) parses the DuckDB text and
writes Spark SQL; kmemscope's own rules rewrite what sqlglot would translate
into something that runs but answers differently, and `lint` rejects what has
no exact Spark form. Rules (each exact, or rejected):

  percentile_cont(p) WITHIN GROUP (ORDER BY x), quantile_cont(x, p | [p, ...]),
  median(x)                -> percentile(x, p): Spark's exact, interpolating
                              percentile (sqlglot writes percentile_approx)
  list(x ORDER BY k)       -> transform(sort_array(collect_list(struct(k, x))), ...):
                              collect_list alone loses the order and drops NULLs
  string_agg(x, s ORDER BY k) -> listagg(x, s) WITHIN GROUP (ORDER BY k) (Spark 4)
  log(x)                   -> log10(x) (DuckDB's one-argument log is base 10,
                              Spark's is natural); log2(x) stays log2
  decimal literals (100.0) -> DOUBLE: DuckDB divides decimals in floating point,
                              Spark would round the quotient to 6 decimal places
  a & b, a | b, a ^ b      -> on uint64 values held as DECIMAL(20,0): per 32-bit
                              half in BIGINT, exact for 0 <= a, b < 2^64
                              (uint64="int64": the columns are BIGINT, plain ops)
  UBIGINT, UINTEGER, ...   -> DECIMAL(20,0), BIGINT, INT, SMALLINT
  a GLOB b                 -> a RLIKE the pattern turned into an anchored regex
  regexp_replace           -> POSIX classes ([:space:]) as Java classes; without
                              'g' only where the pattern can match once
  x ASOF [LEFT] JOIN t ON eqs AND t.k <= x.k
                           -> a window (last_value IGNORE NULLS) over x's and t's
                              rows finds t.k per row of x, then an equi-join on it
                              (asof_to_windows; checked against DuckDB's ASOF)
  several unnest() in one SELECT -> inline(arrays_zip(...)) AS (a, b)
  len(list)                -> size(list) (length() stays: characters of a string in both)
  read_csv($param, ...)    -> a view the backend registers from the bound path
                              (Dataset.sql(..., params={...}) on Spark)
  $name                    -> :name, bound by spark.sql(query, args=...), never pasted
  CREATE TEMP MACRO        -> none: each call written out where it is made (a scalar
                              macro as its expression, a table macro as a subquery;
                              a whole row `b` in a table macro as struct(b.*))
  CREATE TEMP VIEW         -> a Spark temporary view (re-resolved on use, as in DuckDB)
  CREATE TEMP TABLE        -> a DataFrame computed once (createOrReplaceTempView)
"""
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

SQLGLOT_VERSION = "30.30.0"      # the rules are checked against this version's output
UINT64_MODES = ("decimal", "int64")
_TWO32 = 4294967296


class TranslationError(ValueError):
    """SQL with a construct that has no exact Spark translation."""


@dataclass
class FileView:
    """A view the executor makes from a FILE parameter (read_csv in DuckDB)."""
    view: str
    param: str
    header: bool
    comment: str | None      # the comment character, if the parameter names one
    columns: dict            # name -> Spark type


@dataclass
class Statement:
    kind: str                # "view", "table" or "select"
    name: str | None         # the view/table name; None for a select
    sql: str                 # Spark SQL of the SELECT
    params: tuple = ()       # parameter names it binds
    files: list = field(default_factory=list)   # [FileView]

    def text(self):
        if self.kind == "select":
            return self.sql
        what = "TEMPORARY VIEW" if self.kind == "view" else "TEMPORARY TABLE (a cached DataFrame)"
        return f"-- {what} {self.name}\n{self.sql}"


def _sqlglot():
    import sqlglot
    if sqlglot.__version__ != SQLGLOT_VERSION:
        # Another version writes other (maybe correct, maybe not) Spark SQL.
        raise TranslationError(f"sqlglot {sqlglot.__version__} is installed; kmemscope's Spark "
                               f"rules are checked against {SQLGLOT_VERSION} "
                               "(pip install 'kmemscope[spark]')")
    return sqlglot


# ---------------------------------------------------------------- types

_UNSIGNED = {"UTINYINT": "SMALLINT", "USMALLINT": "INT", "UINTEGER": "BIGINT",
             "UINT": "BIGINT", "UBIGINT": None, "HUGEINT": "DECIMAL(38, 0)",
             "INT128": "DECIMAL(38, 0)", "UHUGEINT": "DECIMAL(38, 0)"}


def spark_type(duck_type, uint64="decimal"):
    """The Spark type for a DuckDB type name (stand-in columns, casts)."""
    sqlglot = _sqlglot()
    from sqlglot import exp
    dt = exp.DataType.build(duck_type, dialect="duckdb")
    return _map_types(dt, uint64).sql(dialect="spark")


def _map_types(dt, uint64):
    from sqlglot import exp

    def fix(node):
        if isinstance(node, exp.DataType):
            name = node.this.name
            if name in _UNSIGNED:
                target = _UNSIGNED[name] or ("DECIMAL(20, 0)" if uint64 == "decimal" else "BIGINT")
                return exp.DataType.build(target, dialect="spark")
        return node
    return dt.transform(fix)


# ---------------------------------------------------------------- lint

# sqlglot expression classes whose Spark form computes what DuckDB computes
# (checked against DuckDB: tests/test_spark_translation.py, tests/test_spark_parity.py).
_EXACT_FUNCS = {
    "Count", "Sum", "Avg", "Min", "Max", "Coalesce", "Nullif", "Cast", "Case", "If", "Lower",
    "Upper", "Floor", "Ceil", "Pow", "Abs", "RowNumber", "Lag", "Lead", "FirstValue",
    "LastValue", "Ln", "Log", "Exp", "Sqrt", "Greatest", "Least", "DPipe", "Concat",
    "LogicalOr", "LogicalAnd", "AnyValue", "ArgMax", "ArgMin", "Mode", "Length", "Explode",
    "GenerateSeries", "ArrayPrepend", "ArrayAppend", "ArrayToString", "ArrayJoin", "Transform",
    "Array", "PercentileCont", "Median", "ArrayAgg", "GroupConcat", "RegexpReplace", "ReadCSV",
    "Struct", "Substring", "Trim", "Replace", "IgnoreNulls", "CountIf", "Stddev", "StddevSamp",
    "Variance", "VarianceSamp", "Round", "Sign", "Bracket", "Lambda", "Ntile", "Rank",
    "DenseRank", "Filter",
}
_POSIX = {"alpha": r"\p{Alpha}", "digit": r"\p{Digit}", "alnum": r"\p{Alnum}",
          "upper": r"\p{Upper}", "lower": r"\p{Lower}", "space": r"\s", "blank": r"\p{Blank}",
          "cntrl": r"\p{Cntrl}", "punct": r"\p{Punct}", "xdigit": r"\p{XDigit}",
          "print": r"\p{Print}", "graph": r"\p{Graph}"}


def _func_name(node, text):
    start = node.meta.get("start") if node.meta else None
    end = node.meta.get("end") if node.meta else None
    if start is not None and end is not None:
        return text[start:end + 1].lower()
    return None


def _problems(tree, text):
    from sqlglot import exp
    out = []
    for node in tree.walk():
        cls = type(node).__name__
        if isinstance(node, exp.Anonymous):
            out.append(f"function {node.name}() is not known to have the same meaning in Spark")
        elif isinstance(node, exp.Func) and cls not in _EXACT_FUNCS and not isinstance(
                node, (exp.Window, exp.Connector, exp.Binary, exp.Unary)):
            out.append(f"{node.sql('duckdb')[:60]}: {cls} has no checked Spark translation")
        if isinstance(node, exp.WithinGroup):
            order = node.expression.expressions if node.expression else []
            if not isinstance(node.this, exp.PercentileCont) or len(order) != 1 or order[0].args.get("desc"):
                out.append(f"{node.sql('duckdb')[:60]}: only percentile_cont(p) WITHIN GROUP "
                           "(ORDER BY x) (ascending) has an exact Spark form")
        if isinstance(node, exp.PercentileCont) and not isinstance(node.parent, exp.WithinGroup):
            if node.expression is None:
                out.append(f"{node.sql('duckdb')[:60]}: percentile_cont needs WITHIN GROUP")
        if isinstance(node, exp.ArrayAgg) and isinstance(node.this, exp.Order):
            dirs = {bool(o.args.get("desc")) for o in node.this.expressions}
            if len(dirs) > 1:
                out.append(f"{node.sql('duckdb')[:60]}: list() ordered by keys of mixed "
                           "directions has no exact Spark form")
        if isinstance(node, exp.GroupConcat) and node.find(exp.Distinct):
            out.append(f"{node.sql('duckdb')[:60]}: string_agg(DISTINCT ...) is not translated")
        if isinstance(node, exp.Length) and _func_name(node, text) not in ("len", "length",
                                                                            "array_length"):
            out.append(f"{node.sql('duckdb')[:60]}: write len(list) or length(string)")
        if isinstance(node, exp.RegexpReplace):
            out += _regexp_problems(node)
        if isinstance(node, exp.Join) and node.args.get("method", "").upper() == "ASOF":
            if _asof_parts(node) is None:
                out.append(f"{node.sql('duckdb')[:80]}: ASOF JOIN needs a named table and ON "
                           "equalities AND one inequality on a column of the joined table")
        if isinstance(node, exp.BitwiseNot):
            out.append(f"{node.sql('duckdb')[:60]}: ~ on uint64 has no exact Spark form")
        if isinstance(node, exp.ReadCSV) and not isinstance(node.this, exp.Placeholder):
            out.append("read_csv() must read a FILE parameter ($name)")
        if isinstance(node, (exp.Qualify, exp.Pivot, exp.Unnest)):
            out.append(f"{cls} is not translated")
    for sel in tree.find_all(exp.Select):
        explodes = [i for i, e in enumerate(sel.expressions) if e.find(exp.Explode)]
        if len(explodes) > 1:
            if explodes != list(range(explodes[0], explodes[-1] + 1)) or not all(
                    isinstance(sel.expressions[i], exp.Alias) and
                    isinstance(sel.expressions[i].this, exp.Explode) for i in explodes):
                out.append("several unnest() in one SELECT must be next to each other, each aliased")
    if isinstance(tree, exp.Create) and tree.find(exp.Placeholder) and \
            tree.args.get("kind", "").upper() == "VIEW":
        out.append(f"view {tree.this.sql('duckdb')} holds a parameter (make it a TEMP TABLE)")
    return out


def _regexp_problems(node):
    from sqlglot import exp
    pat, mods = node.expression, node.args.get("modifiers")
    if not isinstance(pat, exp.Literal) or not pat.is_string:
        return [f"{node.sql('duckdb')[:60]}: regexp_replace needs a literal pattern"]
    flags = mods.name if mods is not None else ""
    if flags not in ("", "g"):
        return [f"{node.sql('duckdb')[:60]}: regexp_replace flags {flags!r} are not translated"]
    if not flags:
        # DuckDB replaces the first match only; Spark every match: equal only
        # when the pattern can match once (anchored, never empty).
        text = pat.name
        try:
            empty = re.fullmatch(text.replace("[[:", "[[").replace(":]]", "]]"), "") is not None
        except re.error:
            empty = True
        if not (text.startswith("^") or text.endswith("$")) or empty:
            return [f"{node.sql('duckdb')[:60]}: regexp_replace without 'g' replaces the first "
                    "match only; Spark replaces all (anchor the pattern or add 'g')"]
    if re.search(r"\\[CQEPpXRz]|\(\?P<", pat.name):
        return [f"{node.sql('duckdb')[:60]}: RE2-only regex syntax"]
    return []


def _asof_parts(join):
    """An ASOF join's ON split up, or None when it is not `eqs AND one inequality`:
    (pairs [(joined-table side, other side)], the joined table's column, the other
    side of the inequality, want_max (f.t <= x: the latest f.t), inclusive)."""
    from sqlglot import exp
    on = join.args.get("on")
    alias = join.this.alias_or_name
    if on is None or not isinstance(join.this, exp.Table):
        return None

    def only_alias(e):
        cols = list(e.find_all(exp.Column))
        return bool(cols) and all(c.table == alias for c in cols)

    def no_alias(e):
        return all(c.table != alias for c in e.find_all(exp.Column))

    conds = list(on.flatten()) if isinstance(on, exp.And) else [on]
    pairs, ineqs = [], []
    for c in conds:
        if isinstance(c, exp.EQ):
            if only_alias(c.this) and no_alias(c.expression):
                pairs.append((c.this, c.expression))
            elif only_alias(c.expression) and no_alias(c.this):
                pairs.append((c.expression, c.this))
            else:
                return None
        elif isinstance(c, (exp.LT, exp.LTE, exp.GT, exp.GTE)):
            ineqs.append(c)
        else:
            return None
    if len(ineqs) != 1:
        return None
    c = ineqs[0]
    left, right = c.this, c.expression
    if isinstance(left, exp.Column) and left.table == alias and no_alias(right):
        col, other, want_max = left, right, isinstance(c, (exp.LT, exp.LTE))
    elif isinstance(right, exp.Column) and right.table == alias and no_alias(left):
        col, other, want_max = right, left, isinstance(c, (exp.GT, exp.GTE))
    else:
        return None
    return pairs, col, other, want_max, isinstance(c, (exp.LTE, exp.GTE))


def lint(sql):
    """Problems (strings) of DuckDB `sql` (one or more statements) for Spark; [] = translatable."""
    try:
        return _tree_problems(_parse(sql), sql)
    except TranslationError as exc:
        return [str(exc)]


def _tree_problems(trees, sql):
    return [p for tree in trees for p in _problems(tree, sql)]


def _parse(sql):
    """The statements of DuckDB `sql` as trees, their macros written out where they are called."""
    sqlglot = _sqlglot()
    try:
        trees = [t for t in sqlglot.parse(sql, read="duckdb") if t is not None]
    except sqlglot.errors.ParseError as exc:
        raise TranslationError(f"sqlglot cannot parse it: {str(exc).splitlines()[0]}") from None
    return inline_macros(trees)


# ---------------------------------------------------------------- macros

def inline_macros(trees):
    """`trees` without their CREATE MACRO statements, each call of a macro in the statements
    after it replaced by the macro's body (Spark SQL has no macro). The kernel rules of
    queries/lib/ are macros (one home each); written out here, ad-hoc Spark SQL applies the
    same rule. A macro's body is expanded when it is defined, so macros may call earlier ones."""
    from sqlglot import exp
    macros: dict = {}        # name -> (parameters, body, is_table)
    out = []
    for tree in trees:
        if isinstance(tree, exp.Create) and str(tree.args.get("kind", "")).upper() == "MACRO":
            udf = tree.this
            name = udf.this.name.lower()
            params = [p.name for p in udf.expressions]
            body = _expand(tree.expression, macros)
            is_table = isinstance(body, exp.Query)
            if is_table:
                body = _rows_as_structs(body)
            macros[name] = (params, body, is_table)
            continue
        out.append(_expand(tree, macros))
    return out


def _expand(tree, macros):
    from sqlglot import exp
    if not macros:
        return tree

    def bound(name, params, args):
        if len(args) != len(params):
            raise TranslationError(f"{name}() takes {len(params)} argument(s), not {len(args)}")
        return dict(zip(params, args))

    def substitute(body, values):
        def put(node):
            if isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous) \
                    and node.this.name.lower() == "query_table" and len(node.this.expressions) == 1:
                ref = node.this.expressions[0]
                arg = values.get(ref.name) if isinstance(ref, exp.Column) else None
                if not isinstance(arg, exp.Column) or arg.table:
                    raise TranslationError("a table macro's table argument must name a table or CTE")
                return exp.Table(this=exp.to_identifier(arg.name), alias=node.args.get("alias"))
            if isinstance(node, exp.Column) and not node.table and node.name in values:
                return values[node.name].copy()
            return node
        return body.copy().transform(put)

    calls = [0]

    def rule(node):
        if isinstance(node, exp.Anonymous) and node.name.lower() in macros:
            params, body, is_table = macros[node.name.lower()]
            if not is_table:
                return exp.Paren(this=substitute(body, bound(node.name, params, node.expressions)))
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous) \
                and node.this.name.lower() in macros:
            call = node.this
            params, body, is_table = macros[call.name.lower()]
            if not is_table:
                raise TranslationError(f"{call.name}() is a scalar macro, used as a table")
            alias = node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(call.name))
            calls[0] += 1
            body = _private_ctes(substitute(body, bound(call.name, params, call.expressions)),
                                 f"_{call.name.lower()}{calls[0]}")
            return exp.Subquery(this=body, alias=alias)
        return node

    return tree.transform(rule)


def _private_ctes(body, suffix):
    """`body` with its CTEs renamed NAME + suffix: sqlglot's Spark SQL lifts nested CTEs to the
    statement's WITH, where two calls of one table macro (or the caller's own CTE of the same
    name) would collide. A reference keeps the old name as its alias."""
    from sqlglot import exp
    names = {cte.alias: cte.alias + suffix for cte in body.find_all(exp.CTE)}
    if not names:
        return body
    for cte in list(body.find_all(exp.CTE)):
        cte.set("alias", exp.TableAlias(this=exp.to_identifier(names[cte.alias])))
    for table in list(body.find_all(exp.Table)):
        if not table.args.get("db") and isinstance(table.this, exp.Identifier) \
                and table.name in names:
            table.set("alias", table.args.get("alias") or
                      exp.TableAlias(this=exp.to_identifier(table.name)))
            table.set("this", exp.to_identifier(names[table.name]))
    return body


def _rows_as_structs(query):
    """A table macro's whole-row references (`b`, `lag(b)` where b names a FROM item) as
    struct(b.*): DuckDB reads a bare table alias as its row, Spark does not. Only in
    kmemscope's own macros, whose tables hold no column of their alias's name."""
    from sqlglot import exp
    for sel in list(query.find_all(exp.Select)):
        aliases = {t.alias_or_name for t in sel.find_all(exp.Table)
                   if t.find_ancestor(exp.Select) is sel}
        for col in list(sel.find_all(exp.Column)):
            if col.find_ancestor(exp.Select) is sel and not col.table and col.name in aliases:
                col.replace(exp.Struct(expressions=[exp.Column(this=exp.Star(),
                                                               table=exp.to_identifier(col.name))]))
    return query


# ---------------------------------------------------------------- rewrites

def _double(node):
    from sqlglot import exp
    return exp.Cast(this=node, to=exp.DataType.build("DOUBLE"))


def _fn(name, *args):
    from sqlglot import exp
    return exp.Anonymous(this=name, expressions=list(args))


def _bitop(op, a, b, uint64):
    """a op b (op: & | ^) exact on uint64 values."""
    import sqlglot
    from sqlglot import exp
    cls = {"&": exp.BitwiseAnd, "|": exp.BitwiseOr, "^": exp.BitwiseXor}[op]
    if uint64 == "int64":
        return exp.Paren(this=cls(this=a, expression=b))
    # Split at bit 32: each half fits a BIGINT, where Spark has bit operators.
    tmpl = (f"(CAST(CAST(A DIV {_TWO32} AS BIGINT) {op} CAST(B DIV {_TWO32} AS BIGINT) "
            f"AS DECIMAL(20, 0)) * {_TWO32} + "
            f"(CAST(A % {_TWO32} AS BIGINT) {op} CAST(B % {_TWO32} AS BIGINT)))")
    tree = sqlglot.parse_one(tmpl, read="spark")

    def put(node):
        if isinstance(node, exp.Column) and node.name in ("A", "B") and not node.table:
            return exp.Paren(this=(a if node.name == "A" else b).copy())
        return node
    return tree.transform(put)


def _glob_regex_literal(glob):
    out, i = [], 0
    while i < len(glob):
        ch = glob[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            j = glob.find("]", i + 2)
            if j < 0:
                out.append(re.escape(ch))
            else:
                body = glob[i + 1:j]
                neg = body[:1] in ("!", "^")
                body = body[1:] if neg else body
                out.append("[" + ("^" if neg else "") + body.replace("\\", "\\\\") + "]")
                i = j
        else:
            out.append(re.escape(ch))
        i += 1
    return "(?s)^" + "".join(out) + "$"


def _glob(node):
    """a GLOB pattern -> a RLIKE regex; a pattern from a column is converted at run time."""
    from sqlglot import exp
    pat = node.expression
    if isinstance(pat, exp.Literal) and pat.is_string:
        regex = exp.Literal.string(_glob_regex_literal(pat.name))
    else:
        # escape regex metacharacters, then * -> .*, ? -> ., [! -> [^
        esc = _fn("regexp_replace", pat.copy(), exp.Literal.string(r"([.+^$(){}|\\])"),
                  exp.Literal.string(r"\\$1"))
        esc = _fn("replace", esc, exp.Literal.string("*"), exp.Literal.string(".*"))
        esc = _fn("replace", esc, exp.Literal.string("?"), exp.Literal.string("."))
        esc = _fn("replace", esc, exp.Literal.string("[!"), exp.Literal.string("[^"))
        regex = _fn("concat", exp.Literal.string("(?s)^"), esc, exp.Literal.string("$"))
    return exp.RegexpLike(this=node.this, expression=regex)


def _posix_to_java(pattern):
    return re.sub(r"\[:([a-z]+):\]", lambda m: _POSIX.get(m.group(1), m.group(0)), pattern)


def _asof_select(sel, counter):
    """Rewrite the ASOF joins of one SELECT (DuckDB SQL in, DuckDB SQL out).

    x ASOF [LEFT] JOIN t AS f ON f.k = x.k AND f.ts <= x.ts picks, per row of x,
    the t row with the greatest ts <= x.ts among those with equal keys. Here a
    window over x's keys and positions and t's rows, in one sort, carries the
    last ts of t forward (last_value IGNORE NULLS); t is then joined on its keys
    and that ts, one t row per (keys, ts). O(n log n), where the LATERAL ...
    LIMIT 1 form that Spark also accepts plans as a cartesian product.
    """
    import sqlglot
    from sqlglot import exp
    joins = sel.args.get("joins") or []
    if not any(j.args.get("method", "").upper() == "ASOF" for j in joins):
        return sel
    d = "duckdb"
    src = sel.args["from_"].this
    new_joins = []
    for j in joins:
        if j.args.get("method", "").upper() != "ASOF":
            new_joins.append(j)
            continue
        pairs, col, other, want_max, inclusive = _asof_parts(j)
        counter[0] += 1
        m = f"_asof{counter[0]}"
        falias = j.this.alias_or_name
        tname = j.this.copy()
        tname.set("alias", None)
        ks = [f"k{i}" for i in range(len(pairs))]
        x_keys = ", ".join(f"{o.sql(d)} AS {k}" for (_, o), k in zip(pairs, ks))
        f_keys = ", ".join(f"{f.sql(d)} AS {k}" for (f, _), k in zip(pairs, ks))
        f_notnull = " AND ".join([f"{f.sql(d)} IS NOT NULL" for f, _ in pairs] +
                                 [f"{col.sql(d)} IS NOT NULL"])
        # at equal positions, t's row counts when the inequality is inclusive
        f_side, x_side = (0, 1) if inclusive else (1, 0)
        part = f"PARTITION BY {', '.join(ks)} " if ks else ""
        direction = "ASC" if want_max else "DESC"
        sep = ", " if ks else ""
        # Every piece is sqlglot's rendering of our own .sql files' expressions or a generated
        # sql-safe: alias (k0, _asof1); no value from a trace or a user reaches this text
        mm = (f"(SELECT {', '.join(ks)}{sep}_pos, _match FROM ("
              f"SELECT {', '.join(ks)}{sep}_pos, _side, last_value(_t IGNORE NULLS) OVER ("
              f"{part}ORDER BY _pos {direction}, _side ROWS UNBOUNDED PRECEDING) AS _match "
              f"FROM (SELECT DISTINCT {x_keys}{sep}{other.sql(d)} AS _pos, NULL AS _t, "
              f"{x_side} AS _side FROM {src.sql(d)} "
              f"UNION ALL SELECT {f_keys}{sep}{col.sql(d)} AS _pos, {col.sql(d)} AS _t, "
              f"{f_side} AS _side FROM {tname.sql(d)} AS {falias} WHERE {f_notnull}) AS _u"
              f") AS _w WHERE _side = {x_side}) AS {m}")
        on1 = " AND ".join([f"{m}.{k} = {o.sql(d)}" for (_, o), k in zip(pairs, ks)] +
                           [f"{m}._pos = {other.sql(d)}"])
        f_part = ", ".join([f.sql(d) for f, _ in pairs] + [col.sql(d)])
        # sql-safe: as above, rendered expressions of our own SQL and generated aliases
        one = (f"(SELECT * EXCLUDE (_asof_rn) FROM (SELECT *, row_number() OVER "
               f"(PARTITION BY {f_part} ORDER BY {col.sql(d)}) AS _asof_rn FROM {tname.sql(d)} AS {falias}) AS {falias} "
               f"WHERE _asof_rn = 1) AS {falias}")
        on2 = " AND ".join([f"{f.sql(d)} = {o.sql(d)}" for f, o in pairs] +
                           [f"{col.sql(d)} = {m}._match"])
        side = "LEFT " if (j.args.get("side") or "").upper() == "LEFT" else ""
        # sql-safe: mm, one, on1 and on2 are built just above from rendered expressions
        probe = sqlglot.parse_one(f"SELECT 1 FROM _x LEFT JOIN {mm} ON {on1} "
                                  f"{side}JOIN {one} ON {on2}", read=d)
        new_joins += probe.args["joins"]
    sel.set("joins", new_joins)
    return sel


def asof_to_windows(sql):
    """DuckDB `sql` with every ASOF join rewritten as windows and equi-joins (DuckDB SQL)."""
    import sqlglot
    from sqlglot import exp
    out = []
    for tree in sqlglot.parse(sql, read="duckdb"):
        if tree is None:
            continue
        counter = [0]
        tree = tree.transform(lambda n: _asof_select(n, counter) if isinstance(n, exp.Select) else n)
        out.append(tree.sql("duckdb"))
    return ";\n".join(out)


def _zip_explodes(sel):
    from sqlglot import exp
    idx = [i for i, e in enumerate(sel.expressions)
           if isinstance(e, exp.Alias) and isinstance(e.this, exp.Explode)]
    if len(idx) < 2:
        return sel
    arrays = [sel.expressions[i].this.this for i in idx]
    names = [sel.expressions[i].args["alias"] for i in idx]
    zipped = exp.Aliases(this=exp.Inline(this=exp.ArraysZip(expressions=arrays)), expressions=names)
    new = sel.expressions[:idx[0]] + [zipped] + sel.expressions[idx[-1] + 1:]
    sel.set("expressions", new)
    return sel


def _rewrite(tree, text, uint64, files):
    from sqlglot import exp

    def rule(node):
        if isinstance(node, exp.Literal) and not node.is_string and re.search(r"[.eE]", node.name):
            return _double(node.copy())
        if uint64 == "int64" and isinstance(node, exp.Literal) and not node.is_string \
                and node.name.isdigit() and int(node.name) >= 1 << 63:
            # a uint64 constant as the BIGINT with the same bits (2^64-1 -> -1)
            return exp.Literal.number(int(node.name) - (1 << 64))
        if isinstance(node, exp.DataType):
            return _map_types(node, uint64)
        if isinstance(node, exp.WithinGroup) and isinstance(node.this, exp.PercentileCont):
            x = node.expression.expressions[0].this
            return _fn("percentile", x.copy(), node.this.this.copy())
        if isinstance(node, exp.PercentileCont) and node.expression is not None:
            return _fn("percentile", node.this.copy(), node.expression.copy())
        if isinstance(node, exp.Median):
            return _fn("percentile", node.this.copy(), _double(exp.Literal.number("0.5")))
        if isinstance(node, exp.ArrayAgg):
            inner = node.this
            if isinstance(inner, exp.Order):
                keys = [o.this.copy() for o in inner.expressions]
                value, desc = inner.this.copy(), bool(inner.expressions[0].args.get("desc"))
            else:
                keys, value, desc = [], inner.copy(), False
            fields = [exp.PropertyEQ(this=exp.to_identifier(f"k{i}"), expression=k)
                      for i, k in enumerate(keys)]
            fields.append(exp.PropertyEQ(this=exp.to_identifier("v"), expression=value))
            items = _fn("collect_list", _fn("named_struct", *[
                x for f in fields for x in (exp.Literal.string(f.this.name), f.expression)]))
            if keys:
                items = _fn("sort_array", items, exp.Boolean(this=not desc))
            lam = exp.Lambda(this=exp.Dot(this=exp.column("e"), expression=exp.to_identifier("v")),
                             expressions=[exp.to_identifier("e")])
            return _fn("transform", items, lam)
        if isinstance(node, exp.Log):
            if node.expression is None:
                return _fn("log10", node.this.copy())
            base = node.this
            if isinstance(base, exp.Literal) and base.name == "2":
                return _fn("log2", node.expression.copy())
        if isinstance(node, (exp.BitwiseAnd, exp.BitwiseOr, exp.BitwiseXor)):
            op = {exp.BitwiseAnd: "&", exp.BitwiseOr: "|", exp.BitwiseXor: "^"}[type(node)]
            return _bitop(op, node.this, node.expression, uint64)
        if isinstance(node, exp.Glob):
            return _glob(node)
        if isinstance(node, exp.RegexpReplace):
            pat = exp.Literal.string(_posix_to_java(node.expression.name))
            return _fn("regexp_replace", node.this.copy(), pat, node.args["replacement"].copy())
        if isinstance(node, exp.Length) and _func_name(node, text) in ("len", "array_length"):
            return _fn("size", node.this.copy())
        if isinstance(node, exp.Select):
            return _zip_explodes(node)
        if isinstance(node, exp.ReadCSV):
            return node
        return node

    tree = tree.transform(rule)
    # read_csv($p, ...) in FROM -> a view the executor registers from the bound path
    for table in list(tree.find_all(exp.Table)):
        rc = table.this if isinstance(table.this, exp.ReadCSV) else None
        if rc is None:
            continue
        opts = {}
        for e in rc.expressions:
            if isinstance(e, (exp.EQ, exp.PropertyEQ)):
                opts[e.this.name.lower()] = e.expression
        cols = {}
        if "columns" in opts and isinstance(opts["columns"], exp.Struct):
            for f in opts["columns"].expressions:
                cols[f.this.name] = spark_type(f.expression.name, uint64)
        view = f"_file_{rc.this.name}"
        header = "header" in opts and opts["header"].sql("duckdb").lower() == "true"
        files.append(FileView(view, rc.this.name, header,
                              opts["comment"].name if "comment" in opts else None, cols))
        table.replace(exp.Table(this=exp.to_identifier(view), alias=table.args.get("alias")))
    return tree


def translate(sql, uint64="decimal", pretty=True):
    """DuckDB `sql` (statements separated by ';') -> [Statement] of Spark SQL.

    Raises TranslationError with every problem `lint` finds.
    """
    return list(_translate(sql, uint64, pretty))


@functools.lru_cache(maxsize=64)
def _translate(sql, uint64, pretty):
    from sqlglot import exp
    if uint64 not in UINT64_MODES:
        raise ValueError(f"uint64 must be one of {UINT64_MODES}")
    trees = _parse(sql)
    problems = _tree_problems(trees, sql)
    if problems:
        raise TranslationError("; ".join(dict.fromkeys(problems)))
    out = []
    for tree in trees:
        kind, name = "select", None
        if isinstance(tree, exp.Create):
            kind = "view" if tree.args.get("kind", "").upper() == "VIEW" else "table"
            name = tree.this.name
            tree = tree.expression
        files: list = []
        if any(j.args.get("method", "").upper() == "ASOF" for j in tree.find_all(exp.Join)):
            counter = [0]
            tree = tree.transform(
                lambda n: _asof_select(n, counter) if isinstance(n, exp.Select) else n)
        tree = _rewrite(tree, sql, uint64, files)
        params = tuple(dict.fromkeys(p.name for p in tree.find_all(exp.Placeholder)))
        text = tree.sql(dialect="spark", pretty=pretty)
        out.append(Statement(kind, name, text, params, files))
    return tuple(out)
