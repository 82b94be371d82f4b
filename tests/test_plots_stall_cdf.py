"""plots.stall_cdf draws the groups (kind, order) with the most stalls, largest first, and counts
what it leaves out.

Data: the committed examples A/B (examples_ab: kernel a and b), whose stalls fall into seven
groups of kind and order; the panel limit is lowered to three so that four groups are left
out. Oracle: the stalls of `kmemscope query stalls.each` (one row per stall) recounted per
kind and order in plain Python, as many as each panel says it drew.
"""
import re
from collections import Counter

import pytest

import kmemscope
from kmemscope import plots
from kmemscope.plots import timeseries
from kmrun import kmemscope as km, rows_of


@pytest.fixture(scope="module")
def recount(examples_ab):
    """{(kind, order): stalls with a duration} from the analysis' rows, in plain Python."""
    rows = rows_of(km("query", "stalls.each", examples_ab, "--format", "json"))
    count = Counter((r["kind"], -1 if r["order"] is None else r["order"])
                    for r in rows if r["duration_ms"] and r["duration_ms"] > 0)
    assert len(count) > 3 and len(set(count.values())) > 2      # enough groups, of unlike sizes
    return count


def panel_key(kind, order):
    return f"{kind} {'no order' if order == -1 else f'order {order}'}"


def drawn_stalls(fig):
    """{panel: stalls drawn over every side} of a figure's numbers, in its panel order."""
    return {name: int(frame["stalls"].sum()) for name, frame in fig.drawn.panels.items()}


def test_stall_cdf_draws_every_group_largest_first(examples_ab, recount):
    with kmemscope.open(examples_ab) as ds:
        fig = plots.stall_cdf(ds, by="kernel")
    want = sorted(recount.items(), key=lambda kv: (-kv[1], kv[0]))
    assert list(drawn_stalls(fig).items()) == [(panel_key(*k), n) for k, n in want]
    assert not [n for n in fig.notes if n and "not drawn" in n]


def test_stall_cdf_leaves_out_the_smallest_groups_and_counts_them(examples_ab, recount,
                                                                  monkeypatch):
    shown = 3
    monkeypatch.setattr(timeseries, "MAX_CDF_PANELS", shown)
    with kmemscope.open(examples_ab) as ds:
        fig = plots.stall_cdf(ds, by="kernel")
    want = sorted(recount.items(), key=lambda kv: (-kv[1], kv[0]))
    drawn = drawn_stalls(fig)
    assert list(drawn.items()) == [(panel_key(*k), n) for k, n in want[:shown]]
    left = want[shown:]
    assert min(drawn.values()) >= max(n for _k, n in left)      # nothing larger left out
    note = next(n for n in fig.notes if n and "not drawn" in n)
    m = re.match(r"(\d+) more groups? of kind and order not drawn: ([\d,]+) stalls? \((.*)\)", note)
    assert m, note
    assert int(m.group(1)) == len(left)
    assert int(m.group(2).replace(",", "")) == sum(n for _k, n in left)
    named = m.group(3)
    for (kind, order), n in left[:timeseries.MAX_LEFT_NAMED]:
        title = timeseries.STALL_KINDS[kind]
        assert f"{title} {'no order' if order == -1 else f'order {order}'}: {n:,}" in named
