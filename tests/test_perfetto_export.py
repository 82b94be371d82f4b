"""`kmemscope export perfetto`: one run as a Perfetto trace, decoded with the perfetto package's own protos.

The runs are the memory-pressure and thp-faults example bundles (real captures
of this project's test machine: direct compaction and reclaim stalls, kcompactd
and kswapd runs, THP faults, buddyinfo and vmstat samples). The trace is read
back as Perfetto's Trace message and checked against recounts made here from
the Parquet files with pyarrow and plain Python, and against the `stalls`
analysis whose slices it draws.
"""
import importlib.util
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import kmrun
import requirements
from kmdata import run_rows as rows

if importlib.util.find_spec("perfetto") is None:
    requirements.skip("setup", "the perfetto package ([report] extra) is not installed "
                      "(make setup)", allow_module_level=True)
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as perfetto_pb2  # noqa: E402
TrackEvent = perfetto_pb2.TrackEvent
# The examples exported, by their folder under examples/ (runs of the shared A/B dataset).
BUNDLES = {"pressure": "memory-pressure", "thp": "thp-faults"}
KIND_OF_SLICE = {"direct compaction": "direct_compaction", "direct reclaim": "direct_reclaim",
                 "kcompactd run": "kcompactd", "kswapd awake": "kswapd"}


def kmemscope(*args, timeout=300):
    """The real command line (tests/kmrun.py); its exit status is the caller's to check."""
    return kmrun.kmemscope(*args, check=False, timeout=timeout)


@pytest.fixture(scope="module")
def exported(examples_ab, tmp_path_factory):
    """{name: (dataset, run id, decoded Trace)} for the BUNDLES runs of the shared A/B dataset."""
    tmp = tmp_path_factory.mktemp("perfetto")
    ds = examples_ab
    name_of = {folder: name for name, folder in BUNDLES.items()}
    out = {}
    for part in sorted((ds / "runs").glob("run_id=*")):
        run = part.name[len("run_id="):]
        (source,) = [r["source"] for r in rows(ds, "runs", run, ["source"])]
        name = name_of.get(Path(source).name)
        if name is None:
            continue
        trace_file = tmp / f"{name}.pftrace"
        done = kmemscope("export", "perfetto", ds, "--run", run[:10], "-o", trace_file)
        assert done.returncode == 0, done.stderr
        trace = perfetto_pb2.Trace()
        trace.ParseFromString(trace_file.read_bytes())
        out[name] = (ds, run, trace)
    assert sorted(out) == sorted(BUNDLES)
    return out


def tracks(trace):
    return {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet
            if p.HasField("track_descriptor")}


def slices(trace):
    """[(track uuid, name, begin ts, end ts, {arg: value})], pairing BEGIN and END per track as
    Perfetto does (a stack per track); asserts that no END comes without its BEGIN and no
    slice is left open."""
    open_ = defaultdict(list)
    out = []
    for p in trace.packet:
        if not p.HasField("track_event"):
            continue
        e = p.track_event
        if e.type == TrackEvent.TYPE_SLICE_BEGIN:
            args = {a.name: (a.string_value or a.int_value or a.double_value) for a in e.debug_annotations}
            open_[e.track_uuid].append((e.name, p.timestamp, args))
        elif e.type == TrackEvent.TYPE_SLICE_END:
            assert open_[e.track_uuid], f"an END without a BEGIN on track {e.track_uuid}"
            name, begin, args = open_[e.track_uuid].pop()
            assert p.timestamp >= begin
            out.append((e.track_uuid, name, begin, p.timestamp, args))
    assert not any(open_.values()), "slices left open"
    return out


def counters(trace):
    """{counter track name: [(ts, value)]}."""
    names = {u: t.name for u, t in tracks(trace).items() if t.HasField("counter")}
    out = defaultdict(list)
    for p in trace.packet:
        if p.HasField("track_event") and p.track_event.type == TrackEvent.TYPE_COUNTER:
            out[names[p.track_event.track_uuid]].append((p.timestamp, p.track_event.double_counter_value))
    return dict(out)


def test_every_packet_is_on_one_trusted_sequence_with_a_clean_start(exported):
    for _, _, trace in exported.values():
        assert len(trace.packet) > 0
        assert {p.trusted_packet_sequence_id for p in trace.packet} == {1}
        assert trace.packet[0].sequence_flags & perfetto_pb2.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED


def test_every_stall_slice_is_closed_and_on_its_tasks_track(exported):
    seen = Counter()
    for _, _, trace in exported.values():
        threads = {u: t.thread for u, t in tracks(trace).items() if t.HasField("thread")}
        for uuid, name, begin, end, args in slices(trace):
            seen[name] += 1
            assert uuid in threads, "a stall slice on a track that is no task's"
            assert name in KIND_OF_SLICE
            if name in ("direct compaction", "direct reclaim"):
                assert "order" in args and args.get("result"), (name, args)
    # the examples hold all four kinds between them
    assert set(seen) == set(KIND_OF_SLICE), seen


def test_slice_counts_equal_the_stalls_analysis(exported):
    for ds, run, trace in exported.values():
        out = kmemscope("query", "stalls", ds, "--run", run, "--format", "json")
        assert out.returncode == 0, out.stderr
        want = Counter()
        for r in kmrun.rows_of(out):
            want[r["kind"]] += r["timed"]
        got = Counter(KIND_OF_SLICE[name] for _, name, *_ in slices(trace))
        assert got == want, (run, got, want)


def test_direct_reclaim_and_kcompactd_slices_match_a_recount_of_the_events(exported):
    """Independent of the SQL: direct reclaim = a begin followed by the task's next event being
    its end; a kcompactd run = a kcompactd thread's mm_compaction_begin and its next end."""
    for ds, run, trace in exported.values():
        got = sorted((name, b, e) for _, name, b, e, _ in slices(trace)
                     if name in ("direct reclaim", "kcompactd run"))
        want = []
        for name, begin_t, end_t, who in (
                ("direct reclaim", "mm_vmscan_direct_reclaim_begin", "mm_vmscan_direct_reclaim_end", None),
                ("kcompactd run", "mm_compaction_begin", "mm_compaction_end", "kcompactd")):
            events = defaultdict(list)
            for table, is_begin in ((begin_t, 1), (end_t, 0)):
                for r in rows(ds, table, run, ["ts", "pid", "comm"]):
                    if who is None or r["comm"].startswith(who):
                        events[r["pid"]].append((r["ts"], -is_begin))
            for evs in events.values():
                evs.sort()
                for (t0, b0), (t1, b1) in zip(evs, evs[1:]):
                    if b0 == -1 and b1 == 0:
                        want.append((name, t0, t1))
        assert got == sorted(want), run


def test_free_page_counters_equal_the_buddyinfo_samples(exported):
    for ds, run, trace in exported.values():
        want = defaultdict(lambda: defaultdict(int))
        for r in rows(ds, "buddyinfo", run, ["ts", "order", "count"]):
            want[r["order"]][r["ts"]] += r["count"] * 2 ** r["order"]
        got = counters(trace)
        assert want, "the example bundles carry buddyinfo samples"
        for order, per_ts in want.items():
            assert got[f"free pages, order {order} (buddyinfo)"] == sorted(per_ts.items())


def test_vmstat_rate_counters_equal_the_samples(exported):
    checked = 0
    for ds, run, trace in exported.values():
        series = defaultdict(list)
        for r in rows(ds, "vmstat", run, ["ts", "name", "value"]):
            series[r["name"]].append((r["ts"], r["value"]))
        for name, values in counters(trace).items():
            if not name.startswith("vmstat "):
                continue
            counter = name[len("vmstat "):-len(" /s")]
            samples = sorted(series[counter])
            want = [(t1, (v1 - v0) / ((t1 - t0) / 1e9)) for (t0, v0), (t1, v1) in zip(samples, samples[1:])]
            assert [t for t, _ in values] == [t for t, _ in want]
            assert [v for _, v in values] == pytest.approx([v for _, v in want], rel=1e-9)
            checked += 1
    assert checked >= 3


def test_thp_and_fallback_instants(exported):
    ds, run, trace = exported["thp"]
    names = Counter(p.track_event.name for p in trace.packet
                    if p.HasField("track_event") and p.track_event.type == TrackEvent.TYPE_INSTANT)
    # THP faults are order-9 allocations; every fault attempt is an instant, a failure a fallback
    order9 = [r for r in rows(ds, "mm_page_alloc", run, ["order", "pfn"]) if r["order"] == 9]
    assert 0 < names["THP fault: huge page"] + names["THP fault: fallback"] <= len(order9)
    failed9 = sum(1 for r in order9 if r["pfn"] == 2 ** 64 - 1)
    assert 0 < names["THP fault: fallback"] <= failed9
    extfrag = rows(ds, "mm_page_alloc_extfrag", run, ["ts"])
    assert names["migratetype fallback"] == len(extfrag)


@pytest.mark.parametrize("args, message", [
    (["--run", "ffffffffffff"], "has no run"),
    (["--run", ""], "run"),
])
def test_bad_run_is_one_line(exported, tmp_path, args, message):
    ds = next(iter(exported.values()))[0]
    out = kmemscope("export", "perfetto", ds, *args, "-o", tmp_path / "x.pftrace")
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kmemscope: error:") and message in lines[0], out.stderr
    assert not (tmp_path / "x.pftrace").exists()


def test_missing_dataset_and_output_directory_are_one_line(exported, tmp_path):
    ds, run, _ = exported["thp"]
    for args in ([tmp_path / "nope", "--run", run, "-o", tmp_path / "x.pftrace"],
                 [ds, "--run", run, "-o", tmp_path / "no" / "x.pftrace"]):
        out = kmemscope("export", "perfetto", *args)
        assert out.returncode != 0
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kmemscope: error:"), out.stderr
