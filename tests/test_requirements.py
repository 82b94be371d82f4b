"""The skip helper (requirements.py) and the rule that an exception is a failure.

Planted tests run in a pytest of their own: a skip for a missing requirement passes
without its switch and fails the run with it, at module level too; an exception in an
analysis section fails test_determinism.py instead of skipping it.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import requirements

TESTS = Path(__file__).resolve().parent

PLANTED = '''
import requirements

def test_needs_java():
    requirements.skip("spark", "planted: no Java here")

def test_present():
    requirements.skip_unless("tracefs", None)
'''

PLANTED_MODULE_LEVEL = '''
import requirements
requirements.skip("fixtures", "planted: no fixtures here", allow_module_level=True)

def test_never_runs():
    pass
'''

# A plugin that makes one analysis section raise, as a bug in its SQL would.
PLANTED_CRASH = '''
import parity_data
from kmemscope.queries import runner

parity_data.build = lambda tmp, stacks=None: tmp          # no dataset is read
def run_query(qname, dataset, **kw):
    raise RuntimeError("planted: this section crashes")
runner.run_query = run_query
'''


def _pytest(tmp_path, args, **switches):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KMEMSCOPE_REQUIRE_")}
    env.update(switches)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(tmp_path)])
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "-p", "requirements", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def _outcomes(out):
    """{'passed': n, 'failed': n, 'skipped': n, ...} from pytest's last line, counted here."""
    last = out.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", last)}


def test_a_missing_requirement_skips_with_its_reason_and_switch(tmp_path):
    (tmp_path / "test_planted.py").write_text(PLANTED)
    run = _pytest(tmp_path, ["test_planted.py"])
    assert run.returncode == 0, run.stdout + run.stderr
    assert _outcomes(run.stdout) == {"passed": 1, "skipped": 1}
    assert "[spark] planted: no Java here (KMEMSCOPE_REQUIRE_SPARK=1 makes this a failure)" \
        in run.stdout


def test_a_demanded_requirement_fails_instead_of_skipping(tmp_path):
    (tmp_path / "test_planted.py").write_text(PLANTED)
    run = _pytest(tmp_path, ["test_planted.py"], KMEMSCOPE_REQUIRE_SPARK="1")
    assert run.returncode == 1, run.stdout + run.stderr
    assert _outcomes(run.stdout) == {"failed": 1, "passed": 1}
    assert "KMEMSCOPE_REQUIRE_SPARK=1 but planted: no Java here" in run.stdout


# `make check` runs its tests on pytest-xdist workers: a miss found in a worker fails the run too.
# slow: the xdist case starts two workers of a planted run (~6 s); make test runs it
@pytest.mark.parametrize("workers", [[], pytest.param(["-n", "2"], marks=pytest.mark.slow)],
                         ids=["one-process", "xdist"])
def test_a_demanded_requirement_missing_at_module_level_fails_the_run(tmp_path, workers):
    (tmp_path / "test_planted.py").write_text(PLANTED_MODULE_LEVEL)
    (tmp_path / "test_other.py").write_text("def test_other():\n    assert True\n")
    off = _pytest(tmp_path, [*workers, "test_planted.py", "test_other.py"])
    assert off.returncode == 0, off.stdout + off.stderr
    assert _outcomes(off.stdout) == {"passed": 1, "skipped": 1}
    on = _pytest(tmp_path, [*workers, "test_planted.py", "test_other.py"],
                 KMEMSCOPE_REQUIRE_FIXTURES="1")
    assert on.returncode == 1, on.stdout + on.stderr
    assert _outcomes(on.stdout) == {"passed": 1, "skipped": 1}     # the rest still ran
    assert "FAILED: KMEMSCOPE_REQUIRE_FIXTURES=1 but planted: no fixtures here" in on.stdout


def test_an_unknown_requirement_is_an_error():
    with pytest.raises(ValueError, match="unknown requirement"):
        requirements.skip("gpu", "no GPU")


@pytest.mark.slow   # runs the determinism tests in a pytest of its own
def test_a_crashing_section_fails_the_determinism_tests(tmp_path):
    (tmp_path / "planted_crash.py").write_text(PLANTED_CRASH)
    run = _pytest(tmp_path, ["-p", "planted_crash", "--rootdir", str(TESTS.parent),
                             "-c", str(TESTS.parent / "setup.cfg"),
                             str(TESTS / "test_determinism.py"), "-k", "threads and summary"])
    assert run.returncode == 1, run.stdout + run.stderr
    counts = _outcomes(run.stdout)
    assert counts.get("failed", 0) >= 1 and "skipped" not in counts, run.stdout
    assert "planted: this section crashes" in run.stdout


def test_every_switch_is_documented_for_contributors():
    page = (TESTS.parent / "docs" / "contributing.md").read_text()
    for what, (switch, _demands) in requirements.SWITCHES.items():
        assert f"| `{what}` | `{switch}` |" in page, f"{what} ({switch}) is not in docs/contributing.md"


# ---------------------------------------------------------------- the skip policy

# Helpers of the suite that may call pytest's skip machinery themselves: the one helper.
SKIP_HELPERS = {"requirements.py"}
BARE_SKIPS = {"skip", "importorskip", "skipif", "xfail", "SkipTest"}


def bare_skips(source, name="<planted>"):
    """'file:line what' for each way `source` skips other than through requirements.py:
    pytest.skip/importorskip/xfail, @pytest.mark.skip/skipif/xfail, unittest's SkipTest,
    or those names imported from pytest or unittest."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.ImportFrom) and node.module in ("pytest", "unittest"):
            found += [f"{name}:{node.lineno} from {node.module} import {a.name}"
                      for a in node.names if a.name in BARE_SKIPS]
        elif isinstance(node, ast.Attribute) and node.attr in BARE_SKIPS:
            base = node.value
            while isinstance(base, ast.Attribute):     # pytest.mark.skipif, unittest.case.SkipTest
                base = base.value
            if isinstance(base, ast.Name) and base.id in ("pytest", "unittest"):
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_no_test_skips_but_through_a_requirement():
    """Every skip names a requirement whose switch can demand it (tests/requirements.py)."""
    found = [hit for path in sorted(TESTS.glob("*.py")) if path.name not in SKIP_HELPERS
             for hit in bare_skips(path.read_text(), path.name)]
    assert not found, "skips outside requirements.skip():\n" + "\n".join(found)


@pytest.mark.parametrize("planted", [
    "import pytest\ndef test_x():\n    pytest.skip('no trace-cmd')\n",
    "import pytest\nperfetto = pytest.importorskip('perfetto')\n",
    "import pytest\n@pytest.mark.skipif(True, reason='no PSI')\ndef test_x():\n    pass\n",
    "import pytest\n@pytest.mark.skip\ndef test_x():\n    pass\n",
    "import pytest\ndef test_x():\n    pytest.xfail('flaky')\n",
    "from pytest import skip\ndef test_x():\n    skip('no debugfs')\n",
    "import unittest\ndef test_x():\n    raise unittest.SkipTest('no root')\n",
], ids=["skip", "importorskip", "skipif", "mark.skip", "xfail", "from-import", "SkipTest"])
def test_the_skip_policy_finds_every_bare_skip(planted):
    assert bare_skips(planted), planted
    assert not bare_skips("import requirements\nrequirements.skip('setup', 'no trace-cmd')\n")
