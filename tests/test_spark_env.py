"""`kmemscope spark-env` when it cannot make the executors' environment archive.

Every failure is one line on stderr and exit status 1 (Ctrl-C: 130), and leaves nothing:
no temporary folder in TMPDIR (each test gives the command a TMPDIR of its own and finds it
empty afterwards), no archive and no temporary file beside its name. The archive that does
get made, and the executors that run from it, are tests/test_spark_cluster.py's.

Cheap checks (a bad name, a missing folder, a file that is no wheel, an editable install
without --wheel) fail before any work. The slow ones start the real work: a package index
that refuses connections, a file-size limit that makes pip's writes fail (RLIMIT_FSIZE, the
stand-in for a full disk that needs no mount), and Ctrl-C while pip installs.
"""
import importlib.metadata
import json
import os
import resource
import signal
import socket
import sys
import time

import pytest

import requirements
from conftest import PROJECT_ROOT
from kmrun import kmemscope, one_error_line, popen


def _left(tmp_path):
    """What a run left in its TMPDIR and in the archive's folder."""
    return sorted(os.listdir(tmp_path / "tmp")) + sorted(os.listdir(tmp_path / "out"))


@pytest.fixture
def dirs(tmp_path):
    (tmp_path / "tmp").mkdir()
    (tmp_path / "out").mkdir()
    return tmp_path


def _env(dirs, **more):
    return dict(os.environ, TMPDIR=str(dirs / "tmp"), **more)


def _wheel(folder):
    """A synthetic kmemscope wheel (no code) that needs duckdb and pyarrow, as the real one
    does: what pip does with those, the failures below are made of. The real wheel and the
    archive made from it are tests/test_spark_cluster.py's."""
    import base64
    import hashlib
    import zipfile

    files = {"kmemscope_stub/__init__.py": b"",
             "kmemscope-0.0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: kmemscope\n"
             b"Version: 0.0.1\nRequires-Dist: duckdb\nRequires-Dist: pyarrow\n",
             "kmemscope-0.0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\n"
             b"Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}\n" for name, data in files.items()) + "kmemscope-0.0.1.dist-info/RECORD,,\n"
    path = folder / "kmemscope-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for name, data in files.items():
            whl.writestr(name, data)
        whl.writestr("kmemscope-0.0.1.dist-info/RECORD", record)
    return path


@pytest.mark.parametrize("output,wheel,expect", [
    ("out/env.rar", None, "not an archive Spark unpacks"),
    ("missing/env.tar.gz", None, "no such folder"),
    ("out/env.tar.gz", "in/kmemscope.txt", "not a wheel file"),
    ("out/env.tar.gz", "in/none.whl", "not a wheel file"),
], ids=["suffix", "folder", "not-a-wheel", "no-wheel-file"])
def test_a_bad_argument_is_one_line_before_any_work(dirs, output, wheel, expect):
    (dirs / "in").mkdir()
    (dirs / "in" / "kmemscope.txt").write_text("not a wheel")
    proc = kmemscope("spark-env", "-o", dirs / output, *(["--wheel", dirs / wheel] if wheel else []),
                     check=False, env=_env(dirs))
    assert expect in one_error_line(proc)
    assert _left(dirs) == []


def test_an_editable_install_without_a_wheel_says_how_to_get_one(dirs):
    here = [p for p in sys.path if p and os.path.abspath(p) not in (os.getcwd(), str(PROJECT_ROOT))]
    dist = next(iter(importlib.metadata.distributions(name="kmemscope", path=here)))
    origin = dist.read_text("direct_url.json")
    if not origin or not json.loads(origin).get("dir_info", {}).get("editable"):
        requirements.skip("setup", "kmemscope is not an editable install here (make setup makes one)")
    proc = kmemscope("spark-env", "-o", dirs / "out" / "env.tar.gz", check=False, env=_env(dirs))
    line = one_error_line(proc)
    assert "editable" in line and "--wheel" in line and "make dist" in line
    assert _left(dirs) == []


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow      # a venv with pip (ensurepip: seconds of CPU) before pip fails
def test_an_index_that_cannot_be_reached_is_one_line_and_leaves_nothing(dirs):
    wheel = _wheel(dirs)
    env = _env(dirs, PIP_INDEX_URL=f"http://127.0.0.1:{_closed_port()}/simple",
               PIP_RETRIES="1", PIP_TIMEOUT="5")   # one retry: pip says why
    env.pop("PIP_FIND_LINKS", None)
    proc = kmemscope("spark-env", "-q", "--wheel", wheel, "-o", dirs / "out" / "env.tar.gz",
                     check=False, env=env, timeout=300)
    line = one_error_line(proc)
    assert "pip install failed: the package index cannot be reached" in line, line
    assert "PIP_INDEX_URL" in line
    assert _left(dirs) == []


def _file_limit(size):
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # a write past it fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    return limit


@pytest.mark.slow      # a venv with pip, then pip unpacking duckdb and pyarrow
def test_a_write_that_fails_midway_is_one_line_and_leaves_nothing(dirs):
    """No file may grow past 30 MB: the venv is made, then pip's unpacking of duckdb's or
    pyarrow's libraries (each over 40 MB) fails, as on a disk that fills up."""
    wheel = _wheel(dirs)
    proc = kmemscope("spark-env", "-q", "--wheel", wheel, "-o", dirs / "out" / "env.tar.gz",
                     check=False, env=_env(dirs), preexec_fn=_file_limit(30 << 20), timeout=600)
    line = one_error_line(proc)
    assert "pip install failed" in line and "File too large" in line, line
    assert "TMPDIR" in line
    assert _left(dirs) == []


@pytest.mark.slow      # a venv with pip, then pip at work until the signal
def test_ctrl_c_while_pip_installs_leaves_nothing(dirs):
    wheel = _wheel(dirs)
    proc = popen("spark-env", "--wheel", wheel, "-o", dirs / "out" / "env.tar.gz", env=_env(dirs))
    try:
        lines = []
        for line in proc.stderr:                 # progress: one line per step
            lines.append(line)
            if line.startswith("kmemscope: installing"):
                break
        assert lines and lines[-1].startswith("kmemscope: installing"), lines
        pip = []
        deadline = time.monotonic() + 60
        while not pip and time.monotonic() < deadline:   # pip started under the temporary folder
            pip = [p for p in _processes() if str(dirs / "tmp") in p[1] and " pip " in p[1]]
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "kmemscope: error: interrupted", err
    assert "Traceback" not in err
    assert not [p for p in _processes() if str(dirs / "tmp") in p[1]], "a child outlived the command"
    assert _left(dirs) == []


def _processes():
    """[(pid, command line)] of this machine's processes."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out.append((int(pid), f.read().replace(b"\0", b" ").decode(errors="replace")))
        except OSError:
            continue
    return out


class _Installed:
    """A kmemscope distribution as importlib.metadata gives it: a version, a direct_url.json."""

    def __init__(self, origin):
        self.version, self.origin = "9.9.9", origin

    def read_text(self, name):
        return None if self.origin is None or name != "direct_url.json" else json.dumps(self.origin)


@pytest.mark.parametrize("origin,expect", [
    (None, "kmemscope[s3]==9.9.9"),                                   # from a package index
    ({"url": "file://{wheel}", "archive_info": {}}, "{wheel}[s3]"),    # from a wheel file
])
def test_without_wheel_the_installed_kmemscope_is_what_gets_installed(tmp_path, monkeypatch,
                                                                       origin, expect):
    from kmemscope.queries.engines import spark_env

    wheel = tmp_path / "kmemscope-9.9.9-py3-none-any.whl"
    wheel.write_bytes(b"")
    origin = json.loads(json.dumps(origin).replace("{wheel}", str(wheel))) if origin else None
    monkeypatch.setattr(spark_env.importlib.metadata, "distributions",
                        lambda name, path: iter([_Installed(origin)]) if name == "kmemscope" else iter([]))
    assert spark_env._requirement(None, ["s3"]) == expect.replace("{wheel}", str(wheel))
    wheel.unlink()                       # the wheel it was installed from is gone: say so
    if origin is not None:
        with pytest.raises(spark_env.SparkEnvError, match="not from a wheel file.*--wheel"):
            spark_env._requirement(None, [])


@pytest.mark.parametrize("archives,python", [
    ("/a/kmemscope-env.tar.gz#environment", "./environment/bin/python"),
    ("hdfs:///x.zip#deps,/a/env.tar.gz#environment", "./environment/bin/python"),
    ("/a/env.tar.gz", None),                       # unpacked as env.tar.gz: not ours to name
    ("/a/environment.tar.gz#other", None),
    (None, None),
])
def test_an_archive_unpacked_as_environment_names_the_executors_python(archives, python):
    from kmemscope.queries.engines import spark_env

    assert spark_env.executor_python(archives) == python
