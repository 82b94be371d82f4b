"""What every kmemscope figure is: a matplotlib Figure that shows itself, its numbers and its notes.

A `Figure` is a plain matplotlib Figure (not pyplot: nothing depends on a
backend) with three more things a reader needs: `notes`, plain sentences about
what is not drawn and why; `drawn`, the numbers each panel shows read back from
its artists (a DataFrame per panel); and `tables`, frames that go with it (the
five hottest pfns beside the hot-pfn figure). In a notebook it renders as an
inline PNG with alt text, the notes, the tables and the folded numbers; a
script saves it with `fig.savefig(path)`.

A figure whose analysis returned no rows is `empty`: it holds one sentence
saying what is missing, drawn as text, and nothing else. Any other failure
(a bad parameter, an error in a query) is raised, never drawn as "no data".

Text from a trace or a manifest (labels, hosts, comms) only ever reaches HTML
escaped and never reaches Markdown: a label cannot add a link or an image. In the
drawing every text is literal: a Figure draws with matplotlib's mathtext and TeX off
(`$\\undef$` is drawn as those characters, never parsed), whoever placed the text.
"""
import html
import io
import math
from contextlib import contextmanager
from dataclasses import dataclass

from matplotlib.figure import Figure as _MplFigure
from matplotlib.ticker import LogFormatter, LogFormatterMathtext

MAX_LINES = 12           # legend entries before a figure drops its legend


class Missing(Exception):
    """The selected runs lack the data of a figure; str() is the sentence to show instead."""


class Figure(_MplFigure):
    """A matplotlib Figure with the notes, tables and drawn numbers of a kmemscope figure."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.name = "figure"       # which figure (data-figure in HTML, the file name in docs)
        self.notes = []            # plain sentences: what is left out and why
        self.tables = []           # pandas frames shown under the figure
        self.drawn = None          # Drawn: the numbers each panel shows
        self.empty = False         # True: no data; notes[0] says what is missing

    @classmethod
    def nothing(cls, name, sentence):
        """The figure of an analysis that returned no rows: the sentence, drawn and noted."""
        fig = cls(figsize=(8, 0.6))
        fig.text(0.01, 0.5, sentence, fontsize=9, va="center", color="0.35", wrap=True)
        fig.name, fig.notes, fig.empty = name, [sentence], True
        return fig

    def draw(self, renderer):
        with literal_text(self):
            return super().draw(renderer)

    def get_tightbbox(self, renderer=None, *args, **kwargs):
        with literal_text(self):
            return super().get_tightbbox(renderer, *args, **kwargs)

    def _repr_png_(self):
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=90, bbox_inches="tight")
        return buf.getvalue()

    def _repr_html_(self):
        from .style import figure_html

        if self.empty:
            return f'<p class="kmemscope-nodata"><i>{html.escape(self.notes[0])}</i></p>'
        parts = [figure_html(self, self.name)]
        parts += [f'<p class="kmemscope-note"><i>{html.escape(n)}</i></p>' for n in self.notes]
        parts += [table_html(t) for t in self.tables]
        if self.drawn is not None:
            parts.append(self.drawn.html())
        return "".join(parts)


class Html:
    """HTML a notebook displays (a comparison's tables); `.html` is the markup, `.text` a plain
    rendering for a terminal. Every value from the data in it is escaped."""

    def __init__(self, markup, text=""):
        self.html, self.text = markup, text

    def _repr_html_(self):
        return self.html

    def __repr__(self):
        return self.text or "<kmemscope.plots.Html: display it in a notebook>"


@contextmanager
def literal_text(fig):
    """Every text of `fig`, and every text made meanwhile (tick labels are made while
    drawing), drawn as it is: no mathtext, no TeX."""
    import matplotlib
    from matplotlib.text import Text

    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        for t in fig.findobj(Text):
            t.set_parse_math(False)
            t.set_usetex(False)
        _plain_log_ticks(fig)
        yield


def _plain_log_ticks(fig):
    """Log and symlog axes (colour bars included) label their ticks in plain numbers: their
    default labels are mathtext (`$\\mathdefault{10^{2}}$`), which with mathtext off would be
    drawn as that source."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for get, put in ((axis.get_major_formatter, axis.set_major_formatter),
                             (axis.get_minor_formatter, axis.set_minor_formatter)):
                old = get()
                if isinstance(old, LogFormatterMathtext):
                    put(_plain_log_formatter(old))


class _PlainLogFormatter(LogFormatter):
    """A log axis's tick labels as plain numbers: 0.01, 1, 100, 10,000, 1e6."""

    def __call__(self, x, pos=None):
        s = super().__call__(abs(x), pos)
        return "\u2212" + s if s and x < 0 else s

    def _num_to_string(self, x, vmin, vmax):
        if 1e-4 <= x < 1e5:
            return f"{x:,.{max(0, -math.floor(math.log10(x) + 1e-9))}f}"
        mantissa, exponent = f"{x:.0e}".split("e")
        return f"{mantissa}e{int(exponent)}"


def _plain_log_formatter(old):
    """The plain formatter that labels the ticks `old` (a mathtext log formatter) labels."""
    return _PlainLogFormatter(base=old._base, labelOnlyBase=old.labelOnlyBase,
                              minor_thresholds=old.minor_thresholds, linthresh=old._linthresh)


def new_figure(name, nrows=1, ncols=1, height=3.2, width=11):
    """An empty Figure of nrows x ncols axes (an array, squeezed never), laid out by constraints."""
    fig = Figure(figsize=(width, height * nrows), layout="constrained")
    fig.name = name
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def finish(fig, drawn=None, notes=(), tables=()):
    """The figure with its numbers, notes (None and empty ones dropped) and tables attached."""
    fig.drawn = drawn
    fig.notes = [n for n in notes if n]
    fig.tables = [t for t in tables if t is not None]
    return fig


# ---------------------------------------------------------------- wording

def plural(n, word, many=None):
    """'1 run', '2 runs', '1,234 events'."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def fig_text(text):
    """Text from a trace or a label as a figure shows it: as it is (a Figure draws every text
    literally, literal_text)."""
    return str(text)


def hex_pfn(p):
    """A page frame number as trace-cmd and perf print it."""
    if p is None or p != p:       # None or NaN
        return ""
    return f"0x{int(p):x}"


def _is_pfn_column(name):
    return isinstance(name, str) and (name == "pfn" or name.endswith("_pfn"))


def tidy_table(df):
    """A frame as shown: index folded into columns, no axis names, pfns in hex, labels as k=v."""
    if any(n is not None for n in df.index.names):
        df = df.reset_index()     # a named index is a real column; a row counter says nothing
    else:
        df = df.reset_index(drop=True)
    df.columns = [str(c) if not isinstance(c, str) else c for c in df.columns]
    df.columns.name = None
    for col in df.columns:
        if _is_pfn_column(col) and df[col].dtype.kind in "iuf":
            df[col] = df[col].map(hex_pfn)
    return df


def table_html(df):
    """A frame as an HTML table (pandas escapes every cell)."""
    return tidy_table(df).to_html(index=False, escape=True)


# ---------------------------------------------------------------- the numbers drawn

@dataclass
class Drawn:
    """The numbers a figure drew, panel by panel, read back from its artists.

    Shown under the figure as a folded table; every cell carries its value in a
    data-value attribute and every table names its figure and panel, so a test
    can compare the figure with a recount of the data.
    """
    figure: str
    panels: dict                       # panel name -> DataFrame (rows x columns), or None: nothing drawn
    caption: str = "Numbers drawn"

    def html(self):
        parts = [f"<details><summary>{html.escape(self.caption)}</summary>"]
        for name, frame in self.panels.items():
            attrs = (f'class="kmemscope-drawn" data-figure="{html.escape(self.figure, quote=True)}" '
                     f'data-panel="{html.escape(str(name), quote=True)}"')
            if frame is None:
                parts.append(f"<p {attrs} data-empty=\"1\"><b>{html.escape(str(name))}</b>: nothing drawn</p>")
                continue
            head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
            rows = []
            for idx, row in frame.iterrows():
                cells = "".join(f'<td data-column="{html.escape(str(c), quote=True)}" '
                                f'data-value="{_num(v)}">{_cell(v)}</td>' for c, v in row.items())
                rows.append(f'<tr data-row="{html.escape(str(idx), quote=True)}">'
                            f"<th>{html.escape(str(idx))}</th>{cells}</tr>")
            parts.append(f"<p><b>{html.escape(str(name))}</b></p><table {attrs}>"
                         f"<thead><tr><th></th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
        parts.append("</details>")
        return "".join(parts)


def _num(v):
    f = float(v)
    return str(int(f)) if f.is_integer() else repr(f)


def _cell(v):
    f = float(v)
    return f"{int(f):,}" if f.is_integer() else f"{f:,.3g}"


def no_negative_axes(fig, x=False):
    """Counts never go below 0: where every plotted value is >= 0, the value axis starts at 0.

    Matplotlib pads an all-zero series to [-0.05, 0.05]; that reads as negative
    counts. Image axes (heatmaps) are left alone.
    """
    for ax in fig.axes:
        if ax.images or not (ax.lines or ax.collections or ax.patches):
            continue
        lim = ax.dataLim
        lo, hi = (lim.x0, lim.x1) if x else (lim.y0, lim.y1)
        get, put = (ax.get_xlim, ax.set_xlim) if x else (ax.get_ylim, ax.set_ylim)
        if lo >= 0 and get()[0] < 0:
            top = get()[1]
            put(0, top if hi > 0 else 1)
    return fig
