"""Run the real `kmemscope` command line, as a user does (the console script beside this Python).

The one way a test runs the command line: `kmemscope(...)` for a run to its end, `popen(...)`
for one the test signals or reads while it runs, `one_error_line(proc)` for the promise
that every failure is one line on stderr.
"""
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


def kmemscope(*args, check=True, timeout=600, text=True, **popen):
    """`kmemscope ARGS` to its end -> CompletedProcess (stdout and stderr captured).

    check: a non-zero exit fails the test with its stderr. text=False: bytes (parquet).
    popen: more of subprocess.run's arguments (input, env, cwd, preexec_fn)."""
    popen.setdefault("cwd", PROJECT_ROOT)
    proc = subprocess.run(_argv(args), capture_output=True, text=text,
                          timeout=timeout, **popen)
    if check and proc.returncode:
        stderr = proc.stderr if text else proc.stderr.decode(errors="replace")
        raise AssertionError(f"kmemscope {' '.join(map(str, args))} failed ({proc.returncode}): {stderr}")
    return proc


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
