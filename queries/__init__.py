"""kmemscope.queries: DuckDB over a kmemscope dataset, and the named analyses."""
