"""The A/B report keeps the sides apart, checked against plain-Python recounts of the Parquet data.

A two-sided dataset without recording: the built-in kmem-compaction trace cut
in two at a time between its migratetype fallbacks (`trace-cmd split`), the
first half labelled kernel=a, the second kernel=b together with the
memory-pressure bundle (which recorded no kmem events). Every figure of the
comparison must then show each side's own numbers: the report puts the numbers
each panel drew (read back from the matplotlib artists) under the figure as
data attributes, and the test compares them with counts made here from the
Parquet files of each side's runs, with pyarrow and collections.Counter only.
"""
import re
import shutil
import subprocess
from collections import Counter, defaultdict
from html.parser import HTMLParser
from pathlib import Path

import pytest

import kmrun
import requirements
from kmdata import run_rows as rows

from conftest import EXAMPLES

FULL = EXAMPLES / "kmem-compaction" / "trace.dat"
PRESSURE = EXAMPLES / "memory-pressure"
# The upstream enum, used by kmemscope (with a note) for a bare trace.dat that has no migratetype list.
UPSTREAM_MIGRATETYPES = ["Unmovable", "Movable", "Reclaimable", "HighAtomic"]
NOT_EVENTS = {"runs", "print_flags", "lost_events", "vmstat", "pagetypeinfo_free",
              "pagetypeinfo_blocks", "buddyinfo", "zoneinfo", "event_tables"}
FAILED_PFN = 2 ** 64 - 1


def kmemscope(*args, timeout=300):
    """The real command line (tests/kmrun.py); its exit status is the caller's to check."""
    return kmrun.kmemscope(*args, check=False, timeout=timeout)


# ---------------------------------------------------------------- the dataset and its recounts

def run_facts(ds):
    """run_id -> {labels, first_ts, last_ts, migratetypes} from the runs table's files."""
    out = {}
    for part in sorted((Path(ds) / "runs").glob("run_id=*")):
        run = part.name[len("run_id="):]
        (row,) = rows(ds, "runs", run, ["labels", "first_ts", "last_ts", "migratetypes"])
        row["labels"] = dict(row["labels"] or [])
        out[run] = row
    return out


def sides_of(ds):
    side = defaultdict(list)
    for run, facts in run_facts(ds).items():
        side[facts["labels"]["kernel"]].append(run)
    return dict(side)


def recount_pollution(ds, runs):
    """(requested type name, fallback type name) -> extfrag events over `runs`."""
    facts = run_facts(ds)
    counts = Counter()
    for run in runs:
        names = facts[run]["migratetypes"] or UPSTREAM_MIGRATETYPES
        for r in rows(ds, "mm_page_alloc_extfrag", run, ["alloc_migratetype", "fallback_migratetype"]):
            counts[(names[r["alloc_migratetype"]], names[r["fallback_migratetype"]])] += 1
    return counts


def recount_nonblocking(ds, runs):
    """class -> order -> allocations over `runs`, by the 6.3+ rule (these runs are 6.18):
    eligible = order > 0, __GFP_HIGH, no __GFP_DIRECT_RECLAIM, no __GFP_NOMEMALLOC;
    other non-blocking = not eligible and no __GFP_DIRECT_RECLAIM."""
    out = {"highatomic_eligible": Counter(), "other_nonblocking": Counter()}
    for run in runs:
        bits = {r["name"]: r["value"] for r in rows(ds, "print_flags", run, ["event", "field", "name", "value"])
                if r["event"] == "mm_page_alloc" and r["field"] == "gfp_flags"}
        high, direct = bits["__GFP_HIGH"], bits["__GFP_DIRECT_RECLAIM"]
        nomemalloc = bits.get("__GFP_NOMEMALLOC", 0)
        for r in rows(ds, "mm_page_alloc", run, ["order", "gfp_flags"]):
            g, order = r["gfp_flags"], r["order"]
            if g & direct:
                continue
            eligible = order > 0 and g & high and not g & nomemalloc
            out["highatomic_eligible" if eligible else "other_nonblocking"][order] += 1
    return out


@pytest.fixture(scope="module")
def ab(examples_ab, tmp_path_factory):
    """(dataset, {side: [run ids]}): kmem-compaction's halves as a and b, memory-pressure also on b."""
    if not shutil.which("trace-cmd"):
        requirements.skip("setup", "trace-cmd is not installed (run `make setup`)")
    tmp = tmp_path_factory.mktemp("sides")
    (whole,) = sides_of(examples_ab)["a"]      # the shared A/B dataset's kmem-compaction run
    ts = sorted(r["ts"] for r in rows(examples_ab, "mm_page_alloc_extfrag", whole, ["ts"]))
    assert len(ts) >= 4, "the example should hold migratetype fallbacks"
    cut = (ts[len(ts) // 3] + ts[len(ts) // 3 + 1]) // 2        # fallbacks on both sides of the cut
    cut_s = f"{cut // 10**9}.{cut % 10**9:09d}"
    ds = tmp / "ds"
    for name, span, label in (("first", ["0", cut_s], "a"), ("second", [cut_s], "b")):
        out = subprocess.run(["trace-cmd", "split", "-i", str(FULL), "-o", str(tmp / f"{name}.dat"), *span],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        (piece,) = tmp.glob(f"{name}.dat*")
        parsed = kmemscope("parse", "-q", piece, "-o", ds, "--label", f"kernel={label}")
        assert parsed.returncode == 0, parsed.stderr
    parsed = kmemscope("parse", "-q", PRESSURE, "-o", ds, "--label", "kernel=b")
    assert parsed.returncode == 0, parsed.stderr
    sides = sides_of(ds)
    assert sorted(sides) == ["a", "b"] and len(sides["a"]) == 1 and len(sides["b"]) == 2
    return ds, sides


@pytest.fixture(scope="module")
def report(ab, tmp_path_factory):
    ds, _ = ab
    out_html = tmp_path_factory.mktemp("report") / "r.html"
    out = kmemscope("report", ds, "-o", out_html, "--compare", "kernel")
    assert out.returncode == 0, out.stderr
    return out_html.read_text(), out.stderr


# ---------------------------------------------------------------- reading the report back

class DrawnTables(HTMLParser):
    """The `kmemscope-drawn` tables of a report: [(figure, panel, {row: {column: value}} or None)]."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found, self.cur, self.row = [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "kmemscope-drawn" in (a.get("class") or "").split():
            if a.get("data-empty"):
                self.found.append((a["data-figure"], a["data-panel"], None))
            elif tag == "table":
                self.cur = {}
                self.found.append((a["data-figure"], a["data-panel"], self.cur))
        elif self.cur is not None and tag == "tr" and "data-row" in a:
            self.row = self.cur.setdefault(a["data-row"], {})
        elif self.row is not None and tag == "td" and "data-value" in a:
            self.row[a["data-column"]] = float(a["data-value"])

    def handle_endtag(self, tag):
        if tag == "table":
            self.cur = self.row = None


def drawn(html, figure):
    p = DrawnTables()
    p.feed(html)
    return [(panel, cells) for fig, panel, cells in p.found if fig == figure]


def per_cell(cells):
    return {(r, c): v for r, cols in cells.items() for c, v in cols.items()}


def matrix_cells(cells):
    return {(r, c): int(v) for r, cols in cells.items() for c, v in cols.items()}


def text_of(html):
    body = re.sub(r"<style.*?</style>|<script.*?</script>", "", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))


# ---------------------------------------------------------------- the tests

@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_report_pollution_matrix_shows_each_sides_own_numbers(ab, report):
    ds, sides = ab
    html, _ = report
    panels = dict(drawn(html, "pollution"))
    want = {side: recount_pollution(ds, runs) for side, runs in sides.items()}
    assert sum(want["a"].values()) > 0 and sum(want["b"].values()) > 0, want
    for side in ("a", "b"):
        assert panels.get(side) is not None, f"no pollution matrix for side {side}: {list(panels)}"
        got = {k: v for k, v in per_cell(panels[side]).items() if v}
        # every cell the figure drew is the side's own count per run; every fallback of the side is drawn
        n = len(sides[side])
        assert got == {k: round(v / n, 3) for k, v in want[side].items()}, (side, got, want[side])
    # the matrices are not the sum of both sides (the old figure added them up)
    total = sum(want["a"].values()) + sum(want["b"].values())
    assert all(sum(per_cell(panels[s]).values()) < total for s in ("a", "b"))
    # the overview part: one matrix per run, each the run's own recount
    facts = run_facts(ds)
    for run in sides["a"] + sides["b"]:
        name = f"{run[:8]} kernel={facts[run]['labels']['kernel']}"
        mine = recount_pollution(ds, [run])
        if not mine:
            assert panels.get(name) is None
            continue
        got = matrix_cells(panels[name])
        assert {k: v for k, v in got.items() if v} == dict(mine), (run, got, mine)


def test_pollution_figure_returns_per_side_matrices_on_one_scale(ab):
    import kmemscope as km
    from kmemscope import plots

    ds, sides = ab
    fig = plots.pollution(km.open(ds), by="kernel")
    drawn_, (frag,) = fig.drawn, fig.tables
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 2
    assert len({im.get_clim() for im in images}) == 1, "the sides' heatmaps use different colour scales"
    for side in ("a", "b"):
        m = drawn_.panels[side]
        got = {(r, c): m.loc[r, c] for r in m.index for c in m.columns if m.loc[r, c]}
        n = len(sides[side])            # per run of the side
        assert got == {k: round(v / n, 3) for k, v in recount_pollution(ds, sides[side]).items()}
        # readable labels: migratetype names on both axes, the same on both sides
        assert list(m.index) == list(m.columns) and {"Unmovable", "Movable", "Reclaimable"} <= set(m.index)
    assert list(drawn_.panels["a"].index) == list(drawn_.panels["b"].index)
    per_side = frag.groupby("kernel")["events"].sum().to_dict()
    assert per_side == {s: sum(recount_pollution(ds, r).values()) for s, r in sides.items()}


@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_report_atomic_orders_are_per_side_recounts(ab, report):
    ds, sides = ab
    html, _ = report
    panels = dict(drawn(html, "atomic_orders"))
    assert set(panels) >= {"highatomic_eligible", "other_nonblocking"}
    for side, runs in sides.items():
        want = recount_nonblocking(ds, [r for r in runs if (Path(ds) / "mm_page_alloc" / f"run_id={r}").exists()])
        for cls in ("highatomic_eligible", "other_nonblocking"):
            cells = panels[cls]
            # per run of the side: the sides differ in run count (1 against 2)
            got = {int(order): cols[side] for order, cols in cells.items() if cols.get(side)}
            assert got == {o: round(n / len(runs), 3) for o, n in want[cls].items() if n}, (side, cls, got)
    # side b's kmem events come from its half of the trace only, so the sides differ
    a = {o: c["a"] for o, c in panels["other_nonblocking"].items()}
    b = {o: c["b"] for o, c in panels["other_nonblocking"].items()}
    assert a != b


def test_event_rates_are_zero_filled(ab):
    import kmemscope as km
    from kmemscope import plots
    from kmemscope.plots.runs import event_counts_per_second
    from kmemscope.plots.scope import Scope

    ds, sides = ab
    facts = run_facts(ds)
    (run,) = sides["a"]
    df = event_counts_per_second(Scope.of(km.open(ds), [run]))
    first, span_s = facts[run]["first_ts"], (facts[run]["last_ts"] - facts[run]["first_ts"]) / 1e9
    zero_inside = 0
    events = [p.name for p in Path(ds).iterdir() if p.is_dir() and p.name not in NOT_EVENTS
              and not p.name.startswith((".", "_")) and (p / f"run_id={run}").is_dir()]
    assert events
    for event in events:
        per_s = Counter((r["ts"] - first) // 10**9 for r in rows(ds, event, run, ["ts"]))
        last = max(int(span_s), max(per_s))
        sub = df[df.event == event].sort_values("second")
        assert list(sub["second"]) == list(range(0, last + 1)), event      # every second, none missing
        assert list(sub["n"]) == [per_s.get(s, 0) for s in range(0, last + 1)], event
        zero_inside += sum(1 for s in range(1, last) if per_s.get(s, 0) == 0)
    assert zero_inside > 0, "the test needs a second without events inside a run"
    # the figure draws the zero-filled series: no gaps in any line
    fig = plots.event_rates(km.open(ds), run=[run])
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for line in ax.get_lines():
            xs = list(line.get_xdata())
            assert xs == list(range(int(xs[0]), int(xs[-1]) + 1)) and xs[0] == 0, (ax.get_title(), xs)
        assert ax.get_ylim()[0] >= 0


@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_pfns_are_hex_in_the_report(ab, report):
    ds, sides = ab
    html, _ = report
    text = text_of(html)
    # the per-CPU list study: "a (6bb6d22c) 43 pfn=0x603f4b ..." per run, each the run's own top five
    blocks = re.findall(r"\b([ab]) \(([0-9a-f]{8})\)((?: \d+ pfn=\S+)+)", text)
    assert {side for side, _, _ in blocks} == {"a", "b"}, blocks
    for side, prefix, listing in blocks:
        (run,) = [r for r in sides[side] if r.startswith(prefix)]
        allocs = Counter(r["pfn"] for r in rows(ds, "mm_page_alloc", run, ["pfn"]) if r["pfn"] != FAILED_PFN)
        fifth = sorted(allocs.values(), reverse=True)[4]
        shown = re.findall(r"(\d+) pfn=(\S+)", listing)
        assert len(shown) == 5
        for n, pfn in shown:
            assert re.fullmatch(r"0x[0-9a-f]+", pfn), pfn
            assert allocs[int(pfn, 16)] == int(n) and int(n) >= fifth, (run, pfn, n)
    # the hot page frames table of the overview
    cells = re.findall(r"<td>(0x[0-9a-f]+)</td>\s*<td>(\d+)</td>", html)
    assert len(cells) >= 5
    for pfn, _allocs in cells:
        assert str(int(pfn, 16)) not in text.split(), f"pfn {pfn} also printed in decimal"


@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_report_text_pluralises_and_counts_the_real_sides(report):
    html, stderr = report
    assert "comparing kernel: a (1 run), b (2 runs)" in stderr
    assert "3 runs of" in stderr
    text = text_of(html)
    # the halves of the example trace are bare trace.dat files cut by trace-cmd split: no host name
    assert "a: 1 run (host not recorded); b: 2 runs on 1 host (1 run without a host name)" in text
    assert not re.search(r"\b1 (runs|hosts|fallbacks|events)\b", text), re.findall(r".{40}\b1 runs\b.{20}", text)
    assert "run(s)" not in text and "about 60 hosts" not in text
    assert "(1 run)" in text and "(2 runs)" in text          # the mmtests layout's header


@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_report_tables_have_no_stray_index(report):
    html, _ = report
    tables = re.findall(r'<table[^>]*class="dataframe"[^>]*>(.*?)</table>', html, re.S)
    assert tables
    for t in tables:
        head = re.search(r"<thead>(.*?)</thead>", t, re.S).group(1)
        assert head.count("<tr") == 1, head              # no second header row naming the index
        first = re.search(r"<tbody>\s*<tr[^>]*>\s*<(t[hd])", t, re.S)
        assert first is None or first.group(1) == "td", "a row starts with an index cell"


def test_all_zero_axes_do_not_go_negative(ab):
    import kmemscope as km
    from kmemscope import plots

    ds, sides = ab
    fig = plots.comparison(km.open(ds).compare("kernel"))
    note = " ".join(fig.notes)
    checked = 0
    for ax in fig.axes:
        points = [c for c in ax.collections if type(c).__name__ == "PathCollection"]
        if ax.get_visible() and points:
            ys = [y for c in points for y in c.get_offsets()[:, 1]]
            if ys and min(ys) >= 0:
                assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] > 0, ax.get_title()
                checked += 1
    assert checked
    # a metric that is zero on every run gets a sentence, not a panel of zeros
    assert "lost_events" in note and not any("Lost trace events" in ax.get_title() for ax in fig.axes)
    fig = plots.highatomic(km.open(ds), run=sides["b"])   # the pressure run: no HighAtomic blocks
    assert all(ax.get_ylim()[0] == 0 for ax in fig.axes)


def test_plural_and_hex_helpers():
    import pandas as pd
    from kmemscope.plots.figure import hex_pfn, plural, tidy_table

    assert [plural(n, "run") for n in (0, 1, 2, 1234)] == ["0 runs", "1 run", "2 runs", "1,234 runs"]
    assert plural(1, "more run") == "1 more run"
    assert hex_pfn(18446744073709551615) == "0xffffffffffffffff" and hex_pfn(4096) == "0x1000"
    df = pd.DataFrame({"pfn": [6307659, 16], "allocs": [43, 2]}).set_index("pfn")
    shown = tidy_table(df)
    assert list(shown.columns) == ["pfn", "allocs"] and list(shown["pfn"]) == ["0x603f4b", "0x10"]


def test_an_event_table_named_like_sql_is_left_out_not_executed(ab, tmp_path):
    """A table folder whose name is SQL text is not a name kmemscope gives a table: the
    listing leaves it out (never read, never executed) and the real tables still count."""
    import kmemscope as km
    from kmemscope.plots.runs import event_counts_per_second
    from kmemscope.plots.scope import Scope

    ds, sides = ab
    copy = tmp_path / "ds"
    shutil.copytree(ds, copy)
    (run,) = sides["a"]
    hostile = "x\" FROM runs; DROP VIEW runs; SELECT 1 AS \"y', '1"
    shutil.copytree(copy / "mm_page_pcpu_drain", copy / hostile)
    shutil.rmtree(copy / "event_tables")      # as a dataset parsed before tables were listed per run
    df = event_counts_per_second(Scope.of(km.open(copy), [run]))
    assert hostile not in set(df.event) and "mm_page_pcpu_drain" in set(df.event)
    assert (copy / "runs").is_dir() and (copy / hostile).is_dir()     # nothing dropped or moved


@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_report_sections_are_named_for_what_they_show_and_summarise_per_run(report):
    html, _ = report
    text = text_of(html)
    heads = re.findall(r"<h2[^>]*>(.*?)</h2>", html, re.S)
    assert not any("study" in h for h in heads), heads          # no patch series in the titles
    assert any(h.startswith("High-atomic reserve") for h in heads)
    assert any(h.startswith("Per-CPU lists") for h in heads)
    assert any(h.startswith("Compaction and THP") for h in heads)
    # every per-side row says it is per run; the only total says across how many hosts
    assert "pgscan_kswapd per minute, per run (statistic; range)" in text
    assert "total across the side's hosts" in text
    assert "total across runs" not in text
    assert "-inf" not in text and "+inf" not in text


@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_report_marks_better_and_worse_apart(report):
    html, _ = report
    table = re.search(r"<table class=[\"']kmemscope-compare[\"']>(.*?)</table>", html, re.S).group(1)
    cells = re.findall(r"<span class=[\"']kmemscope-verdict[\"'][^>]*data-verdict=[\"']([^\"']+)[\"']"
                       r"[^>]*style=[\"']color:\s*([^;\"']+)[\"']>(.*?)</span>", table)
    assert cells, "no verdict in the comparison table"
    for verdict, color, text in cells:
        # green only for a significant better, red only for a significant worse, else no colour
        want = {"better": "#1a7f37", "worse": "#cf222e"}.get(verdict, "inherit")
        assert color == want or verdict in ("higher", "lower"), (verdict, color, text)
        assert ("better" in text) <= (verdict == "better" or "leans better" in text), text


def test_report_of_a_one_sided_comparison_is_one_clear_line(ab, tmp_path):
    ds, _sides = ab
    proc = kmemscope("report", ds, "-o", tmp_path / "r.html", "--compare", "kernel", "--label", "kernel=a")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("kmemscope: error: nothing to compare: every selected run (1) has kernel=a")
    assert not (tmp_path / "r.html").exists()
