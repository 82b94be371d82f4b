"""Each kernel rule is written in exactly one place (docs/architecture.md, the rules table).

A rule copied into a second file drifts from the first: this test greps the
project's SQL and Python (every folder of setup.cfg's package_dir, and tools/;
tests/project.py) for the text each rule cannot be written without, and finds
it in its one home. benchmarks/ is left out: its SQL times DuckDB on literals,
it states no rule. A new copy fails here with the file it is in; the fix is to
use the home's view or macro (or, outside an analysis, sql_lib.definition).
"""
import re

import pytest

from project import ROOT, code_files

# rule -> (the text that writes it, the one file that may hold it)
RULES = {
    "kcompactd or direct: who compacted": (r"'kcompactd%'", "queries/lib/threads.sql"),
    "kswapd or direct: who reclaimed": (r"'kswapd%'", "queries/lib/threads.sql"),
    "begin/end pairing of a task's events": (r"is_begin\s+DESC", "queries/lib/pairing.sql"),
    "a failed allocation's pfn (-1UL, 64 and 32 bits)": (r"18446744073709551615|4294967295",
                                                        "queries/lib/allocs.sql"),
    "the class under the era applied": (r"THEN\s+(\w+\.)?alloc_class_era_[ab]\b",
                                        "queries/lib/allocs.sql"),
    "the era applied: the forced one, else the run's": (r"nullif\([^)]*'auto'\)|=\s*'auto'\b",
                                                        "queries/lib/allocs.sql"),
    "a rate from vmstat where sampled, else the trace's": (
        r"coalesce\(\s*(\w+\.)?vmstat_pct\s*,\s*(\w+\.)?trace_pct\s*\)", "queries/lib/vmstat.sql"),
    "stacks bracket their events per CPU": (r"PARTITION\s+BY\s+cpu,\s*level",
                                            "queries/derived_tables.py"),
    "a stack whose innermost frame is another event's": (
        r"trace_event_raw_event_\|ftrace_raw_event_", "queries/derived_tables.py"),
}


def _texts():
    for path in code_files((".py", ".sql", ".ipynb"), tools=False):
        yield path, path.read_text()
    for path in code_files((".py",)):
        if path.parts[len(ROOT.parts)] == "tools":
            yield path, path.read_text()


def homes(pattern, texts):
    """The files (relative to the repository) whose text matches `pattern`."""
    return sorted(str(p.relative_to(ROOT)) for p, text in texts if re.search(pattern, text))


def test_the_grep_finds_a_copied_rule(tmp_path):
    """The search itself: a second copy is found, and so is the home."""
    texts = [(ROOT / "queries/lib/threads.sql", "CASE WHEN comm LIKE 'kcompactd%' THEN"),
             (ROOT / "queries/stalls.sql", "WHERE comm NOT LIKE 'kcompactd%'"),
             (ROOT / "queries/pcp.sql", "SELECT 1")]
    assert homes(RULES["kcompactd or direct: who compacted"][0], texts) == [
        "queries/lib/threads.sql", "queries/stalls.sql"]


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_kernel_rule_has_one_home(rule):
    pattern, home = RULES[rule]
    assert homes(pattern, list(_texts())) == [home], rule


def test_the_walk_reads_every_layer_and_the_notebooks():
    seen = {p.relative_to(ROOT).parts[0] for p, _ in _texts()}
    assert {"common", "dataset", "parsers", "queries", "kmemscope", "cli", "notebooks", "capture",
            "tools"} <= seen, seen


def test_the_dataset_layer_derives_nothing_itself():
    """dataset/derived.py caches what the query layer's families build: it names no event and
    writes no pairing of its own."""
    text = (ROOT / "dataset/derived.py").read_text()
    assert not re.findall(r"\bmm_\w+|\bkernel_stack\b|\bOVER\s*\(|\bWINDOW\b", text)


# The first-look examples teach the view that applies the rule, not the rule's constant.
TEACHING = ("README.md", "docs/index.md", "docs/parse.md", "Makefile")


@pytest.mark.parametrize("name", TEACHING)
def test_the_examples_teach_page_allocs_not_the_failed_pfn(name):
    text = (ROOT / name).read_text()
    sql = [line for line in text.splitlines() if "kmemscope sql" in line or "sql $(" in line]
    assert sql, f"{name}: no SQL example left"
    assert not [line for line in sql if re.search(RULES[
        "a failed allocation's pfn (-1UL, 64 and 32 bits)"][0], line)], name
    if name != "Makefile":
        assert any("page_allocs" in line for line in sql), name
