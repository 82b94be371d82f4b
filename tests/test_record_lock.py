"""How tests share the machine (conftest.py): record_lock()'s wait is bounded and its failure says
who holds the lock; the run puts back the settings it changed, and only those.

Both locks are stand-ins under tmp_path (KMEMSCOPE_STATE_DIR, a patched lock file), held by a
child process with flock(1) as another recorder would; the settings are stand-in files."""
import subprocess
import sys
import time

import pytest

import conftest


@pytest.fixture
def locks(tmp_path, monkeypatch):
    """(tests' lock file, kmemscope record's lock file), both private to this test."""
    monkeypatch.setattr(conftest, "TRACING_LOCK", tmp_path / "trace.lock")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setenv("KMEMSCOPE_STATE_DIR", str(state))
    return tmp_path / "trace.lock", state / "record.lock"


def _held_by_child(path, text=""):
    """A child that holds an exclusive flock on `path` (writing `text` in it) until killed."""
    path.write_text(text)
    child = subprocess.Popen(["flock", "-x", str(path), "sleep", "600"])
    deadline = time.monotonic() + 30
    while subprocess.run(["flock", "-n", "-x", str(path), "true"]).returncode == 0:
        assert time.monotonic() < deadline, "the child never took the lock"
        time.sleep(0.05)
    return child


@pytest.mark.parametrize("which", ["tests", "record"])
def test_a_held_lock_fails_after_the_wait_naming_its_holder(locks, which):
    tests_lock, record_lock = locks
    child = _held_by_child(tests_lock if which == "tests" else record_lock, "4242")
    try:
        with pytest.raises(pytest.fail.Exception) as failed:
            with conftest.record_lock(wait_s=1.5):
                pass
    finally:
        child.kill()
        child.wait()
    message = str(failed.value)
    assert "stayed busy for 2 s" in message and "KMEMSCOPE_TEST_LOCK_WAIT_S" in message
    assert ("another test run" in message) if which == "tests" else ("kmemscope record, pid 4242" in message)


def test_the_lock_is_taken_once_free_and_is_reentrant(locks):
    tests_lock, _ = locks
    with conftest.record_lock(wait_s=5):
        # held: another process cannot take it
        assert subprocess.run(["flock", "-n", "-x", str(tests_lock), "true"]).returncode == 1
        with conftest.record_lock(wait_s=1):        # a fixture inside a locked test
            pass
        assert subprocess.run(["flock", "-n", "-x", str(tests_lock), "true"]).returncode == 1
    assert subprocess.run(["flock", "-n", "-x", str(tests_lock), "true"]).returncode == 0


def test_the_run_puts_back_only_the_settings_and_events_that_changed(tmp_path, monkeypatch):
    """restore_host_state() over stand-in files: what changed is written back, and named."""
    files = {"tracing_on": "0\n", "trace_clock": "[local] global mono\n",
             "vm.nr_hugepages": "0\n", "thp.enabled": "always [madvise] never\n"}
    paths = {name: tmp_path / name for name in files}
    for name, text in files.items():
        paths[name].write_text(text)
    events = tmp_path / "tracing"
    for event, on in (("kmem/mm_page_alloc", "0"), ("kmem/mm_page_free", "1")):
        (events / "events" / event).mkdir(parents=True)
        (events / "events" / event / "enable").write_text(on + "\n")
    monkeypatch.setattr(conftest, "HOST_SETTINGS", paths)
    monkeypatch.setattr(conftest, "TRACEFS", events)

    saved = conftest.host_state()
    assert conftest.restore_host_state(saved) == []          # nothing changed, nothing written
    paths["tracing_on"].write_text("1\n")
    paths["vm.nr_hugepages"].write_text("512\n")
    (events / "events/kmem/mm_page_alloc/enable").write_text("1\n")
    (events / "events/kmem/mm_page_free/enable").write_text("0\n")
    clock_before = paths["trace_clock"].stat().st_mtime_ns

    restored = conftest.restore_host_state(saved)
    assert sorted(restored) == ["events/kmem/mm_page_alloc disabled",
                                "events/kmem/mm_page_free enabled", "tracing_on", "vm.nr_hugepages"]
    assert paths["tracing_on"].read_text() == "0" and paths["vm.nr_hugepages"].read_text() == "0"
    assert (events / "events/kmem/mm_page_alloc/enable").read_text() == "0"
    assert (events / "events/kmem/mm_page_free/enable").read_text() == "1"
    assert paths["trace_clock"].stat().st_mtime_ns == clock_before     # unchanged: not rewritten


# A pytest-xdist worker that runs live tests one after another releases the lock for a few
# milliseconds between them; a session fixture on the other worker that records once must
# still get it then (first come, first served), not wait out the bound. Two programs on a lock
# file of their own: one takes the lock again and again, the other asks once; the second must
# get it while the first still runs.
PROGRAM = r'''
import contextlib, sys, time
sys.path.insert(0, sys.argv[3])
import conftest
conftest.TRACING_LOCK = conftest.Path(sys.argv[1])
conftest._record_lock_holder = lambda: None          # no kmemscope record to look for
if sys.argv[2] == "busy":
    end = time.monotonic() + 10
    while time.monotonic() < end:
        with conftest.record_lock(wait_s=30):
            print("held", flush=True)
            time.sleep(0.3)
else:
    with conftest.record_lock(wait_s=30):
        print("got", flush=True)
'''


def test_a_waiter_gets_the_lock_between_the_tests_of_a_busy_worker(tmp_path):
    lock = tmp_path / "trace.lock"
    args = [sys.executable, "-c", PROGRAM, str(lock)]
    tests = str(conftest.PROJECT_ROOT / "tests")
    busy = subprocess.Popen(args + ["busy", tests], stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout.readline() == "held\n"      # the busy one holds it, and goes on
        start = time.monotonic()
        waiter = subprocess.run(args + ["wait", tests], capture_output=True, text=True,
                                timeout=60)
        waited = time.monotonic() - start
        assert waiter.returncode == 0 and waiter.stdout == "got\n", waiter.stderr
        assert busy.poll() is None, f"the waiter got the lock only after {waited:.1f} s, " \
                                    "once the busy program had ended"
    finally:
        busy.kill()
        busy.wait()
    # the waiter took its ticket away; the busy one, killed while it may have been waiting,
    # may leave one (a later waiter removes a dead process's ticket)
    left = {int(p.name.rsplit("-", 1)[1]) for p in tmp_path.glob("trace.lock.wait-*")}
    assert left <= {busy.pid}, f"waiting tickets left behind: {left}"
