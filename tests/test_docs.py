"""The documentation says what the code does: README.md and docs/ are checked against it.

- The generated parts (docs/cli.md from the click commands, docs/analyses.md from the .sql
  headers, docs/eras.md from queries/KERNEL-ERAS.md) are what tools/gen_docs.py writes now.
- Every verb and every option has help text, and an entry in the command-line reference;
  every analysis, section and parameter has one in the analyses reference.
- Every link between the pages (and from the README) reaches a page and an anchor that exist,
  and every page is in the site's navigation.
- Every example marked `<!-- check -->` prints, when run again on the example bundles, what
  the page shows (tools/doc_examples.py; only times and temporary paths are normalised).

The oracle for the references is the code's own objects (click's command tree, the argparse
parser of `record`, queries/catalog.py), read here apart from the generator's rendering.
"""
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import click
import pytest

from conftest import PROJECT_ROOT
from project import code_folders

sys.path.insert(0, str(PROJECT_ROOT / "tools"))
import doc_examples  # noqa: E402  (tools/ is development-only: not a package)
import gen_docs  # noqa: E402

DOCS = PROJECT_ROOT / "docs"
PAGES = [PROJECT_ROOT / "README.md", PROJECT_ROOT / "CHANGELOG.md"] + sorted(DOCS.glob("*.md"))


def test_generated_pages_are_current():
    proc = subprocess.run([sys.executable, str(PROJECT_ROOT / "tools" / "gen_docs.py"), "--check"],
                          capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_the_figures_page_shows_every_figure_and_its_picture():
    """docs/plots.md lists each figure of kmemscope.plots once, and every picture it shows and
    every example notebook's page is there (tools/gen_plots.py draws and renders them)."""
    from kmemscope import plots

    text = (DOCS / "plots.md").read_text()
    listed = re.findall(r"^### (\w+) \{#", text, re.M)
    assert listed == list(plots.FIGURES)
    proc = subprocess.run([sys.executable, str(PROJECT_ROOT / "tools" / "gen_plots.py"), "--check"],
                          capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    pages = sorted(p.stem for p in (DOCS / "examples").glob("*.md"))
    notebooks = sorted(p.stem for p in (PROJECT_ROOT / "notebooks" / "examples").glob("*.ipynb"))
    assert pages == notebooks
    nav = (PROJECT_ROOT / "mkdocs.yml").read_text()
    assert all(f"examples/{p}.md" in nav for p in pages)


# ---------------------------------------------------------------- the command line

def _section(text, anchor):
    """The part of a page from the heading with {#anchor} to the next heading of its level or above."""
    m = re.search(rf"^(#+) .*\{{#{re.escape(anchor)}\}}\s*$", text, re.M)
    assert m, f"no heading with id {anchor!r}"
    level = len(m.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, m.end())
    return text[m.end():end.start() if end else len(text)]


COMMANDS = gen_docs.walk_commands()


@pytest.mark.parametrize("path,command,ctx", COMMANDS, ids=[" ".join(c[0]) for c in COMMANDS])
def test_every_verb_and_option_has_help_and_an_entry(path, command, ctx):
    section = _section((DOCS / "cli.md").read_text(), gen_docs.anchor(path))
    assert (command.help or command.short_help or "").strip(), f"{' '.join(path)} has no help text"
    if gen_docs.parses_own_arguments(command, ctx):
        return          # its own parser: the next test
    for param in command.params:
        if not isinstance(param, click.Option) or param.hidden:
            continue
        assert (param.help or "").strip(), f"{' '.join(path)} {param.opts[0]} has no help text"
        for opt in param.opts + param.secondary_opts:
            assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", section), \
                f"{' '.join(path)} {opt} is not in docs/cli.md"


def test_record_options_have_help_and_an_entry():
    """`record` parses its own arguments (argparse, so that it runs from a .pyz without click)."""
    import argparse

    from kmemscope.capture.command import build_parser

    section = _section((DOCS / "cli.md").read_text(), "record")
    for action in build_parser()._actions:
        if action.help == argparse.SUPPRESS or not action.option_strings:
            continue
        assert (action.help or "").strip(), f"record {action.option_strings[0]} has no help text"
        for opt in action.option_strings:
            assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", section), \
                f"record {opt} is not in docs/cli.md"


def test_every_analysis_section_and_parameter_has_an_entry():
    from kmemscope.queries import catalog

    text = (DOCS / "analyses.md").read_text()
    for analysis in catalog.load_analyses().values():
        part = _section(text, analysis.name)
        for param in analysis.params:
            assert f"`{param}`" in part, f"parameter {param} of {analysis.name} is not in docs/analyses.md"
        for sec in analysis.sections:
            query = analysis.query_name(sec)
            assert f"#### {query} {{#" in part, f"{query} is not in docs/analyses.md"
            for column in sec.columns or []:
                assert f"`{column.name}`" in part, f"column {column.name} of {query} is not documented"


# ---------------------------------------------------------------- links

def _slug(text):
    """Python-Markdown's toc slug (mkdocs' default): the heading's text without its markup."""
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[*_]{1,2}([^*_]+)[*_]{1,2}", r"\1", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _prose(text):
    """The page without its fenced blocks and code spans (links there are not links)."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "``", text)


def anchors(page):
    out, seen = set(), {}
    for m in re.finditer(r"^#{1,6} (.*?)\s*$", _prose(page.read_text()), re.M):
        heading = m.group(1)
        explicit = re.search(r"\{#([^}\s]+)\}$", heading)
        if explicit:
            out.add(explicit.group(1))
            continue
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}_{n}")
    return out


def _links(page):
    for m in re.finditer(r"\]\(([^)\s]+)\)", _prose(page.read_text())):
        target = m.group(1)
        if not re.match(r"[a-z]+:", target):
            yield target


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(PROJECT_ROOT)) for p in PAGES])
def test_links_reach_a_page_and_an_anchor(page):
    bad = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with that anchor in {dest.relative_to(PROJECT_ROOT)}")
        if page.parent == DOCS and path and not dest.is_relative_to(DOCS):
            bad.append(f"{target}: a docs page links outside docs/ (the site would lose it)")
    assert not bad, f"{page.relative_to(PROJECT_ROOT)}: broken links:\n" + "\n".join(bad)


def test_every_page_is_in_the_navigation():
    nav = re.findall(r":\s*([\w-]+\.md)\s*$", (PROJECT_ROOT / "mkdocs.yml").read_text(), re.M)
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    assert sorted(nav) == pages


# ---------------------------------------------------------------- examples

EXAMPLES = [e for page in PAGES for e in doc_examples.find_examples(page)]


@pytest.fixture(scope="module")
def workdirs():
    dirs = doc_examples.Workdirs()
    yield dirs
    dirs.close()


@pytest.mark.slow   # 30 pages' examples re-run: minutes of CPU
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.where for e in EXAMPLES])
def test_example_output_matches_the_page(example, workdirs):
    expected, actual, _ = doc_examples.run_example(example, workdirs)
    assert expected == actual, (
        f"{example.where}: the example's output changed (after a change you meant, "
        "`.venv/bin/python tools/doc_examples.py --update` rewrites it)\n"
        + doc_examples.diff(example, expected, actual))


def test_readme_is_short_and_has_the_two_commands():
    """The README is a front page: the rest, and the history of the figures, live elsewhere."""
    text = (PROJECT_ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert "make demo" in text and "make test" in text
    assert "## Comparing two kernels" in text


# ---------------------------------------------------------------- pointers in prose and code

# The repository's top-level folders: a code span or comment naming a path under one of them
# points at a file (or folder) that must exist. Globs and placeholders (NAME, <x>) are patterns.
POINTED_FOLDERS = (*code_folders(), "tests", "examples", "docs")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./*-]*\w)" % "|".join(POINTED_FOLDERS))
README_SECTION = re.compile(r'README,? "([^"]+)"')


# Files whose paths are not pointers: this check's own examples, and the type check's linked
# package tree (kmemscope/queries/... there is the installed package's layout).
NOT_POINTERS = {"tests/test_docs.py", "tests/test_types.py"}


def _sources():
    for folder in (*code_folders(), "tests"):
        for path in sorted((PROJECT_ROOT / folder).rglob("*")):
            if (path.suffix in (".py", ".sql", ".c", ".h") and ".venv" not in path.parts
                    and str(path.relative_to(PROJECT_ROOT)) not in NOT_POINTERS):
                yield path


def _pointer_problems(path, text):
    bad = []
    for m in PATH.finditer(text):
        target = m.group(1).rstrip(".")
        if any(ch in target for ch in "*<>") or re.search(r"[A-Z]{3,}", target):
            continue                      # a pattern or a placeholder, not a file
        if not (PROJECT_ROOT / target).exists() and not list(PROJECT_ROOT.glob(target + "*")):
            bad.append(f"{target}: no such file or folder")
    readme = anchors(PROJECT_ROOT / "README.md")
    titles = {m.group(1).strip() for m in re.finditer(r"^#+ (.*)$", (PROJECT_ROOT / "README.md")
                                                        .read_text(), re.M)}
    for m in README_SECTION.finditer(text):
        if m.group(1) not in titles and _slug(m.group(1)) not in readme:
            bad.append(f'README "{m.group(1)}": the README has no such section')
    return [f"{path.relative_to(PROJECT_ROOT)}: {b}" for b in bad]


def test_pointers_in_code_and_pages_reach_what_they_name():
    """A comment, docstring or page that sends the reader to a file or a README section
    names one that exists (paths in code spans and comments alike)."""
    bad = []
    for path in list(_sources()) + PAGES:
        bad += _pointer_problems(path, path.read_text(errors="replace"))
    assert not bad, "pointers to nothing:\n" + "\n".join(sorted(set(bad)))


def test_the_pointer_check_catches_a_missing_file_and_section():
    text = 'see dataset/nothere.py and (README, "The dataset"); queries/lib/*.sql is a pattern'
    found = _pointer_problems(PROJECT_ROOT / "x.py", text)
    assert any("dataset/nothere.py" in b for b in found)
    assert any('README "The dataset"' in b for b in found)
    assert not any("queries/lib" in b for b in found)


def test_the_license_file_is_the_license_setup_cfg_declares():
    """setup.cfg says GPL-2.0-only: LICENSE holds the GPL's version 2 text, no later version."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(PROJECT_ROOT / "setup.cfg")
    assert cfg["metadata"]["license"] == "GPL-2.0-only"
    text = (PROJECT_ROOT / "LICENSE").read_text()
    assert "GNU GENERAL PUBLIC LICENSE" in text and "Version 2, June 1991" in text
    assert "Version 3" not in text
