"""Bad input that once ended in an internal error or a misleading line: each is one line on
stderr and a non-zero exit now, or the true answer.

Oracles: the kernel's interval timer limits (setitimer), the file system (os.listdir), and
numbers written by Python's own repr.
"""
import pytest
from kmrun import kmemscope, one_error_line, rows_of

from kmemscope.common.errors import QueryError
from kmemscope.dataset import limits


@pytest.mark.parametrize("timeout", ["inf", "1e309", "1e18", "nan"])
def test_a_timeout_no_timer_holds_is_one_line(timeout):
    with pytest.raises(QueryError, match="not one kmemscope can keep"):
        with limits.bounded(timeout=float(timeout)):
            pass


def test_a_timeout_of_inf_on_the_command_line_is_one_line(examples_dataset):
    line = one_error_line(kmemscope("sql", examples_dataset, "SELECT 1", "--timeout", "inf",
                                    check=False))
    assert "timeout of inf s" in line


def test_sql_output_into_a_missing_folder_is_one_line(examples_dataset, tmp_path):
    proc = kmemscope("sql", examples_dataset, "SELECT 1", "-o", tmp_path / "nowhere" / "r.csv",
                     check=False)
    line = one_error_line(proc)
    assert "No such folder for the output" in line and "internal error" not in line
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def near_max(examples_ab, tmp_path):
    """A copy of the A/B examples with an imported metric `big` near the largest double:
    1.6e308 on side a's run, 1.7e308 on each of side b's two runs."""
    import shutil

    ds = tmp_path / "ds"
    shutil.copytree(examples_ab, ds, symlinks=True)
    runs = rows_of(kmemscope("sql", ds, "SELECT run_id, labels FROM runs ORDER BY run_id",
                             "--format", "json"))
    lines = ["run,metric,value,unit,better"]
    for r in runs:
        side = dict(r["labels"]) if isinstance(r["labels"], dict) else dict(
            (p["key"], p["value"]) for p in r["labels"])
        lines.append(f"{r['run_id']},big,{'1.6e308' if side['kernel'] == 'a' else '1.7e308'},,higher")
    (tmp_path / "big.csv").write_text("\n".join(lines) + "\n")
    kmemscope("metrics", "import", ds, tmp_path / "big.csv")
    return ds


@pytest.mark.parametrize("fmt", ["text", "csv", "mmtests", "markdown"])
def test_a_value_near_the_largest_double_is_written_with_an_exponent(near_max, fmt):
    out = kmemscope("compare", near_max, "--by", "kernel", "--metrics", "big", "--format", fmt).stdout
    assert "1.7e+308" in out
    import re

    assert not re.search(r"[0-9]{30}", out), out    # not the 309 digits of 1.7e308 in fixed point


def test_a_sum_beyond_the_largest_double_is_na_with_a_note(near_max):
    proc = kmemscope("compare", near_max, "--by", "kernel", "--metrics", "big", "--stat", "sum")
    sum_line = next(line for line in proc.stdout.splitlines() if line.startswith("Sum "))
    assert "inf" not in sum_line and "n/a" in sum_line, sum_line
    assert sum_line.split()[2] == "1.6e+308"        # side a: its one run's value
    assert "big: a side's total is beyond the largest double" in proc.stdout + proc.stderr
