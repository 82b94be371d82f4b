"""Who makes the non-blocking high-order allocations: an icicle graph of their kernel stacks.

An icicle is a flame graph drawn top-down: the order of the allocation at the top,
then the stack from its root (the syscall or interrupt entry) down to the page
allocator, each frame as wide as the allocations under it. The data is
`alloc_origins.folded` (kernel stacks recorded with the atomic-origins preset);
the numbers drawn are listed under the figure like every other figure's.
"""
import zlib

from .figure import Drawn, Missing, fig_text, finish, new_figure
from .runs import MAX_PANELS

MIN_FRACTION = 0.004     # frames narrower than this share of a panel are not drawn
MAX_DEPTH = 14           # levels below the order; deeper frames are cut (the allocator's own)


def folded_tree(lines):
    """{frame path tuple: samples} of every prefix, from (stack, samples) pairs."""
    tree: dict = {}
    for stack, samples in lines:
        frames = tuple(stack.split(";"))
        for depth in range(1, len(frames) + 1):
            key = frames[:depth]
            tree[key] = tree.get(key, 0) + int(samples)
    return tree


def icicle_boxes(tree, max_depth=MAX_DEPTH + 1, min_fraction=MIN_FRACTION):
    """(depth, x, width, frame, samples) boxes, children laid out left to right by size."""
    total = sum(v for k, v in tree.items() if len(k) == 1)
    children: dict = {}
    for key in tree:
        children.setdefault(key[:-1], []).append(key)
    boxes = []

    def lay(key, x):
        for child in sorted(children.get(key, []), key=lambda k: (-tree[k], k[-1])):
            width = tree[child] / total if total else 0
            if width >= min_fraction and len(child) <= max_depth:
                boxes.append((len(child) - 1, x, width, child[-1], tree[child]))
                lay(child, x)
            x += width

    lay((), 0.0)
    return boxes, total


def _short(frame, width_chars):
    frame = frame.replace("_noprof", "")
    return frame if len(frame) <= width_chars else frame[:max(width_chars - 1, 0)] + "…"


def nonblocking_icicles(scope):
    """One icicle per run with kernel stacks: non-blocking allocations by order and stack."""
    import matplotlib
    import pandas as pd
    from matplotlib.patches import Rectangle

    cmap = matplotlib.colormaps["YlOrRd"]
    names = scope.run_names()
    runs = sorted(scope.runs_with("kernel_stack") & set(names))
    if not runs:
        # plain text: notes are shown as text, never rendered as Markdown
        raise Missing("No kernel stacks in these runs: record with \"kmemscope record --preset "
                      "atomic-origins\" to see which code makes the non-blocking high-order "
                      "allocations (kmemscope query alloc_origins).")
    shown = runs[:MAX_PANELS]
    fig, axes = new_figure("nonblocking_icicles", len(shown), 1, height=4.2, width=12)
    panels: dict = {}
    for ax, run in zip(axes[:, 0], shown):
        folded = scope.narrowed([run]).query("alloc_origins.folded", alloc_class="nonblocking",
                                                   root="order")
        lines = [(s, n) for s, n in zip(folded.get("stack", []), folded.get("samples", []))
                 if not s.startswith("order-0;")]
        tree = folded_tree(lines)
        boxes, total = icicle_boxes(tree)
        ax.set_title(fig_text(f"{names[run]}: {total:,} non-blocking allocations of order 1 and "
                              "above, by kernel stack (root at the top)"), fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_ylim(MAX_DEPTH + 1, 0)
        ax.axis("off")
        if not boxes:
            ax.text(0.5, 0.5, "no non-blocking allocation of order 1 or above", ha="center",
                    va="center", fontsize=9)
            panels[names[run]] = None
            continue
        for depth, x, width, frame, samples in boxes:
            # A frame keeps its colour across runs and reports: a stable hash of its name.
            color = cmap(0.2 + 0.55 * (zlib.crc32(frame.encode()) % 1000) / 1000)
            ax.add_patch(Rectangle((x, depth), width, 0.95, facecolor=color, edgecolor="white",
                                   linewidth=0.5))
            chars = int(width * 160)
            if chars >= 4:
                ax.text(x + 0.002, depth + 0.55, _short(frame, chars), fontsize=6.5, va="center",
                        clip_on=True)
        top = sorted(((k, v) for k, v in tree.items() if len(k) == 1), key=lambda kv: -kv[1])
        callers = sorted(((k[-1], v) for k, v in tree.items() if len(k) == 2), key=lambda kv: -kv[1])
        panels[names[run]] = pd.DataFrame(
            {"allocations": [v for _, v in top]}, index=[k[0] for k, _ in top])
        panels[f"{names[run]}: widest frames below the order"] = pd.DataFrame(
            {"allocations": [v for _, v in callers[:10]]}, index=[k for k, _ in callers[:10]])
    fig._kmemscope_alt = "Icicle graphs of the kernel stacks of non-blocking allocations, one per run"
    return finish(fig, Drawn("nonblocking_icicles", panels),
                  [scope.shown_note(len(shown), len(runs), "run with stacks")])
