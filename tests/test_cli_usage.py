"""The command line takes what users type: SQL from anywhere, help, exit codes, pipes, widths.

Each test runs the real `kmemscope` in its own process, as a shell would, and
checks stdout, stderr and the exit status; the oracle for SQL results is
DuckDB's own answer to the same statements over the same Parquet files.
"""
import json
import os
import pty
import shutil
import subprocess
import sys

import pytest
from conftest import EXAMPLES
from kmrun import KMEMSCOPE


@pytest.fixture(scope="module")
def ds(examples_dataset):
    """kmem-compaction as kernel=a, memory-pressure (no page events: notes) as kernel=b."""
    return examples_dataset


def run(*args, stdin=None):
    return subprocess.run([*KMEMSCOPE, *map(str, args)], capture_output=True, text=True,
                          input=stdin, timeout=300)


def one_error_line(proc, code=1):
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kmemscope: error: "), proc.stderr
    return lines[0]


@pytest.mark.parametrize("sql", ["", ";", "  \n", "-- only a comment", "/* c */ ;"])
def test_empty_or_comment_only_sql_is_one_clean_error(ds, sql):
    line = one_error_line(run("sql", ds, sql))
    assert "holds no statement" in line


def test_sql_from_stdin_and_from_a_file(ds, tmp_path):
    want = run("sql", ds, "SELECT count(*) AS n FROM mm_page_alloc", "--format", "json").stdout
    assert json.loads(want)[0]["n"] > 0
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
    assert json.loads(proc.stdout) == [{"answer": 42}]


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
    proc = subprocess.run([*KMEMSCOPE, *args], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    one_error_line(proc, code=2)


def test_a_closed_pipe_exits_0_quietly(ds):
    # `kmemscope sql ... | head -1`: head leaves after one line
    sh = (f"{' '.join(KMEMSCOPE)} sql {ds} \"SELECT * FROM range(200000)\" | head -1; "
          "echo status=${PIPESTATUS[0]}")
    proc = subprocess.run(["bash", "-c", sh], capture_output=True, text=True, timeout=300)
    assert proc.stdout.splitlines()[-1] == "status=0", proc.stdout[-200:]
    assert proc.stderr == ""


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
    as_json = json.loads(run("query", "hot_pfns", ds, "--param", "top_n=1", "--format", "json").stdout)
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
    labels = json.loads(run("sql", tmp_path / "ds", "SELECT labels FROM runs",
                            "--format", "json").stdout)[0]["labels"]
    assert labels == {"kernel": "patched", "host_class": "web", "rack": "r7"}
