"""Open a kmemscope dataset in DuckDB with every table as a view of its own name.

A dataset is `DATASET/<table>/run_id=<run_id>/part-<n>.parquet` (DESIGN.md). Each
table directory becomes one view over all its runs. `run_id` comes from the Hive
partition path and is forced to VARCHAR: a hex id made only of digits would
otherwise be guessed as an integer. `union_by_name` lets one view span kernels
whose event formats differ (gfp_flags is 4 bytes on 5.15 and 8 on 6.x).
"""
from pathlib import Path

from kmemscope.errors import DatasetError

TABLE_GLOB = "*/*.parquet"


def table_dirs(dataset):
    """Map table name -> directory for every table that has at least one run."""
    root = Path(dataset)
    if not root.exists():
        raise DatasetError(f"dataset {dataset} does not exist",
                           "create it with `kmemscope parse TRACE -o DATASET`")
    if not root.is_dir():
        raise DatasetError(f"dataset {dataset} is not a directory",
                           "give the directory that `kmemscope parse -o` wrote")
    tables = {}
    for child in sorted(root.iterdir()):
        if child.is_dir() and not child.name.startswith((".", "_")):
            if any(child.glob(TABLE_GLOB)):
                tables[child.name] = child
    if not tables:
        raise DatasetError(f"dataset {dataset} holds no tables",
                           "parse a trace into it with `kmemscope parse TRACE -o DATASET`")
    return tables


def quote_ident(name):
    return '"' + name.replace('"', '""') + '"'


def connect(dataset, threads=None):
    """Return a DuckDB connection where each table of `dataset` is a view."""
    import duckdb

    tables = table_dirs(dataset)
    con = duckdb.connect(database=":memory:")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    for name, path in tables.items():
        pattern = str(path / TABLE_GLOB).replace("'", "''")
        con.execute(
            f"CREATE VIEW {quote_ident(name)} AS SELECT * FROM read_parquet('{pattern}', "
            "hive_partitioning = true, hive_types = {'run_id': VARCHAR}, union_by_name = true)"
        )
    return con
