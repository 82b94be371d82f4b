#!/usr/bin/env python3
"""Time the analyses as a dataset grows to hundreds of runs, on DuckDB and on Spark.

    fleet_bench.py [--runs 10,100,300] [--engines duckdb,spark] [--analyses a,b,...]
                   [--repeat 1] [--budget 900] [--max-load 2] [--wait 300] [--retries 2]
                   [--spark-conf k=v ...] [--json FILE] [--keep DIR]

The datasets are built by benchmarks/fleet_dataset.py: the three example bundles
(examples/kmem-compaction, thp-faults, memory-pressure) are parsed once, and a
dataset of N runs holds N RE-LABELLED COPIES of those three real runs (hard
links), labelled kernel=a|b alternately and host=hNNN. The events are real; the
fleet is not N distinct captures, so per-run work repeats the same data.

Per engine, one worker process runs every measurement (DuckDB in-process; Spark
local[*] with one SparkSession for all queries, its start time reported
apart). For each N the first call of each analysis is timed on its own (the
first that needs the per-run derived tables builds them: page pairing, top
pfns) and then the best of --repeat warm calls; `compare --by kernel` is
sides.load_sides + comparison_model.compare_table. Peak memory per measurement is VmHWM
after resetting it (/proc/PID/clear_refs 5): of the DuckDB worker process, and
of the Spark driver JVM (the java child of the Spark worker).

The yardstick, measured in the same run: `trace-cmd report -i TRACE > /dev/null`
of each example trace.dat; for N runs, the time trace-cmd report would take
over the N traces the dataset was copied from is the sum of the measured times
of their sources (extrapolated, not run N times). `rep/duck` and `rep/spark`
are that time divided by the analysis's warm time.

An engine whose previous N, scaled by the event count, would exceed --budget
seconds at the next N is not run there (printed as skipped, with the estimate);
within one N, analyses after the budget is spent are skipped too.
The machine may be shared: every measurement first waits (at most --wait
seconds) for a 1-minute load average below --max-load, and the load it started
at is printed beside every warm figure (`load`); a warm call that started above
it is measured again, at most --retries times, and the quietest is kept.

Progress goes to stderr; temporary datasets are removed at the end, also on
Ctrl-C or SIGTERM, unless --keep DIR is given.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import fleet_dataset  # noqa: E402

DEFAULT_ANALYSES = ["summary", "hot_pfns", "pfn_reuse", "atomic_orders", "fallback_pollution",
                    "compaction", "vmstat_rates", "compare"]
COMPARE = "compare --by kernel"     # "compare" in --analyses: sides.load_sides + compare_table


def log(msg):
    print(f"fleet_bench: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- memory

def _status_kb(pid, key):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak(pid):
    """Reset VmHWM of pid to its current RSS (Linux 4.0+); False where refused."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_mb(pid):
    kb = _status_kb(pid, "VmHWM")
    return None if kb is None else kb / 1024


def java_descendant(root):
    """Pid of the first `java` process below root (the Spark driver JVM), or None."""
    children = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            children.setdefault(ppid, []).append(int(d.name))
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
                return pid
        except OSError:
            continue
        todo += children.get(pid, [])
    return None


# ---------------------------------------------------------------- worker

def _compare(dataset, eng):
    from kmemscope.queries import runner, sides
    import inspect
    if "engine" in inspect.signature(sides.load_sides).parameters:
        s = sides.load_sides(dataset, "kernel", engine=eng)
    else:
        # load_sides has no engine parameter yet: give its summary call one
        saved = sides.run_query
        sides.run_query = lambda *a, **k: runner.run_query(*a, **k, engine=eng)
        try:
            s = sides.load_sides(dataset, "kernel")
        finally:
            sides.run_query = saved
    from kmemscope.queries.comparison_model import compare_table

    return len(compare_table(s).rows)


def worker(spec):
    """Run every measurement of one engine; one JSON object per line on stdout."""
    from kmemscope.queries import engines
    out = sys.stdout
    sys.stdout = sys.stderr          # Spark and others print: keep our stdout for results

    def emit(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    name = spec["engine"]
    # before any session starts: Spark's executors inherit it
    os.environ["KMEMSCOPE_RESULT_CACHE"] = "1" if spec.get("result_cache") == "on" else "0"
    eng = None
    mem_pid = os.getpid()
    if name == "spark":
        session_load = wait_quiet(spec["max_load"], spec["wait_s"])
        t0 = time.perf_counter()
        eng = engines.engine_for(engines.EngineSpec.of("spark", conf=spec.get("spark_conf")))
        eng.spark                     # start the session now, timed apart
        start_s = time.perf_counter() - t0
        mem_pid = java_descendant(os.getpid())
        emit({"kind": "session", "engine": name, "seconds": start_s, "load": session_load,
              "jvm_pid": mem_pid,
              "jvm_rss_mb": peak_mb(mem_pid) if mem_pid else None})
    else:
        eng = "duckdb"

    def measure(fn):
        """(seconds, peak MB, result, 1-min load average just before) of one call of fn."""
        load = wait_quiet(spec["max_load"], spec["wait_s"])
        reset_peak(mem_pid)
        t0 = time.perf_counter()
        result = fn()
        return time.perf_counter() - t0, peak_mb(mem_pid), result, load

    try:
        _measure_all(spec, name, eng, emit, measure)
    finally:
        if name == "spark":
            eng.close()


def wait_quiet(max_load, wait_s):
    """Wait (at most wait_s) until the 1-minute load average is below max_load; return it.

    The machine is shared: a figure measured on a busy machine says little, so every
    measurement waits for quiet first and reports the load it started at.
    """
    deadline = time.monotonic() + wait_s
    load = os.getloadavg()[0]
    while load >= max_load and time.monotonic() < deadline:
        time.sleep(5)
        load = os.getloadavg()[0]
    return load


def _warm(measure, fn, spec, spent_before):
    """Best of spec['repeat'] warm calls; a call started at a load of max_load or more is
    measured again (at most spec['retries'] times), so that the kept figure is a quiet one."""
    warm = []
    for i in range(spec["repeat"]):
        for _attempt in range(spec["retries"] + 1):
            m = measure(fn)
            warm.append(m)
            if m[3] < spec["max_load"] or spent_before + sum(w[0] for w in warm) > spec["budget"]:
                break
            # sql-safe: a log line that starts with "load", not SQL
            log(f"load {m[3]:.2f} at the start of a warm call: measuring it again")
    return warm


def _measure_all(spec, name, eng, emit, measure):
    from kmemscope.queries import runner
    prev = None                       # (events, seconds spent) at the previous N
    for item in spec["datasets"]:
        n, dataset, events = item["n"], item["dataset"], item["events"]
        if prev and prev[1] * events / prev[0] > spec["budget"]:
            est = prev[1] * events / prev[0]
            emit({"kind": "skip_n", "engine": name, "n": n,
                  "why": f"estimated {est:.0f} s from N's predecessor > budget {spec['budget']:.0f} s"})
            continue
        spent = 0.0
        for analysis in spec["analyses"]:
            if spent > spec["budget"]:
                emit({"kind": "result", "engine": name, "n": n, "analysis": analysis,
                      "skipped": f"budget of {spec['budget']:.0f} s spent at this N"})
                continue
            if analysis == COMPARE:
                fn = lambda: _compare(dataset, eng)       # noqa: E731
            else:
                fn = lambda a=analysis: runner.run_query(a, dataset, engine=eng).num_rows  # noqa: E731
            log(f"{name} N={n} {analysis}: first")
            try:
                first_s, first_mb, rows, first_load = measure(fn)
                warm = []
                if spent + first_s <= spec["budget"]:
                    log(f"{name} N={n} {analysis}: warm")
                    warm = _warm(measure, fn, spec, spent + first_s)
            except Exception as exc:  # an engine failure is a result to report
                text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                emit({"kind": "result", "engine": name, "n": n, "analysis": analysis,
                      "error": f"{type(exc).__name__}: {text}"})
                continue
            spent += first_s + sum(w[0] for w in warm)
            peaks = [m for m in [first_mb] + [w[1] for w in warm] if m is not None]
            best = min(warm, key=lambda w: (w[3] >= spec["max_load"], w[0])) if warm else None
            emit({"kind": "result", "engine": name, "n": n, "analysis": analysis,
                  "first_s": first_s, "first_load": first_load,
                  "warm_s": best[0] if best else None, "warm_load": best[3] if best else None,
                  "peak_mb": max(peaks) if peaks else None, "first_peak_mb": first_mb,
                  "rows": rows})
        prev = (events, spent)


# ---------------------------------------------------------------- parent

def time_report(trace):
    t0 = time.perf_counter()
    subprocess.run(["trace-cmd", "report", "-i", str(trace)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def run_worker(spec, procs, results):
    """Run one engine's worker; its results are appended to `results` as they arrive."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    procs.append(proc)
    proc.stdin.write(json.dumps(spec))
    proc.stdin.close()
    for line in proc.stdout:
        obj = json.loads(line)
        results.append(obj)
        if obj["kind"] == "result" and "first_s" in obj:
            log(f"{obj['engine']} N={obj['n']} {obj['analysis']}: first {obj['first_s']:.2f} s, "
                f"warm {_f(obj['warm_s'])} s, peak {_f(obj['peak_mb'], 0)} MB, {obj['rows']} rows")
        elif obj["kind"] != "result" or "first_s" not in obj:
            log(json.dumps(obj))
    proc.wait()
    if proc.returncode:
        log(f"{spec['engine']} worker exited with status {proc.returncode}")


def stop(procs):
    for p in procs:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _f(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def _ratio(a, b, digits=1):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.{digits}f}"


def print_table(report, results, datasets, analyses, engines):
    by = {(r["engine"], r["n"], r["analysis"]): r for r in results if r["kind"] == "result"}
    sessions = [r for r in results if r["kind"] == "session"]
    skips = [r for r in results if r["kind"] == "skip_n"]
    print(f"fleet benchmark: {os.cpu_count()} cores, load average at the end "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("runs are RE-LABELLED COPIES of 3 real example runs "
          "(kmem-compaction, thp-faults, memory-pressure), not distinct captures")
    if report.get("result_cache"):
        print("result cache " + report["result_cache"] + (
            ": warm calls read each run's rows that the first call kept" if report["result_cache"]
            == "on" else ": every call computes every run (KMEMSCOPE_RESULT_CACHE=0)"))
    print("yardstick, measured in this run: trace-cmd report -i TRACE > /dev/null: " + ", ".join(
        f"{k} {v:.2f} s" for k, v in report["per_source"].items())
        + (" (merged: each N uses its own file's)" if report.get("merged") else ""))
    for s in sessions:
        print(f"spark session start (local[*], once, not in the times below): {s['seconds']:.1f} s "
              f"(load {_f(s.get('load'))}); "
              f"driver JVM RSS after start {_f(s['jvm_rss_mb'], 0)} MB")
    for s in skips:
        print(f"{s['engine']} N={s['n']}: not run: {s['why']}")
    for d in datasets:
        print(f"N={d['n']}: {d['events']:,} events; trace-cmd report of the {d['n']} source "
              f"traces would take {d['report_s']:.1f} s")
    print()
    hdr = ["analysis", "N", "duck 1st s", "duck s", "load", "spark 1st s", "spark s", "load",
           "spark/duck", "duck MB", "JVM MB", "rep/duck", "rep/spark", "rows"]
    rows = []
    for d in datasets:
        for a in analyses:
            du = by.get(("duckdb", d["n"], a), {}) if "duckdb" in engines else {}
            sp = by.get(("spark", d["n"], a), {}) if "spark" in engines else {}
            if not du and not sp:
                continue

            def cell(r, key):
                if "error" in r:
                    return "ERROR"
                if "skipped" in r:
                    return "skip"
                return _f(r.get(key))
            rows.append([a, str(d["n"]), cell(du, "first_s"), cell(du, "warm_s"),
                         _f(du.get("warm_load")), cell(sp, "first_s"), cell(sp, "warm_s"),
                         _f(sp.get("warm_load")),
                         _ratio(sp.get("warm_s"), du.get("warm_s")),
                         _f(du.get("peak_mb"), 0), _f(sp.get("peak_mb"), 0),
                         _ratio(d["report_s"], du.get("warm_s")),
                         _ratio(d["report_s"], sp.get("warm_s")),
                         str(du.get("rows", sp.get("rows", "")))])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(hdr)]
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(hdr, widths))))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    errors = [r for r in results if r["kind"] == "result" and "error" in r]
    for r in errors:
        print(f"error: {r['engine']} N={r['n']} {r['analysis']}: {r['error']}")
    mismatch = [(d["n"], a) for d in datasets for a in analyses
                if "rows" in by.get(("duckdb", d["n"], a), {}) and "rows" in by.get(("spark", d["n"], a), {})
                and by[("duckdb", d["n"], a)]["rows"] != by[("spark", d["n"], a)]["rows"]]
    for n, a in mismatch:
        print(f"rows differ: N={n} {a}: duckdb {by[('duckdb', n, a)]['rows']}, "
              f"spark {by[('spark', n, a)]['rows']}")


def merge(files):
    docs = [json.loads(Path(f).read_text()) for f in files]
    results = [r for d in docs for r in d["results"]]
    # a size one file skipped and another measured is not "not run"
    measured = {(r["engine"], r["n"]) for r in results if r["kind"] == "result"}
    results = [r for r in results if not (r["kind"] == "skip_n" and (r["engine"], r["n"]) in measured)]
    datasets = {d["n"]: d for doc in docs for d in doc["datasets"]
                if any(n == d["n"] for _, n in measured)}
    analyses = []
    for r in results:
        if r["kind"] == "result" and r["analysis"] not in analyses:
            analyses.append(r["analysis"])
    engines = sorted({r["engine"] for r in results})
    for f, d in zip(files, docs):
        sizes = ",".join(str(x["n"]) for x in d["datasets"])
        print(f"merged: {f} (N={sizes}; {', '.join(d['engines'])}): load average at its end "
              + " ".join(f"{x:.1f}" for x in d["loadavg_end"]) + "; trace-cmd report there: "
              + ", ".join(f"{k} {v:.2f} s" for k, v in d["trace_cmd_report_s"].items()))
    print_table(dict(docs[0]["report"], merged=True), results, [datasets[n] for n in sorted(datasets)], analyses,
                engines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="10,100,300", help="dataset sizes (runs), comma-separated")
    ap.add_argument("--engines", default="duckdb,spark")
    ap.add_argument("--analyses", default=",".join(DEFAULT_ANALYSES))
    ap.add_argument("--repeat", type=int, default=1, help="warm calls per measurement (best kept)")
    ap.add_argument("--budget", type=float, default=900.0,
                    help="seconds one engine may spend on one N (default 900)")
    ap.add_argument("--max-load", type=float, default=2.0,
                    help="wait for a 1-minute load average below this before every measurement, "
                         "and measure a warm call again that started above it (default 2)")
    ap.add_argument("--wait", type=float, default=300.0, metavar="SECONDS",
                    help="the longest wait for that load before measuring anyway (default 300)")
    ap.add_argument("--retries", type=int, default=2,
                    help="warm calls measured again at most this often for load (default 2)")
    ap.add_argument("--spark-conf", action="append", default=[], metavar="K=V")
    ap.add_argument("--result-cache", choices=("off", "on"), default="off",
                    help="off (default): every call computes every run; on: a warm call reads "
                         "each run's rows kept by the first (queries/result_cache.py)")
    ap.add_argument("--json", type=Path, metavar="FILE")
    ap.add_argument("--keep", type=Path, metavar="DIR",
                    help="build the datasets in DIR and keep them (reused when present)")
    ap.add_argument("--merge", type=Path, nargs="+", metavar="JSON",
                    help="print one table from the --json files of earlier runs (e.g. one per engine)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.merge:
        merge(args.merge)
        return
    if args.worker:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        try:
            worker(json.loads(sys.stdin.read()))
        except KeyboardInterrupt:
            sys.exit(130)
        return
    try:
        sizes = sorted({int(x) for x in args.runs.split(",")})
    except ValueError:
        ap.error("--runs takes whole numbers, e.g. 10,100,300")
    if not sizes or sizes[0] < 1:
        ap.error("--runs takes numbers of at least 1")
    engines = [e for e in args.engines.split(",") if e]
    if not engines or set(engines) - {"duckdb", "spark"}:
        ap.error("--engines takes duckdb and/or spark")
    analyses = [COMPARE if a == "compare" else a for a in args.analyses.split(",") if a]
    from kmemscope.queries import catalog
    known = {n for n, _ in catalog.list_queries()} | {COMPARE}
    if set(analyses) - known:
        ap.error(f"unknown analyses: {', '.join(sorted(set(analyses) - known))}")

    results = []
    work = args.keep or Path(tempfile.mkdtemp(prefix="kmemscope-fleet-", dir="/var/tmp"))
    procs = []

    def on_term(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    try:
        work.mkdir(parents=True, exist_ok=True)
        report = {"per_source": {}, "result_cache": args.result_cache}
        for b in fleet_dataset.EXAMPLES:
            log(f"trace-cmd report {b.name}/trace.dat")
            report["per_source"][b.name] = time_report(b / "trace.dat")
        source = work / "source"
        if not (source / "runs").is_dir():
            log("parsing the three example bundles once")
            shutil.rmtree(source, ignore_errors=True)
            fleet_dataset.parse_sources(source)
        src_runs = {}
        import pyarrow.parquet as pq
        from kmemscope.dataset import reader as ds
        for run, files in ds.table_runs(source)["runs"].items():
            row = pq.read_table(files[0]).to_pylist()[0]
            src_runs[run] = (Path(row["source_file"]).parent.name, row["events"])
        ordered = sorted(src_runs)
        datasets = []
        for n in sizes:
            d = work / f"runs-{n}"
            if not (d / "runs").is_dir():
                shutil.rmtree(d, ignore_errors=True)
                log(f"building N={n} (re-labelled copies of {len(ordered)} real runs)")
                fleet_dataset.build(source, d, n, ordered)
            else:
                # a kept dataset is measured from scratch: its derived tables go
                shutil.rmtree(d / "_derived", ignore_errors=True)
            srcs = [ordered[i % len(ordered)] for i in range(n)]
            datasets.append({"n": n, "dataset": str(d),
                             "events": sum(src_runs[s][1] for s in srcs),
                             "report_s": sum(report["per_source"][src_runs[s][0]] for s in srcs)})
        interrupted = False
        try:
            for e in engines:
                spec = {"engine": e, "datasets": datasets, "analyses": analyses,
                        "repeat": args.repeat, "budget": args.budget, "spark_conf": args.spark_conf,
                        "max_load": args.max_load, "wait_s": args.wait, "retries": args.retries,
                        "result_cache": args.result_cache}
                run_worker(spec, procs, results)
        except KeyboardInterrupt:
            # what was measured before the interruption is still printed
            interrupted = True
            log("interrupted: printing what was measured")
            stop(procs)
        print_table(report, results, datasets, analyses, engines)
        if interrupted:
            print("INTERRUPTED: measurements after the last row above were not made")
        if args.json:
            args.json.write_text(json.dumps({
                "cores": os.cpu_count(), "loadavg_end": os.getloadavg(),
                "note": "runs are re-labelled copies of 3 real example runs",
                "interrupted": interrupted,
                "trace_cmd_report_s": report["per_source"], "report": report,
                "engines": engines, "datasets": datasets,
                "results": results}, indent=1) + "\n")
        if interrupted:
            sys.exit(130)
    except KeyboardInterrupt:
        log("interrupted")
        sys.exit(130)
    finally:
        stop(procs)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
