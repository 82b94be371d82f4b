"""The `kmemscope` command line: verbs over the Python API (kmemscope.api).

`kmemscope.cli.cli` holds the verbs, `output` the files and streams every verb
writes (table, csv, json, jsonl, parquet, folded). The text of tables and of
comparisons is the API's (kmemscope.tables, kmemscope.comparison_text).
"""
from kmemscope.cli.cli import main

__all__ = ["main"]
