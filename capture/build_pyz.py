"""Build dist/kmemscope-record.pyz: `kmemscope record` as one file for hosts.

usage: python3 capture/build_pyz.py OUT.pyz

The archive holds kmemscope/capture/*.py, kmemscope/errors.py and a stub
kmemscope/__init__.py and kmemscope/version.py: the rest of the package root is not
needed to record, and leaving it out guarantees that nothing pulls pyarrow,
duckdb or click onto a host that has only Python 3.8+ and trace-cmd. Run it as
`python3 kmemscope-record.pyz -o BUNDLE ...`.
"""
import os
import re
import shutil
import sys
import tempfile
import zipapp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MAIN = """import sys

from kmemscope.capture.cli import main

sys.exit(main(sys.argv[1:]))
"""


def package_version():
    """__version__ from kmemscope/version.py, without importing it."""
    try:
        with open(os.path.join(ROOT, "kmemscope", "version.py")) as f:
            m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
        return m.group(1) if m else None
    except OSError:
        return None


def build(out):
    with tempfile.TemporaryDirectory() as tmp:
        pkg = os.path.join(tmp, "kmemscope")
        os.makedirs(os.path.join(pkg, "capture"))
        with open(os.path.join(pkg, "__init__.py"), "w") as f:
            f.write('"""kmemscope (record-only build)."""\n')
        with open(os.path.join(pkg, "version.py"), "w") as f:
            f.write('__version__ = %r\n' % package_version())
        shutil.copy(os.path.join(ROOT, "kmemscope", "errors.py"), os.path.join(pkg, "errors.py"))
        for name in sorted(os.listdir(HERE)):
            if name.endswith(".py") and name != "build_pyz.py":
                shutil.copy(os.path.join(HERE, name), os.path.join(pkg, "capture", name))
        with open(os.path.join(tmp, "__main__.py"), "w") as f:
            f.write(MAIN)
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        zipapp.create_archive(tmp, out, interpreter="/usr/bin/env python3", compressed=True)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 capture/build_pyz.py OUT.pyz")
    print(build(sys.argv[1]))
