"""A test run stopped by SIGTERM leaves no JVM behind (tests/conftest.py turns SIGTERM into
Ctrl-C's teardown; the cluster's daemons also die with the process that started them).

The run under test is `pytest tests/test_spark_cluster.py` in a process of its own, with a
mark in its environment that every process it starts inherits: the JVMs it leaves are the
processes that still carry the mark.
"""
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from conftest import PROJECT_ROOT, skip_without_spark

pytestmark = pytest.mark.spark


def _marked(mark):
    """{pid: command line} of the processes whose environment holds `mark`."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark.encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out[int(pid)] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return out


def _wait_for(what, check, bound_s):
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"not within {bound_s} s: {what}")


def test_sigterm_to_a_running_cluster_test_leaves_no_jvm(tmp_path):
    skip_without_spark()
    mark = f"KMEMSCOPE_STOP_TEST_MARK={uuid.uuid4().hex}"
    key, value = mark.split("=")
    env = dict(os.environ, **{key: value})
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             f"--basetemp={tmp_path / 'run'}",
                             "tests/test_spark_cluster.py"],
                            cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        # both workers of the standalone cluster up (their logs say so): the test is midway
        logs = tmp_path / "run"
        _wait_for("the cluster's two workers registered with its master", lambda: sum(
            "Successfully registered with master" in log.read_text(errors="replace")
            for log in logs.glob("cluster*/worker*.log")) >= 2 or proc.poll() is not None, 300)
        java = [c for c in _marked(mark).values() if "java" in c]
        assert len(java) >= 3, f"master and two workers expected running: {java}"
        assert proc.poll() is None, f"the cluster test ended before it was stopped:\n{proc.stdout.read()[-2000:]}"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0, out[-2000:]
    left = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = {pid: c for pid, c in _marked(mark).items() if "java" in c}
        if not left:
            break
        time.sleep(0.5)
    for pid in left:           # leave the machine clean for the next test either way
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"JVMs left running after SIGTERM: {left}"
