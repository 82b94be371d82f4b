"""`record --pack` archives: owner-only, and `kmemscope parse` reads them like the directory.

Packs a copy of the example bundle (no recording needed) and compares the
parsed runs of the directory and of each archive.
"""
import shutil
import stat

import pytest

import requirements

from conftest import EXAMPLES
from kmemscope.capture import pack
from kmrun import kmemscope

EXAMPLE = EXAMPLES / "kmem-compaction"


def run_summary(ds):
    out = kmemscope("sql", ds, "SELECT run_id, events, (SELECT count(*) FROM vmstat) AS vmstat_rows "
                    "FROM runs", "--format", "csv").stdout
    return out.splitlines()[1]


@pytest.mark.parametrize("fmt", pack.FORMATS)
def test_packed_bundle_parses_like_the_directory(tmp_path, fmt):
    if not EXAMPLE.is_dir():
        requirements.skip("setup", f"the committed example {EXAMPLE} is missing")
    if fmt == "zst" and shutil.which("zstd") is None:
        requirements.skip("setup", "zstd is not installed (make setup)")
    bundle = tmp_path / "host1"
    shutil.copytree(EXAMPLE, bundle)
    archive = pack.pack(str(bundle), fmt)
    assert archive == str(tmp_path / f"host1.tar.{fmt}")
    assert stat.S_IMODE((tmp_path / f"host1.tar.{fmt}").stat().st_mode) == 0o600
    assert not list(tmp_path.glob("*.partial"))

    kmemscope("parse", "-q", bundle, "-o", tmp_path / "from-dir")
    kmemscope("parse", "-q", archive, "-o", tmp_path / "from-archive")
    assert run_summary(tmp_path / "from-dir") == run_summary(tmp_path / "from-archive")
