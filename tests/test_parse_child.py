"""What the parse's decoder child loads, and what it leaves the parent to do.

The child is forked by `kmemscope parse` and decodes the trace. It needs pyarrow
to write Parquet, but not numpy or pandas: both would cost its start-up time under
the GIL while the decoder threads wait. Its Parquet writers take their memory from
malloc rather than Arrow's default mimalloc pool. The probe wraps the child's stage_run in a
fresh Python and writes which of them were loaded when it ended; the run it wrote
is then compared with one parsed in this process without a child.
"""
import json
import subprocess
import sys

import pyarrow.parquet as pq

from conftest import EXAMPLES

from kmemscope.parsers.ingest import ingest

TRACE = EXAMPLES / "kmem-compaction" / "trace.dat"

PROBE = r"""
import json, sys
from kmemscope.parsers import ingest

staged = ingest.stage_run

def probe(*args, **kwargs):
    summary = staged(*args, **kwargs)
    with open(sys.argv[1], "w") as f:
        import pyarrow
        json.dump({"modules": sorted(m for m in ("numpy", "pandas", "pyarrow") if m in sys.modules),
                   "pool": pyarrow.default_memory_pool().backend_name}, f)
    return summary

ingest.stage_run = probe
from kmemscope.cli import main
main(["parse", sys.argv[2], "-o", sys.argv[3], "-q"])
"""


def _rows(table):
    return sorted(zip(*(table.column(n).to_pylist() for n in table.column_names)))


def test_the_decoder_child_loads_pyarrow_without_numpy_or_pandas(tmp_path):
    seen, ds = tmp_path / "modules.json", tmp_path / "ds"
    proc = subprocess.run([sys.executable, "-c", PROBE, str(seen), str(TRACE), str(ds)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    child = json.loads(seen.read_text())
    assert child["modules"] == ["pyarrow"]
    # malloc's pool, not mimalloc's transparent huge pages (a quarter less peak memory)
    assert child["pool"] == "system", child

    # The same rows as a parse in this process, where numpy is loaded.
    here = tmp_path / "here"
    ingest(TRACE, here, isolate=False)
    for table in ("mm_page_alloc", "mm_page_free", "runs"):
        a = pq.read_table(next((ds / table).glob("run_id=*/")))
        b = pq.read_table(next((here / table).glob("run_id=*/")))
        assert a.num_rows == b.num_rows > 0, table
        if table != "runs":     # rows in any order (both parses decode on threads)
            assert _rows(a) == _rows(b), table
