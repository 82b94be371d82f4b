"""The report's icicle of non-blocking allocations: its layout against hand-made folded stacks,
and a sentence instead of a figure for runs recorded without stacks."""
import pytest

from conftest import EXAMPLES
from kmrun import kmemscope


def test_folded_tree_counts_every_prefix():
    from kmemscope.plots.origins import folded_tree

    tree = folded_tree([("order-3;a;b;c", 5), ("order-3;a;d", 2), ("order-1;a;b", 1)])
    assert tree[("order-3",)] == 7 and tree[("order-3", "a")] == 7
    assert tree[("order-3", "a", "b")] == 5 and tree[("order-3", "a", "d")] == 2
    assert tree[("order-1",)] == 1 and sum(v for k, v in tree.items() if len(k) == 1) == 8


def test_icicle_boxes_nest_and_fill_their_parents():
    from kmemscope.plots.origins import folded_tree, icicle_boxes

    lines = [("order-3;a;b", 6), ("order-3;a;c", 2), ("order-2;x", 2)]
    boxes, total = icicle_boxes(folded_tree(lines), min_fraction=0)
    assert total == 10
    by_name = {(d, f): (x, w, n) for d, x, w, f, n in boxes}
    assert by_name[(0, "order-3")] == (0.0, 0.8, 8)            # widest first, from the left
    assert by_name[(0, "order-2")][:2] == (0.8, pytest.approx(0.2))
    assert by_name[(2, "b")] == (0.0, 0.6, 6)
    assert by_name[(2, "c")][0] == pytest.approx(0.6) and by_name[(2, "c")][1] == pytest.approx(0.2)
    for d, x, w, f, n in boxes:                                  # children inside the parent
        assert 0 <= x and x + w <= 1 + 1e-9 and w == pytest.approx(n / total)


def test_runs_without_stacks_get_a_sentence(tmp_path):
    import kmemscope as km
    from kmemscope import plots

    ds = tmp_path / "ds"
    kmemscope("parse", "-q", EXAMPLES / "memory-pressure", "-o", ds)
    fig = plots.alloc_origins(km.open(ds))
    assert fig.empty and "preset atomic-origins" in fig.notes[0] and not fig.axes
