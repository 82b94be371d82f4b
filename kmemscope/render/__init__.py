"""kmemscope.render: every output kmemscope writes, in one place on the API floor.

  formats      the registry of output formats (names, extensions, which verbs offer them)
  tables       Arrow tables as aligned text, Arrow values as JSON cells
  writers      a query's rows to a file or stream in each format
  comparison   a comparison's records as text, mmtests, markdown and rows
  perfetto     one run as a Perfetto trace

Renderers compute nothing of their own: they lay out what the API's results and the
comparison model (kmemscope.queries.comparison_model) hold. Each module is imported
where it is used (this package imports none of them), so the command line stays quick.
"""
