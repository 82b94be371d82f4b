"""kmemscope.capture: record a page-allocator trace bundle on a host.

Runs on Python 3.8+ with the standard library only, plus the trace-cmd binary:
production hosts have neither pyarrow nor duckdb, and the same code ships as
the single-file dist/kmemscope-record.pyz.
"""

# Version of the bundle layout and manifest.json written by this package.
BUNDLE_FORMAT_VERSION = 1
