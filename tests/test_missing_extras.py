"""What an optional extra brings, missing: one line naming the extra to install, no traceback.

`pip install kmemscope` gives parse, info, sql, query, compare, verify and metrics (numpy and
scipy are installed with it, for compare); report, export perfetto and kmemscope.plots need the
[report] extra, Result.pl() [polars], s3:// datasets [s3], --engine spark [spark]. Here each
command runs in a Python where the extra's packages are not found (a finder first on the
import path says so), as after a plain install.
"""
import subprocess
import sys

import pytest

from conftest import PROJECT_ROOT

RUN_WITHOUT = """
import sys
ABSENT = set(sys.argv[1].split(","))
del sys.argv[1]

class Absent:
    # First on the import path: these packages (and their modules) are not found, as when
    # they were never installed.
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Absent())
{body}
"""
CLI = "from kmemscope.cli import main\nmain(sys.argv[1:])"


def _without(packages, body, *args):
    return subprocess.run([sys.executable, "-c", RUN_WITHOUT.format(body=body), ",".join(packages),
                           *map(str, args)], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=300)


def _one_line_naming(proc, extra):
    assert proc.returncode != 0, proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.startswith("kmemscope: error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"pip install 'kmemscope[{extra}]'" in lines[0], lines[0]


@pytest.mark.parametrize("packages, extra, args", [
    (("papermill", "nbconvert"), "report", ("report", "{ds}", "-o", "{tmp}/report.html")),
    (("perfetto",), "report", ("export", "perfetto", "{ds}", "--run", "{run}", "-o", "{tmp}/t.pftrace")),
    (("pyspark",), "spark", ("sql", "{ds}", "SELECT 1", "--engine", "spark")),
    (("s3fs",), "s3", ("info", "s3://bucket/dataset")),
])
def test_a_command_without_its_extra_says_which_to_install(examples_dataset, tmp_path, packages,
                                                           extra, args):
    run = next((examples_dataset / "runs").glob("run_id=*")).name.split("=", 1)[1]
    argv = [a.format(ds=examples_dataset, tmp=tmp_path, run=run) for a in args]
    proc = _without(packages, CLI, *argv)
    _one_line_naming(proc, extra)


@pytest.mark.parametrize("packages, extra, call", [
    (("polars",), "polars", "pl"),
    (("pandas",), "report", "df"),
])
def test_a_result_without_its_extra_says_which_to_install(examples_dataset, packages, extra, call):
    body = ("import kmemscope\n"
            f"r = kmemscope.open({str(examples_dataset)!r}).sql('SELECT 1 AS x')\n"
            "try:\n"
            f"    r.{call}()\n"
            "except kmemscope.KmemscopeError as e:\n"
            "    print('kmemscope: error:', e, file=sys.stderr)\n"
            "    sys.exit(1)\n")
    _one_line_naming(_without(packages, body), extra)


def test_compare_needs_no_extra(examples_dataset):
    """Every package compare imports is installed with kmemscope: the report extra's absent."""
    report_only = ("papermill", "nbconvert", "nbclient", "nbformat", "ipykernel", "matplotlib",
                   "pandas", "perfetto")
    proc = _without(report_only, CLI, "compare", examples_dataset, "--by", "kernel",
                    "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.lstrip().startswith(("{", "["))
