"""The `kmemscope` command line: verbs over the library (capture, parsers, queries, notebooks).

`kmemscope.cli.cli` holds the verbs, `output` the formats every verb writes,
`compare_output` the mmtests-style comparison tables.
"""
from kmemscope.cli.cli import main

__all__ = ["main"]
