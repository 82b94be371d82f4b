"""Text from a dataset or an import is drawn as text by every kmemscope.plots function.

Labels (the sides), an imported metric's name and its unit hold matplotlib mathtext that
does not parse (`$\\undef$` raised mathtext's ValueError from Comparison.plot before), TeX and
HTML. Each figure is rendered to PNG and HTML; the oracle is matplotlib's own Text objects
(the hostile text is among them, exactly, and is not parsed) and Python's HTML parser.
"""
import json
import shutil
from html.parser import HTMLParser

import pytest

import kmemscope
import requirements
from conftest import EXAMPLES
from kmemscope import plots
from kmrun import kmemscope as km, rows_of

MATH = r"$\undef$ $\frac{1"
SIDES = [f"a{MATH}", f"b<b>x</b>{MATH}"]
UNIT = r"$\undef$"
EXTREME = (1.7e308, -1.7e308)     # finite, at the edge of a double
TINY = (5e-324, -5e-324)          # the smallest subnormals


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mathtext")
    ds = tmp / "ds"
    for side, name in zip(SIDES, ("kmem-compaction", "thp-faults")):
        if not (EXAMPLES / name).is_dir():
            requirements.skip("setup", f"the committed example {EXAMPLES / name} is missing")
        bundle = tmp / name
        shutil.copytree(EXAMPLES / name, bundle)
        (bundle / "metrics.json").write_text(json.dumps({"metrics": [
            {"metric": "m_score", "value": 10.0 + len(side), "unit": UNIT, "better": "higher"},
            {"metric": "m_extreme", "value": EXTREME[side == SIDES[1]], "unit": "x",
             "better": "lower"},
            {"metric": "m_tiny", "value": TINY[side == SIDES[1]], "unit": "x",
             "better": "lower"}]}))
        km("parse", "-q", bundle, "-o", ds, "--label", f"kernel={side}")
    return ds


def _texts(fig):
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_text()]


class _Text(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.data = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.data.append(data)


def _rendered(fig):
    png = fig._repr_png_()            # draws: mathtext would raise here
    assert png.startswith(b"\x89PNG")
    return _html(fig._repr_html_())


def _html(markup):
    """The HTML's text; the label's <b> must be in it as text, never as a tag."""
    assert "<b>x</b>" not in markup
    page = _Text()
    page.feed(markup)
    return "".join(page.data)


FIGURES = sorted(plots.FIGURES)


@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_draws_hostile_labels_as_text(hostile, name):
    ds = kmemscope.open(hostile)
    fig = plots.FIGURES[name](ds, by="kernel")
    _rendered(fig)
    if fig.empty:
        return
    shown = _texts(fig)
    assert not [t for t in shown if t.get_parse_math() or t.get_usetex()]


def test_comparison_figures_and_tables_draw_an_imported_unit_and_labels_as_text(hostile):
    cmp = kmemscope.open(hostile).compare("kernel")
    fig = cmp.plot("m_score")
    _rendered(fig)
    texts = {t.get_text() for t in _texts(fig)}
    assert UNIT in texts
    assert {s for s in SIDES} <= texts
    whole = plots.comparison(cmp)
    _rendered(whole)
    assert UNIT in {t.get_text() for t in _texts(whole)}
    for table in (plots.summary, plots.comparison_table, plots.highatomic_table,
                  plots.hot_pfns_table, plots.vmstat_table):
        _html(table(cmp)._repr_html_())
    assert SIDES[1] in _html(plots.summary(cmp)._repr_html_())
    spent = plots.time_spent(kmemscope.open(hostile).compare("kernel", metrics=["cost"]))
    _rendered(spent)
    assert not [t for t in _texts(spent) if t.get_parse_math() or t.get_usetex()]


def test_every_plots_function_is_covered():
    covered = set(FIGURES) | {"comparison", "summary", "comparison_table", "highatomic_table",
                              "hot_pfns_table", "vmstat_table", "time_spent"}
    functions = {n for n in plots.__all__ if callable(getattr(plots, n))
                 and n not in ("Figure", "Html")}
    assert functions == covered


def test_extreme_imported_values_are_read_shown_and_drawn_without_an_internal_error(hostile):
    listed = km("metrics", "list", hostile, "--format", "json")
    values = {(r["metric"], r["value"]) for r in rows_of(listed)}
    assert {("m_extreme", v) for v in EXTREME} | {("m_tiny", v) for v in TINY} <= values
    table = km("metrics", "list", hostile).stdout
    assert "1.7e+308" in table and "-1.7e+308" in table and "4.94066e-324" in table
    for fmt in ("text", "mmtests", "csv", "json"):
        out = km("compare", hostile, "--by", "kernel", "--format", fmt, check=False)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    cmp = kmemscope.open(hostile).compare("kernel")
    for name in ("m_extreme", "m_tiny"):
        _rendered(cmp.plot(name))
