"""The `kmemscope` command line: verbs over the Python API (kmemscope.api).

`kmemscope.cli.verbs` holds the verbs, `output` the files and streams every verb
writes (table, csv, json, jsonl, parquet, folded). The text of tables and of
comparisons is the API's (kmemscope.render).

`main` here is the program's entry point: it loads the verbs itself, so that
the cyclic collector's work on what the imports create can be skipped.
"""

__all__ = ["main"]


def main(argv=None):
    """Run `kmemscope ARGS` (sys.argv when `argv` is None) and exit with its status."""
    import gc

    as_program = argv is None
    if as_program:
        # The imports create some 150 modules' objects, all alive until exit:
        # the collector's ~20 passes over them during the imports, and the
        # passes of the interpreter's finalization, are 15-30 ms of a parse or
        # query of a second or less. gc.freeze() moves them out of its reach;
        # what the command allocates afterwards is collected as usual.
        gc.disable()
    try:
        from kmemscope.cli.verbs import main as run
    finally:
        if as_program:
            gc.freeze()
            gc.enable()
    try:
        return run(argv)
    finally:
        if as_program:
            gc.freeze()
