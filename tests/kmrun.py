"""Run the real `kmemscope` command line, as a user does (the console script beside this Python)."""
import signal
import subprocess
import sys
from pathlib import Path

from conftest import PROJECT_ROOT

_SCRIPT = Path(sys.executable).parent / "kmemscope"
KMEMSCOPE = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "kmemscope.cli"]


def kmemscope(*args, check=True, timeout=600):
    proc = subprocess.run([*KMEMSCOPE, *map(str, args)], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, timeout=timeout)
    if check and proc.returncode:
        raise AssertionError(f"kmemscope {' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr}")
    return proc


def default_signals():
    """Popen(preexec_fn=...): the child starts with SIGINT at its default, as from a terminal.

    A test run started in the background (`make test &`, nohup) has SIGINT ignored, which
    its children inherit, and kmemscope leaves an ignored signal ignored (as nohup asks):
    the signal tests would then measure how they were started, not kmemscope."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
