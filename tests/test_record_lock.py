"""conftest.record_lock(): the wait for the machine's tracefs is bounded and its failure says who
holds it. Both locks are stand-ins under tmp_path (KMEMSCOPE_STATE_DIR, a patched lock file),
held by a child process with flock(1) as another recorder would."""
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
