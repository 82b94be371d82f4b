#!/usr/bin/env python3
"""Write the generated parts of the documentation from the code they describe.

    docs/cli.md        every verb of the click command tree (groups included) and its --help
    docs/analyses.md   every analysis of queries/*.sql: question, parameters, sections,
                       columns with units, caveats (queries/catalog.py reads the headers)
    docs/eras.md       queries/KERNEL-ERAS.md, with an anchor per section
    docs/dataset-format.md   the SQL modules of queries/lib/: each one's views and their columns
                       with units, from the comments above their CREATE statements (sql_lib.py)
    docs/plots.md      every figure of kmemscope.plots: signature, docstring, its picture
                       (tools/gen_plots.py draws the pictures from the examples)

Each page is written by hand around one generated region:

    <!-- BEGIN GENERATED: NAME (tools/gen_docs.py writes this part: edit the code, not this) -->
    ...
    <!-- END GENERATED: NAME -->

and only that region is rewritten. Nothing is listed by hand here: a new verb, option,
analysis, section or parameter appears on the next run.

    .venv/bin/python tools/gen_docs.py            rewrite the regions
    .venv/bin/python tools/gen_docs.py --check    exit 1, naming each stale page

Development only: nothing in kmemscope imports it (tests/test_docs.py and `make docs` run it).
"""
import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 100          # help text is wrapped at this width, whatever the terminal

BEGIN = "<!-- BEGIN GENERATED: {name} (tools/gen_docs.py writes this part: edit the code, not this) -->"
END = "<!-- END GENERATED: {name} -->"


# ---------------------------------------------------------------- command line

def walk_commands(command=None, path=("kmemscope",), parent=None):
    """[(path, click.Command, click.Context)] of the whole tree, the root first, in click's order."""
    import click

    from kmemscope.cli.verbs import cli

    command = command or cli
    settings = dict(command.context_settings, terminal_width=WIDTH, max_content_width=WIDTH)
    ctx = click.Context(command, info_name=path[-1], parent=parent, **settings)
    out = [(path, command, ctx)]
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            out += walk_commands(sub, path + (name,), ctx)
    return out


def parses_own_arguments(command, ctx):
    """A verb that hands its arguments to a parser of its own (`record`: argparse)."""
    import click

    return command.get_help_option(ctx) is None and any(
        isinstance(p, click.Argument) and p.type is click.UNPROCESSED for p in command.params)


def command_help(path, command, ctx):
    """The text `PATH --help` prints, at WIDTH columns."""
    if parses_own_arguments(command, ctx):
        env = dict(os.environ, COLUMNS=str(WIDTH), LC_ALL="C.UTF-8")
        proc = subprocess.run([sys.executable, "-m", "kmemscope", *path[1:], "--help"],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
        if proc.returncode:
            raise SystemExit(f"`{' '.join(path)} --help` failed: {proc.stderr.strip()}")
        return proc.stdout.rstrip() + "\n"
    return command.get_help(ctx).rstrip() + "\n"


def anchor(path):
    return "-".join(path[1:]) or "kmemscope"


def cli_reference():
    rows, sections = [], []
    for path, command, ctx in walk_commands():
        name = " ".join(path)
        short = command.get_short_help_str(limit=200)
        if len(path) > 1:
            rows.append(f"| [`{name}`](#{anchor(path)}) | {_escape(short)} |")
        level = "#" * max(2, min(len(path), 4))
        sections += [f"{level} {name} {{#{anchor(path)}}}", "", "```text",
                     command_help(path, command, ctx).rstrip(), "```", ""]
    return "\n".join(["| verb | what it does |", "|---|---|", *rows, "", *sections])


# ---------------------------------------------------------------- analyses

_ERAS = re.compile(r"KERNEL-ERAS\.md (sections?) (\d+(?:(?:, | and )\d+)*)")


def era_links(text):
    """`KERNEL-ERAS.md section 3` -> links to the sections of the eras page."""
    def repl(m):
        numbers = re.findall(r"\d+", m.group(2))
        links = ", ".join(f"[{n}](eras.md#section-{n})" for n in numbers)
        return f"[kernel eras](eras.md) {m.group(1)} {links}"
    return _ERAS.sub(repl, text)


def _escape(text):
    """Prose from a .sql header as markdown: code spans kept, the rest taken literally."""
    parts = re.split(r"(`[^`]*`)", text)
    for i in range(0, len(parts), 2):
        s = parts[i]
        s = s.replace("\\", "\\\\")
        s = re.sub(r"([*_\[\]|#])", r"\\\1", s)
        parts[i] = s.replace("<", "&lt;").replace(">", "&gt;")
    return "".join(parts)


def prose(text):
    """Header prose: plain paragraphs become markdown; aligned ones stay as they are."""
    out = []
    for para in re.split(r"\n\s*\n", text.strip("\n")):
        lines = para.split("\n")
        if any(line[:1].isspace() for line in lines[1:]) or any("   " in line.strip() for line in lines):
            out += ["```text", para, "```", ""]
            cited = sorted({n for m in _ERAS.finditer(para) for n in re.findall(r"\d+", m.group(2))},
                           key=int)
            if cited:
                out.append("Kernel eras: " + ", ".join(f"[section {n}](eras.md#section-{n})"
                                                      for n in cited) + ".")
        else:
            out.append(era_links(_escape(" ".join(line.strip() for line in lines))))
        out.append("")
    return out


def _cell(text):
    return era_links(_escape(str(text))).replace("\n", " ")


def _param_allowed(p):
    if p["choices"]:
        return " \\| ".join(f"`{c}`" for c in p["choices"])
    if p["min"] is not None:
        return f"{p['min']:g} to {p['max']:g}" if p["type"] == "DOUBLE" else f"{p['min']} to {p['max']}"
    return {"FILE": "a file (at most 1 MiB)", "BOOLEAN": "true, false"}.get(p["type"], "any")


def _param_default(p):
    d = p["default"]
    if d is None:
        return "none"
    if isinstance(d, bool):
        return f"`{str(d).lower()}`"
    return f"`{d}`"


def query_anchor(query):
    return query.replace(".", "-")


def analyses_reference():
    from kmemscope.queries import catalog

    analyses = [catalog.describe_analysis(a) for a in catalog.load_analyses().values()]
    out = ["| analysis | question |", "|---|---|"]
    for doc in analyses:
        for sec in doc["sections"]:
            out.append(f"| [`{sec['query']}`](#{query_anchor(sec['query'])}) | "
                       f"{_cell(sec['description'])} |")
    out += ["", "### Units {#units}", "", "Every output column has one of these units.", "",
            "| unit | meaning |", "|---|---|"]
    out += [f"| `{unit}` | {_cell(meaning)} |" for unit, meaning in catalog.UNITS.items()]
    out.append("")
    for doc in analyses:
        out += [f"### {doc['name']} {{#{doc['name']}}}", "",
                f"**{_cell(doc['description'])}** (`{doc['path']}`)", ""]
        if doc["text"]:
            out += prose(doc["text"])
        if doc["parameters"]:
            out += ["Parameters (`--param NAME=VALUE`, or keywords of `ds.query()`):", "",
                    "| parameter | type | default | allowed | description |", "|---|---|---|---|---|"]
            out += [f"| `{p['name']}` | {p['type'].lower()} | {_param_default(p)} | "
                    f"{_param_allowed(p)} | {_cell(p['description'])} |" for p in doc["parameters"]]
            out.append("")
        for sec in doc["sections"]:
            sid = query_anchor(sec["query"]) if sec["query"] != doc["name"] else \
                f"{doc['name']}-{sec['section'] or 'rows'}"
            out += [f"#### {sec['query']} {{#{sid}}}", "",
                    _cell(sec["description"]), ""]
            needs = [("needs", sec["requires"]), ("needs one of", sec["any_of"]),
                     ("uses if present", sec["optional"]), ("derived tables", sec["derived"])]
            for label, tables in needs:
                if tables:
                    out.append(f"- {label}: " + ", ".join(f"`{t}`" for t in tables))
            if sec["modules"]:
                out.append("- SQL modules: " + ", ".join(
                    f"[`{m}`](dataset-format.md#{module_anchor(m)})" for m in sec["modules"]))
            if any(t for _, t in needs) or sec["modules"]:
                out.append("")
            if sec["columns"] is None:
                out += ["(columns not documented)", ""]
            else:
                out += ["| column | unit | description |", "|---|---|---|"]
                out += [f"| `{c['name']}` | `{c['unit']}` | {_cell(c['description'])} |"
                        for c in sec["columns"]]
                out.append("")
            if sec["notes"]:
                out += prose(sec["notes"])
        if doc["caveats"]:
            out += prose(doc["caveats"])
        out += [f"Run it: `kmemscope query {doc['sections'][0]['query']} DATASET "
                "[--run ID | --label K=V] [--param NAME=VALUE]`", ""]
    return "\n".join(out)


# ---------------------------------------------------------------- SQL modules

def module_anchor(name):
    return f"lib-{name}"


def modules_reference():
    from kmemscope.queries import catalog, sql_lib

    mods = list(sql_lib.modules().values())
    users = {m.name: [] for m in mods}
    for a in catalog.load_analyses().values():
        for name in dict.fromkeys(n for sec in a.sections for n in a.modules(sec)):
            users[name].append(a.name)
    out = ["| module | views | runs before (itself or through a module) |", "|---|---|---|"]
    out += [f"| [`{m.name}`](#{module_anchor(m.name)}) | "
            + (", ".join(f"`{v}`" for v in m.views) or "(internal helpers only)") + " | "
            + (", ".join(f"[`{u}`](analyses.md#{u})" for u in users[m.name]) or "(none)") + " |"
            for m in mods]
    out.append("")
    for m in mods:
        out += [f"### lib/{m.name} {{#{module_anchor(m.name)}}}", "",
                f"{_cell(m.description[:1].upper() + m.description[1:])} (`queries/lib/{m.name}.sql`)",
                ""]
        if m.includes:
            out.append("- includes: " + ", ".join(f"[`{r}`](#{module_anchor(r)})" for r in m.includes))
        if m.derived:
            out.append("- builds on derived tables: " + ", ".join(f"`{t}`" for t in m.derived)
                       + " (its views exist where an analysis includes it, not in ad-hoc SQL)")
        if m.includes or m.derived:
            out.append("")
        for view in m.docs:
            out += [f"#### {view.name} {{#lib-{view.name.replace('_', '-')}}}", ""]
            out += prose(view.doc)
            out += ["| column | unit | description |", "|---|---|---|"]
            out += [f"| `{c.name}` | `{c.unit}` | {_cell(c.doc)} |" for c in view.columns]
            out.append("")
    return "\n".join(out)


# ---------------------------------------------------------------- kernel eras

def eras_reference():
    text = (ROOT / "queries" / "KERNEL-ERAS.md").read_text()
    out = []
    for line in text.split("\n"):
        if line.startswith("# "):
            continue            # the page has its own title
        m = re.match(r"## (\d+)\. (.*)", line)
        if m:
            line = f"## {m.group(1)}. {m.group(2)} {{#section-{m.group(1)}}}"
        out.append(line)
    return "\n".join(out).strip("\n")


# ---------------------------------------------------------------- pages

def figures_reference():
    import gen_plots      # tools/gen_plots.py, beside this file: it also draws the pictures

    return gen_plots.reference()


PAGES = {
    "docs/cli.md": ("cli", cli_reference),
    "docs/analyses.md": ("analyses", analyses_reference),
    "docs/eras.md": ("eras", eras_reference),
    "docs/dataset-format.md": ("sql-modules", modules_reference),
    "docs/plots.md": ("figures", figures_reference),
}


def render(page, name, generate):
    """The page's text with its generated region replaced."""
    path = ROOT / page
    text = path.read_text()
    begin, end = BEGIN.format(name=name), END.format(name=name)
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise SystemExit(f"{page}: needs one `{begin}` line and one `{end}` line after it")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n\n{generate().strip()}\n\n{end}{tail}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 naming each page that is not up to date")
    args = ap.parse_args(argv)
    stale = []
    for page, (name, generate) in PAGES.items():
        new = render(page, name, generate)
        if (ROOT / page).read_text() == new:
            continue
        if args.check:
            import difflib

            lines = list(difflib.unified_diff((ROOT / page).read_text().splitlines(), new.splitlines(),
                                              f"{page} (as committed)", "(from the code now)",
                                              lineterm="", n=1))
            stale.append((page, lines))
        else:
            (ROOT / page).write_text(new)
            print(f"wrote {page}")
    for page, lines in stale:
        print(f"{page} is stale: its generated part no longer matches the code "
              "(run .venv/bin/python tools/gen_docs.py)", file=sys.stderr)
        shown = lines[:40] + ([f"... ({len(lines) - 40} more diff lines)"] if len(lines) > 40 else [])
        print("\n".join(shown), file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
