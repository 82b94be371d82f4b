"""The Python environment of Spark executors, packed into one archive for spark.archives.

A named analysis and a parse on Spark run kmemscope's own code on the executors:
kmemscope with its native decoder, duckdb and pyarrow must import there. Spark's
documented way to ship such packages ("Python Package Management" in the PySpark
docs) is a packed virtual environment passed as spark.archives=ENV.tar.gz#environment
and spark.pyspark.python=./environment/bin/python: each executor unpacks the
archive into its working folder and starts its Python workers from it.

pack() makes that archive: a fresh venv in a temporary folder, the kmemscope wheel
(a given one, or the one this kmemscope was installed from) and its dependencies
pip-installed at the versions this process runs (the driver and its executors
exchange plans and Arrow rows, so they run the same duckdb and pyarrow), then
venv-pack (which refuses editable installs, hence a wheel). The archive holds
packages, not the interpreter: the workers need the same Python at the same path
(venv-pack's --python-prefix names another). pyspark is left out: Spark puts its
own pyspark.zip on the executors' PYTHONPATH.

The temporary folder goes on every exit (an error, Ctrl-C); the archive is written
beside its name and renamed into place, so a failure leaves neither.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable, Iterable, Optional

from kmemscope.common.errors import KmemscopeError
from kmemscope.common.outfile import NewFile

# The folder the archive unpacks into on an executor (the #fragment of spark.archives)
# and the Python the executors' workers run from it.
ARCHIVE_FOLDER = "environment"
EXECUTOR_PYTHON = f"./{ARCHIVE_FOLDER}/bin/python"
VENV_PACK = "venv-pack==0.2.0"
# What Spark unpacks and venv-pack writes, keeping bin/python a link (a zip would not).
SUFFIXES = (".tar.gz", ".tgz", ".tar")
# Not needed to run tasks: the installers, venv-pack itself, pyarrow's C++ headers, Cython
# sources and tests (about 15 MB), and scipy (140 MB: only compare's statistics use it, on the
# driver; tests/test_spark_cluster.py runs every section, a parse and a compare on executors
# without it).
EXCLUDE = ("lib/python*/site-packages/scipy/*", "lib/python*/site-packages/scipy.libs/*",
           "lib/python*/site-packages/scipy-*",
           "bin/pip*", "lib/python*/site-packages/pip/*", "lib/python*/site-packages/pip-*",
           "lib/python*/site-packages/setuptools/*", "lib/python*/site-packages/setuptools-*",
           "lib/python*/site-packages/_distutils_hack/*",
           "lib/python*/site-packages/distutils-precedence.pth",
           "lib/python*/site-packages/pkg_resources/*",
           "bin/venv-pack", "lib/python*/site-packages/venv_pack/*",
           "lib/python*/site-packages/venv_pack-*",
           "lib/python*/site-packages/pyarrow/include/*", "lib/python*/site-packages/pyarrow/tests/*",
           "lib/python*/site-packages/pyarrow/src/*", "lib/python*/site-packages/pyarrow/*.pxd",
           "lib/python*/site-packages/pyarrow/*.pyx", "lib/python*/site-packages/pyarrow/*.pxi",
           "lib/python*/site-packages/pyarrow/includes/*")
# What a task imports: the modules its code lives in (a named analysis's, a parse's), the
# native decoder, the engine's libraries.
IMPORT_CHECK = ("import sys, kmemscope, kmemscope.parsers._tracedat, kmemscope.parsers.spark_parse, "
                "kmemscope.queries.runner, kmemscope.queries.engines.spark_engine, duckdb, pyarrow; "
                "print(f'Python {sys.version_info[0]}.{sys.version_info[1]}, kmemscope "
                "{kmemscope.__version__}, duckdb {duckdb.__version__}, pyarrow {pyarrow.__version__}')")
# pip's words for an index it cannot reach (it then says only that no version was found)
OFFLINE = ("NewConnectionError", "Failed to establish a new connection", "Network is unreachable",
           "Temporary failure in name resolution", "ConnectTimeoutError", "ProxyError")
TMP_HINT = "set TMPDIR to a folder with 1 GB free"


class SparkEnvError(KmemscopeError):
    """The executors' environment could not be made: no wheel, no pip, no index, no space."""


@dataclasses.dataclass(frozen=True)
class PackedEnv:
    """An archive made by pack(): where it is, its size, and the Spark settings that use it."""

    path: Path
    size: int
    python: str                      # the interpreter the workers need at this path

    @property
    def conf(self) -> dict:
        return {"spark.archives": f"{self.path}#{ARCHIVE_FOLDER}",
                "spark.pyspark.python": EXECUTOR_PYTHON}


def executor_python(archives: Optional[str]) -> Optional[str]:
    """The executors' Python for a spark.archives value (comma-separated URIs, each with an
    optional #folder): EXECUTOR_PYTHON when one unpacks into ARCHIVE_FOLDER, else None."""
    for item in (archives or "").split(","):
        if item.strip().rpartition("#")[2] == ARCHIVE_FOLDER and "#" in item:
            return EXECUTOR_PYTHON
    return None


def pack(output, wheel=None, extras: Iterable[str] = (), python_prefix=None,
         progress: Optional[Callable[[str], None]] = None) -> PackedEnv:
    """Make the executors' environment archive at `output` (.tar.gz, .tgz or .tar).

    wheel: the kmemscope wheel to install (None: the one this kmemscope was installed from;
    an editable install has none). extras: kmemscope extras the executors need (e.g. s3).
    python_prefix: the Python prefix on the workers when it differs from this one's.
    progress: called with a line per step. Raises SparkEnvError.
    """
    say = progress or (lambda _line: None)
    output = Path(output)
    if not output.name.endswith(SUFFIXES):
        raise SparkEnvError(f"{output}: not an archive Spark unpacks",
                            f"name it ending in {', '.join(SUFFIXES)}")
    if not output.parent.is_dir():
        raise SparkEnvError(f"{output.parent}: no such folder")
    for extra in extras:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", extra):
            raise SparkEnvError(f"{extra!r} is not the name of an extra", "e.g. --extra s3")
    requirement = _requirement(wheel, sorted(set(extras)))
    started = time.monotonic()
    try:
        work = Path(tempfile.mkdtemp(prefix="kmemscope-spark-env-"))
    except OSError as exc:
        raise SparkEnvError(f"cannot make a temporary folder: {exc.strerror or exc}",
                            TMP_HINT) from None
    try:
        env = work / "env"
        say(f"creating a virtual environment in {env}")
        _run([sys.executable, "-m", "venv", str(env)], "creating a virtual environment",
             "Debian: apt-get install python3-venv", work)
        python = env / "bin" / "python"
        constraints = work / "constraints.txt"
        try:
            constraints.write_text("".join(f"{n}=={v}\n" for n, v in _installed_versions()))
        except OSError as exc:
            raise SparkEnvError(f"cannot write in {work}: {exc.strerror or exc}", TMP_HINT) from None
        say(f"installing {requirement} and its dependencies (the versions this Python runs)")
        _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
              "--progress-bar", "off", "-q", "-c", str(constraints), requirement, VENV_PACK],
             "pip install", "pip needs the package index (PIP_INDEX_URL) or a folder of "
                            "wheels (PIP_FIND_LINKS) for duckdb, pyarrow and their kin", work)
        checked = _run([str(python), "-I", "-c", IMPORT_CHECK],
                       "importing kmemscope's task modules, its native decoder, duckdb and "
                       "pyarrow in the new environment",
                       "a wheel with every kmemscope package and the native decoder: make dist", work)
        say(f"{checked.strip()} import; packing {output.name}")
        packed = work / ("env" + next(s for s in SUFFIXES if output.name.endswith(s)))
        cmd = [str(python), "-m", "venv_pack", "-q", "-p", str(env), "-o", str(packed)]
        for pattern in EXCLUDE:
            cmd += ["--exclude", pattern]
        if python_prefix:
            cmd += ["--python-prefix", str(python_prefix)]
        _run(cmd, "venv-pack", None, work)
        size = packed.stat().st_size
        try:
            with packed.open("rb") as src, NewFile(output) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except OSError as exc:
            raise SparkEnvError(f"cannot write {output}: {exc.strerror or exc}") from None
        interpreter = os.path.realpath(env / "bin" / "python")
        if python_prefix:
            interpreter = str(Path(python_prefix) / "bin" / Path(interpreter).name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"wrote {output} ({size / 1e6:.1f} MB) in {time.monotonic() - started:.0f} s; "
        f"the workers need {interpreter}")
    return PackedEnv(output.resolve(), size, interpreter)


def _requirement(wheel, extras):
    """What pip installs: the given wheel, the wheel this kmemscope came from, or this
    version from the package index; with the extras."""
    tail = f"[{','.join(extras)}]" if extras else ""
    if wheel is not None:
        given = Path(wheel)
        if not given.name.endswith(".whl") or not given.is_file():
            raise SparkEnvError(f"{wheel}: not a wheel file", "make dist builds one in dist/")
        return f"{given.resolve()}{tail}"
    # not the source tree's kmemscope.egg-info, which `python -c` in a checkout would find first
    search = [p for p in sys.path if p and os.path.abspath(p) != os.getcwd()]
    dist = next(iter(importlib.metadata.distributions(name="kmemscope", path=search)), None)
    if dist is None:
        raise SparkEnvError("no installed kmemscope distribution found", "give --wheel")
    origin = json.loads(dist.read_text("direct_url.json") or "null")
    if origin is None:                        # installed from a package index
        return f"kmemscope{tail}=={dist.version}"
    url = urllib.parse.urlsplit(origin.get("url", ""))
    source = Path(urllib.request.url2pathname(url.path)) if url.scheme == "file" else None
    if "archive_info" in origin and source and source.name.endswith(".whl") and source.is_file():
        return f"{source}{tail}"
    kind = "in editable mode" if origin.get("dir_info", {}).get("editable") else "not from a wheel file"
    raise SparkEnvError(f"kmemscope {dist.version} is installed {kind} ({source or origin.get('url', '?')}), "
                        "which venv-pack cannot pack", "give --wheel: make dist builds one in dist/, "
                        "or pip wheel --no-deps -w DIR SOURCE")


def _installed_versions():
    """(name, version) of every distribution this Python has, but kmemscope: the executors
    get the versions the driver runs."""
    seen = set()
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").strip()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if not name or key in seen or key == "kmemscope":
            continue
        seen.add(key)
        yield name, dist.version


def _run(cmd, what, hint, cwd):
    """Run a step in the temporary folder (a source tree in the caller's folder would shadow
    the installed package); its stdout, or SparkEnvError with the line of its output that
    says why."""
    # The step's own temporary files (pip's build tracker and unpacked wheels) go inside the
    # folder the caller removes, so a step killed by an interrupt leaves none in $TMPDIR.
    tmp = Path(cwd) / "tmp"
    tmp.mkdir(exist_ok=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                              stdin=subprocess.DEVNULL, cwd=cwd,
                              env={**os.environ, "TMPDIR": str(tmp)})
    except OSError as exc:
        raise SparkEnvError(f"{what}: {exc.strerror or exc}", hint) from None
    if proc.returncode == 0:
        return proc.stdout
    reason = _reason(proc.stderr + "\n" + proc.stdout)
    if any(s in proc.stderr for s in OFFLINE):
        reason = f"the package index cannot be reached ({reason})"
    if "No space left" in reason or "Errno 28" in reason or "File too large" in reason:
        hint = TMP_HINT
    raise SparkEnvError(f"{what} failed: {reason}", hint)


def _reason(text):
    """The line of a failed step's output that says why: a full disk's, else pip's ERROR:
    line, else (a traceback: pip's "ERROR: Exception:") the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "No space left" in ln or "Errno 28" in ln:
            return ln[:300]
    errors = [ln[len("ERROR:"):].strip() for ln in lines if ln.startswith("ERROR:")]
    errors = [e for e in errors if e not in ("", "Exception:")]
    if errors:
        return errors[0][:300]
    return lines[-1][:300] if lines else "no output"
