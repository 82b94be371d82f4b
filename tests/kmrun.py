"""Run the real `kmemscope` command line, as a user does (the console script beside this Python).

The one way a test runs the command line: `kmemscope(...)` for a run to its end, `popen(...)`
for one the test signals or reads while it runs, `one_error_line(proc)` for the promise
that every failure is one line on stderr, `rows_of(proc)` for the rows of a query's or
sql's --format json.

`kmemscope(...)` runs the command in this process (kmemscope.cli.verbs.main with its own
stdin, stdout, stderr, working folder and signal handlers, put back afterwards) when the
test is not about the process: a verb of IN_PROCESS_VERBS, no option of PROCESS_OPTIONS,
no argument to the process but its standard input (env, cwd, preexec_fn, ...). A program
start costs ~0.2-0.3 CPU-s, and the suite starts hundreds. `parse` runs here too: its
decoder is a forked child either way, with its own stderr and limits. Everything else, and
every run when KMEMSCOPE_TESTS_SUBPROCESS=1, starts the console script: `record` owns
tracefs and its signals, `report` starts a notebook kernel, Spark starts a JVM the test
must not share. `process=True` asks for a program of its own.
"""
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import PROJECT_ROOT

_SCRIPT = Path(sys.executable).parent / "kmemscope"
KMEMSCOPE = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "kmemscope"]


def _argv(args):
    """The command line: paths and numbers as text, bytes (a name that is not UTF-8) as given."""
    return [*KMEMSCOPE, *(a if isinstance(a, bytes) else str(a) for a in args)]


# Verbs that read or write a dataset in this process and leave nothing running.
IN_PROCESS_VERBS = {"parse", "sql", "query", "queries", "compare", "info", "verify", "prune", "metrics",
                    "limits", "derive", "export"}
# Options whose subject is the process: alarms and limits, tracebacks, other engines.
PROCESS_OPTIONS = ("--engine", "--spark-master", "--spark-conf", "--timeout", "--memory-limit",
                   "--debug", "--help", "--version")


def _in_process(args, process, popen):
    if process or set(popen) - {"input"} or os.environ.get("KMEMSCOPE_TESTS_SUBPROCESS") == "1":
        return False
    if not args or args[0] not in IN_PROCESS_VERBS:
        return False
    return not any(isinstance(a, bytes) or str(a).split("=", 1)[0] in PROCESS_OPTIONS
                   for a in args)


def _captured_stream():
    """A text stream over bytes, as a pipe's: UTF-8, no terminal."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="\n", write_through=True)


def _run_in_process(args, text, input=None):
    """`kmemscope ARGS` through kmemscope.cli.verbs.main here -> CompletedProcess.
    Its standard input is `input` (text or bytes), or an empty pipe's."""
    from kmemscope.cli.verbs import main

    stdout, stderr = _captured_stream(), _captured_stream()
    data = input if isinstance(input, bytes) else (input or "").encode()
    stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline=None)
    saved_streams, saved_cwd = (sys.stdin, sys.stdout, sys.stderr), os.getcwd()
    saved_signals = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM,
                                                            signal.SIGHUP)}
    code = 0
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    try:
        os.chdir(PROJECT_ROOT)
        main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        for stream in (stdout, stderr):
            stream.flush()
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.chdir(saved_cwd)
        for sig, handler in saved_signals.items():
            signal.signal(sig, handler)
        _end_of_program()
    out, err = stdout.buffer.getvalue(), stderr.buffer.getvalue()
    if text:
        out, err = out.decode(), err.decode()
    return subprocess.CompletedProcess(_argv(args), code, out, err)


def _end_of_program():
    """Forget what a program's exit drops: the private folder of derived tables built outside
    a dataset (removed by an atexit of dataset/derived.py) and the files it checked. Kept, a
    later run here would find its caches there and write none into a copy of the same runs."""
    from kmemscope.dataset import derived

    derived.forget_private_root()
    derived._CHECKED.clear()


def kmemscope(*args, check=True, timeout=600, text=True, process=False, **popen):
    """`kmemscope ARGS` to its end -> CompletedProcess (stdout and stderr captured).

    check: a non-zero exit fails the test with its stderr. text=False: bytes (parquet).
    process: in a program of its own, also where it could run in this one (see above).
    popen: more of subprocess.run's arguments (input, env, cwd, preexec_fn); with any
    but input, the command runs as a program."""
    if _in_process(args, process, popen):
        proc = _run_in_process(args, text, popen.get("input"))
    else:
        popen.setdefault("cwd", PROJECT_ROOT)
        proc = subprocess.run(_argv(args), capture_output=True, text=text,
                              timeout=timeout, **popen)
    if check and proc.returncode:
        stderr = proc.stderr if text else proc.stderr.decode(errors="replace")
        raise AssertionError(f"kmemscope {' '.join(map(str, args))} failed ({proc.returncode}): {stderr}")
    return proc


def rows_of(json_text, kind=None):
    """The rows of a `query`, `metrics list` or `sql` --format json document (text, bytes or a
    CompletedProcess), after holding its envelope: an object whose `schema_version`,
    `kmemscope_version` and `kind` (query or sql; `kind` if given) come first, its `rows` a list."""
    import json

    if isinstance(json_text, subprocess.CompletedProcess):
        json_text = json_text.stdout
    doc = json.loads(json_text)
    assert isinstance(doc, dict), f"not an object: {str(json_text)[:200]}"
    assert list(doc)[:3] == ["schema_version", "kmemscope_version", "kind"], list(doc)
    assert doc["kind"] in ((kind,) if kind else ("query", "sql")), doc["kind"]
    assert isinstance(doc["rows"], list) and isinstance(doc["notes"], list), list(doc)
    return doc["rows"]


def popen(*args, **popen_args):
    """`kmemscope ARGS` started -> Popen with stdout and stderr as text pipes."""
    popen_args.setdefault("cwd", PROJECT_ROOT)
    return subprocess.Popen(_argv(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen_args)


def one_error_line(proc, code=1):
    """The error of a failed run: exit status `code` (None: any but 0) and one line on
    stderr, `kmemscope: error: ...`, neither a traceback nor an internal error -> that line."""
    stderr = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode(errors="replace")
    if code is None:
        assert proc.returncode != 0, f"exit status 0: {stderr}"
    else:
        assert proc.returncode == code, f"exit status {proc.returncode}, not {code}: {stderr}"
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kmemscope: error: "), stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    return lines[0]


def default_signals():
    """Popen(preexec_fn=...): the child starts with SIGINT at its default, as from a terminal.

    A test run started in the background (`make test &`, nohup) has SIGINT ignored, which
    its children inherit, and kmemscope leaves an ignored signal ignored (as nohup asks):
    the signal tests would then measure how they were started, not kmemscope."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
