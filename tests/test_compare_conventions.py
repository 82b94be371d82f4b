"""The A/B table says what the kernel counted: row names, means, signs, samples and arguments.

Data: the eight real captures of examples/ab-defrag-mode.sh shipped in
examples/ab-defrag-mode/ (Linux 6.18, vm.defrag_mode 0 and 1, four each),
parsed twice: as bundles with their /proc samples, and as bare trace.dat files.
Oracles: the vmstat counters read from each bundle's procfs/vmstat text in
plain Python (last sample minus first), their means and relative changes
computed here with the statistics module; kmemscope's numbers are read back
from the text a user pastes.
"""
import json
import re
import shutil
import statistics

import pytest
from conftest import EXAMPLES
from kmrun import kmemscope, rows_of

AB = EXAMPLES / "ab-defrag-mode"
SIDES = ("defrag0", "defrag1")
RUNS = {side: sorted(AB.glob(f"run*-{side}")) for side in SIDES}
# a cell: value, a model's bounds (+k/-j, left out here), then (percent) or *percent*
CELL = re.compile(r"(-?\d+\.\d{2}|n/a)(?:\s+\+[\d.]+/-[\d.]+)?(?:\s+([(*][^)*]*[)*]))?")
ROW = re.compile(r"^(.*?)\s{2,}(?=-?\d+\.\d{2}|n/a)")


def vmstat_deltas(bundle):
    """{counter: last sample - first sample} of a bundle's procfs/vmstat, in plain Python."""
    samples = []
    for line in (bundle / "procfs" / "vmstat").read_text().splitlines():
        if line.startswith("#kmemscope-sample"):
            samples.append({})
        elif line.strip() and samples:
            name, value = line.split()
            samples[-1][name] = int(value)
    first, last = samples[0], samples[-1]
    out = {k: last[k] - first[k] for k in first if k in last}
    out["allocstall"] = sum(v for k, v in out.items() if k.startswith("allocstall_"))
    return out


def side_values(counter):
    return {side: [vmstat_deltas(b)[counter] for b in RUNS[side]] for side in SIDES}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    base = tmp_path_factory.mktemp("ab")
    with_samples, bare = base / "procfs", base / "bare"
    kmemscope("parse", "-q", *RUNS["defrag0"], *RUNS["defrag1"], "-o", with_samples)
    for side in SIDES:
        kmemscope("parse", "-q", *[b / "trace.dat" for b in RUNS[side]], "--label",
                  f"kernel={side}", "-o", bare)
    return {"procfs": with_samples, "bare": bare}


def mmtests_blocks(text):
    """{block title: {row name: [(value, percent cell)] per side}} of compare --format mmtests."""
    blocks, block, header = {}, None, 0
    for line in text.splitlines():
        title = line.split(" (", 1)[0]
        if title in ("headline", "vmstat", "stalls", "benchmark"):
            block, header = blocks.setdefault(title, {}), 2
            blocks[title + ":header"] = line
            continue
        if block is None or not line.strip():
            block = None if not line.strip() else block
            continue
        if header:
            header -= 1
            continue
        m = ROW.match(line)
        block[m.group(1).strip()] = CELL.findall(line[m.end(1):])
    return blocks


def compare_mmtests(ds, *args):
    proc = kmemscope("compare", ds, "--by", "kernel", "--baseline", "defrag0", "--format",
                     "mmtests", *args)
    return mmtests_blocks(proc.stdout), proc.stdout


def raw_change(base, new):
    return (new / base - 1.0) * 100.0


# ---------------------------------------------------------------- 1. names mean what they count

def test_direct_compaction_stalls_row_is_vmstat_compact_stall(datasets):
    blocks, _ = compare_mmtests(datasets["procfs"], "--metrics", "stalls")
    expected = side_values("compact_stall")
    row = blocks["stalls"]["direct compaction stalls"]
    for (value, _pct), side in zip(row, SIDES):
        assert float(value) == pytest.approx(statistics.fmean(expected[side]), abs=0.005)
    # the same direction as the kernel's counter: more stalls on defrag1 here
    change = raw_change(statistics.fmean(expected["defrag0"]), statistics.fmean(expected["defrag1"]))
    assert change > 0 and row[1][1] == f"({change:7.2f}%)"
    # the compaction runs inside stalls are a row of their own
    assert "direct compaction runs (compact_zone)" in blocks["stalls"]


def test_per_run_stalls_equal_compact_stall_on_every_capture(datasets):
    rows = rows_of(kmemscope("query", "stalls.per_run", datasets["procfs"], "--format",
                             "json"))
    mine = {r["labels"]["kernel"]: [] for r in rows}
    for r in rows:
        if r["kind"] == "direct_compaction":
            mine[r["labels"]["kernel"]].append(r["stalls"])
            assert r["timed"] <= r["stalls"]
    for side in SIDES:
        assert sorted(mine[side]) == sorted(side_values("compact_stall")[side])


# ---------------------------------------------------------------- 2, 3. means and signs

def test_vmstat_block_takes_arithmetic_means_and_prints_the_raw_change(datasets):
    blocks, _ = compare_mmtests(datasets["procfs"], "--metrics", "vmstat")
    assert "Amean" in blocks["vmstat:header"] and "new/baseline - 1" in blocks["vmstat:header"]
    vm = blocks["vmstat"]
    rates = {side: [100.0 * vmstat_deltas(b)["compact_success"] / vmstat_deltas(b)["compact_stall"]
                    for b in RUNS[side]] for side in SIDES}
    for (value, _pct), side in zip(vm["Direct compact success rate %"], SIDES):
        assert float(value) == pytest.approx(statistics.fmean(rates[side]), abs=0.005)
    fallback = side_values("thp_fault_fallback")
    base, new = statistics.fmean(fallback["defrag0"]), statistics.fmean(fallback["defrag1"])
    assert vm["THP fault fallback"][1][1] == f"({raw_change(base, new):7.2f}%)"   # a rise is +


def test_headline_and_benchmark_blocks_keep_mmtests_conventions(datasets):
    blocks, _ = compare_mmtests(datasets["procfs"])
    for title in ("headline", "benchmark"):
        assert "Hmean where higher is better" in blocks[title + ":header"]
        assert "positive = better" in blocks[title + ":header"]


# the headline's rows without a direction, and which way is better for the others
HEADLINE_NONE = ("eligible_allocs_order_1_3", "eligible_allocs_order_4_plus", "top5_pfn_allocs_sum",
                 "cross_cpu_free_pct")
HEADLINE_LOWER = ("pgscan_kswapd_per_min", "highatomic_pageblocks_max", "pollution_per_1000_allocs",
                  "lost_events")


def test_headline_header_states_the_sign_every_row_follows(datasets):
    """The header's one convention: positive = better, and positive = higher on the rows it
    names as having no direction. Oracle: each row's percent recomputed from the two means
    the block prints (2 decimals), by the sign the header gives that row."""
    blocks, _ = compare_mmtests(datasets["procfs"], "--metrics", "headline")
    header = blocks["headline:header"]
    assert "positive = better" in header and "without a direction: positive = higher" in header
    named = header.split("no direction: ", 1)[1].split(";", 1)[0].split(", ")
    assert sorted(named) == sorted(HEADLINE_NONE)
    checked = 0
    for row, cells in blocks["headline"].items():
        stat, name = row.split()[0], row.split()[1]
        if stat not in ("Amean", "Hmean"):
            continue
        (base, _), (new, pct) = cells
        if float(base) == 0 or pct.strip("()*% ") == "n/a":
            continue
        ratio = float(new) / float(base) * 100.0
        want = 100.0 - ratio if name in HEADLINE_LOWER else ratio - 100.0
        got = float(pct.strip("()*% "))
        assert got == pytest.approx(want, rel=1e-3, abs=0.02), (name, got, want)
        checked += 1
    assert checked >= 6
    # the demand row: a rise from 0.75 to 503.75 allocs is +, and is no "worse"
    (_b, _), (_n, pct) = blocks["headline"]["Amean     eligible_allocs_order_1_3"]
    assert float(pct.strip("()*% ")) > 0


def test_one_quantity_in_two_blocks_reads_as_one_fall(datasets):
    """pgscan_kswapd_per_min (headline: positive = better) and Pages kswapd scanned (vmstat: the
    raw change) are one quantity; each names the other with both changes. Oracle: the
    counter's raw change from the bundles' procfs/vmstat in plain Python."""
    scanned = side_values("pgscan_kswapd")
    raw = raw_change(statistics.fmean(scanned["defrag0"]), statistics.fmean(scanned["defrag1"]))
    assert raw < -50                                  # the examples' fall
    blocks, text = compare_mmtests(datasets["procfs"])
    (_b, _), (_n, headline) = blocks["headline"]["Amean     pgscan_kswapd_per_min [vmstat]"]
    line = next(x for x in text.splitlines()
                if x.strip().startswith("pgscan_kswapd_per_min (headline)"))
    m = re.search(r"pgscan_kswapd_per_min \(headline\) ([-+]\d+\.\d\d)% \(positive = better.*"
                  r"Pages kswapd scanned \(vmstat\) ([-+]\d+\.\d\d)% \(raw change", line)
    assert m, line
    assert float(m.group(1)) == pytest.approx(float(headline.strip("()*% ")), abs=0.005)
    assert float(m.group(1)) > 0                       # a fall, where lower is better: +
    assert float(m.group(2)) == pytest.approx(raw, abs=0.006)
    assert "one quantity" in line
    # the text layout and JSON say it too, by metric name
    plain = kmemscope("compare", datasets["procfs"], "--by", "kernel", "--baseline", "defrag0").stdout
    assert re.search(r"pgscan_kswapd_per_min \(headline\) \+\d.*vmstat\.pgscan_kswapd \(vmstat\) -", plain)
    doc = json.loads(kmemscope("compare", datasets["procfs"], "--by", "kernel", "--format",
                               "json").stdout)
    rec = {(r["metric"], r["side"]): r for r in doc["rows"]}
    assert rec[("vmstat.pgscan_kswapd", "defrag1")]["same_as"] == "pgscan_kswapd_per_min"
    assert "vmstat.pgscan_kswapd" in rec[("pgscan_kswapd_per_min", "defrag1")]["same_as"]


# ---------------------------------------------------------------- 4. means that cannot be taken

@pytest.fixture
def imported(datasets, tmp_path):
    """A copy of the dataset with a higher-is-better metric that is negative, and one with a 0."""
    ds = tmp_path / "ds"
    shutil.copytree(datasets["procfs"], ds)
    runs = rows_of(kmemscope("query", "run_metrics.runs", ds, "--format", "json"))
    lines = ["run,metric,value,unit,better"]
    for i, r in enumerate(sorted(runs, key=lambda r: r["run_id"])):
        negative = -3.0 if r["labels"]["kernel"] == "defrag0" and i % 2 == 0 else 5.0 + i
        lines += [f"{r['run_id']},score,{negative},pts,higher",
                  f"{r['run_id']},hits,{0 if i == 0 else 10 + i},count,higher"]
    (tmp_path / "m.csv").write_text("\n".join(lines) + "\n")
    kmemscope("metrics", "import", ds, tmp_path / "m.csv")
    return ds


def test_an_hmean_over_values_at_or_below_zero_is_an_amean_with_a_note(imported):
    proc = kmemscope("compare", imported, "--by", "kernel", "--metrics", "score,hits",
                     "--format", "mmtests")
    text = proc.stdout
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    amean = {m.group(1): m.group(2) for m in re.finditer(r"^Amean\s+(\w+)\s+(.*)$", text, re.M)}
    assert set(amean) == {"score", "hits"} and not re.search(r"^B?Hmean", text, re.M)
    assert "score: Amean instead of Hmean" in text and "hits: Amean instead of Hmean" in text
    assert not amean["hits"].lstrip().startswith("0.00")        # one 0 does not make the side 0


# ---------------------------------------------------------------- 5. samples

def copy_bundle(tmp_path, source=RUNS["defrag0"][0]):
    bundle = tmp_path / source.name
    shutil.copytree(source, bundle)
    return bundle


def test_a_sample_file_without_headers_is_left_out_with_a_note(tmp_path):
    bundle = copy_bundle(tmp_path)
    vmstat = bundle / "procfs" / "vmstat"
    vmstat.write_text("".join(line for line in vmstat.read_text().splitlines(True)
                              if not line.startswith("#kmemscope-sample")))
    proc = kmemscope("parse", bundle, "-o", tmp_path / "ds")
    assert "procfs/vmstat has no '#kmemscope-sample" in proc.stderr and "left out" in proc.stderr
    info = kmemscope("info", tmp_path / "ds", "--format", "json").stdout
    assert '"vmstat"' not in info and '"buddyinfo"' in info


def test_samples_outside_the_trace_get_a_note_and_do_not_empty_the_trace_counts(tmp_path):
    bundle = copy_bundle(tmp_path)
    hour = 3600 * 10**9
    for name in ("vmstat", "buddyinfo", "pagetypeinfo"):
        f = bundle / "procfs" / name
        f.write_text(re.sub(r"mono_ns=(\d+)", lambda m: f"mono_ns={int(m.group(1)) + hour}",
                            f.read_text()))
    proc = kmemscope("parse", bundle, "--label", "kernel=moved", "-o", tmp_path / "ds")
    assert "lie outside the trace" in proc.stderr
    kmemscope("parse", "-q", RUNS["defrag1"][0], "-o", tmp_path / "ds")
    out = kmemscope("compare", tmp_path / "ds", "--by", "kernel", "--metrics",
                    "vmstat.compact_stall,compaction_success_pct", "--format", "json").stdout
    doc = json.loads(out)
    assert any("wholly outside their trace" in n for n in doc["notes"])
    moved = {r["metric"]: r for r in doc["rows"] if r["side"] == "moved"}
    # the samples' own window still gives vmstat's delta; the trace still counts its stalls
    assert moved["vmstat.compact_stall"]["value"] == vmstat_deltas(RUNS["defrag0"][0])["compact_stall"]
    rows = rows_of(kmemscope("query", "vmstat_trace.counters", tmp_path / "ds", "--format",
                             "json"))
    stalls = [r for r in rows if r["labels"]["kernel"] == "moved" and r["name"] == "compact_stall"]
    assert stalls[0]["trace_window"] == "capture" and stalls[0]["value"] > 0


# ---------------------------------------------------------------- 6. arguments

@pytest.mark.parametrize("args,message", [
    (["--metrics", ""], "names no metric"),
    (["--metrics", ","], "names no metric"),
    (["--metrics", "compact_x,,tps"], "empty name"),
    (["--metrics", "vmstat.compact_stall,vmstat.compact_stall"], "more than once"),
    (["-o", "{tmp}/x.xlsx"], "not .xlsx"),
    (["--metrics", "benchmark"], "no selected run has a metric of the group 'benchmark'"),
    (["--over", "minute", "--metrics", "vmstat.compact_stall"], "needs vmstat samples"),
])
def test_bad_compare_arguments_are_one_line_and_a_failure(datasets, tmp_path, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = kmemscope("compare", datasets["bare"], "--by", "kernel", *args, check=False)
    assert proc.returncode != 0 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.xlsx").exists()


def test_metrics_import_refuses_a_builtin_metric_name(datasets, tmp_path):
    ds = tmp_path / "ds"
    shutil.copytree(datasets["procfs"], ds)
    run = rows_of(kmemscope("query", "run_metrics.runs", ds, "--format", "json"))[0]
    (tmp_path / "m.csv").write_text(f"run,metric,value,unit,better\n"
                                    f"{run['run_id']},thp_fault_success_pct,50,%,higher\n")
    proc = kmemscope("metrics", "import", ds, tmp_path / "m.csv", check=False)
    assert proc.returncode != 0 and "one of kmemscope's own metrics" in proc.stderr


def test_one_run_a_side_is_stated_and_wide_values_keep_their_column(datasets):
    runs = rows_of(kmemscope("query", "run_metrics.runs", datasets["procfs"], "--format",
                             "json"))
    one_each = [next(r["run_id"] for r in runs if r["labels"]["kernel"] == s) for s in SIDES]
    proc = kmemscope("compare", datasets["procfs"], "--by", "kernel", "--format", "mmtests",
                     *[a for r in one_each for a in ("--run", r)])
    assert "defrag0, defrag1 have one run: no stddev, and no test of significance" in proc.stdout
    blocks = mmtests_blocks(proc.stdout)
    # every cell of a block ends in the same column, however wide its percentage
    for title in ("headline", "vmstat"):
        lines = [line for line in proc.stdout.splitlines()
                 if any(line.startswith(name) for name in blocks[title]) and "%" in line]
        assert len({len(line) for line in lines}) == 1, title


# ---------------------------------------------------------------- 7. a bare trace's vmstat block

# Rows the trace counts where the kernel counts them: equal on every capture.
EXACT = ("Direct compact fail", "Direct compact success", "Direct compact success rate %",
         "Compact daemon scanned free", "Compact direct scanned free", "Compact total free scanned",
         "Pages kswapd scanned", "Pages kswapd reclaimed", "THP fault fallback")
# Rows where it cannot be exact (queries/vmstat_trace.sql says why): the trace's mean may be
# lower by this share of vmstat's (alloc stalls, migrate scans), or off by this much either way.
LOWER_BY = {"Alloc stall": 0.15, "Compact daemon scanned migrate": 0.10,
            "Compact total migrate scanned": 0.10, "Compact direct scanned migrate": 0.15}
NEAR = {"THP fault alloc": 0.02, "Pages direct scanned": 0.01, "Pages direct reclaimed": 0.01,
        "Pages total scanned": 0.01, "Pages total reclaimed": 0.01}


def test_a_bare_traces_vmstat_block_equals_the_samples_it_was_recorded_with(datasets):
    sampled, _ = compare_mmtests(datasets["procfs"], "--metrics", "vmstat")
    traced, text = compare_mmtests(datasets["bare"], "--metrics", "vmstat")
    vm, tr = sampled["vmstat"], traced["vmstat"]
    for name in EXACT + tuple(LOWER_BY) + tuple(NEAR):
        marked = [k for k in tr if k.startswith(name + " [trace")]
        assert len(marked) == 1, (name, list(tr))
        mine = tr[marked[0]]
        # a row the trace counts only in part is named a lower bound (a mark on its title);
        # vmstat_trace also calls pgscan one (a scan it cannot see), though equal here
        if name in LOWER_BY:
            assert marked[0].endswith("[trace, lower bound]"), marked[0]
        # the THP fault model met successes whose page was freed at once: a model, with bounds
        if name.startswith("THP fault"):
            assert marked[0].endswith("[trace, model]"), marked[0]
        for (want, _), (got, _) in zip(vm[name], mine):
            want, got = float(want), float(got)
            if name in EXACT:
                assert got == want, name
            elif name in LOWER_BY:
                assert want * (1 - LOWER_BY[name]) <= got <= want, name
            else:
                assert got == pytest.approx(want, rel=NEAR[name]), name
    for name in ("Swap out", "Swap in", "File refaults"):
        assert [v for v, _ in tr[name]] == ["n/a", "n/a"]
    assert "no tracepoint counts them" in text and "vmstat rows marked [trace]" in text
