"""`parse --derive` builds the pairing tables at parse time; the analyses answer the same."""

import requirements

from conftest import EXAMPLES
from kmrun import kmemscope

EXAMPLE = EXAMPLES / "kmem-compaction" / "trace.dat"


def test_parse_derive_builds_pairs_that_queries_use_unchanged(tmp_path):
    if not EXAMPLE.is_file():
        requirements.skip("setup", f"the committed example {EXAMPLE} is missing")
    eager, lazy = tmp_path / "eager", tmp_path / "lazy"
    out = kmemscope("parse", EXAMPLE, "-o", eager, "--derive")
    assert "derived tables built" in out.stderr
    assert list((eager / "_derived" / "page_pairs").glob("run_id=*/*.parquet"))
    kmemscope("parse", "-q", EXAMPLE, "-o", lazy)
    assert not (lazy / "_derived").exists()
    for query in ("hot_pfns", "pfn_reuse.cross_cpu"):
        eager_out = kmemscope("query", query, eager, "--format", "csv").stdout
        lazy_out = kmemscope("query", query, lazy, "--format", "csv").stdout
        assert eager_out == lazy_out and len(eager_out.splitlines()) > 1


def test_the_query_that_builds_the_pairing_says_so_and_later_ones_do_not(tmp_path):
    ds = tmp_path / "ds"
    kmemscope("parse", "-q", EXAMPLES / "kmem-compaction", "-o", ds)
    first = kmemscope("query", "hot_pfns", ds, "--param", "top_n=1")
    assert "pairing frees with reallocations, once" in first.stderr
    assert (ds / "_derived").is_dir()
    again = kmemscope("query", "hot_pfns", ds, "--param", "top_n=1")
    assert "pairing" not in again.stderr and again.stdout == first.stdout
