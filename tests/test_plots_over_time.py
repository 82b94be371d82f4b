"""plots.over_time on captures without vmstat samples: the panels come from the trace, and its
text never calls a panel zero that nothing measured.

Data: the trace.dat of two real captures of examples/ab-defrag-mode-cost, parsed bare (one a
side). Oracle: the same captures' own vmstat samples (procfs/vmstat, read in plain Python):
per run, the compaction successes and failures the figure draws from the trace add up to
vmstat's compact_success and compact_fail increases.
"""
import numpy as np
import pytest
from capture_helpers import vmstat_samples
from conftest import EXAMPLES
from kmrun import kmemscope as km

import kmemscope
import requirements
from kmemscope import plots

SET = EXAMPLES / "ab-defrag-mode-cost"
RUNS = {"a": "run1-defrag0", "b": "run1-defrag1"}


@pytest.fixture(scope="module")
def bareds(tmp_path_factory):
    if not (SET / "run1-defrag0").is_dir():
        requirements.skip("setup", f"the committed example {SET} is missing")
    ds = tmp_path_factory.mktemp("overtime") / "ds"
    for side, run in RUNS.items():
        km("parse", "-q", SET / run / "trace.dat", "-o", ds, "--label", f"kernel={side}")
    return ds


def _vmstat_delta(run, name):
    samples = vmstat_samples(SET / run / "procfs" / "vmstat")
    return samples[-1][1][name] - samples[0][1][name]


def test_bare_captures_draw_compaction_over_time_from_the_trace(bareds):
    with kmemscope.open(bareds) as ds:
        fig = plots.over_time(ds, by="kernel")
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
    for counter, word in (("compact_success", "successes"), ("compact_fail", "failures")):
        (title,) = [t for t in panels if t.startswith(f"compaction {word} per second")]
        assert "the trace's direct compactions" in title
        drawn = sorted(round(float(np.nansum(line.get_ydata()))) for line in panels[title].get_lines())
        assert drawn == sorted(_vmstat_delta(run, counter) for run in RUNS.values()), counter
    assert any(t.startswith("THP fault success %") for t in panels)
    # nothing the runs did is called zero
    assert not any("compaction" in note for note in fig.notes if note and "Zero" in note)


def test_a_bare_trace_s_compaction_is_drawn_not_called_zero(tmp_path):
    """memory-pressure's trace alone (no samples): its direct compactions are drawn from the
    trace, and no note calls the compaction panels zero (before, with no vmstat samples to
    read, the note said "Zero on every run" beside the report's own compaction figures)."""
    ds = tmp_path / "ds"
    km("parse", "-q", EXAMPLES / "memory-pressure" / "trace.dat", "-o", ds)
    with kmemscope.open(ds) as opened:
        fig = plots.over_time(opened)
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert any(t.startswith("compaction successes per second") for t in titles)
    assert not any(note and "compaction" in note for note in fig.notes)
