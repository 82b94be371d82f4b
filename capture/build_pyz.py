"""Build dist/kmemscope-record.pyz: `kmemscope record` as one file for hosts.

usage: python3 capture/build_pyz.py OUT.pyz

The archive holds capture/*.py as kmemscope.capture, common/errors.py and
common/version.py as kmemscope.common, and stub package files: the rest of
the package is not needed to record, and leaving it out guarantees that nothing
pulls pyarrow, duckdb or click onto a host that has only Python 3.8+ and
trace-cmd. Every module it carries must parse as Python 3.8: the build checks. Run it as
`python3 kmemscope-record.pyz -o BUNDLE ...`.
"""
import ast
import os
import re
import shutil
import sys
import tempfile
import zipapp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MAIN = """import sys

from kmemscope.capture.command import main

sys.exit(main(sys.argv[1:]))
"""


def package_version():
    """__version__ from common/version.py, without importing it."""
    try:
        with open(os.path.join(ROOT, "common", "version.py")) as f:
            m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
        return m.group(1) if m else None
    except OSError:
        return None


def check_python38(path):
    """Raise SystemExit naming `path` when it does not parse as Python 3.8 (what the .pyz
    meets on old hosts). ast's feature_version catches 3.9+ syntax, not newer library calls."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    try:
        ast.parse(source, filename=path, feature_version=(3, 8))
    except SyntaxError as exc:
        sys.exit("build_pyz: %s:%s is not Python 3.8 (the record .pyz runs there): %s"
                 % (os.path.relpath(path, ROOT), exc.lineno, exc.msg))


def carried_modules():
    """(source path, path inside the archive) of every module the .pyz carries."""
    for name in ("errors.py", "outfile.py"):
        yield os.path.join(ROOT, "common", name), os.path.join("kmemscope", "common", name)
    for name in sorted(os.listdir(HERE)):
        if name.endswith(".py") and name != "build_pyz.py":
            yield os.path.join(HERE, name), os.path.join("kmemscope", "capture", name)


def build(out):
    modules = list(carried_modules())
    for source, _ in modules:
        check_python38(source)
    with tempfile.TemporaryDirectory() as tmp:
        pkg = os.path.join(tmp, "kmemscope")
        os.makedirs(os.path.join(pkg, "capture"))
        os.makedirs(os.path.join(pkg, "common"))
        with open(os.path.join(pkg, "__init__.py"), "w") as f:
            f.write('"""kmemscope (record-only build)."""\n')
        with open(os.path.join(pkg, "common", "__init__.py"), "w") as f:
            f.write('"""kmemscope.common (record-only build)."""\n')
        with open(os.path.join(pkg, "common", "version.py"), "w") as f:
            f.write('__version__ = %r\n' % package_version())
        for source, inside in modules:
            shutil.copy(source, os.path.join(tmp, inside))
        with open(os.path.join(tmp, "__main__.py"), "w") as f:
            f.write(MAIN)
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        zipapp.create_archive(tmp, out, interpreter="/usr/bin/env python3", compressed=True)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 capture/build_pyz.py OUT.pyz")
    print(build(sys.argv[1]))
