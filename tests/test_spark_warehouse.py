"""Spark's catalog folder (its "warehouse") is the process's own, not the user's working folder.

Spark's default is spark-warehouse/ in the folder the JVM started in: `kmemscope sql
--engine spark` left one behind wherever it ran. kmemscope gives each process a private
folder under the temporary directory and removes it at exit.
"""
import subprocess
import sys
from pathlib import Path

import pytest

import kmemscope
from conftest import PROJECT_ROOT, SPARK_MASTER, SPARK_TEST_CONF, skip_without_spark
from kmemscope.queries.engines import EngineSpec


def _local(uri):
    return Path(uri[len("file:"):] if uri.startswith("file:") else uri)


def test_sql_on_spark_keeps_the_catalog_in_a_private_folder(spark_engine, examples_dataset):
    where = _local(spark_engine.spark.conf.get("spark.sql.warehouse.dir"))
    assert where.name.startswith("kmemscope-spark-warehouse-"), where
    assert PROJECT_ROOT not in where.resolve().parents
    ds = kmemscope.open(examples_dataset, engine=EngineSpec("spark", SPARK_MASTER, SPARK_TEST_CONF))
    assert ds.sql("SELECT count(*) AS n FROM runs").rows() == [{"n": 2}]
    # the statement made Spark's catalog folder: there, and none where the JVM started
    assert where.is_dir()
    assert not (PROJECT_ROOT / "spark-warehouse").exists()


def test_the_private_warehouse_is_removed_at_exit():
    run = subprocess.run(
        [sys.executable, "-c", "from kmemscope.queries.engines import spark_engine as s\n"
         "import os\nf = s._private_warehouse()\nassert os.path.isdir(f)\nprint(f)"],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    folder = Path(run.stdout.strip())
    assert folder.name.startswith("kmemscope-spark-warehouse-") and not folder.exists()


@pytest.mark.spark
def test_a_stopped_session_leaves_no_warehouse():
    """A test worker ends without atexit: the folder goes when its session stops."""
    skip_without_spark()
    run = subprocess.run(
        [sys.executable, "-c",
         "import os\nfrom kmemscope.queries.engines import spark_engine as s\n"
         f"e = s.SparkEngine(master={SPARK_MASTER!r}, conf={SPARK_TEST_CONF!r})\n"
         "where = e.spark.conf.get('spark.sql.warehouse.dir')\ne.spark.sql('SELECT 1').collect()\n"
         "e.close()\nprint(where)\nos._exit(0)"],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    folder = _local(run.stdout.strip().splitlines()[-1])
    assert folder.name.startswith("kmemscope-spark-warehouse-") and not folder.exists()
