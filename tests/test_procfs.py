"""The procfs parsers over real samples from this project's 6.18 test VM.

Oracles share no code with parsers/procfs.py: plain splits of the same text,
the kernel's own cross-totals (buddyinfo vs pagetypeinfo, nr_free_pages vs
buddyinfo, pageblocks vs zoneinfo spans), and the sample headers read with a
separate regex. Where the data come from: tests/data/procfs/README.md.
"""
import re
from pathlib import Path

import pytest

from kmemscope.parsers import procfs
from kmemscope.parsers.sources import read_manifest

DATA = Path(__file__).parent / "data" / "procfs"
LIVE = DATA / "linux-6.18"
BUNDLE = DATA / "bundle-6.18"
SAMPLES = ["", "-fragmented"]


def text(name):
    return (LIVE / name).read_text()


@pytest.mark.parametrize("suffix", SAMPLES)
def test_vmstat_rows_match_a_plain_split_of_every_line(suffix):
    raw = text("vmstat" + suffix)
    expected = [(line.split()[0], int(line.split()[1])) for line in raw.splitlines()]
    assert procfs.parse_vmstat(raw) == expected
    assert len(expected) > 150


@pytest.mark.parametrize("suffix", SAMPLES)
def test_pagetypeinfo_free_counts_add_up_to_buddyinfo(suffix):
    """Per zone and order, the migratetype free lists sum to buddyinfo's count.

    The two files were read one after the other on a live system, so allow a
    small drift; a capped count (">100000") is only a lower bound.
    """
    free, _ = procfs.parse_pagetypeinfo(text("pagetypeinfo" + suffix))
    buddy = {(z, o): c for _, z, o, c in procfs.parse_buddyinfo(text("buddyinfo" + suffix))}
    sums, capped = {}, set()
    for node, zone, mt, order, count, is_capped in free:
        sums[(zone, order)] = sums.get((zone, order), 0) + count
        if is_capped:
            capped.add((zone, order))
    assert set(sums) == set(buddy)
    for key, total in sums.items():
        if key in capped:
            assert buddy[key] >= total
        else:
            assert abs(buddy[key] - total) <= max(16, buddy[key] // 50), key


def test_pagetypeinfo_capped_count_is_a_flagged_lower_bound():
    raw = text("pagetypeinfo-fragmented")
    line = next(l for l in raw.splitlines() if "zone   Normal, type      Movable" in l)
    assert ">100000" in line.split()
    free, _ = procfs.parse_pagetypeinfo(raw)
    row = [r for r in free if r[1:4] == ("Normal", "Movable", 0)]
    assert row == [(0, "Normal", "Movable", 0, procfs.PAGETYPEINFO_CAP, True)]
    assert not any(r[5] for r in free if r[1:4] != ("Normal", "Movable", 0))


@pytest.mark.parametrize("suffix", SAMPLES)
def test_pagetypeinfo_shape_follows_its_own_header(suffix):
    raw = text("pagetypeinfo" + suffix)
    header = next(l for l in raw.splitlines() if l.startswith("Number of blocks type"))
    migratetypes = header.split()[4:]
    orders = next(l for l in raw.splitlines() if l.startswith("Free pages count")).split("order", 1)[1].split()
    zones = re.findall(r"^Node 0, zone\s+(\S+)\s+\d", raw, re.M)
    free, blocks = procfs.parse_pagetypeinfo(raw)
    assert migratetypes == ["Unmovable", "Movable", "Reclaimable", "HighAtomic", "Isolate"]
    assert len(free) == len(zones) * len(migratetypes) * len(orders)
    assert len(blocks) == len(zones) * len(migratetypes)
    assert {r[3] for r in free} == {int(o) for o in orders}


@pytest.mark.parametrize("suffix", SAMPLES)
def test_pageblocks_cover_each_zone_span_from_zoneinfo(suffix):
    """The zone's pageblocks hold its present pages and fit in its span.

    pagetypeinfo counts only pageblocks with memory behind them, so holes in
    a zone's span (DMA32 on this VM) have none.
    """
    _, blocks = procfs.parse_pagetypeinfo(text("pagetypeinfo" + suffix))
    per_block = int(re.search(r"Pages per block:\s+(\d+)", text("pagetypeinfo" + suffix)).group(1))
    zoneinfo = text("zoneinfo" + suffix)
    spans = {}
    for chunk in re.split(r"^(?=Node \d+, zone)", zoneinfo, flags=re.M)[1:]:
        zone = chunk.split()[3]
        spans[zone] = (int(re.search(r"^\s+present\s+(\d+)$", chunk, re.M).group(1)),
                       int(re.search(r"^\s+spanned\s+(\d+)$", chunk, re.M).group(1)))
    totals = {}
    for _, zone, _, n in blocks:
        totals[zone] = totals.get(zone, 0) + n
    for zone, total in totals.items():
        present, spanned = spans[zone]
        assert present <= total * per_block, zone
        assert total <= (spanned + per_block - 1) // per_block + 1, zone


@pytest.mark.parametrize("suffix", SAMPLES)
def test_buddyinfo_pages_match_nr_free_pages(suffix):
    """Free pages by order from buddyinfo add up to vmstat's nr_free_pages (within 1%)."""
    pages = sum(count << order for _, _, order, count in procfs.parse_buddyinfo(text("buddyinfo" + suffix)))
    nr_free = int(re.search(r"^nr_free_pages (\d+)$", text("vmstat" + suffix), re.M).group(1))
    assert abs(pages - nr_free) <= nr_free // 100


def test_sample_files_split_on_their_header_lines():
    raw = (BUNDLE / "procfs" / "vmstat").read_text()
    headers = [(int(a), int(b)) for a, b in
               re.findall(r"^#kmemscope-sample mono_ns=(\d+) realtime_ns=(\d+)$", raw, re.M)]
    samples = procfs.split_samples(raw)
    assert [(s[0], s[1]) for s in samples] == headers and len(headers) == 2
    assert headers[0][0] < headers[1][0]
    rows = procfs.vmstat_rows(raw)
    per_sample = len([l for l in raw.splitlines() if not l.startswith("#")]) // 2
    assert len(rows) == 2 * per_sample
    assert {r[0] for r in rows} == {h[0] for h in headers}


def test_a_sample_cut_short_keeps_only_whole_rows():
    raw = (BUNDLE / "procfs" / "pagetypeinfo").read_text()
    cut = raw[: raw.rindex("Node    0, zone   Normal, type      Movable") + 30]
    free, _ = procfs.pagetypeinfo_rows(cut)
    whole, _ = procfs.pagetypeinfo_rows(raw)
    assert len(whole) - len(free) > 0
    assert all(r in whole for r in free)


def test_read_bundle_procfs_gives_the_design_tables_without_run_id():
    tables = procfs.read_bundle_procfs(BUNDLE)
    assert set(tables) == {"vmstat", "pagetypeinfo_free", "pagetypeinfo_blocks", "buddyinfo"}
    assert tables["vmstat"].column_names == ["ts", "name", "value"]
    assert tables["pagetypeinfo_free"].column_names[:6] == ["ts", "node", "zone", "migratetype",
                                                            "order", "count"]
    assert tables["pagetypeinfo_blocks"].column_names == ["ts", "node", "zone", "migratetype", "blocks"]
    assert tables["buddyinfo"].column_names == ["ts", "node", "zone", "order", "count"]
    for t in tables.values():
        assert "run_id" not in t.column_names
        assert t.num_rows > 0 and t.column("ts").null_count == 0
    first = int(re.search(r"mono_ns=(\d+)", (BUNDLE / "procfs" / "buddyinfo").read_text()).group(1))
    assert tables["buddyinfo"].column("ts")[0].as_py() == first


def test_read_bundle_procfs_of_a_bare_directory_is_empty(tmp_path):
    assert procfs.read_bundle_procfs(tmp_path) == {}
    assert read_manifest(tmp_path) is None


@pytest.mark.parametrize("junk", ["", "\n\n", "garbage\x00\xff", "#kmemscope-sample mono_ns=x\nnr_free 1",
                                  "Node 0, zone DMA 1 2 x\n"])
def test_empty_or_wrong_text_gives_no_rows(junk):
    assert procfs.vmstat_rows(junk) == []
    assert procfs.pagetypeinfo_rows(junk) == ([], [])
    assert procfs.buddyinfo_rows(junk) == []


def test_a_corrupt_manifest_is_a_clear_error(tmp_path):
    from kmemscope.common.errors import TraceFileError
    (tmp_path / "manifest.json").write_text('{"host": ')
    with pytest.raises(TraceFileError, match="unreadable manifest"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("[1, 2]")
    with pytest.raises(TraceFileError, match="not a JSON object"):
        read_manifest(tmp_path)
