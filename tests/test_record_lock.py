"""How tests share the machine (conftest.py): record_lock()'s wait is bounded and its failure says
who holds the lock; the run puts back the settings it changed, and only those.

Both locks are stand-ins under tmp_path (KMEMSCOPE_STATE_DIR, a patched lock file), held by a
child process with flock(1) as another recorder would; the settings are stand-in files."""
import subprocess
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
