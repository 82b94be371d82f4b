"""kmemscope.common: the leaves every layer imports (errors, version, printable text).

The ground floor of the house: these modules import nothing of kmemscope, so
any layer may use them without an import circle (tests/test_layers.py).

errors.py and version.py also ship inside the single-file recorder
(dist/kmemscope-record.pyz), which runs on hosts with only Python 3.8: they
must stay Python 3.8 (no `match`, no `X | Y` types at run time, no
`str.removeprefix`-era syntax newer than 3.8). capture/build_pyz.py refuses to
build when either stops parsing as 3.8.
"""
