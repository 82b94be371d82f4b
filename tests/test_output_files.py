"""Files written outside a dataset go through common/outfile.py: created O_EXCL|O_NOFOLLOW in
an opened folder under an unpredictable name, then renamed; a planted link is never written
through, and a failed write leaves nothing.

Oracles: the victim file's bytes, os.lstat of the output's folder, and the kernel's own
file-size limit (RLIMIT_FSIZE) as the full disk.
"""
import ast
import os
import resource
import signal
import subprocess
import tarfile

import pytest

import requirements
from conftest import PROJECT_ROOT
from kmemscope.common import outfile
from kmrun import _argv, kmemscope


def _plant_links(out, name, victim):
    """Links at every temporary name a writer could have used before: `.NAME.tmp`,
    `.NAME.<pid>.tmp` for the next few pids, `NAME.tmp`, `NAME.partial`."""
    first = os.getpid()
    names = [f".{name}.tmp", f"{name}.tmp", f"{name}.partial"] + \
        [f".{name}.{pid}.tmp" for pid in range(first, first + 400)]
    for n in names:
        (out / n).symlink_to(victim)
    return names


def test_sql_output_through_planted_links_leaves_the_victim_as_it_was(examples_dataset, tmp_path):
    out, victim = tmp_path / "out", tmp_path / "victim"
    out.mkdir()
    victim.write_text("precious")
    planted = _plant_links(out, "r.csv", victim)
    kmemscope("sql", examples_dataset, "SELECT 42 AS answer", "--format", "csv", "-o", out / "r.csv")
    assert victim.read_text() == "precious"
    assert not (out / "r.csv").is_symlink() and (out / "r.csv").read_text().split() == ['"answer"', "42"]
    assert sorted(os.listdir(out)) == sorted(planted + ["r.csv"])


def test_a_planted_link_at_the_output_name_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "r.html").symlink_to(victim)
    outfile.write_file(tmp_path / "r.html", "<html>")
    assert victim.read_text() == "precious"
    assert not (tmp_path / "r.html").is_symlink() and (tmp_path / "r.html").read_text() == "<html>"


def test_temp_names_are_not_predictable(tmp_path):
    names = {outfile.temp_name("r.html") for _ in range(1000)}
    assert len(names) == 1000


def _limited(limit):
    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # EFBIG instead of a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return pre


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_write_that_fails_for_want_of_space_leaves_nothing(examples_dataset, tmp_path, fmt):
    out = tmp_path / "out"
    out.mkdir()
    (out / "r.out").write_text("the older file")
    proc = subprocess.run(_argv(["sql", examples_dataset, "SELECT * FROM range(2000000)",
                                 "--format", fmt, "-o", out / "r.out"]),
                          capture_output=True, text=True, cwd=PROJECT_ROOT,
                          preexec_fn=_limited(1 << 20), timeout=600)
    assert proc.returncode != 0
    assert proc.stderr.count("kmemscope: error:") == 1, proc.stderr
    assert os.listdir(out) == ["r.out"]
    assert (out / "r.out").read_text() == "the older file"


def test_a_packed_bundle_is_written_past_planted_links(tmp_path):
    from kmemscope.capture import pack

    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("{}")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    planted = _plant_links(tmp_path, "b.tar.gz", victim)
    target = pack.pack(str(bundle), "gz")
    assert victim.read_text() == "precious"
    with tarfile.open(target) as tar:
        assert tar.getnames() == ["b", "b/manifest.json"]
    assert oct(os.stat(target).st_mode & 0o777) == "0o600"
    assert sorted(os.listdir(tmp_path)) == sorted(planted + ["b", "b.tar.gz", "victim"])


# The writers of files outside a dataset: none writes a file but through common/outfile.py.
WRITERS = ["cli/verbs.py", "notebooks/report.py", "kmemscope/render/writers.py",
           "kmemscope/render/perfetto.py", "capture/pack.py", "capture/bundle.py",
           "capture/bench_metrics.py"]


@pytest.mark.parametrize("rel", WRITERS)
def test_writers_of_output_files_use_the_one_helper(rel):
    tree = ast.parse((PROJECT_ROOT / rel).read_text())
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in ("write_text", "write_bytes", "replace", "rename") and \
                    isinstance(f, ast.Attribute) and getattr(f.value, "id", "") in ("os", "tmp"):
                bad.append((node.lineno, name))
            if name in ("write_text", "write_bytes"):
                bad.append((node.lineno, name))
            if name == "open" and any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                      and a.value[:1] in "wx" for a in node.args[1:2]):
                bad.append((node.lineno, name))
    assert not bad, f"{rel} writes a file itself at lines {bad}: use kmemscope.common.outfile"


# ---------------------------------------------------------------- names that are no file
# Device nodes made here (os.mknod, root only), never the machine's /dev: the oracle is
# os.lstat of the node after the write, and the kernel's own null and full devices.

def _device(folder, name, minor):
    """A character device of the kernel's memory driver (major 1): 3 null, 7 full."""
    if os.geteuid() != 0:
        requirements.skip("tracefs", "making a device node needs root")
    import stat

    path = folder / name
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    return path


def test_output_to_a_null_device_writes_through_it_and_leaves_the_device(examples_dataset, tmp_path):
    import stat

    null = _device(tmp_path, "null", 3)
    proc = kmemscope("sql", examples_dataset, "SELECT 1", "-o", null)
    assert proc.stdout == "" and proc.stderr == ""
    assert stat.S_ISCHR(os.lstat(null).st_mode) and os.listdir(tmp_path) == ["null"]


def test_a_link_to_a_null_device_is_written_through_not_replaced(tmp_path):
    null = _device(tmp_path, "null", 3)
    (tmp_path / "out.csv").symlink_to(null)
    outfile.write_file(tmp_path / "out.csv", "a,b\n")
    assert (tmp_path / "out.csv").is_symlink() and os.readlink(tmp_path / "out.csv") == str(null)


def test_output_to_a_full_device_is_one_no_space_line(examples_dataset, tmp_path):
    import stat

    full = _device(tmp_path, "full", 7)
    proc = kmemscope("sql", examples_dataset, "SELECT 1", "-o", full, check=False)
    assert proc.returncode != 0
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], proc.stderr
    assert stat.S_ISCHR(os.lstat(full).st_mode)


def test_output_to_a_fifo_streams_into_it(tmp_path):
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    outfile.write_file(fifo, b"streamed")
    reader.join(timeout=30)
    assert got == [b"streamed"]
    assert fifo.is_fifo() and os.listdir(tmp_path) == ["pipe"]


def test_a_block_device_or_socket_is_refused_in_one_line(tmp_path):
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s"))
    try:
        with pytest.raises(outfile.UnwritableOutput) as err:
            outfile.write_file(tmp_path / "s", "x")
    finally:
        sock.close()
    assert "is a socket" in str(err.value) and "\n" not in str(err.value)
    assert os.listdir(tmp_path) == ["s"]


def test_dash_and_dev_stdout_write_to_standard_output(examples_dataset, tmp_path):
    dash = kmemscope("sql", examples_dataset, "SELECT 42 AS answer", "--format", "csv", "-o", "-",
                     cwd=tmp_path)
    assert dash.stdout.split() == ['"answer"', "42"] and os.listdir(tmp_path) == []
    # /dev/stdout's own kind of link, made here: the machine's /dev is never at risk
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")
    dev = kmemscope("sql", examples_dataset, "SELECT 42 AS answer", "--format", "csv",
                    "-o", stdout, process=True)
    assert dev.stdout.split() == ['"answer"', "42"]
    assert stdout.is_symlink() and os.listdir(tmp_path) == ["stdout"]


def test_an_overwritten_file_keeps_its_mode(tmp_path):
    out = tmp_path / "r.csv"
    out.write_text("old")
    out.chmod(0o640)
    outfile.write_file(out, "new")
    assert out.read_text() == "new" and oct(out.stat().st_mode & 0o777) == "0o640"
    outfile.write_file(out, "private", 0o600)          # a private writer's file stays private
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def test_an_overwritten_file_keeps_its_owner_where_root_writes_it(tmp_path):
    if os.geteuid() != 0:
        requirements.skip("tracefs", "giving a file to another owner needs root")
    out = tmp_path / "r.csv"
    out.write_text("old")
    os.chown(out, 4321, 4321)
    outfile.write_file(out, "new")
    st = out.stat()
    assert (st.st_uid, st.st_gid) == (4321, 4321) and out.read_text() == "new"


def test_a_name_of_255_bytes_is_written_whole(tmp_path):
    name = "r" * 251 + ".csv"
    outfile.write_file(tmp_path / name, "x")
    assert os.listdir(tmp_path) == [name]
    wide = "é" * 125 + ".csv"                           # 254 bytes of UTF-8, cut mid-character
    outfile.write_file(tmp_path / wide, "y")
    assert sorted(os.listdir(tmp_path)) == sorted([name, wide])


def test_a_killed_writers_temporary_file_goes_with_the_next_write(tmp_path):
    import fcntl

    stale = tmp_path / f".r.csv.{'ab' * 16}.tmp"
    stale.write_text("half a report")
    live = tmp_path / f".r.csv.{'cd' * 16}.tmp"
    live.write_text("being written")
    other = tmp_path / f".q.csv.{'ef' * 16}.tmp"        # another name's: not this write's
    other.write_text("x")
    with open(live) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        outfile.write_file(tmp_path / "r.csv", "new")
    assert sorted(os.listdir(tmp_path)) == sorted(["r.csv", live.name, other.name])
