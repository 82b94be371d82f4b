"""`kmemscope report`: execute the report notebooks headless and write one self-contained HTML file.

The notebooks (overview.ipynb, compare.ipynb) call only the public API
(`kmemscope.open`, `Dataset.compare`, `kmemscope.plots`): a reader can copy any
cell into a notebook of their own. papermill runs each notebook with its
parameters in a fresh kernel; nbconvert turns the executed cells into HTML with
the code inputs left out and figures inline as data: URIs. No output is
Markdown: text from traces and manifests (labels, hosts, comms) reaches the
page only as escaped HTML or inside a PNG, so it can add no link or image. The template drops the <script> tags that would fetch
require.js and MathJax from a CDN: the report must open on a machine with no
network, and nothing in it needs them.
"""
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from kmemscope.common.errors import KmemscopeError
from kmemscope.common.outfile import write_file
from kmemscope.common.scratch import ScratchFolder
from kmemscope.common.text import printable

# lab's page with its CSS inlined, but no scripts fetched from elsewhere.
_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block extra_css -%}
<style>
  body { max-width: 1250px; margin: 0 auto; }
  .jp-RenderedHTMLCommon table { font-size: 12px; }
  /* lab's theme gives output <pre> the UI font and wrapping: columns must line up */
  .jp-RenderedHTMLCommon pre, .jp-OutputArea-output pre, pre.kmemscope-mono, .kmemscope-mmtests pre {
    font-family: "DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, ui-monospace, monospace !important;
    font-size: 11px; white-space: pre !important; overflow-x: auto; }
  .kmemscope-mmtests pre { background: #f6f8fa; border: 1px solid #d0d7de; padding: 8px; }
  .kmemscope-mmtests button { font-size: 12px; margin-left: 8px; cursor: pointer; }
  .jp-OutputArea-output img { max-width: 100%; }
  nav.kmemscope-toc { border: 1px solid #d0d7de; background: #f6f8fa; padding: 6px 16px; margin: 12px 0;
    font-size: 13px; font-family: system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; }
  nav.kmemscope-toc > ol { display: grid; grid-template-columns: repeat(auto-fit, minmax(380px, 1fr)); }
  nav.kmemscope-toc ol { margin: 2px 0; padding-left: 18px; }
  .kmemscope-mmtests pre { max-height: 36em; }
  ul.kmemscope-summary { font-size: 14px; }
  p.kmemscope-note, p.kmemscope-nodata { color: #57606a; font-size: 13px; }
</style>
{%- endblock extra_css -%}
"""
PARAM_TAGS = {"parameters", "injected-parameters"}
# Overview sections the comparison draws per side: left out of a comparison report.
PER_RUN_ONLY = "overview-only"
# Overview sections the comparison draws per side: left out of a comparison report.
PER_RUN_ONLY = "overview-only"


def _need_report_extra():
    try:
        import nbconvert  # noqa: F401
        import papermill  # noqa: F401
    except ImportError as exc:
        raise KmemscopeError(f"kmemscope report needs {exc.name}",
                             "install the report extra: pip install 'kmemscope[report]'") from None


def notebook_path(name):
    return resources.files("kmemscope.notebooks") / name


def execute(name, parameters, workdir, progress=None, cell_bar=False):
    """Run notebook `name` with papermill into workdir; returns the executed NotebookNode.

    cell_bar: show a bar of the cells executed on the terminal (stderr's, which the
    kernel's own chatter does not reach)."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    out = Path(workdir) / name
    started = time.monotonic()
    if progress:
        progress(f"executing {name}")
    with resources.as_file(notebook_path(name)) as src, \
            _stderr_to(Path(workdir) / "kernel.log") as terminal:
        bar = {"file": terminal, "desc": name, "leave": False} if cell_bar else False
        try:
            nb = pm.execute_notebook(str(src), str(out), parameters=parameters, kernel_name="python3",
                                     progress_bar=bar, log_output=False, cwd=str(workdir))
        except PapermillExecutionError as exc:
            raise KmemscopeError(f"notebook {name} failed in cell {exc.exec_count}: "
                                 f"{exc.ename}: {str(exc.evalue).splitlines()[0] if exc.evalue else ''}",
                                 "rerun with --keep-notebooks DIR and open the notebook") from None
    if progress:
        progress(f"{name} done in {time.monotonic() - started:.1f} s")
    return nb


class _stderr_to:
    """Send fd 2 to a file while a kernel runs: its start-up chatter is not kmemscope's progress."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        """The terminal's stderr, as a text stream for progress while fd 2 goes to the log."""
        sys.stderr.flush()
        self.saved = os.dup(2)
        with open(self.path, "ab") as log:
            os.dup2(log.fileno(), 2)
        self.terminal = os.fdopen(os.dup(self.saved), "w", buffering=1)
        return self.terminal

    def __exit__(self, *exc):
        sys.stderr.flush()
        self.terminal.close()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        return False


def merge(notebooks, compared=False):
    """One notebook of the cells of all `notebooks`, without the parameter cells (and, in a
    comparison report, without the overview's sections that the comparison draws per side)."""
    import nbformat

    drop = PARAM_TAGS | ({PER_RUN_ONLY} if compared else set())
    merged = nbformat.v4.new_notebook()
    merged.metadata = notebooks[0].metadata
    for nb in notebooks:
        merged.cells += [c for c in nb.cells if not drop & set(c.metadata.get("tags", []))]
    return merged


def to_html(nb, title):
    """Self-contained HTML: inputs excluded, images inline, no external scripts."""
    import jinja2
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True, embed_images=True,
                            extra_loaders=[jinja2.DictLoader({"kmemscope_report.html.j2": _TEMPLATE})],
                            template_file="kmemscope_report.html.j2")
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})
    return body


def with_contents(page):
    """The page with a table of contents at its top: a link to every notebook title (h1) and
    section (h2), by the ids nbconvert gave the headings."""
    import html as html_
    import re

    heads = re.findall(r'<h([12]) id="([^"]+)"[^>]*>(.*?)</h\1>', page, re.S)
    if not heads:
        return page
    items, open_sub = [], False
    for level, ident, inner in heads:
        text = html_.escape(html_.unescape(re.sub(r"<[^>]+>|¶", "", inner)).strip())
        link = f'<a href="#{ident}">{text}</a>'
        if level == "1":
            if open_sub:
                items.append("</ol></li>")
            items.append(f"<li>{link}<ol>")
            open_sub = True
        else:
            items.append(f"<li>{link}</li>")
    if open_sub:
        items.append("</ol></li>")
    nav = ('<nav class="kmemscope-toc" aria-label="Contents"><b>Contents</b><ol>'
           + "".join(items) + "</ol></nav>")
    first = re.search(r'<div[^>]*class="[^"]*jp-Cell\b', page)
    if first is None:
        return page
    return page[:first.start()] + nav + page[first.start():]


def _runs(n):
    return f"{n} run" if n == 1 else f"{n} runs"


@contextmanager
def _temp_files_in(folder):
    """Every temp file and folder made while the notebooks run goes into `folder`, inside the
    report's own temp folder, which is removed however the report ends: the kernels' (they
    inherit TMPDIR; a kernel its client kills on SIGTERM runs no clean-up of its own, and
    left its DuckDB spill folder in /tmp) and the kernel client's here (tempfile.tempdir)."""
    os.makedirs(folder, exist_ok=True)
    saved_env, saved_dir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = str(folder), str(folder)
    try:
        yield
    finally:
        tempfile.tempdir = saved_dir
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env


def build_report(dataset, output, compare=None, baseline=None, runs=(), labels=(), keep_dir=None,
                 progress=None, engine=None, cell_bar=False, steps=None):
    """Execute overview.ipynb (and compare.ipynb with `compare`) and write `output` (HTML).

    steps: the progress of the comparison computed here before the notebooks run (its
    analyses and the runs whose derived tables it builds: Dataset.compare's progress);
    closed, when it has a close(), before the first notebook starts.

    engine: an EngineSpec (or "duckdb"/"spark"), handed to the notebooks as
    parameters; their kernels start their own Spark session.
    """
    import kmemscope
    from kmemscope.api import EngineSpec

    engine = EngineSpec.of(engine)
    _need_report_extra()
    dataset = os.path.abspath(dataset)
    from kmemscope.api import dataset_handle, shared_with_children

    ref = dataset_handle(dataset)
    ds = kmemscope.open(ref)                      # a missing, empty or foreign dataset: one line
    chosen = ds.run_ids(list(runs) or None, list(labels) or None)
    if compare:
        # unknown label: one line, before any notebook runs (on DuckDB: one summary query)
        sides = ds.compare(compare, baseline or None, run=chosen, progress=steps).sides
        if hasattr(steps, "close"):
            steps.close()           # its line goes before the notebooks' own progress
        if progress:
            progress(f"comparing {printable(compare)}: "
                     + ", ".join(f"{printable(s)} ({_runs(len(r))})" for s, r in sides.runs.items()))
    params = {"dataset": dataset, "runs": list(runs), "labels": list(labels), **engine.params()}
    if progress:
        progress(f"{_runs(len(chosen))} of {printable(dataset)}")
    # removed however the report ends: a SIGKILLed report's by the next (common/scratch.py)
    with ScratchFolder("kmemscope-report-") as tmp, \
            _temp_files_in(Path(tmp) / "tmp"), shared_with_children(ref):
        # the notebooks' kernels read the state listed here, whatever a parse commits now
        workdir = keep_dir or tmp
        os.makedirs(workdir, exist_ok=True)
        executed = []
        if compare:
            executed.append(execute("compare.ipynb", {**params, "compare": compare,
                                                      "baseline": baseline or ""}, workdir, progress,
                                    cell_bar))
        executed.append(execute("overview.ipynb", {**params, "compare": compare or "",
                                                   "baseline": baseline or ""},
                                workdir, progress, cell_bar))
    title = f"kmemscope report: {os.path.basename(dataset.rstrip('/'))}"
    html = with_contents(to_html(merge(executed, compared=bool(compare)), title))
    out = Path(output)
    # a reader never sees half a report; a planted link is never written through
    write_file(out, html)
    if progress:
        progress(f"wrote {printable(str(out))} ({len(html) / 1e6:.1f} MB)")
    return out
