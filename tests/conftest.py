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


# Spark: one local session for every Spark test of a pytest run (a JVM start
# costs 10-20 s here). `make test` sets KMEMSCOPE_REQUIRE_SPARK=1, having
# installed Java and the [spark] extra: a missing piece then fails the tests
# instead of skipping them.
SPARK_MASTER = "local[2]"
# Two cores and small data: few shuffle partitions. The JIT stops at C1: the
# C2 compiler threads took about 40% of a fresh JVM's CPU for these short
# queries; results do not depend on it.
# 4 GiB: one session serves the whole run, and late in it thp's sections (the trace
# models' window functions over every parity run) ran out of aggregation memory in 2 GiB.
SPARK_TEST_CONF = {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
                   "spark.driver.memory": "4g",
                   "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


def spark_unavailable():
    """None when Spark can run here (pyspark, sqlglot, Java), else the reason."""
    import importlib.util
    import shutil

    for mod in ("pyspark", "sqlglot"):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed (make setup-spark, or pip install 'kmemscope[spark]')"
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        return "no Java runtime for Spark (make setup-spark installs openjdk-17-jre-headless)"
    return None


_SPARK_MISSING = []


def skip_spark_test(reason, allow_module_level=False):
    """Skip a Spark test for `reason`; under KMEMSCOPE_REQUIRE_SPARK=1 the run then fails
    at its end (a collection error would stop every other test from running)."""
    if os.environ.get("KMEMSCOPE_REQUIRE_SPARK") == "1":
        _SPARK_MISSING.append(reason)
        reason = f"KMEMSCOPE_REQUIRE_SPARK=1 but {reason}: the run fails"
    pytest.skip(reason, allow_module_level=allow_module_level)


def pytest_terminal_summary(terminalreporter):
    for reason in dict.fromkeys(_SPARK_MISSING):
        terminalreporter.write_line(f"FAILED: KMEMSCOPE_REQUIRE_SPARK=1 but {reason}", red=True)


def pytest_sessionfinish(session, exitstatus):
    if _SPARK_MISSING and exitstatus == 0:
        session.exitstatus = 1


def skip_without_spark(allow_module_level=False):
    """skip_spark_test() when Spark cannot run here."""
    reason = spark_unavailable()
    if reason is not None:
        skip_spark_test(reason, allow_module_level)


@pytest.fixture(scope="session")
def spark_engine():
    """The Spark engine on local[2], shared by the whole run; stopped at its end."""
    skip_without_spark()
    from kmemscope.queries import engines

    spec = engines.EngineSpec("spark", SPARK_MASTER, SPARK_TEST_CONF)
    yield engines.engine_for(spec)
    engines.release(spec)


@pytest.fixture(scope="session")
def mixed_dataset(tmp_path_factory):
    """Runs of several kernel eras and field widths (parity_data.py), built once per run."""
    import parity_data

    return parity_data.build(tmp_path_factory.mktemp("mixed"))
