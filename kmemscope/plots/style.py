"""One look for every figure of a report: a colour per side, a marker and line style per run.

A side (the runs that share a label value) keeps one colour in every figure of
the report, the overview half included; the runs of a side differ by marker
and line style, never by colour. Without sides (a one-run or unlabelled
overview) each run is its own side. Colours are Okabe and Ito's palette,
which stays distinct for the common colour-vision deficiencies.

Every artist drawn for a side or a run carries a gid naming it
("side=a", "run=a/017c827d..."); `figure_record` reads the colours back from
the artists, and `show` puts that record under the figure, so a reader (and a
test) can check that a side has one colour everywhere.
"""
import json

# Okabe & Ito (2008): blue, orange, bluish green, reddish purple, sky blue, vermillion, yellow, black
SIDE_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", ":", "-.")
HATCHES = (None, "//", "..", "xx")


class Palette:
    """Colours per side and markers/line styles per run, from {side: [run ids]} in side order."""

    def __init__(self, groups):
        self.groups = {side: sorted(runs) for side, runs in groups.items()}
        self.sides = list(self.groups)
        self.side_of = {r: side for side, runs in self.groups.items() for r in runs}

    def color(self, side):
        return SIDE_COLORS[self.sides.index(side) % len(SIDE_COLORS)]

    def side(self, side):
        """Keyword arguments for an artist that stands for a whole side."""
        return {"color": self.color(side), "gid": f"side={side}"}

    def run(self, run):
        """Keyword arguments for a line or points of one run: its side's colour, its own marker."""
        side = self.side_of.get(run, run)
        i = self.groups.get(side, [run]).index(run) if run in self.groups.get(side, []) else 0
        return {"color": self.color(side) if side in self.groups else SIDE_COLORS[0],
                "marker": MARKERS[i % len(MARKERS)], "linestyle": LINESTYLES[i % len(LINESTYLES)],
                "gid": f"run={side}/{run}"}

    def hatch(self, run):
        """A bar's hatch for a run: none for a side's first run, then stripes, dots, crosses."""
        side = self.side_of.get(run)
        if side is None:
            return None
        return HATCHES[self.groups[side].index(run) % len(HATCHES)]

    def run_marker(self, run):
        style = self.run(run)
        return {k: style[k] for k in ("color", "marker", "gid")}


def legend_outside(fig, ax=None, title=None):
    """One legend for the figure, right of the panels: it never covers data.

    Entries are collected from every axes (or `ax`) by label, first seen first."""
    axes = [ax] if ax is not None else fig.axes
    handles, labels = [], []
    for a in axes:
        for h, lab in zip(*a.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=8, title=title,
                   title_fontsize=8, frameon=False)


def _hex(color):
    from matplotlib.colors import to_hex

    return to_hex(color, keep_alpha=False)


def _first(colors):
    """One RGBA of what an artist returns: a tuple, or an array of one row per element."""
    import numpy as np

    arr = np.asarray(colors, dtype=float)
    if arr.ndim == 2:
        return tuple(arr[0]) if len(arr) else None
    return tuple(arr) if arr.size else None


def figure_record(fig):
    """{gid: colour} of every artist that names a side or a run, read back from the figure."""
    out = {}
    for ax in fig.axes:
        for artist in list(ax.lines) + list(ax.collections) + list(ax.patches):
            gid = artist.get_gid()
            if not gid or not gid.startswith(("side=", "run=")):
                continue
            if type(artist).__name__ == "Line2D":
                color = artist.get_color()
            else:
                # a filled artist by its face; a line collection (no face) by its edge
                color = _first(artist.get_facecolor())
                if color is None or len(color) == 4 and color[3] == 0:
                    color = _first(artist.get_edgecolor())
            if color is None:
                continue
            try:
                out[gid] = _hex(color)
            except ValueError:
                continue
    return out


def record_html(name, fig):
    """The colours a figure drew, as a hidden element (data-colors: JSON {gid: colour})."""
    import html

    record = figure_record(fig)
    if not record:
        return ""
    return (f'<div class="kmemscope-colors" hidden data-figure="{html.escape(name, quote=True)}" '
            f"data-colors='{html.escape(json.dumps(record, sort_keys=True), quote=True)}'></div>")


def alt_text(fig):
    """A description of a figure from its own titles, axis labels and legend, for <img alt>."""
    parts = []
    if getattr(fig, "_suptitle", None) is not None and fig._suptitle.get_text():
        parts.append(fig._suptitle.get_text())
    for ax in fig.axes:
        if not ax.get_visible() or ax.get_label() == "<colorbar>":
            continue
        bits = [t for t in (ax.get_title(),) if t]
        x, y = ax.get_xlabel(), ax.get_ylabel()
        if y or x:
            bits.append(f"{y or 'value'} against {x or 'category'}")
        if bits:
            parts.append(": ".join(bits))
    legend = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    if legend:
        parts.append("series: " + ", ".join(legend[:12]))
    kind = getattr(fig, "_kmemscope_alt", None)
    text = "; ".join(dict.fromkeys(p.replace("\n", " ") for p in parts))
    return (kind + ". " if kind else "Figure. ") + text


def figure_html(fig, name):
    """A figure as an inline PNG with alt text from its own titles and labels, and the record
    of the colours it gave each side and run."""
    import base64
    import html
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    alt = html.escape(alt_text(fig), quote=True)
    return (f'<img class="kmemscope-figure" data-figure="{html.escape(name, quote=True)}" '
            f'alt="{alt}" src="data:image/png;base64,{data}">' + record_html(name, fig))
