"""Imports run one way (docs/architecture.md): each floor uses only the floors below it.

    common                       the leaves (errors, version, text): nothing of kmemscope
    capture                      the leaves only (it runs alone on traced hosts)
    dataset                      the dataset layer: format, storage, commit, derived cache
    parsers, queries             the dataset layer (parsers may read capture's formats); never each other
    api                          the package root (kmemscope, kmemscope.api, ...): parsers and queries
    cli, notebooks               the API; the command line also runs capture's recorder and the
                                 report and Perfetto export of notebooks/

Every import statement counts, also those inside functions (kmemscope imports
lazily to keep the command line quick). Each layer is one folder of the
repository, and the folders are read from setup.cfg's package_dir, so a folder
added or moved there is walked here without editing this file. No module
reaches itself again through its imports: no circles, inside a layer either.
"""
import ast
from pathlib import Path

import pytest

from project import ROOT, package_folders

FOLDERS = package_folders()
# The package root holds the public API and nothing else.
API_MODULES = {"kmemscope", "kmemscope.__main__", "kmemscope.api", "kmemscope.render",
               "kmemscope.render.formats", "kmemscope.render.tables", "kmemscope.render.writers",
               "kmemscope.render.comparison", "kmemscope.render.comparison_html",
               "kmemscope.render.verdicts", "kmemscope.render.perfetto", "kmemscope.plots",
               "kmemscope.plots.figure", "kmemscope.plots.scope", "kmemscope.plots.style",
               "kmemscope.plots.runs", "kmemscope.plots.sides", "kmemscope.plots.timeseries",
               "kmemscope.plots.origins", "kmemscope.plots.cost"}
LAYERS = ("common", "capture", "dataset", "parsers", "queries", "notebooks", "cli")
ALLOWED = {
    "common": set(),
    "capture": {"common", "capture"},
    "dataset": {"common", "dataset"},
    "parsers": {"common", "dataset", "parsers", "capture"},
    "queries": {"common", "dataset", "queries"},
    "api": {"common", "dataset", "parsers", "queries", "api"},
    "notebooks": {"common", "api", "notebooks"},
    "cli": {"common", "api", "cli", "notebooks", "capture"},
}
# `python -m kmemscope` is an entry point into the command line.
ENTRY_POINTS = {"kmemscope.__main__": {"cli"}}


def layer(module):
    parts = module.split(".")
    if parts[0] != "kmemscope":
        return None
    if len(parts) >= 2 and parts[1] in LAYERS:
        return parts[1]
    return "api"


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


PACKAGES = {package: folder for folder, package in FOLDERS.items()}


def _is_module(dotted):
    """True when `dotted` names a module or package of the project (through package_dir)."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):          # the longest package that holds it
        folder = PACKAGES.get(".".join(parts[:n]))
        if folder is not None:
            path = ROOT / folder / Path(*parts[n:]) if parts[n:] else ROOT / folder
            return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()
    return False


ALL = list(modules())


def test_the_walk_sees_every_layer():
    layers = {layer(name) for name, _ in ALL}
    assert layers == {"common", "capture", "dataset", "parsers", "queries", "api", "notebooks", "cli"}
    assert set(FOLDERS.values()) == {"kmemscope", *(f"kmemscope.{name}" for name in LAYERS)}


def test_the_package_root_holds_the_public_api_only():
    """Leaves, reports and exports live in folders of their own, not beside the API."""
    root = {name for name, path in ALL if (ROOT / "kmemscope") in path.parents}
    assert root == API_MODULES, f"not API, yet in kmemscope/: {sorted(root - API_MODULES)}"


def test_the_leaves_import_nothing_of_kmemscope():
    for name, path in ALL:
        if layer(name) == "common":
            mine = [f"{path.relative_to(ROOT)}:{line} imports {target}"
                    for target, line in imported(name, path) if target.startswith("kmemscope")]
            assert not mine, "\n".join(mine)


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
    bad.write_text("def f():\n    from kmemscope.render.writers import write_result\n")
    assert [t for t, _ in imported("kmemscope.queries.x", bad)] == ["kmemscope.render.writers"]
    assert layer("kmemscope.render.writers") not in ALLOWED["queries"]


def test_every_layer_is_a_folder_of_its_own():
    """The tree shows the plan: each layer's modules live in the layer's own folder."""
    for name, path in ALL:
        folder = path.relative_to(ROOT).parts[0]
        want = {"api": "kmemscope"}.get(layer(name), layer(name))
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


def private_names_used(path):
    """`from kmemscope... import _x` and `kmemscope_module._x` in `path` -> [(line, name)]."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kmemscope"):
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id in ("api", "kmemscope") and node.attr.startswith("_")
              and not node.attr.startswith("__")):
            out.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return out


def test_the_command_line_uses_only_public_api():
    """The command line is one client of the API among others: no private name of it."""
    used = [f"{path.relative_to(ROOT)}:{line} uses {what}"
            for name, path in ALL if layer(name) == "cli"
            for line, what in private_names_used(path)]
    assert not used, "\n".join(used)


def test_the_check_catches_a_private_name(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("def f():\n    from kmemscope.api import _secret\n    return api._other\n")
    assert private_names_used(bad) == [(2, "kmemscope.api._secret"), (3, "api._other")]
