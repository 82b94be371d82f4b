"""Shared test fixtures: paths, and access to the live kernel's tracefs.

Tests that record real traces need root and tracefs. They mount tracefs where
they can and skip with a reason elsewhere, so the suite passes on a laptop.
Recording holds a file lock: tracefs is one global resource per machine.
"""
import fcntl
import os
import subprocess
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PUBLIC_FIXTURES = PROJECT_ROOT.parent / "shared" / "fixtures" / "public"
EXAMPLES = PROJECT_ROOT / "examples"
TRACEFS = Path("/sys/kernel/tracing")
TRACING_LOCK = Path("/var/tmp/kmemscope-trace.lock")


def tracefs_available():
    """Return None when tracefs is usable, else the reason it is not."""
    if os.geteuid() != 0:
        return "recording needs root"
    if not (TRACEFS / "events").is_dir():
        if not TRACEFS.is_dir():
            return f"{TRACEFS} does not exist (no tracefs in this kernel)"
        mounted = subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)],
                                 capture_output=True, text=True)
        if mounted.returncode != 0 or not (TRACEFS / "events").is_dir():
            return f"cannot mount tracefs at {TRACEFS}: {mounted.stderr.strip()}"
    if not (TRACEFS / "events" / "kmem" / "mm_page_alloc").is_dir():
        return "this kernel has no kmem:mm_page_alloc tracepoint"
    if subprocess.run(["sh", "-c", "command -v trace-cmd"], capture_output=True).returncode:
        return "trace-cmd is not installed (run `make setup`)"
    return None


# Settings that a trace-cmd run may leave changed on hosts where it cannot
# reset tracefs; tests that record put them back when the session ends.
RESTORED_SETTINGS = ("tracing_on", "buffer_size_kb", "trace_clock")


def _read_setting(name):
    from kmemscope.capture.tracefs import selected

    text = (TRACEFS / name).read_text()
    if name == "buffer_size_kb":
        # The size a tracer would get: on a fresh boot '7 (expanded: 1408)' is not 7.
        from capture_helpers import buffer_kb_for_a_tracer
        return buffer_kb_for_a_tracer(text, [])[0]
    return selected(text) if name == "trace_clock" else text.strip()


@pytest.fixture(scope="session")
def live_tracefs():
    """Skip unless the kernel can be traced here; yields the tracefs path."""
    reason = tracefs_available()
    if reason:
        pytest.skip(reason)
    saved = {name: _read_setting(name) for name in RESTORED_SETTINGS}
    yield TRACEFS
    for name, value in saved.items():
        try:
            if _read_setting(name) != value:
                (TRACEFS / name).write_text(value)
        except OSError:
            pass


def _hold_tracing_lock():
    with open(TRACING_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def tracing_lock():
    """Serialise use of the machine's one tracefs between concurrent recorders."""
    yield from _hold_tracing_lock()


@pytest.fixture(scope="module")
def tracing_lock_module():
    """The same lock, held by a module-scoped recording fixture."""
    yield from _hold_tracing_lock()


@pytest.fixture(scope="session")
def public_fixtures():
    if not PUBLIC_FIXTURES.is_dir():
        pytest.skip(f"public trace fixtures not found at {PUBLIC_FIXTURES}")
    return PUBLIC_FIXTURES
