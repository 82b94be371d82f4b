"""Every file a parse makes stays inside its dataset, and a packed bundle's headers and skipped
members count against its unpack budget.

A parse stages its run in `DATASET/.parse-<id>/` (unpacked bundle, staged Parquet parts, the
decoder's log). Someone who can write the dataset folder may rename that folder while the parse
runs and put a link to a folder of theirs (or the victim's) in its place. The oracle is the file
system outside the dataset: hostile.tree_state before and after, every file hashed.
"""
import os
import subprocess
import tarfile

import pytest

import hostile
from conftest import EXAMPLES
from kmrun import KMEMSCOPE, kmemscope

BUNDLE = EXAMPLES / "thp-faults"


def _outside_like_a_work_folder(outside):
    """A folder shaped like a work folder, so that a write through the link has every folder it
    would need: a stage with table folders and files in them, a log and an unpacked bundle."""
    for table in ("mm_page_alloc", "runs", "print_flags", "lost_events", "vmstat"):
        (outside / "stage" / table).mkdir(parents=True)
        (outside / "stage" / table / "part-0.parquet").write_bytes(b"the victim's file\n")
        (outside / "stage" / table / "part-1.parquet").write_bytes(b"the victim's file\n")
    (outside / "unpacked" / "procfs").mkdir(parents=True)
    (outside / "unpacked" / "trace.dat").write_bytes(b"the victim's file\n")
    (outside / "decoder.log").write_bytes(b"the victim's log\n")
    (outside / "owner.lock").write_bytes(b"")


@pytest.mark.slow   # a dozen parses, each raced by a thread that swaps its work folder
def test_a_work_folder_swapped_for_a_link_during_parses_writes_nothing_outside(tmp_path):
    ds, outside = tmp_path / "ds", tmp_path / "outside"
    outside.mkdir()
    _outside_like_a_work_folder(outside)
    packed = tmp_path / "b.tar.gz"
    with tarfile.open(packed, "w:gz") as tar:
        tar.add(BUNDLE, arcname="b")
    kmemscope("parse", "-q", BUNDLE / "trace.dat", "-o", ds)
    before = hostile.tree_state(outside)
    # The decoder pauses after each segment, so that the swaps meet it while it stages.
    env = {**os.environ, "KMEMSCOPE_TEST_PAUSE_DECODER_S": "0.02"}
    swaps, outcomes = 0, []
    for attempt in range(12):
        source = packed if attempt % 2 else BUNDLE
        with hostile.WorkFolderSwapper(ds, outside) as swapper:
            proc = subprocess.run([*KMEMSCOPE, "parse", "-q", str(source), "-o", str(ds)],
                                  capture_output=True, text=True, timeout=300, env=env)
        swaps += swapper.swaps
        outcomes.append(proc.returncode)
        if proc.returncode:
            # The commit finds the link where its work folder belongs: one line, nothing moved.
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 1 and len(lines) == 1, proc.stderr
            assert lines[0].startswith("kmemscope: error: ") and "Traceback" not in proc.stderr
        assert hostile.tree_state(outside) == before, f"attempt {attempt} wrote outside"
    assert swaps > 0, "the race never ran"
    # What was committed checks out against its record.
    verify = kmemscope("verify", ds, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr


# ---------------------------------------------------------------- tar header bombs

def _members():
    return {"b/trace.dat": (BUNDLE / "trace.dat").read_bytes(),
            "b/manifest.json": (BUNDLE / "manifest.json").read_bytes()}


def one_error_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("kmemscope: error: ") and "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.slow   # builds 4 GiB of tar headers through zstd and gzip
@pytest.mark.parametrize("size, compression", [(3 << 30, "zst"), (1 << 30, "gz")])
def test_a_huge_pax_header_is_refused_in_bounded_memory(tmp_path, size, compression):
    archive = hostile.pax_header_bomb(tmp_path / f"bomb.tar.{compression}", size, _members(),
                                      compression)
    assert archive.stat().st_size < 8 << 20        # a thousandfold and more
    code, _out, err, peak_mib, _s = hostile.run_measured(
        [*KMEMSCOPE, "parse", str(archive), "-o", str(tmp_path / "ds")], 600)
    line = one_error_line(subprocess.CompletedProcess([], code, "", err))
    assert "header" in line and "bomb" in line, line
    # The header is never held: the parse stays near its usual size (it read the whole
    # header into memory before: 3.24 GB and 2.17 GB).
    assert peak_mib < 400, f"peak RSS {peak_mib:.0f} MiB"
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME])
def test_a_pax_or_long_name_header_past_the_header_bound_is_refused(tmp_path, kind):
    import io

    archive = tmp_path / "b.tar"
    with tarfile.open(archive, "w", format=tarfile.USTAR_FORMAT) as tar:
        head = tarfile.TarInfo("././@LongLink" if kind == tarfile.GNUTYPE_LONGNAME
                               else "././@PaxHeader")
        head.type, head.size = kind, 4 << 20
        body = (f"{4 << 20} comment=".encode().ljust((4 << 20) - 1, b"a") + b"\n"
                if kind == tarfile.XHDTYPE else b"n" * ((4 << 20) - 1) + b"\0")
        tar.addfile(head, io.BytesIO(body))
        for name, content in _members().items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    packed = tmp_path / "b.tar.gz"
    with open(archive, "rb") as src, __import__("gzip").open(packed, "wb") as dst:
        dst.write(src.read())
    line = one_error_line(kmemscope("parse", packed, "-o", tmp_path / "ds", check=False))
    assert "header" in line, line


def test_skipped_members_count_against_the_unpack_budget(tmp_path, monkeypatch):
    """A member that is not part of a bundle is read through (a compressed stream cannot be
    skipped without inflating it), and every byte of it counts: past the budget, refused.
    The budget is made small here (16 MiB; the module's floor is 256 MiB), the member 64 MiB."""
    from kmemscope.common.errors import TraceFileError
    from kmemscope.parsers import ingest, sources

    monkeypatch.setattr(sources, "ARCHIVE_MIN_BUDGET", 16 << 20)
    monkeypatch.setattr(sources, "ARCHIVE_MAX_RATIO", 2)
    # the bundle's own members after the one that is not
    archive = hostile.write_tar(tmp_path / "b.tar.zst",
                                {"b/junk.bin": (64 << 20, b"\0"), **_members()}, "zst")
    with pytest.raises(TraceFileError, match="archive bomb"):
        ingest.ingest(archive, tmp_path / "ds", isolate=False)


def test_a_packed_bundle_s_files_are_named_inside_the_archive_in_errors(tmp_path):
    """The unpacked files are read through their folder's handle (/proc/self/fd/N/...): an
    error names them by the archive and their place in it instead."""
    data = (BUNDLE / "trace.dat").read_bytes()
    archive = hostile.write_tar(tmp_path / "cut.tar.gz", {"b/trace.dat": data[:len(data) // 2]})
    line = one_error_line(kmemscope("parse", archive, "-o", tmp_path / "ds", check=False))
    assert line.startswith(f"kmemscope: error: {archive}: trace.dat: "), line
    assert "/proc/self" not in line
