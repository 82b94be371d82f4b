"""Run the real `kmemscope` command line, as a user does (the console script beside this Python)."""
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
