"""kmemscope.parsers: trace.dat and procfs samples -> Arrow -> the Parquet dataset."""
