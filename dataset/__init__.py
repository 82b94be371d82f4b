"""kmemscope.dataset: the Parquet dataset on disk, the bottom layer.

Format version and canonical schema (`format`, `schema`), local and s3://
storage (`storage`), listing and DuckDB views for readers (`reader`; plain results
as Python rows, `rows`), the
commit protocol and its recovery (`commit`, over the no-follow folder
primitives of `safefs` and the recorded digests of `digests`), the derived-table
cache (`derived`), imported benchmark results (`run_metrics`) and `verify`.
Parsers write through it and queries read through it; it imports nothing of
kmemscope but the leaves of `kmemscope.common` (errors, version, text).
"""
