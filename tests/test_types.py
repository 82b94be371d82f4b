"""The Python API's type hints are checked by mypy (the package ships py.typed).

mypy reads the public surface (kmemscope.api, the tables and comparison text
every surface shows, the engine spec and protocols) with --check-untyped-defs,
following its imports silently. The repository's folders map onto the package
through setup.cfg's package_dir, which mypy does not read: the test lays the
same package out with links in a temporary directory.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import requirements

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("capture", "parsers", "queries", "notebooks", "cli")
CHECKED = ("kmemscope/api.py", "kmemscope/tables.py", "kmemscope/comparison_text.py",
           "common/errors.py", "kmemscope/queries/engines/__init__.py",
           "kmemscope/queries/engines/base.py")


def _package_tree(tmp):
    pkg = tmp / "kmemscope"
    pkg.mkdir()
    for entry in (ROOT / "kmemscope").iterdir():
        if entry.name != "__pycache__":
            os.symlink(entry, pkg / entry.name)
    for stage in STAGES:
        os.symlink(ROOT / stage, pkg / stage)
    return tmp


def _require_mypy():
    import importlib.util
    if importlib.util.find_spec("mypy") is None:
        requirements.skip("setup", "mypy is in the test extra: pip install -e '.[test]'")


def test_py_typed_ships_with_the_package():
    assert (ROOT / "kmemscope" / "py.typed").is_file()
    assert "py.typed" in (ROOT / "setup.cfg").read_text()


@pytest.mark.slow   # mypy over the package
def test_the_api_type_checks(tmp_path):
    _require_mypy()
    tree = _package_tree(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
         "--check-untyped-defs", "--no-error-summary", "--cache-dir", str(tmp_path / ".cache"),
         *CHECKED], cwd=tree, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_check_finds_a_type_error(tmp_path):
    _require_mypy()
    bad = tmp_path / "bad.py"
    bad.write_text("from kmemscope.queries.engines import EngineSpec\n"
                   "spec: EngineSpec = EngineSpec()\nname: int = spec.name\n")
    (tmp_path / "tree").mkdir()
    tree = _package_tree(tmp_path / "tree")
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / ".cache"), str(bad)],
        cwd=tree, capture_output=True, text=True, timeout=600, env={**os.environ, "MYPYPATH": str(tree)})
    assert run.returncode == 1 and "Incompatible types in assignment" in run.stdout, run.stdout
