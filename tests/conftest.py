"""Shared test fixtures: paths, the machine's tracefs and allocator settings, Spark.

Tests that record real traces need root and tracefs: without them they skip through
requirements.skip("tracefs", ...), a failure under KMEMSCOPE_REQUIRE_TRACEFS=1 (`make test`).
A test that records holds the machine-wide record lock (record_lock() below) for as long as
it records: tracefs is one global resource per machine, shared with other pytest runs and
with a `kmemscope record` started by hand. It waits for the lock, at most
KMEMSCOPE_TEST_LOCK_WAIT_S seconds, then fails saying who holds it.

Tiers (markers registered in setup.cfg, set here from the fixtures a test uses):
`live` records on this machine's tracefs, `spark` starts a JVM, `slow` takes long for
another reason. `make check` runs everything else; `make test` runs everything.
"""
import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import requirements
# A demanded requirement missing at module level fails the run at its end.
from requirements import pytest_sessionfinish, pytest_terminal_summary  # noqa: F401

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PUBLIC_FIXTURES = PROJECT_ROOT.parent / "shared" / "fixtures" / "public"
EXAMPLES = PROJECT_ROOT / "examples"
TRACEFS = Path("/sys/kernel/tracing")
# The lock between pytest runs; kmemscope record's own lock (capture/lock.py) is checked too.
TRACING_LOCK = Path("/var/tmp/kmemscope-trace.lock")
# Below the per-test limit (setup.cfg timeout, 900 s), so that the lock's own failure is the one seen.
LOCK_WAIT_S = float(os.environ.get("KMEMSCOPE_TEST_LOCK_WAIT_S", "600"))
# The suite checks what the analyses compute: analyses' rows kept from an earlier question
# (queries/result_cache.py) are off, except in test_result_cache.py, which checks that what
# the cache gives back equals what is computed. Children started by tests inherit it.
os.environ.setdefault("KMEMSCOPE_RESULT_CACHE", "0")
# The environment the run started with: what kmemscope running in-process (the Spark engine
# above all) must leave as it found it, since later tests start children from it.
ENVIRONMENT_AT_START = dict(os.environ)


# ---------------------------------------------------------------- stopping the run

def _stop_on_signal(signum, _frame):
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def pytest_configure(config):
    """SIGTERM and SIGHUP stop a test run the way Ctrl-C does: pytest tears the fixtures
    down, so every JVM, recorder and child a fixture started is stopped in its `finally`
    (left at their default, they end the process at once and the children run on)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _stop_on_signal)


_PR_SET_PDEATHSIG = 1


def die_with_this_process():
    """Popen(preexec_fn=...): the child is killed (SIGKILL) when the test process dies, also
    by a SIGKILL that no `finally` sees. For daemons a test starts in a session of their own."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def tracefs_available():
    """Return None when tracefs is usable, else the reason it is not."""
    if os.geteuid() != 0:
        return "recording needs root"
    if not (TRACEFS / "events").is_dir():
        if not TRACEFS.is_dir():
            return f"{TRACEFS} does not exist (no tracefs in this kernel)"
        mounted = subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)],
                                 capture_output=True, text=True)
        # another pytest-xdist worker may have mounted it meanwhile ("already mounted")
        if not (TRACEFS / "events").is_dir():
            return f"cannot mount tracefs at {TRACEFS}: {mounted.stderr.strip()}"
    if not (TRACEFS / "events" / "kmem" / "mm_page_alloc").is_dir():
        return "this kernel has no kmem:mm_page_alloc tracepoint"
    if subprocess.run(["sh", "-c", "command -v trace-cmd"], capture_output=True).returncode:
        return "trace-cmd is not installed (run `make setup`)"
    return None


def _record_lock_holder():
    """None when no `kmemscope record` holds its lock (capture/lock.py), else the holder's pid."""
    from kmemscope.capture import lock

    path = os.path.join(lock.state_dir(), "record.lock")
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.read(fd, 64).decode(errors="replace").strip() or "?"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@contextlib.contextmanager
def record_lock(wait_s=None):
    """Hold the machine's tracefs: the tests' lock, taken once no `kmemscope record` runs.

    Waits at most `wait_s` (KMEMSCOPE_TEST_LOCK_WAIT_S, 600 s) for another pytest run's
    recordings and for a record started by hand, then fails naming the holder.
    """
    global _lock_depth
    if _lock_depth:           # held already by this process (a fixture inside a locked test)
        _lock_depth += 1
        try:
            yield
        finally:
            _lock_depth -= 1
        return
    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    # First come, first served: a pytest-xdist worker that runs one live test after another
    # releases the lock for a few milliseconds between them, so a worker that polls for it
    # (a session fixture that records once) would wait out the bound. Each process waiting
    # leaves a ticket; only the oldest live ticket tries the lock.
    ticket = Path(f"{TRACING_LOCK}.wait-{time.time_ns():020d}-{os.getpid()}")
    ticket.touch()
    try:
        with open(TRACING_LOCK, "a") as held:
            while True:
                first = _first_ticket()
                if first is not None and first != ticket:
                    holder = f"another test run waiting before this one ({first.name})"
                else:
                    try:
                        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        holder = f"another test run (lock file {TRACING_LOCK})"
                    else:
                        pid = _record_lock_holder()
                        if pid is None:
                            break
                        fcntl.flock(held, fcntl.LOCK_UN)
                        holder = f"kmemscope record, pid {pid}"
                if time.monotonic() > deadline:
                    pytest.fail(f"the machine-wide record lock stayed busy for {wait_s:.0f} s, "
                                f"held by {holder} (wait for it to finish, or raise "
                                "KMEMSCOPE_TEST_LOCK_WAIT_S)", pytrace=False)
                time.sleep(0.1)
            ticket.unlink()
            _lock_depth = 1
            try:
                yield
            finally:
                _lock_depth = 0
                fcntl.flock(held, fcntl.LOCK_UN)
    finally:
        ticket.unlink(missing_ok=True)


def _first_ticket():
    """The oldest ticket of a process still alive (see record_lock); stale ones are removed."""
    for path in sorted(Path(TRACING_LOCK).parent.glob(Path(TRACING_LOCK).name + ".wait-*")):
        try:
            os.kill(int(path.name.rsplit("-", 1)[1]), 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
            continue
        except (ValueError, PermissionError):
            pass
        return path
    return None


_lock_depth = 0


def _hold_tracing_lock():
    """record_lock() as a generator, for fixtures (`yield from _hold_tracing_lock()`)."""
    with record_lock():
        yield


@pytest.fixture
def tracing_lock():
    """Serialise use of the machine's one tracefs between concurrent recorders."""
    yield from _hold_tracing_lock()


@pytest.fixture(scope="module")
def tracing_lock_module():
    """The same lock, held by a module-scoped recording fixture."""
    yield from _hold_tracing_lock()


# What tests (and the recordings they make) change on the machine, read and written
# as text. Put back at the end of the run when changed, and only then.
HOST_SETTINGS = {
    "tracing_on": TRACEFS / "tracing_on",
    "trace_clock": TRACEFS / "trace_clock",
    "buffer_size_kb": TRACEFS / "buffer_size_kb",
    "vm.defrag_mode": Path("/proc/sys/vm/defrag_mode"),
    "vm.nr_hugepages": Path("/proc/sys/vm/nr_hugepages"),
    "thp.enabled": Path("/sys/kernel/mm/transparent_hugepage/enabled"),
    "thp.defrag": Path("/sys/kernel/mm/transparent_hugepage/defrag"),
}


def _read_setting(name):
    from kmemscope.capture.tracefs import selected

    path = HOST_SETTINGS[name]
    if not path.exists():
        return None
    text = path.read_text()
    if name == "buffer_size_kb":
        # The size a tracer would get: on a fresh boot '7 (expanded: 1408)' is not 7.
        from capture_helpers import buffer_kb_for_a_tracer
        return buffer_kb_for_a_tracer(text, [])[0]
    if name in ("trace_clock", "thp.enabled", "thp.defrag"):
        return selected(text)          # the [bracketed] choice
    return text.strip()


def _enabled_events():
    """{events/<system>/<event>} whose enable file reads 1."""
    out = set()
    for enable in TRACEFS.glob("events/*/*/enable"):
        try:
            if enable.read_text().startswith("1"):
                out.add(enable.parent)
        except OSError:
            continue
    return out


def host_state():
    """The settings that tests change, and the enabled events, as read now."""
    return {name: _read_setting(name) for name in HOST_SETTINGS}, _enabled_events()


def restore_host_state(saved):
    """Write back each setting (and event enable) that differs from `saved`; -> what was put back."""
    settings, events = saved
    restored = []
    for name, value in settings.items():
        if value is not None and _read_setting(name) != value:
            HOST_SETTINGS[name].write_text(value)
            restored.append(name)
    now = _enabled_events()
    for event in now - events:
        (event / "enable").write_text("0")
        restored.append(f"{event.relative_to(TRACEFS)} disabled")
    for event in events - now:
        (event / "enable").write_text("1")
        restored.append(f"{event.relative_to(TRACEFS)} enabled")
    return restored


@pytest.fixture(scope="session")
def live_tracefs():
    """The tracefs path, once this machine can be traced (else a named skip).

    The allocator and tracing settings tests change are read under the record lock when
    the first live test starts and put back under it at the end of the run (only those
    that differ, so a recording someone else started in between is left alone).
    """
    requirements.skip_unless("tracefs", tracefs_available())
    with record_lock():
        saved = host_state()
    yield TRACEFS
    with record_lock():
        restored = restore_host_state(saved)
    if restored:
        print(f"\nkmemscope tests: put back {', '.join(restored)}")


@pytest.fixture(scope="session")
def public_fixtures():
    if not PUBLIC_FIXTURES.is_dir():
        requirements.skip("fixtures", f"public trace fixtures not found at {PUBLIC_FIXTURES}")
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


def skip_spark_test(reason, allow_module_level=False):
    """Skip a Spark test for `reason`; a failure under KMEMSCOPE_REQUIRE_SPARK=1."""
    requirements.skip("spark", reason, allow_module_level)


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


# The tiers. A test that uses one of these fixtures records live or starts a JVM.
LIVE_FIXTURES = {"live_tracefs", "tracing_lock", "tracing_lock_module", "stacks_recording"}
SPARK_FIXTURES = {"spark_engine"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark live and spark tests from their fixtures, before -m selects (make check), and
    group them for pytest-xdist (`--dist loadgroup`, make check and make test).

    A group runs on one worker: the tests of a file stay together (its module fixtures
    are made once), every file with a live test runs on the worker that owns tracefs
    (recordings take the machine's one tracefs in turn anyway), and every file with a
    Spark test on the worker that owns the one SparkSession."""
    kind = {}
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        module = item.nodeid.split("::")[0]
        if names & LIVE_FIXTURES:
            item.add_marker(pytest.mark.live)
        if item.get_closest_marker("live"):      # by its fixtures or written on the test
            kind[module] = "tracefs"
        if names & SPARK_FIXTURES:
            item.add_marker(pytest.mark.spark)
        if item.get_closest_marker("spark"):      # by its fixtures or written on the test
            kind.setdefault(module, "spark")
    for item in items:
        module = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(kind.get(module, module)))


def pytest_fixture_setup(fixturedef, request):
    """A test that reaches tracefs through a fixture asked for at run time
    (request.getfixturevalue) escapes the marking above: make check would record, and
    pytest-xdist could run it beside the live tests. Such a test must be marked live."""
    item = getattr(request, "_pyfuncitem", None)
    # (the session's shared recording, stacks_recording, is made once under the record lock
    # for whichever test asks first: the one exception)
    reaches = {fixturedef.argname, *fixturedef.argnames} & LIVE_FIXTURES
    if reaches and fixturedef.scope != "session" and item is not None \
            and not item.get_closest_marker("live"):
        pytest.fail(f"{item.nodeid} reaches tracefs through {fixturedef.argname} but is not "
                    "marked live (mark it, or the fixture parameter that records)", pytrace=False)


def pytest_collection_finish(session):
    # Shared fixtures record only when the run holds live tests (not under `make check`).
    session.config.kmemscope_live = any(item.get_closest_marker("live") for item in session.items)


def pytest_xdist_node_collection_finished(node, ids):
    """Every test has a group (pytest_collection_modifyitems), so under `--dist loadgroup`
    every id a worker collected ends in xdist's "@group" suffix. Without it a test goes to
    any worker: two live tests then wait on each other's record lock, and a file's module
    fixtures are built on both workers. It happened once when pytest renamed the attribute
    xdist rewrites."""
    if node.config.getvalue("dist") == "loadgroup" and ids and not any("@" in i for i in ids):
        pytest.exit(f"pytest-xdist did not group the tests (pytest {pytest.__version__}): "
                    "install the versions setup.cfg pins", returncode=4)


# Loopback TCP for a second: high-order non-blocking allocations (skb pages) with stacks.
# 4 MiB socket buffers keep many large sends in flight: tests/test_alloc_origins.py asks for
# more than 100 stacked allocations, most of them from the network stack.
NETLOAD = r'''
import socket, sys, threading, time
secs = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
def recv():
    c, _ = srv.accept()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    while c.recv(1 << 20):
        pass
t = threading.Thread(target=recv); t.start()
s = socket.create_connection(srv.getsockname())
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
buf = b"x" * (1 << 20)
end = time.monotonic() + secs
while time.monotonic() < end:
    s.sendall(buf)
s.close(); t.join()
'''


STACKS_RECORD_ARGS = ("--preset", "atomic-origins", "-e", "kmem:mm_page_free:order > 0")


# ---------------------------------------------------------------- made once per test run

def built_once(tmp_path_factory, name, build):
    """build(folder) -> a path or a tuple of paths under folder, run once per test run: the
    pytest-xdist workers of one run share it (the first to ask builds it under a lock in
    the run's base folder; the others wait, then read what it built). Without xdist, once
    per process, as any session fixture. What is built is only read: each worker queries a
    private copy of a dataset (private_copy), since queries write derived caches."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return build(tmp_path_factory.mktemp(name))
    root = tmp_path_factory.getbasetemp().parent          # the run's, above each worker's
    shared, done = root / f"built-once-{name}", root / f"built-once-{name}.json"
    with open(root / f"built-once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)                  # released when the file closes
        if not done.exists():
            if shared.exists():                           # a worker died building it
                shutil.rmtree(shared)
            shared.mkdir()
            value = build(shared)
            paths = value if isinstance(value, tuple) else (value,)
            done.write_text(json.dumps({"tuple": isinstance(value, tuple),
                                        "paths": [str(Path(p).relative_to(shared)) for p in paths]}))
    built = json.loads(done.read_text())
    paths = tuple(shared / p for p in built["paths"])
    return paths if built["tuple"] else paths[0]


def private_copy(tmp_path_factory, dataset, name):
    """A copy of a dataset that this worker's queries may write derived caches into."""
    target = tmp_path_factory.mktemp(name) / "ds"
    shutil.copytree(dataset, target, symlinks=True)
    return target


@pytest.fixture(scope="session")
def stacks_recording(live_tracefs, tmp_path_factory):
    """(bundle, dataset) of one recording with kernel stacks made here, shared by the run.

    The atomic-origins preset plus high-order frees over 1 s of loopback TCP: what
    alloc_origins needs (tests/test_alloc_origins.py checks it against trace-cmd report),
    made once instead of once per test file.
    """
    import sys

    from kmrun import kmemscope

    def record(d):
        load = d / "netload.py"
        load.write_text(NETLOAD)
        bundle = d / "bundle"
        with record_lock():
            kmemscope("record", "-o", bundle, *STACKS_RECORD_ARGS, "--", sys.executable, load, "1")
        ds = d / "ds"
        kmemscope("parse", "-q", bundle, "-o", ds, "--label", "kernel=stacks")
        return bundle, ds

    bundle, ds = built_once(tmp_path_factory, "stacks", record)
    return bundle, private_copy(tmp_path_factory, ds, "stacks")


# (example folder, its kernel label) of the examples datasets
EXAMPLES_TWO = (("kmem-compaction", "a"), ("memory-pressure", "b"))


def examples_parsed(tmp_path_factory, name, bundles):
    """The committed examples `bundles` parsed once per test run (built_once) -> a private
    copy for this worker, which no query has touched before the caller's."""
    from kmrun import kmemscope

    def parse(d):
        ds = d / "ds"
        for bundle, kernel in bundles:
            if not (EXAMPLES / bundle).is_dir():
                requirements.skip("setup", f"the committed example {EXAMPLES / bundle} is missing")
            kmemscope("parse", "-q", EXAMPLES / bundle, "-o", ds, "--label", f"kernel={kernel}")
        return ds

    return private_copy(tmp_path_factory, built_once(tmp_path_factory, name, parse), name)


@pytest.fixture(scope="session")
def examples_dataset(tmp_path_factory):
    """One dataset of two committed examples, parsed once per run and only read by tests:
    kmem-compaction (label kernel=a) and memory-pressure (kernel=b, a run without page events,
    about which the analyses have notes to give)."""
    return examples_parsed(tmp_path_factory, "examples", EXAMPLES_TWO)


@pytest.fixture(scope="session")
def examples_ab(tmp_path_factory):
    """One A/B dataset of the three committed examples, parsed once per run and only read by
    tests (the report, compare and Perfetto export tests): kmem-compaction labelled kernel=a,
    memory-pressure and thp-faults kernel=b. Each run's `source` names its example folder."""
    return examples_parsed(tmp_path_factory, "examples-ab", EXAMPLES_TWO + (("thp-faults", "b"),))


@pytest.fixture(scope="session")
def mixed_dataset(request, tmp_path_factory):
    """Runs of several kernel eras and field widths (parity_data.py), built once per run.

    With the stacks recording when the run holds live tests (`make test`); `make check`
    builds it from the committed and synthetic runs only.
    """
    import parity_data

    stacks = None
    if getattr(request.config, "kmemscope_live", False):
        stacks = request.getfixturevalue("stacks_recording")[0]
    # the stacks recording joins it where the run records (its path differs per worker)
    name = "mixed-with-stacks" if stacks is not None else "mixed"
    built = built_once(tmp_path_factory, name, lambda d: parity_data.build(d, stacks))
    return private_copy(tmp_path_factory, built, name)
