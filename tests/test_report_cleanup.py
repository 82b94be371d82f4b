"""`kmemscope report` stopped by SIGTERM while a notebook kernel runs leaves no temp file or
folder behind (notebooks/report.py). The oracle is the file system: the command's TMPDIR,
empty before, is empty after."""
import os
import signal
import subprocess
import time

import requirements
from kmrun import KMEMSCOPE

DEADLINE_S = 300


def test_a_report_stopped_by_sigterm_while_its_kernel_queries_leaves_no_temp_folder(
        examples_dataset, tmp_path):
    try:
        import nbconvert  # noqa: F401
        import papermill  # noqa: F401
    except ImportError:
        requirements.skip("setup", "the report extra is not installed (run `make setup`)")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([*KMEMSCOPE, "report", str(examples_dataset), "-o",
                             str(tmp_path / "r.html")], env={**os.environ, "TMPDIR": str(tmp)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # the kernel has opened the dataset with DuckDB: its spill folder is there
        deadline = time.monotonic() + DEADLINE_S
        while not list(tmp.rglob("kmemscope-spill-*")):
            assert proc.poll() is None, f"the report ended first: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "the kernel never opened the dataset"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert "terminated by SIGTERM" in err, err
    assert sorted(tmp.rglob("*")) == []
