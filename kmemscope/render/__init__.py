"""kmemscope.render: every output kmemscope writes, in one place on the API floor.

  formats           the registry of output formats: names, extensions, which verbs offer
                    them, each one's writer and whether it is for programs (`machine`)
  tables            Arrow tables as aligned text, Arrow values as JSON cells
  writers           each format's writer of a Document (kind, rows, envelope, notes), the
                    schema version every machine output carries
  schemas/          the JSON Schema of each kind of machine output (docs/output-schema.md)
  comparison        a comparison's records as text, mmtests, markdown and rows
  comparison_html   a comparison's HTML table and the value and verdict spans of the report
  verdicts          the verdict's colours and texts, bounds, exactness and p-values as printed
  perfetto          one run as a Perfetto trace

Renderers compute nothing of their own: they lay out what the API's results and the
comparison model (kmemscope.queries.comparison_model) hold. Each module is imported
where it is used (this package imports none of them), so the command line stays quick.
"""
