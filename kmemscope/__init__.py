"""kmemscope: trace capture and offline SQL analysis for the Linux page allocator.

    import kmemscope
    ds = kmemscope.open("DATASET")
    ds.query("hot_pfns").df()

The package root stays import-light: `kmemscope.capture` must run on hosts that
have only the Python standard library, so nothing here imports pyarrow or duckdb,
and the Python API (kmemscope.api) is loaded on first use.
"""

from kmemscope.common.errors import (  # noqa: F401  (leaves: nothing circles back)
    CaptureError, DatasetError, KmemscopeError, QueryError, TraceFileError)
from kmemscope.common.version import __version__  # noqa: F401

# the public API (kmemscope.api), one name a verb: open, parse, derive, verify, info...
_API = ("open", "parse", "parse_on_spark", "prune", "derive", "verify", "info", "bounded", "analyses",
        "describe", "Dataset", "Result", "Comparison", "Labels", "EngineSpec")


def __getattr__(name):
    if name in _API:
        from kmemscope import api

        return getattr(api, name)
    raise AttributeError(f"module 'kmemscope' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API))
