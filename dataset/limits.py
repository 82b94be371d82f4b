"""How much memory and time kmemscope may take: one setting per process, for every
DuckDB connection it makes and for the Python work around them.

A dataset from elsewhere can hold a 6 MB file of 200 million rows, a table of
100,000 columns or a 512 MiB host name: without limits a query builds tables of
tens of GB and opening the dataset alone takes minutes. So:

- every connection made through connect() gets DuckDB's memory limit (default a
  quarter of this machine's memory, not DuckDB's 80%) and a private spill folder
  (never ./.tmp of the working directory), removed at exit;
- bounded(timeout=...) stops the whole command, the listing, footers and views
  included, once `timeout` seconds have passed: SIGALRM interrupts every live
  connection and raises Expired in Python code, turned into one QueryError line.

The limits reach processes kmemscope starts (the report's notebook kernels)
through the environment: KMEMSCOPE_MEMORY_LIMIT (bytes).
"""
import os
import re
import weakref
from contextlib import contextmanager
from typing import Any

from kmemscope.common.errors import QueryError

ENV_MEMORY = "KMEMSCOPE_MEMORY_LIMIT"
DEFAULT_TIMEOUT = 3600.0        # a whole query over hundreds of runs takes minutes, not hours
TIMEOUT_MAX = 1e9               # about 31 years: what an interval timer holds on every platform

_MEMORY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(b|kb|mb|gb|tb|kib|mib|gib|tib)?\s*", re.I)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}

_live: weakref.WeakSet = weakref.WeakSet()       # connections to interrupt when the time is up
_spill: Any = None              # this process's ScratchFolder, made on first use


class Expired(BaseException):
    """The command's time is up (a BaseException: no `except Exception` swallows it)."""


def memory_bytes(text):
    """Bytes of a memory size such as `2GB`, `512MiB` or `1000000` (bytes); QueryError if not one."""
    m = _MEMORY.fullmatch(str(text))
    if not m or float(m.group(1)) <= 0:
        raise QueryError(f"{text!r} is not a memory size", "write it like 2GB, 512MiB or 4GiB")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "b").lower()])


def default_memory_limit():
    """A quarter of this machine's memory (DuckDB's own default is 80%)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError):
        return 2 << 30


def memory_limit():
    """The memory limit in bytes of this process's connections."""
    try:
        return int(os.environ[ENV_MEMORY])
    except (KeyError, ValueError):
        return default_memory_limit()


def _spill_dir():
    """This process's spill folder: removed at exit, and by the next kmemscope after a
    SIGKILL (common/scratch.py)."""
    global _spill
    if _spill is None:
        import atexit

        from kmemscope.common.scratch import ScratchFolder

        _spill = ScratchFolder("kmemscope-spill-")
        atexit.register(_spill.remove)
    return _spill.path


def connect(**kwargs):
    """duckdb.connect() with this process's memory limit and a private spill folder."""
    import duckdb

    con = duckdb.connect(**kwargs)
    try:
        # sql-safe: an int, and a path of mkdtemp quoted by doubling quotes
        con.execute(f"SET memory_limit = '{int(memory_limit())}B'")
        con.execute("SET temp_directory = '" + _spill_dir().replace("'", "''") + "'")
    except BaseException:
        con.close()
        raise
    _live.add(con)
    return con


def check_timeout(timeout):
    """QueryError unless `timeout` is a number of seconds an interval timer can hold (no
    inf, NaN, or 1e18)."""
    import math

    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (0 < seconds <= TIMEOUT_MAX):
        raise QueryError(f"a timeout of {timeout} s is not one kmemscope can keep",
                         f"give a number of seconds above 0 and at most {TIMEOUT_MAX:.0e}")


@contextmanager
def bounded(memory=None, timeout=None):
    """Run a command within `memory` (bytes or text such as 4GB; default: the process's
    limit) and `timeout` seconds (None: no limit). Nests: an inner limit never outlives
    the outer one. Outside the main thread only DuckDB's statements are stopped."""
    import signal
    import threading
    import time

    if timeout is not None:
        check_timeout(timeout)
    previous_env = os.environ.get(ENV_MEMORY)
    if memory is not None:
        os.environ[ENV_MEMORY] = str(memory if isinstance(memory, int) else memory_bytes(memory))
    state = {"expired": False}

    def interrupt_all():
        state["expired"] = True
        for con in list(_live):
            try:
                con.interrupt()
            except Exception:       # a closed connection
                pass

    def on_alarm(signum, frame):
        interrupt_all()
        raise Expired()

    main = threading.current_thread() is threading.main_thread()
    old, outer, timer, started = None, 0.0, None, time.monotonic()
    if timeout and main:
        # An alarm raised while duckdb's native module initialises aborts the process
        # (nanobind turns the exception into a fatal error), so it loads before the alarm is
        # armed. Not pyarrow: its import raises an ordinary exception, and the quick commands
        # that never need it keep from importing it (tests/test_reader_metadata.py).
        import duckdb  # noqa: F401
        outer = signal.getitimer(signal.ITIMER_REAL)[0]
        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, min(float(timeout), outer) if outer else float(timeout))
    elif timeout:
        timer = threading.Timer(float(timeout), interrupt_all)
        timer.daemon = True
        timer.start()
    try:
        yield
    except BaseException as exc:
        if state["expired"]:
            raise QueryError(f"the command ran longer than {timeout:g} s and was stopped",
                             "raise --timeout, or narrow the command to fewer runs") from None
        raise
    finally:
        if timer is not None:
            timer.cancel()
        if old is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            if outer:
                signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started),
                                                         0.001))
        if memory is not None:
            if previous_env is None:
                os.environ.pop(ENV_MEMORY, None)
            else:
                os.environ[ENV_MEMORY] = previous_env
