"""The A/B report as a patch author reads it: one statistic per metric, one colour per side, a
monospace mmtests block, honest figures, navigation.

The dataset is the three example bundles: kmem-compaction as kernel=a, memory-pressure and
thp-faults as kernel=b (two runs against one). The oracles: `kmemscope compare --format json`
and `--format mmtests` (the comparison every place of the report must agree with), recounts
of the Parquet files with pyarrow, and Debian's chromium for what a browser computes.
"""
import json
import re
import shutil
import subprocess
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import pytest

import kmrun
import requirements
from kmdata import run_rows as rows


FAILED_PFN = 2 ** 64 - 1


def kmemscope(*args, timeout=600):
    """The real command line (tests/kmrun.py); its exit status is the caller's to check."""
    return kmrun.kmemscope(*args, check=False, timeout=timeout)


@pytest.fixture(scope="module")
def ab(examples_ab):
    """(dataset, {side: [run ids]}): the run's shared A/B dataset of the examples (conftest)."""
    ds = examples_ab
    sides = defaultdict(list)
    for part in sorted((ds / "runs").glob("run_id=*")):
        run = part.name[len("run_id="):]
        (labels,) = [dict(r["labels"]) for r in rows(ds, "runs", run, ["labels"])]
        sides[labels["kernel"]].append(run)
    assert {s: len(r) for s, r in sides.items()} == {"a": 1, "b": 2}
    return ds, dict(sides)


@pytest.fixture(scope="module")
def report(ab, tmp_path_factory):
    ds, _ = ab
    path = tmp_path_factory.mktemp("report") / "ab.html"
    out = kmemscope("report", ds, "-o", path, "--compare", "kernel")
    assert out.returncode == 0, out.stderr
    return path


@pytest.fixture(scope="module")
def compared(ab):
    ds, _ = ab
    out = kmemscope("compare", ds, "--by", "kernel", "--format", "json")
    assert out.returncode == 0, out.stderr
    return {(r["metric"], r["side"]): r for r in json.loads(out.stdout)["rows"]}


class Elements(HTMLParser):
    """Start tags with their attributes, and the text inside <pre id=...> and headings."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.pre, self._in_pre = [], {}, None
        self.drawn, self._table, self._row = [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "pre" and a.get("id"):
            self._in_pre = a["id"]
            self.pre[self._in_pre] = ""
        if "kmemscope-drawn" in (a.get("class") or "").split() and tag == "table":
            self._table = {}
            self.drawn.append((a["data-figure"], a["data-panel"], self._table))
        elif self._table is not None and tag == "tr" and "data-row" in a:
            self._row = self._table.setdefault(a["data-row"], {})
        elif self._row is not None and tag == "td" and "data-value" in a:
            self._row[a["data-column"]] = float(a["data-value"])

    def handle_endtag(self, tag):
        if tag == "pre":
            self._in_pre = None
        if tag == "table":
            self._table = self._row = None

    def handle_data(self, data):
        if self._in_pre:
            self.pre[self._in_pre] += data


def parsed(path):
    p = Elements()
    p.feed(Path(path).read_text())
    return p


def stat_of(row):
    return row["statistic"]


@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_every_place_of_a_metric_shows_the_comparisons_statistic_and_names_it(report, compared):
    p = parsed(report)
    seen = defaultdict(set)
    for tag, a in p.tags:
        if "kmemscope-value" in (a.get("class") or "").split():
            seen[(a["data-metric"], a["data-side"])].add((a["data-stat"], float(a["data-value"])))
    for figure, panel, cells in p.drawn:
        if figure != "distributions":
            continue
        metric, stat = re.fullmatch(r"(.+) \((\w+)\)", panel).groups()
        for side, cols in cells.items():
            seen[(metric, side)].add((stat, cols[stat]))
    assert len(seen) > 20, "the table, vmstat table and figure values were not found"
    vmstat_rows = headline_rows = 0
    for (metric, side), found in seen.items():
        want = compared[(metric, side)]
        stats = {s for s, _ in found}
        values = {v for _, v in found}
        assert stats == {stat_of(want)}, (metric, side, found, stat_of(want))
        assert len(values) == 1 and values.pop() == pytest.approx(want["value"], rel=1e-12), (metric, side, found)
        vmstat_rows += metric.startswith("vmstat.")
        headline_rows += want["kind"] == "summary"
    assert vmstat_rows and headline_rows
    # every mean the comparison has appears in the report
    missing = [k for k, r in compared.items() if r["value"] is not None and k not in seen]
    assert not missing, missing


@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_the_verdicts_at_the_top_are_the_comparisons(report, compared):
    html = Path(report).read_text()
    summary = re.search(r"""<ul class=["']kmemscope-summary["']>(.*?)</ul>""", html, re.S).group(1)
    for metric, side in compared:
        r = compared[(metric, side)]
        if r["kind"] == "summary" and not r["is_baseline"] and r["change"] is not None:
            assert f"{r['change']:+.2f}%" in summary, (metric, summary)
    # the summary comes before the comparison table, the contents before both
    places = [re.search(pattern, html).start() for pattern in (
        r'<nav class="kmemscope-toc"', r"""<ul class=["']kmemscope-summary""", r"""<table class=["']kmemscope-compare""")]
    assert places == sorted(places)


@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_each_side_has_one_colour_in_every_figure(report, ab):
    _, sides = ab
    p = parsed(report)
    colours = defaultdict(set)
    figures = set()
    for tag, a in p.tags:
        if "kmemscope-colors" in (a.get("class") or "").split():
            figures.add(a["data-figure"])
            for gid, colour in json.loads(a["data-colors"]).items():
                side = gid.split("=", 1)[1].split("/", 1)[0]
                colours[side].add(colour)
    # the comparison's figures and the overview's (runs coloured by their side)
    assert {"distributions", "orders", "atomic_orders", "over_time", "stall_cdfs",
            "event_rates", "hot_pfns", "compaction_timeline", "vmstat_rates"} <= figures, figures
    assert set(colours) == set(sides)
    assert all(len(c) == 1 for c in colours.values()), dict(colours)
    assert len({next(iter(c)) for c in colours.values()}) == len(sides), "two sides share a colour"


@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_the_mmtests_block_is_the_compare_output_with_a_copy_button(report, ab):
    ds, _ = ab
    p = parsed(report)
    out = kmemscope("compare", ds, "--by", "kernel", "--format", "mmtests")
    assert out.returncode == 0, out.stderr
    assert p.pre["kmemscope-mmtests"].strip() == out.stdout.strip()
    buttons = [a for tag, a in p.tags if tag == "button"]
    assert any("kmemscope-mmtests" in a.get("onclick", "") for a in buttons)
    assert not any(tag == "script" and a.get("src") for tag, a in p.tags), "a script fetched from elsewhere"


@pytest.fixture(scope="module")
def browser():
    exe = shutil.which("chromium")
    if not exe:
        requirements.skip("setup", "Debian's chromium is not installed (make browser)")
    return exe


@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_a_browser_renders_the_mmtests_block_monospace_and_unwrapped(report, browser, tmp_path):
    probe = tmp_path / "probe.html"
    probe.write_text(Path(report).read_text().replace("</body>", """<script>
var s = getComputedStyle(document.getElementById('kmemscope-mmtests'));
document.body.setAttribute('data-probe', s.fontFamily + '|' + s.whiteSpace);
</script></body>"""))
    out = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          probe.as_uri()], capture_output=True, text=True, timeout=120)
    family, white = re.search(r'data-probe="([^"|]*)\|([^"]*)"', out.stdout).groups()
    family = family.replace("&quot;", '"')
    assert "monospace" in family and "system-ui" not in family, family
    assert white == "pre", white


@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_figures_have_real_alt_text_and_the_page_a_table_of_contents(report):
    html = Path(report).read_text()
    images = re.findall(r"<img\b[^>]*>", html)
    assert len(images) >= 10
    for img in images:
        alt = re.search(r'alt="([^"]*)"', img)
        assert alt and len(alt.group(1)) > 30 and "No description" not in alt.group(1), img[:200]
    nav = re.search(r'<nav class="kmemscope-toc".*?</nav>', html, re.S).group(0)
    ids = re.findall(r'<h2 id="([^"]+)"', html)
    assert len(ids) >= 15
    for ident in ids:
        assert f'href="#{ident}"' in nav, ident
    assert "No description has been provided" not in html


@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_tables_have_no_leaked_index(report):
    html = Path(report).read_text()
    assert not re.search(r"<th>\s*index\s*</th>", html)
    assert not re.search(r"<th>\s*Unnamed", html)


@pytest.mark.slow   # an A/B report is a notebook run (~25 s of CPU)
def test_per_side_orders_are_per_run_with_failures_beside_attempts(report, ab):
    ds, sides = ab
    panels = {(f, panel): cells for f, panel, cells in parsed(report).drawn}
    attempts, failed = panels[("orders", "allocations")], panels[("orders", "failed")]
    assert any(v for cols in failed.values() for v in cols.values()), "the examples hold failed THP attempts"
    for side, runs in sides.items():
        tot, bad = defaultdict(int), defaultdict(int)
        for run in runs:
            for r in rows(ds, "mm_page_alloc", run, ["order", "pfn"]):
                tot[r["order"]] += 1
                bad[r["order"]] += r["pfn"] == FAILED_PFN
        for order, cols in attempts.items():
            assert cols[side] == pytest.approx(round(tot[int(order)] / len(runs), 3)), (side, order)
            assert failed[order][side] == pytest.approx(round(bad[int(order)] / len(runs), 3)), (side, order)


def test_distribution_panels_are_honest(ab):
    import kmemscope as km
    from kmemscope import plots

    ds, _ = ab
    cf = km.open(ds).compare("kernel")
    fig = plots.comparison(cf)
    drawn, note = fig.drawn, " ".join(fig.notes)
    zero = [r.metric.name for r in cf.rows if r.metric.kind != "vmstat"
            and any(x.n for x in r.stats.values()) and not any(v for x in r.stats.values() for v in x.values)]
    assert zero, "the examples have metrics that are zero on every run (lost_events)"
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()]
    for name in zero:
        assert not any(name in p for p in drawn.panels), name
        assert name in note
    by_title = {r.metric.title: r for r in cf.rows}
    for ax in fig.axes:
        if not ax.get_visible() or not ax.get_title():
            continue
        r = by_title[ax.get_title().split("\n")[0]]
        assert ax.get_ylabel(), ax.get_title()                  # a unit on every value axis
        assert ("Hmean" in ax.get_title()) or ("Amean" in ax.get_title())
        lo, hi = ax.get_ylim()
        assert lo == 0, ax.get_title()                           # counts, shares, times from zero
        if r.metric.unit == "%":
            assert hi <= 100
        texts = " ".join(t.get_text() for t in ax.texts)
        for side, x in r.stats.items():
            if x.n == 1:
                assert "no spread" in texts, ax.get_title()
    assert len(titles) >= 6
