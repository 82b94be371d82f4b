"""The Python API's type hints are checked by mypy (the package ships py.typed).

mypy reads every module of every layer (the folders of setup.cfg's package_dir,
tests/project.py) with --check-untyped-defs, so the dataset layer's types reach
the API checked, not as Any. The repository's folders map onto the package
through package_dir, which mypy does not read: the test lays the same package
out with links in a temporary directory.
"""
import os
import subprocess
import sys

import pytest

import requirements
from project import ROOT, package_folders


def _package_tree(tmp):
    """tmp/kmemscope/... as installed: the package root's files, each layer's folder linked
    under its package name."""
    pkg = tmp / "kmemscope"
    pkg.mkdir()
    for entry in (ROOT / "kmemscope").iterdir():
        if entry.name != "__pycache__":
            os.symlink(entry, pkg / entry.name)
    for folder, package in package_folders().items():
        if package != "kmemscope":
            os.symlink(ROOT / folder, tmp / package.replace(".", "/"))
    return tmp


def _checked(tree):
    """Every module of the package, as paths inside the linked tree."""
    found = []
    for top, dirs, files in os.walk(tree / "kmemscope", followlinks=True):    # the layers are links
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found += [os.path.relpath(os.path.join(top, f), tree) for f in files if f.endswith(".py")]
    return sorted(found)


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
         *_checked(tree)], cwd=tree, capture_output=True, text=True, timeout=600)
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


def test_the_check_reads_every_layer(tmp_path):
    """Each folder of setup.cfg's package_dir is in the tree mypy reads, under its package."""
    tree = _package_tree(tmp_path)
    checked = _checked(tree)
    for folder, package in package_folders().items():
        prefix = package.replace(".", "/") + "/"
        assert any(c.startswith(prefix) for c in checked), (folder, package)
    assert "kmemscope/dataset/reader.py" in checked and "kmemscope/common/errors.py" in checked

