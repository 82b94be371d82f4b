"""The project's folders, read from setup.cfg's package_dir: the one list the guards walk.

The repository's folders map onto one import package (kmemscope = kmemscope,
kmemscope.dataset = dataset, ...). Every test that walks the code (the layer
test, the SQL lint, the type check, the pointer check of the docs, the rules
test) takes its folders from here, so a folder added to or moved in setup.cfg
is guarded without editing a test.
"""
import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Top-level folders of code outside the package: run from a checkout, never installed.
TOOL_FOLDERS = ("benchmarks", "tools")


def package_folders():
    """{folder: package} from setup.cfg's package_dir: the one list of the project's folders."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    pairs = [line.split("=", 1) for line in cfg["options"]["package_dir"].strip().splitlines()]
    return {folder.strip(): package.strip() for package, folder in pairs}


def code_folders(tools=True):
    """The folders that hold the project's code: every package folder, then (tools=True)
    benchmarks/ and tools/."""
    return list(package_folders()) + (list(TOOL_FOLDERS) if tools else [])


def code_files(suffixes=(".py",), tools=True):
    """Every file under code_folders() whose name ends with one of `suffixes`, sorted."""
    for folder in code_folders(tools):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in suffixes and "__pycache__" not in path.parts and path.is_file():
                yield path
