"""The command line takes what users type: SQL from anywhere, help, exit codes, pipes, widths.

Each test runs the real `kmemscope` in its own process, as a shell would, and
checks stdout, stderr and the exit status; the oracle for SQL results is
DuckDB's own answer to the same statements over the same Parquet files.
"""
import csv
import io
import json
import os
import pty
import shlex
import shutil
import subprocess
import sys

import pytest
from conftest import EXAMPLES
from kmdata import run_rows
from kmrun import KMEMSCOPE, kmemscope, one_error_line, rows_of


@pytest.fixture(scope="module")
def ds(examples_dataset):
    """kmem-compaction as kernel=a, memory-pressure (no page events: notes) as kernel=b."""
    return examples_dataset


def run(*args, stdin=None):
    return kmemscope(*args, check=False, input=stdin, timeout=300)


@pytest.mark.parametrize("sql", ["", ";", "  \n", "-- only a comment", "/* c */ ;"])
def test_empty_or_comment_only_sql_is_one_clean_error(ds, sql):
    line = one_error_line(run("sql", ds, sql))
    assert "holds no statement" in line


def test_sql_from_stdin_and_from_a_file(ds, tmp_path):
    want = run("sql", ds, "SELECT count(*) AS n FROM mm_page_alloc", "--format", "json").stdout
    assert rows_of(want)[0]["n"] > 0
    assert run("sql", ds, "-", "--format", "json",
               stdin="SELECT count(*) AS n FROM mm_page_alloc").stdout == want
    f = tmp_path / "q.sql"
    f.write_text("-- how many allocations\nSELECT count(*) AS n FROM mm_page_alloc;\n")
    assert run("sql", ds, "-f", f, "--format", "json").stdout == want
    one_error_line(run("sql", ds, "SELECT 1", "-f", f), code=2)          # both: a usage error
    one_error_line(run("sql", ds), code=2)                               # neither


def test_a_leading_sql_comment_is_sql_not_an_option(ds):
    proc = run("sql", ds, "-- the answer\nSELECT 42 AS answer", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert rows_of(proc) == [{"answer": 42}]


def test_every_statements_result_is_shown_in_turn(ds):
    proc = run("sql", ds, "SELECT 1 AS a; CREATE TEMP VIEW v AS SELECT 2 AS b; SELECT b FROM v",
               "--format", "jsonl")
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(x) for x in proc.stdout.splitlines()] == [{"a": 1}, {"b": 2}]
    table = run("sql", ds, "SELECT 1 AS a; SELECT 2 AS b").stdout
    assert table.split("\n\n") == ["a\n-\n1", "b\n-\n2\n"]
    line = one_error_line(run("sql", ds, "SELECT 1; SELECT 2", "--format", "json"))
    assert "holds one result" in line


def test_bare_kmemscope_prints_help_on_stdout_and_exits_0():
    proc = run()
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("Usage: kmemscope") and "compare" in proc.stdout


@pytest.mark.parametrize("args", [
    ["record", "--preset", "nope", "-o", "x"],
    ["record", "--no-such-option"],
    ["query"],
    ["compare", "somewhere"],
    ["sql", "ds", "SELECT 1", "--format", "xml"],
    ["metrics", "import"],
    ["no-such-verb"],
])
def test_usage_errors_exit_2_everywhere(args, tmp_path):
    one_error_line(kmemscope(*args, check=False, timeout=60, cwd=tmp_path), code=2)


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "jsonl", "parquet"])
def test_a_closed_pipe_exits_0_quietly_in_every_format(ds, fmt):
    # `kmemscope sql ... | head -1`: head leaves after one line (parquet: after one byte)
    cut = "head -c 1" if fmt == "parquet" else "head -1"
    sh = (f"{' '.join(KMEMSCOPE)} sql {shlex.quote(str(ds))} "
          f"'SELECT range FROM range(300000)' --format {fmt} | {cut} >/dev/null; "
          "echo status=${PIPESTATUS[0]}")
    proc = subprocess.run(["bash", "-c", sh], capture_output=True, text=True, timeout=300)
    assert proc.stdout.splitlines()[-1] == "status=0", proc.stdout[-200:] + proc.stderr
    assert proc.stderr == ""


def test_sql_takes_runs_labels_and_bound_parameters_as_the_api_does(ds):
    """--run, --label and --param as Dataset.sql's run=, label= and params=; the oracle is a
    recount of the runs' Parquet files in plain Python."""
    runs = {run: dict(r["labels"]) for run in sorted(p.name[len("run_id="):]
                                                    for p in (ds / "runs").glob("run_id=*"))
            for r in run_rows(ds, "runs", run, ["labels"])}
    (run_a,) = [r for r, labels in runs.items() if labels.get("kernel") == "a"]
    orders = [r["order"] for r in run_rows(ds, "mm_page_alloc", run_a, ["order"])]
    count = "SELECT count(*) AS n FROM mm_page_alloc"

    def n(*args):
        proc = run("sql", ds, *args, "--format", "json")
        assert proc.returncode == 0, proc.stderr
        return rows_of(proc)[0]["n"]

    assert n(count, "--run", run_a) == len(orders)
    assert n(count, "--label", "kernel=a") == len(orders)
    assert n("SELECT count(*) AS n FROM runs", "--label", "kernel=b") == 1
    assert n(count + ' WHERE "order" = $o', "--param", "o=9") == orders.count(9)
    # a value is bound, never pasted into the SQL
    hostile = "1; DROP VIEW runs; --"
    assert n("SELECT $v AS n", "--param", f"v={hostile}") == hostile
    assert "KEY=VALUE" in one_error_line(run("sql", ds, count, "--param", "o"), code=2)


def test_csv_cells_cannot_act_on_a_terminal_or_a_spreadsheet(ds):
    """Control characters are escaped as in tables, and a cell that a spreadsheet would run
    as a formula (OWASP's CSV injection: = + - @, tab, CR) starts with a quote."""
    cells = ["=cmd|' /c calc'!A1", "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx",
             "\x1b]0;pwned\x07", "a\nb", "plain", "-"]
    sql = " UNION ALL ".join(f"SELECT {i} AS i, {sql_text(c)} AS cell" for i, c in enumerate(cells))
    proc = run("sql", ds, sql + " ORDER BY i", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    got = [row["cell"] for row in csv.DictReader(io.StringIO(proc.stdout))]
    want = []
    for c in cells:                 # the oracle: OWASP's rule and the escapes, spelled out here
        c = (c.replace("\t", "\\t").replace("\r", "\\r").replace("\n", "\\n")
             .replace("\x1b", "\\x1b").replace("\x07", "\\x07"))
        want.append("'" + c if c[:1] in ("=", "+", "-", "@") else c)
    assert got == want
    assert not any(ord(ch) < 0x20 for ch in proc.stdout.replace("\n", "").replace("\r", ""))
    # json keeps the data as it is: the way to the raw values
    as_json = rows_of(run("sql", ds, sql + " ORDER BY i", "--format", "json"))
    assert [r["cell"] for r in as_json] == cells


def test_running_out_of_memory_is_one_error_line(ds, tmp_path):
    """Python's MemoryError (an address-space limit, a result held whole) is the one line of
    every error, not an internal error: planted where the verb fetches its rows."""
    code = ("import kmemscope.api as api\n"
            "def run_sql(*args, **kwargs):\n"
            "    raise MemoryError()\n"
            "api.run_sql = run_sql\n"
            "from kmemscope.cli.verbs import main\n"
            f"main(['sql', {str(ds)!r}, 'SELECT 1'])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)       # the installed kmemscope, not ./
    assert "out of memory" in one_error_line(proc)


def sql_text(value):
    """A SQL string literal of `value`, control characters by chr() (the test's own quoting)."""
    parts = [f"chr({ord(ch)})" if ord(ch) < 0x20 else "'" + ch.replace("'", "''") + "'"
             for ch in value]
    return "(" + " || ".join(parts) + ")"


def test_tables_fit_the_terminal_and_pfns_print_in_hex(ds):
    """On an 80-column terminal no line of a wide result is longer than 80."""
    def on_tty(*args):
        pid, fd = pty.fork()
        if pid == 0:
            os.environ["COLUMNS"] = "80"
            os.execv(KMEMSCOPE[0], [*KMEMSCOPE, *map(str, args)]) if len(KMEMSCOPE) == 1 else \
                os.execv(sys.executable, [*KMEMSCOPE, *map(str, args)])
        out = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        os.waitpid(pid, 0)
        return out.decode()
    text = on_tty("query", "summary", ds, "-q")
    # the table's lines (stderr's progress lines share the terminal)
    lines = [x for x in text.splitlines() if x.strip() and not x.startswith("kmemscope:")]
    assert len(lines) >= 3 and max(len(x) for x in lines) <= 80, max(len(x) for x in lines)
    assert "…" in lines[0]                       # wide columns were cut, visibly
    hot = run("query", "hot_pfns", ds, "--param", "top_n=3").stdout
    assert "0x603f4b" in hot                     # the example's hottest frame, as perf prints it
    as_json = rows_of(run("query", "hot_pfns", ds, "--param", "top_n=1", "--format", "json"))
    assert 0x603f4b in [r["pfn"] for r in as_json]   # machine formats keep the number


def test_quiet_silences_notes(ds):
    loud = run("query", "summary", ds)
    assert "note:" in loud.stderr
    quiet = run("query", "summary", ds, "-q")
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == loud.stdout


def test_label_on_parse_adds_and_says_when_it_replaces_the_bundles_own(tmp_path):
    bundle = tmp_path / "b"
    shutil.copytree(EXAMPLES / "memory-pressure", bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["labels"] = {"kernel": "vanilla", "host_class": "web"}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    proc = run("parse", bundle, "-o", tmp_path / "ds", "--label", "kernel=patched",
               "--label", "rack=r7")
    assert proc.returncode == 0, proc.stderr
    assert "--label kernel=patched replaces the bundle's own label kernel=vanilla" in proc.stderr
    assert "host_class" not in proc.stderr and "rack" not in proc.stderr
    labels = rows_of(run("sql", tmp_path / "ds", "SELECT labels FROM runs",
                         "--format", "json"))[0]["labels"]
    assert labels == {"kernel": "patched", "host_class": "web", "rack": "r7"}


def test_a_label_with_escapes_reaches_the_terminal_inert(tmp_path):
    """A manifest's label holding a terminal escape (retitle, clear screen) and a typed label
    holding a tab are printed escaped by the one inert-text rule, not raw."""
    bundle = tmp_path / "b"
    shutil.copytree(EXAMPLES / "memory-pressure", bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["labels"] = {"kernel": "van\x1b]0;owned\x07\x1b[2Jilla\u202e"}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    proc = run("parse", bundle, "-o", tmp_path / "ds", "--label", "kernel=pat\tched")
    assert proc.returncode == 0, proc.stderr
    assert not any(c in proc.stderr for c in "\x1b\x07\t\u202e"), repr(proc.stderr)
    assert ("--label kernel=pat\\tched replaces the bundle's own label "
            "kernel=van\\x1b]0;owned\\x07\\x1b[2Jilla\\u202e") in proc.stderr
