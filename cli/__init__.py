"""kmemscope: trace capture and offline SQL analysis for the Linux page allocator.

The package root stays import-light: `kmemscope.capture` must run on hosts that
have only the Python standard library, so nothing here imports pyarrow or duckdb.
"""

__version__ = "0.1.0"
