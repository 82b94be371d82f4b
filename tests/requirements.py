"""The one way a kmemscope test skips: for a named requirement, and never when it is demanded.

A test that cannot run here calls `skip(what, reason)` (or `skip_unless(what, reason_or_none)`):
`what` names a requirement below, `reason` says what is missing. When the requirement's switch
is on in the environment (`make test` turns on every switch that the machine can meet), the
skip becomes a failure instead, so that a missing Java, tracefs or fixture cannot pass quietly.

Only a missing requirement skips. An exception inside a test is a failure: no test catches
Exception to skip.
"""
import os

import pytest

# requirement -> (environment switch, what turning it on demands)
SWITCHES = {
    "spark": ("KMEMSCOPE_REQUIRE_SPARK", "Java 17+ and the [spark] extra (make setup-spark)"),
    "tracefs": ("KMEMSCOPE_REQUIRE_TRACEFS",
                "root, tracefs, trace-cmd and a kernel with the kmem/compaction/vmscan "
                "tracepoints of the Linux release the tests were written against, "
                "/proc/pressure (CONFIG_PSI) and debugfs's extfrag files"),
    "quiet": ("KMEMSCOPE_REQUIRE_QUIET",
              "a machine that nothing else squeezes for memory or traces on while the live "
              "tests run (a dedicated CI runner)"),
    "fixtures": ("KMEMSCOPE_REQUIRE_FIXTURES",
                 "the public trace.dat fixtures at ../shared/fixtures/public beside the clone"),
    "python38": ("KMEMSCOPE_REQUIRE_PYTHON38", "a Python 3.8 interpreter for the record .pyz"),
    "setup": ("KMEMSCOPE_REQUIRE_SETUP",
              "what `make setup` installs (trace-cmd, zstd, gcc, pkg-config, binutils, the "
              "[report] and [test] extras) and the committed examples/; for the installed-wheel "
              "test, the wheel `make dist` writes into dist/"),
}

# Requirements that were demanded but missing, where failing on the spot was not possible
# (at module level a failure would be a collection error that stops the whole run): the
# run fails at its end (conftest.pytest_sessionfinish).
DEMANDED_BUT_MISSING = []


def switch(what):
    """The environment variable that demands `what`."""
    return SWITCHES[what][0]


def required(what):
    """True when the run demands `what` (its switch is 1)."""
    return os.environ.get(switch(what)) == "1"


def skip(what, reason, allow_module_level=False):
    """Skip for `reason` (a missing `what`); fail instead when `what` is demanded."""
    if what not in SWITCHES:
        raise ValueError(f"unknown requirement {what!r}; one of {sorted(SWITCHES)}")
    if required(what):
        message = f"{switch(what)}=1 but {reason}"
        if allow_module_level:
            DEMANDED_BUT_MISSING.append(message)
            pytest.skip(message + RUN_FAILS, allow_module_level=True)
        pytest.fail(message, pytrace=False)
    pytest.skip(f"[{what}] {reason} ({switch(what)}=1 makes this a failure)",
                allow_module_level=allow_module_level)


def skip_unless(what, reason, allow_module_level=False):
    """skip(what, reason) when `reason` is not None (a probe's answer: None means present)."""
    if reason is not None:
        skip(what, reason, allow_module_level)


# pytest hooks (imported into conftest.py): the module-level misses above fail the run.
# Under pytest-xdist (`make check`) a module is collected in a worker process, so the
# controller learns of a miss only from the skip's report: its reason carries RUN_FAILS.
RUN_FAILS = ": the run fails"


def _demanded_but_missing(config):
    misses = list(DEMANDED_BUT_MISSING)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for report in (reporter.stats.get("skipped", []) if reporter else []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if reason.endswith(RUN_FAILS):
            misses.append(reason.removeprefix("Skipped: ")[:-len(RUN_FAILS)])
    return list(dict.fromkeys(misses))


def pytest_terminal_summary(terminalreporter):
    for reason in _demanded_but_missing(terminalreporter.config):
        terminalreporter.write_line(f"FAILED: {reason}", red=True)


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == 0 and _demanded_but_missing(session.config):
        session.exitstatus = 1
