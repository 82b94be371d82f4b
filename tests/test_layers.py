"""Imports run one way (docs/architecture.md): each layer uses only the layers below it.

    capture                      nothing of the rest (it runs alone on traced hosts)
    dataset                      the dataset layer: format, storage, commit, derived cache
    parsers, queries             the dataset layer (parsers may read capture's formats); never each other
    api                          kmemscope.api, .operations, .tables, .comparison_text, .perfetto_export:
                                 parsers and queries
    cli, notebooks               the API; the command line also runs capture's recorder and the report

Every import statement counts, also those inside functions (kmemscope imports
lazily to keep the command line quick). The package root, errors and version are
below everything. Each layer is one folder of the repository (`dataset/` is
kmemscope.dataset, `kmemscope/` the API), and no module reaches itself again
through its imports: no circles, inside a layer either.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"kmemscope": "kmemscope", "dataset": "kmemscope.dataset", "capture": "kmemscope.capture",
           "parsers": "kmemscope.parsers",
           "queries": "kmemscope.queries", "notebooks": "kmemscope.notebooks", "cli": "kmemscope.cli"}
API_MODULES = {"kmemscope.api", "kmemscope.operations", "kmemscope.tables", "kmemscope.comparison_text",
               "kmemscope.perfetto_export"}
BASE = {"root"}
ALLOWED = {
    "root": BASE,
    "capture": BASE | {"capture"},
    "dataset": BASE | {"dataset"},
    "parsers": BASE | {"dataset", "parsers", "capture"},
    "queries": BASE | {"dataset", "queries"},
    "api": BASE | {"dataset", "parsers", "queries", "api"},
    "notebooks": BASE | {"api", "notebooks"},
    "cli": BASE | {"api", "cli", "notebooks", "capture"},
}
# The package root's lazy attributes (kmemscope.open, ...) and `python -m kmemscope` are entry points.
ENTRY_POINTS = {"kmemscope": {"api"}, "kmemscope.__main__": {"cli"}}


def layer(module):
    parts = module.split(".")
    if parts[0] != "kmemscope":
        return None
    if module in API_MODULES:
        return "api"
    if len(parts) == 1 or parts[1] in ("errors", "version", "__main__"):
        return "root"
    if parts[1] in ("capture", "dataset", "parsers", "queries", "notebooks", "cli"):
        return parts[1]
    return "root"


def modules():
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            name = ".".join([package, *rel.parts])
            yield (name[: -len(".__init__")] if name.endswith(".__init__") else name), path


def imported(name, path):
    """The kmemscope modules `path` imports (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                # `from kmemscope import api` names a module; `from kmemscope import __version__` does not
                yield (full if _is_module(full) else base), node.lineno


def _is_module(dotted):
    parts = dotted.split(".")
    if parts[0] != "kmemscope":
        return False
    if len(parts) >= 2 and parts[1] in ("capture", "dataset", "parsers", "queries", "notebooks", "cli"):
        folder = ROOT / parts[1] / Path(*parts[2:]) if len(parts) > 2 else ROOT / parts[1]
    else:
        folder = ROOT / "kmemscope" / Path(*parts[1:]) if len(parts) > 1 else ROOT / "kmemscope"
    return folder.with_suffix(".py").is_file() or (folder / "__init__.py").is_file()


ALL = list(modules())


def test_the_walk_sees_every_layer():
    layers = {layer(name) for name, _ in ALL}
    assert layers == {"root", "capture", "dataset", "parsers", "queries", "api", "notebooks", "cli"}


@pytest.mark.parametrize("name,path", ALL, ids=[n for n, _ in ALL])
def test_imports_run_one_way(name, path):
    mine = layer(name)
    allowed = ALLOWED[mine] | ENTRY_POINTS.get(name, set())
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {target} ({layer(target)})"
             for target, line in imported(name, path)
             if layer(target) is not None and layer(target) not in allowed]
    assert not wrong, f"{name} ({mine}) may use {sorted(allowed)}:\n" + "\n".join(wrong)


def test_the_check_catches_an_upward_import(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("def f():\n    from kmemscope.cli.output import write_result\n")
    assert [t for t, _ in imported("kmemscope.queries.x", bad)] == ["kmemscope.cli.output"]
    assert layer("kmemscope.cli.output") not in ALLOWED["queries"]


def test_every_layer_is_a_folder_of_its_own():
    """The tree shows the plan: each layer's modules live in the layer's own folder."""
    for name, path in ALL:
        folder = path.relative_to(ROOT).parts[0]
        want = {"root": "kmemscope", "api": "kmemscope"}.get(layer(name), layer(name))
        assert folder == want, f"{path.relative_to(ROOT)} is {layer(name)} code in {folder}/"
    for folder, package in FOLDERS.items():
        assert (ROOT / folder / "__init__.py").is_file(), f"{folder}/ has no __init__.py"


def import_graph():
    """{module: {module it imports}} over every import statement of the package."""
    names = {name for name, _ in ALL}
    return {name: {t for t, _ in imported(name, path) if t in names and t != name}
            for name, path in ALL}


def circles(graph):
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, "import circles (inside functions count):\n" + "\n".join(
        " <-> ".join(group) for group in found)


def test_the_check_catches_a_circle_through_a_function(tmp_path):
    # the circle this layer once had: commit imported run_metrics, which imported commit in a function
    commit, metrics = tmp_path / "commit.py", tmp_path / "run_metrics.py"
    commit.write_text("from kmemscope.dataset import run_metrics\n")
    metrics.write_text("def f():\n    from kmemscope.dataset.commit import update_digests\n")
    graph = {"kmemscope.dataset.commit": {t for t, _ in imported("kmemscope.dataset.commit", commit)},
             "kmemscope.dataset.run_metrics": {t for t, _ in imported("kmemscope.dataset.run_metrics",
                                                                     metrics)}}
    assert circles(graph) == [["kmemscope.dataset.commit", "kmemscope.dataset.run_metrics"]]
