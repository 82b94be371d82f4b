"""`kmemscope spark-env`: the Spark executors' Python environment as one archive.

A verb of its own module, registered on the command group by cli/verbs.py; the work
is kmemscope.api.pack_spark_env's.
"""
import click


@click.command("spark-env")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              metavar="ARCHIVE", help="The archive to write: .tar.gz, .tgz or .tar.")
@click.option("--wheel", type=click.Path(dir_okay=False), metavar="PATH",
              help="The kmemscope wheel to install (default: the wheel this kmemscope was "
                   "installed from; an editable install needs one: make dist).")
@click.option("--extra", "extras", multiple=True, metavar="NAME",
              help="A kmemscope extra the executors need, e.g. s3. Repeatable.")
@click.option("--python-prefix", metavar="PATH",
              help="The prefix of the workers' Python (e.g. /usr) when it is not this one's.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def spark_env(output, wheel, extras, python_prefix, quiet):
    """Pack the Python environment Spark executors run kmemscope with.

    A new virtual environment gets the kmemscope wheel, its native decoder, and
    duckdb and pyarrow at the versions this Python runs (pip: the package index, or
    PIP_FIND_LINKS); venv-pack packs it into ARCHIVE. The Spark settings that
    ship it to the executors are printed on stdout, one a line:

    \b
      spark.archives=ARCHIVE#environment
      spark.pyspark.python=./environment/bin/python

    Give them with --spark-conf (spark.archives alone is enough: kmemscope then
    sets the executors' Python). The archive holds packages, not Python: the
    workers need the same Python at the same path (or --python-prefix), on the
    same OS and architecture.
    """
    from kmemscope.api import pack_spark_env
    from kmemscope.common.text import printable

    def progress(line):
        if not quiet:
            click.echo(f"kmemscope: {printable(line)}", err=True)

    packed = pack_spark_env(output, wheel, extras, python_prefix, progress)
    for key, value in packed.conf.items():
        click.echo(f"{key}={value}")
