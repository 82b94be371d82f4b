"""The runs a figure draws, and the colours it gives them: a Dataset, a selection and the sides.

Every figure of kmemscope.plots reads its data through the public API only:
named analyses (`Dataset.query`) and the shared helper views (`Dataset.sql`
over run_facts, page_allocs, migratetype_names...). A figure whose analysis
needs a table that none of the selected runs holds, or returns no rows, is
drawn empty with a sentence saying so; every other error is raised.
"""
from dataclasses import dataclass, field
from typing import Any

from .figure import Missing, plural

NO_LABEL = "(no label)"
# What a missing table means to a reader: procfs tables come only with `kmemscope record`.
SAMPLES = {"vmstat": "vmstat samples", "buddyinfo": "buddyinfo samples", "zoneinfo": "zoneinfo samples",
           "pagetypeinfo_blocks": "pagetypeinfo samples", "pagetypeinfo_free": "pagetypeinfo samples",
           "psi_memory": "memory pressure (PSI) samples", "cpu_stat": "/proc/stat samples",
           "kthread_cpu": "kernel-thread CPU samples", "mthp_stats": "mTHP statistics samples"}


@dataclass
class Scope:
    ds: Any                                       # a kmemscope.Dataset
    runs: list = field(default_factory=list)      # run ids or prefixes; empty: all runs
    labels: list = field(default_factory=list)    # "k=v" filters
    by: str = ""              # a label whose values are the sides: a colour per side, else per run
    baseline: str = ""        # the side coloured first
    sides: list = field(default_factory=list)     # the sides' order (a comparison's); empty: baseline, then sorted
    _palette: object = field(default=None, init=False, repr=False, compare=False)
    _runs: object = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, ds, run=None, label=None, by=None, baseline=None, sides=None):
        """The scope of a public figure call: `run` ids or prefixes, `label` "k=v" filters."""
        runs = [run] if isinstance(run, str) else list(run or [])
        labels = [label] if isinstance(label, str) else list(label or [])
        return cls(ds, runs, labels, by or "", baseline or "", list(sides or []))

    def narrowed(self, runs):
        """The same dataset and colours over other runs."""
        out = Scope(self.ds, list(runs), [], self.by, self.baseline, self.sides)
        out._palette = self._palette
        return out

    # ---------------------------------------------------------------- colours and groups

    def groups(self):
        """{side: [run ids]} in side order; without `by`, a group per run named by run_names()."""
        return dict(self.palette().groups)

    def palette(self):
        """A colour per side (the order of `sides`, else baseline first, then sorted: as compare
        orders sides), a marker per run; without `by`, a colour per run."""
        from .style import Palette

        if self._palette is None:
            runs = self.query_runs()
            if self.by:
                groups: dict = {}
                for run, labels in zip(runs.run_id, runs.labels):
                    value = dict(labels or {}).get(self.by)
                    groups.setdefault(value if value is not None else NO_LABEL, []).append(run)
                given = [s for s in self.sides if s in groups]
                rest = sorted((g for g in groups if g not in given),
                              key=lambda v: (v != self.baseline, v == NO_LABEL, v))
                self._palette = Palette({v: groups[v] for v in given + rest})
            else:
                names = self.run_names()
                self._palette = Palette({names[r]: [r] for r in sorted(names)})
        return self._palette

    def use_palette(self, palette):
        self._palette = palette
        return self

    # ---------------------------------------------------------------- data

    def _where(self):
        return {"run": self.runs or None, "label": self.labels or None}

    def query(self, name, **params):
        """A named analysis as a DataFrame (labels as "k=v,..." text)."""
        df = self.ds.query(name, **self._where(), **params).df()
        if "labels" in df:
            df["labels"] = df["labels"].map(labels_text)
        return df

    def analysis(self, name, what, **params):
        """A named analysis that a figure needs rows of: Missing (with a sentence naming `what`)
        when the selected runs hold none of a table it requires or it returns no rows."""
        for section in self.ds.describe(name)["sections"]:
            lacking = [t for t in section["requires"] if not self.runs_with(t)]
            if section["any_of"] and not any(self.runs_with(t) for t in section["any_of"]):
                lacking.append(" or ".join(section["any_of"]))
            if lacking:
                named = list(dict.fromkeys(SAMPLES.get(t, f"{t} events") for t in lacking))
                bare = (" (a bare trace.dat has none: capture with kmemscope record)"
                        if any(t in SAMPLES for t in lacking) else "")
                raise Missing(f"No {' or '.join(named)} in these runs{bare}: no {what}.")
        df = self.query(name, **params)
        if df.empty:
            raise Missing(f"`{name}` returned no rows for the selected runs: no {what}.")
        return df

    def sql(self, text, params=None):
        """SQL over the selected runs' tables and the helper views; values bound from `params`."""
        return self.ds.sql(text, params, **self._where()).df()

    def query_runs(self):
        """One row per selected run: id, labels (a dict), host, kernel, seconds, events, lost."""
        if self._runs is None:
            self._runs = self.sql(
                "SELECT r.run_id, r.labels, r.host, r.kernel_release, "
                "round(f.duration_s, 2) AS seconds, r.events, r.lost_events "
                "FROM runs r JOIN run_facts f USING (run_id) ORDER BY r.run_id")
        return self._runs

    def run_names(self):
        """run_id -> short legend name: id prefix and labels."""
        df = self.query_runs()
        return {r: f"{r[:8]} {labels_text(lab)}".strip() for r, lab in zip(df.run_id, df.labels)}

    def spans(self):
        """run_id -> seconds from the run's first to its last event."""
        df = self.sql("SELECT run_id, (last_ts - first_ts) / 1e9 AS span_s FROM run_facts")
        return dict(zip(df.run_id, df.span_s))

    def selected(self):
        """The run ids this scope selects (all runs when it names none)."""
        return self.ds.run_ids(self.runs or None, self.labels or None)

    def runs_with(self, table):
        """The selected runs that have rows in `table` (its partitions on disk)."""
        return self.ds.table_runs().get(table, set()) & set(self.selected())

    def recorded(self):
        """table -> the selected runs whose trace carries that event's format (recorded, maybe 0 events).

        None for a dataset parsed before runs listed their event tables: then
        "no events" cannot be told from "not recorded".
        """
        if "event_tables" not in self.ds.table_runs():
            return None
        df = self.sql('SELECT DISTINCT run_id, "table" FROM event_tables')
        out: dict = {}
        for run, table in zip(df["run_id"], df["table"]):
            out.setdefault(table, set()).add(run)
        return out

    def shown_note(self, shown, total, what="run"):
        """The sentence under a figure that draws fewer panels than there are runs."""
        if total > shown:
            return f"Showing {shown} of {plural(total, what)}; pick runs with run=[...]."
        return None


def labels_text(m):
    """Labels as "k=v,k2=v2" (sorted), whatever shape they came in (dict, Arrow pairs)."""
    if m is None:
        return ""
    if isinstance(m, str):
        return m
    items = m.items() if isinstance(m, dict) else [
        tuple(x) if not isinstance(x, dict) else (x["key"], x["value"]) for x in m]
    return ",".join(f"{k}={v}" for k, v in sorted(items))
