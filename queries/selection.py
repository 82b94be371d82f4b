"""Which runs of a dataset a command works on: run ids or their prefixes, and label filters."""
from kmemscope.common.errors import DatasetError, QueryError

from kmemscope.dataset import reader as ds


def label_filter(labels):
    """{key: [values]} from "k=v" strings or a dict: a run matches every key, any of its values.

    `--label kernel=a --label kernel=b` selects the runs of either kernel;
    `--label kernel=a --label host=h1` those of kernel a on host h1.
    """
    if isinstance(labels, str):
        labels = [labels]
    if isinstance(labels, dict):
        return {str(k): [str(x) for x in (v if isinstance(v, (list, tuple, set)) else [v])]
                for k, v in labels.items()}
    wanted: dict = {}
    for item in labels:
        k, sep, v = str(item).partition("=")
        if not sep or not k:
            raise QueryError(f"label filter {item!r} is not k=v")
        wanted.setdefault(k, [])
        if v not in wanted[k]:
            wanted[k].append(v)
    return wanted


def labels_dict(m):
    """A run's labels as a dict, whichever form DuckDB or Arrow gave the MAP in."""
    if m is None:
        return {}
    if isinstance(m, dict):
        if set(m) == {"key", "value"} and isinstance(m["key"], list):
            return dict(zip(m["key"], m["value"]))
        return m
    return dict(m)


def select_runs(ref, parts, run_ids=None, labels=None):
    """The run ids of the dataset of handle `ref` chosen by ids (or unique prefixes) and
    label filters.

    parts: the listing (ref.listing). No ids and no labels: every run.
    """
    if "runs" not in parts:
        raise DatasetError(f"dataset {ref} has no runs table",
                           "it was not written by `kmemscope parse`")
    all_runs = sorted(parts["runs"])
    chosen = list(all_runs)
    if run_ids:
        chosen = []
        for want in ([run_ids] if isinstance(run_ids, str) else run_ids):
            hits = [r for r in all_runs if r == want] or [r for r in all_runs if r.startswith(str(want))]
            if len(hits) != 1:
                what = "no run" if not hits else f"{len(hits)} runs matching"
                raise QueryError(f"dataset has {what} {want!r}",
                                 "runs: " + ", ".join(all_runs[:20]) + (" ..." if len(all_runs) > 20 else ""))
            if hits[0] not in chosen:
                chosen.append(hits[0])
    if labels:
        wanted = label_filter(labels)
        con = ds.connect(ref, run_ids=chosen, tables=["runs"], parts=parts)
        rows = con.sql("SELECT run_id, labels FROM runs").fetchall()
        con.close()
        kept = []
        for run_id, lab in rows:
            lab = labels_dict(lab)
            if all(lab.get(k) in values for k, values in wanted.items()):
                kept.append(run_id)
        if not kept:
            shown = ", ".join(f"{k}={'|'.join(v)}" for k, v in wanted.items())
            raise QueryError(f"no run has label {shown}",
                             "see the runs' labels with `kmemscope sql DATASET 'SELECT run_id, labels FROM runs'`")
        chosen = [r for r in chosen if r in kept]
    return chosen
