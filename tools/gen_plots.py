#!/usr/bin/env python3
"""Draw the pictures of docs/plots.md and render the example notebooks into docs/examples/.

    docs/plots.md                 its generated region: every figure of kmemscope.plots.FIGURES
                                  (signature, what it draws, its picture); tools/gen_docs.py
                                  writes and checks the region, this tool the pictures
    docs/img/plots/NAME.png       each figure drawn over the eight A/B bundles of
                                  examples/ab-defrag-mode (by="kernel"), or over one of
                                  them (run4-defrag0) for the one-run figures
    docs/examples/NAME.md         each notebook of notebooks/examples/ executed (papermill) and
                                  converted to Markdown (nbconvert), its pictures beside it

    .venv/bin/python tools/gen_plots.py [--work out/plots]     draw and render everything
    .venv/bin/python tools/gen_plots.py --check                 exit 1 when a picture the page
                                                                shows or an example page is missing

The pictures are not compared byte for byte (a matplotlib release moves pixels); --check and
tests/test_docs.py check that each one the page names exists and that the page lists exactly
the figures the API has. Development only: nothing in kmemscope imports it.
"""
import argparse
import inspect
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NOTEBOOKS = ROOT / "notebooks" / "examples"
IMAGES = ROOT / "docs" / "img" / "plots"
PAGES = ROOT / "docs" / "examples"
# figures drawn over one run rather than the A/B sides (no sides to tell apart)
ONE_RUN = {"free_by_migratetype", "event_rates", "alloc_origins"}


def image_name(name):
    return f"img/plots/{name}.png"


def reference():
    """docs/plots.md's generated region: a section per figure, from the API's own docstrings."""
    from kmemscope import plots

    out = []
    for name, fn in plots.FIGURES.items():
        sig = str(inspect.signature(fn)).replace(" -> kmemscope.plots.figure.Figure", "")
        sig = sig.replace(" -> Figure", "")
        doc = " ".join(inspect.getdoc(fn).split())
        out += [f"### {name} {{#{name.replace('_', '-')}}}", "", f"`plots.{name}{sig}`", "", doc, ""]
        if (ROOT / "docs" / image_name(name)).exists():
            out += [f"![plots.{name} over the examples]({image_name(name)})", ""]
        else:
            out += ["*No picture: the example bundles lack the data (kernel stacks) it draws.*", ""]
    return "\n".join(out)


def run(*args):
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"gen_plots: error: {' '.join(map(str, args[:4]))} failed: {proc.stderr.strip()[-400:]}")


def datasets(work):
    """(the A/B dataset of the eight defrag_mode bundles, a dataset of one of them)."""
    ab, one = work / "ab", work / "one"
    sources = {ab: sorted(p for p in (EXAMPLES / "ab-defrag-mode").iterdir() if p.is_dir()),
               one: [EXAMPLES / "ab-defrag-mode" / "run4-defrag0"]}
    for ds, bundles in sources.items():
        if ds.is_dir():
            continue
        # parsed aside and moved in whole: an interrupted run leaves no half dataset to reuse
        part = ds.with_name(ds.name + ".partial")
        shutil.rmtree(part, ignore_errors=True)
        for bundle in bundles:
            run(sys.executable, "-m", "kmemscope", "parse", "-q", bundle, "-o", part)
        part.rename(ds)
    return ab, one


def draw(ab, one):
    """Each figure of plots.FIGURES as a PNG in docs/img/plots/ (an empty figure: no picture)."""
    import kmemscope
    from kmemscope import plots

    IMAGES.mkdir(parents=True, exist_ok=True)
    ab_ds, one_ds = kmemscope.open(ab), kmemscope.open(one)
    for name, fn in plots.FIGURES.items():
        fig = fn(one_ds) if name in ONE_RUN else fn(ab_ds, by="kernel", baseline="defrag0")
        path = IMAGES / f"{name}.png"
        if fig.empty:
            path.unlink(missing_ok=True)
            print(f"{name}: no picture ({fig.notes[0]})")
            continue
        fig.savefig(path, dpi=72, bbox_inches="tight")
        print(f"wrote {path.relative_to(ROOT)}")
    cmp = ab_ds.compare(by="kernel", baseline="defrag0")
    cmp.plot("compaction_success_pct").savefig(IMAGES / "comparison_plot.png", dpi=72,
                                                bbox_inches="tight")


def render_examples(ab, one, work):
    """Each example notebook executed and converted to docs/examples/NAME.md."""
    import nbformat
    import papermill
    from nbconvert import MarkdownExporter

    PAGES.mkdir(parents=True, exist_ok=True)
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        params = {"examples": str(EXAMPLES), "dataset": str(one if path.stem.startswith("one-run") else ab)}
        if path.stem == "fleet":
            params["benchmarks"] = str(ROOT / "benchmarks")
        executed = work / path.name
        papermill.execute_notebook(str(path), str(executed), parameters=params, kernel_name="python3",
                                   progress_bar=False, cwd=str(work))
        nb = nbformat.read(executed, as_version=4)
        # the injected parameters are this machine's paths: the page shows the notebook's own cell
        nb.cells = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
        body, resources = MarkdownExporter().from_notebook_node(
            nb, resources={"output_files_dir": f"{path.stem}_files"})
        files = PAGES / f"{path.stem}_files"
        shutil.rmtree(files, ignore_errors=True)
        for name, data in resources.get("outputs", {}).items():
            (PAGES / name).parent.mkdir(parents=True, exist_ok=True)
            (PAGES / name).write_bytes(data)
        source = f"notebooks/examples/{path.name}"
        head = (f"<!-- generated by tools/gen_plots.py from {source}: edit the notebook, not this -->\n\n")
        (PAGES / f"{path.stem}.md").write_text(head + body.strip() + "\n\n"
                                                + f"*The notebook: `{source}`.*\n")
        print(f"wrote docs/examples/{path.stem}.md")


def missing():
    """Pictures the page names and example pages that are not there."""
    import re

    page = (ROOT / "docs" / "plots.md").read_text()
    out = [p for p in re.findall(r"\]\((img/plots/[^)]+)\)", page) if not (ROOT / "docs" / p).exists()]
    out += [f"docs/examples/{p.stem}.md" for p in NOTEBOOKS.glob("*.ipynb")
            if not (PAGES / f"{p.stem}.md").exists()]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "plots", help="where datasets are parsed")
    ap.add_argument("--check", action="store_true", help="draw nothing; exit 1 naming what is missing")
    args = ap.parse_args(argv)
    if args.check:
        gone = missing()
        for g in gone:
            print(f"missing: {g} (run .venv/bin/python tools/gen_plots.py)", file=sys.stderr)
        return 1 if gone else 0
    args.work.mkdir(parents=True, exist_ok=True)
    ab, one = datasets(args.work)
    draw(ab, one)
    render_examples(ab, one, args.work)
    run(sys.executable, str(ROOT / "tools" / "gen_docs.py"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
