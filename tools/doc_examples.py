#!/usr/bin/env python3
"""Run the examples that README.md and docs/*.md mark as checked, and compare their output.

A checked example is a fenced block right after a `<!-- check -->` comment:

    <!-- check: kmemscope parse -q examples/kmem-compaction -o ds -->
    ```
    $ kmemscope info ds
    runs (1)
    ...
    ```

Each block runs in a fresh temporary directory that holds `examples/` (a link to
the repository's example bundles) and `.venv` (a link to this Python's environment), after the comment's setup commands (bash; their
output is not shown), with this Python's `kmemscope` first on PATH. In a shell block
every `$ ` line is a command (it continues on the next lines while a quote is open or
a line ends in a backslash), and the lines up to the next command are what it printed,
stdout and stderr together. A block whose first line starts with `>>> ` is a Python
session, run statement by statement as the interactive interpreter does.

Only what truly varies between runs is normalised, in both the page and the run
(NORMALISE below): elapsed times and rates, and temporary paths.

    tools/doc_examples.py              check every marked example; exit 1 naming each that differs
    tools/doc_examples.py --update     write each example's fresh output into its page
    tools/doc_examples.py docs/parse.md --list

Development only: nothing in kmemscope imports it (tests/test_docs.py does).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", "docs/*.md"]
TIMEOUT = 300       # seconds for one block

CHECK = re.compile(r"^<!--\s*check(?::\s*(?P<setup>.*?))?\s*-->\s*$")
FENCE = re.compile(r"^(`{3,}|~{3,})")

# (pattern, replacement): what differs from one run to the next and nothing else.
NORMALISE = [
    (re.compile(r"in \d+(\.\d+)? s \(\d+(\.\d+)? M events/s\)"), "in <t> s (<r> M events/s)"),
    (re.compile(r"(built|done) in \d+(\.\d+)? s"), r"\1 in <t> s"),
    (re.compile(r"/tmp/kmemscope-derived-[\w]+"), "/tmp/kmemscope-derived-<tmp>"),
]


@dataclass
class Example:
    page: Path
    line: int                   # 1-based line of the block's first content line
    setup: str
    body: list                  # the block's lines, without the fences
    end: int                    # index of the closing fence line (0-based)
    python: bool = field(init=False)

    def __post_init__(self):
        self.python = bool(self.body) and self.body[0].startswith(">>> ")

    @property
    def where(self):
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages(paths=None):
    if paths:
        return [Path(p).resolve() for p in paths]
    out = []
    for pattern in PAGES:
        out += sorted(ROOT.glob(pattern))
    return out


def find_examples(page):
    """Every checked example of a markdown page."""
    lines = page.read_text().split("\n")
    found, i = [], 0
    while i < len(lines):
        m = CHECK.match(lines[i].strip())
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        fence = FENCE.match(lines[j]) if j < len(lines) else None
        if not fence:
            raise SystemExit(f"{page.relative_to(ROOT)}:{i + 1}: a check comment must be "
                             "followed by a fenced block")
        k = j + 1
        while k < len(lines) and not lines[k].startswith(fence.group(1)):
            k += 1
        found.append(Example(page, j + 2, (m.group("setup") or "").strip(), lines[j + 1:k], k))
        i = k + 1
    return found


# ---------------------------------------------------------------- shell blocks

def split_shell(body):
    """[(command, [expected output lines])] of a shell block."""
    out, i = [], 0
    while i < len(body):
        line = body[i]
        if not line.startswith("$ "):
            if out:
                out[-1][1].append(line)
            elif line.strip():
                raise ValueError(f"output before the first `$ ` command: {line!r}")
            i += 1
            continue
        command = line[2:]
        while not _complete(command) and i + 1 < len(body):
            i += 1
            command += "\n" + body[i]
        out.append((command, []))
        i += 1
    return out


def _complete(command):
    if command.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(command)
    except ValueError:
        return False
    return True


def _env():
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(LC_ALL="C.UTF-8", TZ="UTC", COLUMNS="80", PYTHONHASHSEED="0")
    env.pop("KMEMSCOPE_FAIL_ALLOC", None)
    return env


def _bash(command, cwd):
    proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=_env(), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=TIMEOUT)
    return proc.returncode, proc.stdout


def normalise(text, workdir=None):
    if workdir:
        text = text.replace(str(workdir) + "/", "").replace(str(workdir), ".")
    for pattern, repl in NORMALISE:
        text = pattern.sub(repl, text)
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


# ---------------------------------------------------------------- python blocks

_PY_RUNNER = r'''
import contextlib, io, json, sys, traceback
sources = json.load(sys.stdin)
namespace = {"__name__": "__main__"}
outputs = []
for source in sources:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            exec(compile(source, "<doc>", "single"), namespace)
        except Exception as exc:
            print("".join(traceback.format_exception_only(type(exc), exc)), end="")
    outputs.append(buf.getvalue())
json.dump(outputs, sys.__stdout__)
'''


def split_python(body):
    """[(source, [expected output lines], [source lines as written])] of a `>>>` block."""
    out = []
    for line in body:
        if line.startswith(">>> "):
            out.append([line[4:], [], [line]])
        elif (line.startswith("... ") or line == "...") and out and not out[-1][1]:
            out[-1][0] += "\n" + line[4:]
            out[-1][2].append(line)
        elif out:
            out[-1][1].append(line)
    return [(src + "\n", expected, written) for src, expected, written in out]


def _run_python(sources, cwd):
    proc = subprocess.run([sys.executable, "-c", _PY_RUNNER], cwd=cwd, env=_env(),
                          input=json.dumps(sources), capture_output=True, text=True,
                          timeout=TIMEOUT)
    if proc.returncode:
        raise RuntimeError(f"python session failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


# ---------------------------------------------------------------- running

class Workdirs:
    """Fresh directories for examples, each a copy of its setup's state (made once per setup)."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="kmemscope-docs-"))
        self.prepared = {}

    def new(self, setup):
        base = self.prepared.get(setup)
        if base is None:
            base = self.root / f"setup-{len(self.prepared)}"
            base.mkdir()
            (base / "examples").symlink_to(ROOT / "examples")
            # `.venv/bin/python` in an example is the Python running this check.
            (base / ".venv").symlink_to(Path(sys.executable).parent.parent)
            if setup:
                status, output = _bash(setup, base)
                if status:
                    raise RuntimeError(f"setup `{setup}` failed ({status}): {output.strip()[-2000:]}")
            self.prepared[setup] = base
        target = Path(tempfile.mkdtemp(prefix="ex-", dir=self.root))
        shutil.copytree(base, target, symlinks=True, dirs_exist_ok=True)
        return target

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)


def run_example(example, workdirs):
    """(expected lines, actual lines, fresh body lines): the block as written, its output now."""
    cwd = workdirs.new(example.setup)
    try:
        expected, actual, fresh = [], [], []
        if example.python:
            steps = split_python(example.body)
            outputs = _run_python([s[0] for s in steps], cwd)
            for (_, want, written), got in zip(steps, outputs):
                expected += [">>> " + written[0][4:]] + written[1:] + want
                got_lines = normalise(got, cwd)
                actual += [">>> " + written[0][4:]] + written[1:] + got_lines
                fresh += written + [line.replace(str(cwd), ".") for line in got.rstrip("\n").split("\n") if got.strip()]
        else:
            for command, want in split_shell(example.body):
                _, output = _bash(command, cwd)
                shown = ["$ " + command.split("\n")[0]] + command.split("\n")[1:]
                # A blank line after a command's output only separates it from the next.
                gap = bool(want) and not want[-1].strip()
                expected += shown + normalise("\n".join(want))
                actual += shown + normalise(output, cwd)
                raw = output.replace(str(cwd) + "/", "").replace(str(cwd), ".").rstrip("\n")
                fresh += shown + ([line.rstrip() for line in raw.split("\n")] if raw else [])
                fresh += [""] if gap else []
        return normalise("\n".join(expected)), actual, fresh
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def keep_unchanged(page_lines, fresh):
    """`fresh`, with the page's own text wherever the two agree once normalised: an update
    rewrites what changed, not the times measured when the page was written."""
    import difflib

    norm = lambda lines: ["\n".join(normalise(line)) for line in lines]
    out = []
    matcher = difflib.SequenceMatcher(None, norm(page_lines), norm(fresh), autojunk=False)
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        out += page_lines[a1:a2] if op == "equal" else fresh[b1:b2]
    return out


def diff(example, expected, actual):
    import difflib

    return "".join(difflib.unified_diff([line + "\n" for line in expected],
                                        [line + "\n" for line in actual],
                                        f"{example.where} (the page)", "(run now)", n=2))


def check(paths=None, update=False, log=print):
    """Run every marked example; returns the list of failure texts (empty: all match)."""
    failures = []
    workdirs = Workdirs()
    try:
        for page in pages(paths):
            examples = find_examples(page)
            if not examples:
                continue
            lines = page.read_text().split("\n")
            changed = False
            # From the last block up, so that the line numbers of earlier ones hold.
            for example in reversed(examples):
                try:
                    expected, actual, fresh = run_example(example, workdirs)
                except (RuntimeError, ValueError, OSError, shutil.Error,
                        subprocess.TimeoutExpired) as exc:
                    failures.append(f"{example.where}: {exc}")
                    continue
                if expected == actual:
                    continue
                if update:
                    start = example.line - 1
                    lines[start:example.end] = keep_unchanged(lines[start:example.end], fresh)
                    changed = True
                    log(f"{example.where}: updated")
                else:
                    failures.append(f"{example.where}: the output differs\n"
                                    + diff(example, expected, actual))
            if changed:
                page.write_text("\n".join(lines))
    finally:
        workdirs.close()
    return failures


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pages", nargs="*", help="markdown files (default: README.md docs/*.md)")
    ap.add_argument("--update", action="store_true",
                    help="write each differing example's fresh output into its page")
    ap.add_argument("--list", action="store_true", help="list the checked examples and exit")
    args = ap.parse_args(argv)
    if args.list:
        for page in pages(args.pages):
            for example in find_examples(page):
                print(f"{example.where}: {example.body[0] if example.body else ''}")
        return 0
    failures = check(args.pages, update=args.update)
    for text in failures:
        print(text, file=sys.stderr)
    if failures:
        print(f"{len(failures)} example(s) differ from their pages "
              "(tools/doc_examples.py --update rewrites them after a change you meant)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
