"""The wheel of dist/ as a user installs it: in a fresh virtualenv, on a machine without libtraceevent.

`make dist` builds the wheel (tagged cp310-abi3-manylinux_*, libtraceevent and libzstd inside).
Here it is installed with its [report] extra into a virtualenv outside the checkout (pip and
its cache; the dependencies held at the versions of the checkout's .venv, so that an answer
that differs is kmemscope's and not a newer duckdb's), and every command runs from another
folder, with no PYTHONPATH, in a mount namespace where an empty file is bound over the
system's libtraceevent and libzstd: the checkout's own build cannot load there (a test below
shows it), so what works came from the wheel. The installed commands must give the answers
the checkout gives on the committed examples: parse, sql, query, compare in every format,
export perfetto byte for byte (parquet as a table), and report must write its page.

Without a wheel in dist/ the module skips (the `setup` requirement: `make test` builds dist/
first); it is `slow`, for the minute pip takes to fill the virtualenv.
"""
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import requirements
from conftest import EXAMPLES, PROJECT_ROOT
import kmrun
from project import package_folders

from kmemscope.common.version import __version__

# A virtualenv with the [report] extra (about a minute of pip), then every verb twice.
pytestmark = pytest.mark.slow

DIST = PROJECT_ROOT / "dist"
WHEEL_NAME = re.compile(rf"kmemscope-{re.escape(__version__)}-cp310-abi3-"
                        r"(manylinux_\d+_\d+_x86_64)\.whl")
# The system's copies of the libraries the decoder links that manylinux does not allow.
SYSTEM_LIBS = sorted(p for pattern in ("libtraceevent.so*", "libzstd.so*")
                     for p in Path("/usr/lib/x86_64-linux-gnu").glob(pattern))
# Binds an empty file over each library given after it, then runs the command after "--".
HIDE = """#!/bin/sh
empty=$1; shift
while [ "$1" != -- ]; do mount --bind "$empty" "$1" || exit 97; shift; done
shift
exec "$@"
"""
COMPARE_FORMATS = ("text", "mmtests", "markdown", "csv", "json", "jsonl", "parquet")


def _wheel():
    wheels = sorted(DIST.glob(f"kmemscope-{__version__}-*.whl"))
    if not wheels:
        requirements.skip("setup", f"no kmemscope {__version__} wheel in {DIST} (make dist builds it)")
    assert len(wheels) == 1, f"several wheels in dist/: {[w.name for w in wheels]}"
    return wheels[0]


def _unshare():
    """The command that starts a program in a mount namespace of its own."""
    if not shutil.which("unshare"):
        requirements.skip("setup", "no unshare (util-linux) to hide the system's libtraceevent")
    own_user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *own_user, "--mount", "--propagation", "private"]


class Here(str):
    """A file or folder name in each side's own folder (ds, abds, an output)."""


class Side:
    """One installation of kmemscope and the folder its files are in. The installed one runs
    as a program there, in the namespace that hides the system's libraries; the checkout's in
    this process when it can (kmrun: a program start costs more than most commands here)."""

    def __init__(self, folder, argv=None, env=None, prefix=()):
        self.folder, self.argv, self.env, self.prefix = folder, argv, env, list(prefix)

    def run(self, *args, timeout=600):
        args = [str(self.folder / a) if isinstance(a, Here) else str(a) for a in args]
        if self.argv is None:
            proc = kmrun.kmemscope(*args, check=False, text=False, timeout=timeout)
        else:
            proc = subprocess.run([*self.prefix, *self.argv, *args], cwd=self.folder,
                                  env=self.env, capture_output=True, timeout=timeout)
        # The same answer names each side's own folder: the same words for both.
        here = str(self.folder).encode()
        proc.stdout, proc.stderr = (proc.stdout.replace(here, b"<here>"),
                                    proc.stderr.replace(here, b"<here>"))
        return proc

    def ok(self, *args, timeout=600):
        proc = self.run(*args, timeout=timeout)
        assert proc.returncode == 0, f"kmemscope {args}: {proc.stderr.decode(errors='replace')}"
        return proc

    def read(self, name):
        data = (self.folder / name).read_bytes()
        return data.replace(str(self.folder).encode(), b"<here>")


@pytest.fixture(scope="module")
def wheel():
    return _wheel()


@pytest.fixture(scope="module")
def hidden(tmp_path_factory):
    """The command prefix that runs a program where the system's libtraceevent and libzstd
    are empty files (a mount namespace of its own)."""
    unshare = _unshare()
    if not SYSTEM_LIBS:
        requirements.skip("setup", "no libtraceevent in /usr/lib/x86_64-linux-gnu (make setup)")
    tmp = tmp_path_factory.mktemp("hide")
    hide = tmp / "hide.sh"
    hide.write_text(HIDE)
    hide.chmod(0o755)
    empty = tmp / "empty"
    empty.write_bytes(b"")
    prefix = [str(a) for a in (*unshare, hide, empty, *SYSTEM_LIBS, "--")]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=60)
    if probe.returncode:
        requirements.skip("setup", f"cannot bind-mount over the system's libraries in a mount "
                          f"namespace ({probe.returncode}: {probe.stderr.strip()})")
    return prefix


@pytest.fixture(scope="module")
def installed(wheel, hidden, tmp_path_factory):
    """(venv, hidden, env, work): the virtualenv, the prefix that hides the system's libraries,
    the environment and the folder (outside the checkout) its commands run in."""
    tmp = tmp_path_factory.mktemp("installed-wheel")
    venv, work = tmp / "venv", tmp / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, cwd=work, env=env, timeout=300)
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
                            check=True, capture_output=True, text=True, timeout=300).stdout
    constraints = tmp / "constraints.txt"
    constraints.write_text("".join(line + "\n" for line in freeze.splitlines()
                                   if not line.lower().startswith("kmemscope")))
    pip = subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-compile",
                          "--disable-pip-version-check", "-c", constraints, f"{wheel}[report]"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return venv, hidden, env, work


@pytest.fixture(scope="module")
def sides(installed, tmp_path_factory):
    """{"installed": Side, "checkout": Side}, each with the examples parsed in its folder:
    ds (kmem-compaction) and abds (the A/B runs of ab-defrag-mode)."""
    venv, hidden, env, work = installed
    both = {"installed": Side(work, [venv / "bin" / "kmemscope"], env, hidden),
            "checkout": Side(tmp_path_factory.mktemp("checkout-side"))}
    ab_runs = sorted((EXAMPLES / "ab-defrag-mode").glob("run*"))
    if not (EXAMPLES / "kmem-compaction").is_dir() or not ab_runs:
        requirements.skip("setup", f"the committed examples are missing from {EXAMPLES}")
    for side in both.values():
        side.ok("parse", "-q", EXAMPLES / "kmem-compaction", "-o", Here("ds"), "--label", "kernel=example")
        side.ok("parse", "-q", *ab_runs, "-o", Here("abds"))
    return both


def _untimed(stderr):
    """stderr without the durations its notes give ("built in 1.8 s")."""
    return re.sub(rb"\b\d+(\.\d+)? ?(s|ms)\b", b"<duration>", stderr)


def _same_answer(sides, *args, outputs=()):
    """Run `kmemscope ARGS` on both sides: the same exit, stdout, stderr (but the durations
    it notes) and output files."""
    got = {name: side.run(*args) for name, side in sides.items()}
    installed, checkout = got["installed"], got["checkout"]
    assert checkout.returncode == 0, checkout.stderr.decode(errors="replace")
    assert installed.returncode == 0, installed.stderr.decode(errors="replace")
    assert installed.stdout == checkout.stdout, f"kmemscope {args}: stdout differs"
    assert _untimed(installed.stderr) == _untimed(checkout.stderr), f"kmemscope {args}: stderr differs"
    for name in outputs:
        a, b = sides["installed"], sides["checkout"]
        if name.endswith(".parquet"):
            assert pq.read_table(a.folder / name).equals(pq.read_table(b.folder / name)), f"{name} differs"
        else:
            assert a.read(name) == b.read(name), f"{name} differs"
    return installed


def _mapped_packages():
    """Every package of the checkout: each folder of setup.cfg's package_dir and each folder
    with an __init__.py below it, as a path inside the wheel."""
    out = set()
    for folder, package in package_folders().items():
        root = PROJECT_ROOT / folder
        for init in root.rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                out.add("/".join([*package.split("."), *init.parent.relative_to(root).parts]))
    return out


def test_the_wheel_is_abi3_and_manylinux_with_every_package_and_data_file(wheel):
    m = WHEEL_NAME.fullmatch(wheel.name)
    assert m, f"{wheel.name}: not kmemscope-{__version__}-cp310-abi3-manylinux_*_x86_64.whl"
    auditwheel = Path(sys.executable).parent / "auditwheel"
    if not auditwheel.exists():
        requirements.skip("setup", "no auditwheel in .venv (make dist installs it)")
    show = subprocess.run([auditwheel, "show", wheel], capture_output=True, text=True, timeout=300)
    assert show.returncode == 0, show.stderr
    assert re.search(rf'consistent\s+with\s+the\s+following\s+platform\s+tag:\s+"{m.group(1)}"',
                     show.stdout), show.stdout
    names = set(zipfile.ZipFile(wheel).namelist())
    folders = {n.rsplit("/", 1)[0] for n in names if n.endswith("/__init__.py")}
    assert _mapped_packages() <= folders, f"packages missing: {_mapped_packages() - folders}"
    for lib in ("libtraceevent", "libzstd"):       # auditwheel's copies, renamed with a hash
        pattern = rf"kmemscope\.libs/{lib}-[0-9a-f]+\.so\.1[.0-9]*"
        assert any(re.fullmatch(pattern, n) for n in names), f"no {pattern} in {wheel.name}"
    for parts in (("parsers", "_tracedat.abi3.so"), ("parsers", "_tracedat.pyi"), ("py.typed",),
                  ("queries", "subsystems.csv"), ("queries", "KERNEL-ERAS.md")):
        inside = "/".join(("kmemscope", *parts))
        assert inside in names, f"no {inside} in {wheel.name}"
    # The data the commands read: each query's SQL, the report notebooks, the outputs' schemas.
    for folder, pattern in (("queries", "*.sql"), ("queries", "lib/*.sql"),
                            ("notebooks", "*.ipynb"), ("kmemscope", "render/schemas/*.json")):
        files = sorted((PROJECT_ROOT / folder).glob(pattern))
        assert files, f"no {folder}/{pattern} to look for"
        for path in files:
            inside = "/".join((package_folders()[folder].replace(".", "/"),
                               path.relative_to(PROJECT_ROOT / folder).as_posix()))
            assert inside in names, f"{inside} is not in {wheel.name}"


def _cpythons():
    """{(3, minor): interpreter} for each CPython 3.10 or later found here: this one, python3.X
    on PATH, pyenv's versions."""
    candidates = [sys.executable, *(shutil.which(f"python3.{minor}") for minor in range(10, 20)),
                  *map(str, sorted(Path.home().glob(".pyenv/versions/3.*/bin/python3")))]
    found = {}
    for python in filter(None, candidates):
        proc = subprocess.run([python, "-c", "import platform, sys; "
                               "print(platform.python_implementation(), *sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=60)
        kind, *version = (proc.stdout.split() or ["?"]) if proc.returncode == 0 else ["?"]
        if kind == "CPython" and tuple(map(int, version)) >= (3, 10):
            found.setdefault(tuple(map(int, version)), python)
    return found


# Loads the decoder from the unpacked wheel (on its own: the rest of kmemscope needs pyarrow)
# and uses each type and a compression library.
LOAD_DECODER = """
import importlib.util, sys, zlib
spec = importlib.util.spec_from_file_location("_tracedat", sys.argv[1])
t = importlib.util.module_from_spec(spec)
spec.loader.exec_module(t)
assert t.decompress("zlib", zlib.compress(b"abc" * 99), 297) == b"abc" * 99
assert t.Stacks().count() == 0 and t.Trace.__module__ == "kmemscope.parsers._tracedat"
assert issubclass(t.DecoderMemoryError, MemoryError)
print(t.__file__)
"""


def test_the_decoder_loads_in_every_cpython_from_3_10(wheel, hidden, tmp_path):
    """One abi3 build for all of them: the wheel's decoder, with the libraries inside the wheel,
    in each CPython 3.10+ found here (this one at least), the system's libraries hidden."""
    with zipfile.ZipFile(wheel) as whl:
        whl.extractall(tmp_path, [n for n in whl.namelist() if n.endswith(".so") or ".so." in n])
    native = tmp_path / "kmemscope" / "parsers" / "_tracedat.abi3.so"
    pythons = _cpythons()
    assert tuple(sys.version_info[:2]) in pythons
    for version, python in sorted(pythons.items()):
        proc = subprocess.run([*hidden, python, "-c", LOAD_DECODER, native], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"CPython {version} ({python}): {proc.stderr}"


def test_the_system_libtraceevent_is_hidden_from_the_installed_commands(installed):
    venv, hidden, env, work = installed
    load = "import ctypes; ctypes.CDLL('libtraceevent.so.1')"
    assert subprocess.run([sys.executable, "-c", load], timeout=60).returncode == 0
    proc = subprocess.run([*hidden, sys.executable, "-c", load], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0 and "libtraceevent.so.1" in proc.stderr, proc.stderr
    # The checkout's own build needs the system's library: it loads outside, not there.
    native = "import kmemscope.parsers._tracedat"
    assert subprocess.run([sys.executable, "-c", native], cwd=PROJECT_ROOT, timeout=60).returncode == 0
    proc = subprocess.run([*hidden, sys.executable, "-c", native], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "libtraceevent" in proc.stderr, proc.stderr


def test_the_installed_kmemscope_is_the_wheels(installed):
    venv, hidden, env, work = installed
    where = ("import sys, kmemscope, kmemscope.parsers._tracedat as t; "
             "print(kmemscope.__file__); print(t.__file__); "
             "print('\\n'.join(sorted({l.split()[-1] for l in open('/proc/self/maps') if '.so' in l})))")
    proc = subprocess.run([*hidden, venv / "bin" / "python", "-c", where], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    package, native, *mapped = proc.stdout.splitlines()
    site = venv / "lib"
    assert Path(package).is_relative_to(site) and Path(native).is_relative_to(site), proc.stdout
    assert not Path(package).is_relative_to(PROJECT_ROOT)
    libtraceevent = [m for m in mapped if "libtraceevent" in m]
    assert libtraceevent and all("/kmemscope.libs/" in m for m in libtraceevent), mapped
    version = subprocess.run([*hidden, venv / "bin" / "kmemscope", "--version"], cwd=work,
                             env=env, capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == f"kmemscope, version {__version__}", version.stdout


def test_parse_sql_and_query_answer_as_the_checkout(sides):
    ds, abds = Here("ds"), Here("abds")
    assert _same_answer(sides, "info", ds, "--format", "json").stdout
    _same_answer(sides, "sql", ds, "SELECT \"order\", count(*) AS n, count(*) FILTER (WHERE failed) "
                 "AS failed FROM page_allocs GROUP BY 1 ORDER BY 1")
    _same_answer(sides, "sql", abds, "SELECT * FROM runs ORDER BY run_id", "--format", "csv")
    for name in ("summary", "compaction", "fragmentation", "stalls"):
        _same_answer(sides, "query", name, ds, "--format", "json")
    _same_answer(sides, "query", "summary", abds, "--format", "parquet", "-o", Here("summary.parquet"),
                 outputs=["summary.parquet"])
    _same_answer(sides, "verify", ds)


@pytest.mark.parametrize("fmt", COMPARE_FORMATS)
def test_compare_answers_as_the_checkout(sides, fmt):
    out = f"compare.{fmt}"
    _same_answer(sides, "compare", Here("abds"), "--by", "kernel", "--format", fmt, "-o", Here(out),
                 outputs=[out])


def test_export_perfetto_writes_what_the_checkout_writes(sides):
    run = sides["checkout"].ok("sql", Here("ds"), "SELECT run_id FROM runs", "--format", "jsonl")
    run_id = re.search(rb'"run_id": ?"([0-9a-f]+)"', run.stdout).group(1).decode()
    _same_answer(sides, "export", "perfetto", Here("ds"), "--run", run_id, "-o", Here("run.pftrace"),
                 outputs=["run.pftrace"])


def test_report_runs_from_the_wheel(sides):
    installed = sides["installed"]
    installed.ok("report", Here("ds"), "-o", Here("report.html"), timeout=900)
    page = (installed.folder / "report.html").read_text()
    run_id = installed.ok("sql", Here("ds"), "SELECT run_id FROM runs", "--format", "csv").stdout.split()[-1]
    assert run_id.decode().strip('"') in page
