"""The [spark] extra's requirements, read from setup.cfg (one place for the pins).

    python tests/spark_reqs.py           print them, one line (for pip install)
    python tests/spark_reqs.py --check   exit 0 when each is installed at its pinned version

`make setup-spark` uses --check so that a ready .venv costs no pip run.
"""
import configparser
import re
import sys
from importlib import metadata
from pathlib import Path

SETUP_CFG = Path(__file__).resolve().parent.parent / "setup.cfg"


def requirements():
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    text = cfg.get("options.extras_require", "spark", fallback="")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def installed(req):
    m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*==\s*([A-Za-z0-9_.+-]+)", req)
    if not m:
        return False     # not a plain pin: let pip decide
    try:
        return metadata.version(m.group(1)) == m.group(2)
    except metadata.PackageNotFoundError:
        return False


def main(argv):
    reqs = requirements()
    if not reqs:
        print(f"kmemscope: error: {SETUP_CFG} has no [spark] extra", file=sys.stderr)
        return 2
    if argv[1:] == ["--check"]:
        return 0 if all(installed(r) for r in reqs) else 1
    print(" ".join(reqs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
