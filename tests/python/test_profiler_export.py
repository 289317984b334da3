"""Profiler export and summary on synthetic tracer records (pure Python, no device work)."""

import copy
import json

import pytest

from torch_ember.profiler import chrome_trace, summary, validate_chrome_trace
from torch_ember.profiler._export import device_pid

HOST, W0, W1 = 100, 200, 201  # host thread, stream 0 worker, stream 1 worker
MiB = 1 << 20


def op(name, ts, end, thread=HOST, **kw):
    return {"kind": "host_op", "name": name, "ts_ns": ts, "dur_ns": end - ts, "thread": thread,
            **kw}


def enq(name, stream, seq, ts, thread=HOST):
    return {"kind": "enqueue", "name": name, "device": 0, "stream": stream, "seq": seq,
            "ts_ns": ts, "thread": thread}


def kern(name, stream, seq, ts, end):
    return {"kind": "kernel", "name": name, "device": 0, "stream": stream, "seq": seq,
            "ts_ns": ts, "dur_ns": end - ts, "thread": W0 if stream == 0 else W1}


def mem(kind, ptr, nbytes, allocated, ts):
    return {"kind": kind, "device": 0, "ptr": ptr, "bytes": nbytes, "allocated": allocated,
            "reserved": 2 * MiB, "ts_ns": ts, "thread": HOST}


def records():
    """Two streams; stream 1 waits on an event recorded on stream 0; a 100 µs host stall
    (data_loader) leaves stream 0 idle; memory returns to zero; a copy, a fallback, a compile."""
    return [
        op("aten::add", 1000, 3000, shapes="[[4], [4]]", source="train.py:10"),
        mem("alloc", 0x1000, 1024, 1024, 1500),
        enq("add", 0, 1, 2000),
        kern("add", 0, 1, 2500, 10000),
        op("aten::mm", 4000, 6000, source="train.py:11"),
        mem("alloc", 0x2000, 4096, 5120, 4500),
        enq("gemm", 0, 2, 5000),
        kern("gemm", 0, 2, 10000, 30000),
        {"kind": "event_record", "device": 0, "stream": 0, "event_id": 7, "seq": 2,
         "ts_ns": 6500, "thread": HOST},
        {"kind": "event_wait", "device": 0, "stream": 1, "event_id": 7, "ts_ns": 7000,
         "thread": HOST},
        enq("event_wait", 1, 1, 7100),
        kern("event_wait", 1, 1, 7200, 30100),
        op("aten::mul", 8000, 9000),
        enq("mul", 1, 2, 8500),
        kern("mul", 1, 2, 30100, 35000),
        mem("free", 0x1000, 1024, 4096, 20000),
        op("data_loader", 36000, 136000, source="train.py:42"),
        op("aten::add", 136000, 138000),
        enq("add", 0, 3, 137000),
        kern("add", 0, 3, 137500, 140000),
        mem("free", 0x2000, 4096, 0, 139000),
        op("aten::copy_", 140500, 142000),
        {"kind": "copy", "copy_kind": "H2D", "bytes": 4096, "device": 0, "stream": 0, "seq": 4,
         "ts_ns": 141000, "thread": HOST},
        enq("copy_h2d", 0, 4, 141000),
        kern("copy_h2d", 0, 4, 141500, 143000),
        op("aten::foo", 149000, 156000),
        {"kind": "fallback", "name": "aten::foo", "bytes": 100, "bytes_to_device": 50,
         "ts_ns": 150000, "dur_ns": 5000, "thread": HOST},
        {"kind": "compile", "name": "dynamo", "ts_ns": 160000, "dur_ns": 10000,
         "cache_hit": False, "thread": HOST},
        {"kind": "instant", "name": "step", "ts_ns": 171000, "thread": HOST},
        {"kind": "synchronize", "device": 0, "ts_ns": 172000, "dur_ns": 1000, "thread": HOST},
    ]


def events(trace, ph, **match):
    return [e for e in trace["traceEvents"]
            if e["ph"] == ph and all(e.get(k) == v for k, v in match.items())]


def test_chrome_trace_is_clean_and_round_trips():
    trace = chrome_trace(records())
    assert validate_chrome_trace(trace) == []
    assert json.loads(json.dumps(trace)) == trace
    assert trace["displayTimeUnit"] in ("ns", "ms")

    names = {(e["pid"], e["tid"]): e["args"]["name"]
             for e in events(trace, "M", name="thread_name")}
    pid = device_pid(0)
    assert names[(pid, 1)] == "stream 0" and names[(pid, 2)] == "stream 1"
    assert names[(1, HOST)] == f"host thread {HOST}"

    kernels = events(trace, "X", pid=pid)
    assert len(kernels) == 6
    gemm = next(e for e in kernels if e["name"] == "gemm")
    assert gemm["ts"] == 10.0 and gemm["dur"] == 20.0  # µs
    assert gemm["args"]["host_op"] == "aten::mm"
    h2d = next(e for e in kernels if e["name"] == "copy_h2d")
    assert h2d["cat"] == "copy" and h2d["args"]["bytes"] == 4096

    starts, ends = events(trace, "s"), events(trace, "f")
    assert len(starts) == len(ends) == 7  # six enqueues + one event record -> wait
    ev = [e for e in starts + ends if e["cat"] == "event"]
    assert {(e["ph"], e["tid"]) for e in ev} == {("s", 1), ("f", 2)}
    assert all(e.get("bp") == "e" for e in ends)
    ev_s, ev_f = (next(e for e in ev if e["ph"] == ph) for ph in "sf")
    assert ev_s["ts"] <= ev_f["ts"], "the wait ends after the recorded work"

    alloc = [e["args"]["bytes"] for e in events(trace, "C", name="Memory allocated")]
    assert alloc[0] == alloc[-1] == 0 and max(alloc) == 5120
    assert len(events(trace, "i", name="[memory]")) == 4

    fallback = events(trace, "X", cat="fallback")[0]
    assert fallback["args"] == {"op": "aten::foo", "bytes_to_host": 100, "bytes_to_device": 50}
    assert events(trace, "X", cat="compile")[0]["args"]["cache_hit"] is False


def test_summary_finds_the_gap_and_what_the_host_was_doing():
    s = summary(records())
    assert s.duration_ns == 173000 - 1000
    stream0 = next(st for st in s.streams if st.stream == 0)
    gap = stream0.gaps[0]
    assert (gap.start_ns, gap.dur_ns) == (30000, 107500)
    assert (gap.after, gap.before) == ("gemm", "add")
    assert gap.host[0].name == "data_loader"
    assert gap.host[0].source == "train.py:42"
    assert gap.host[0].overlap_ns == 100000
    assert s.biggest_gaps(1, interior_only=True)[0] is gap
    trailing = s.biggest_gaps(1)[0]  # stream 1 has nothing to do after 'mul'
    assert (trailing.stream, trailing.after, trailing.before) == (1, "mul", None)

    assert [k.name for k in s.kernels][:2] == ["event_wait", "gemm"]
    add = next(k for k in s.kernels if k.name == "add")
    assert (add.count, add.total_ns, add.mean_ns) == (2, 10000, 5000)
    assert sum(k.share for k in s.kernels) == pytest.approx(1.0)

    assert s.fallback_ns == 5000
    assert s.fallback_share == pytest.approx(5000 / 172000)
    assert s.fallbacks[0].name == "aten::foo" and s.fallbacks[0].bytes_to_host == 100
    assert s.peak_allocated == {0: 5120}
    assert s.memory[0].end_allocated == s.memory[0].start_allocated == 0
    assert s.memory[0].peak_reserved == 2 * MiB
    (h2d,) = s.copies
    assert (h2d.kind, h2d.count, h2d.bytes, h2d.device_ns) == ("H2D", 1, 4096, 1500)
    assert s.compile[0].name == "dynamo" and s.compile[0].cache_hits == 0

    rows = {(r.key, r.device_type): r for r in s.key_averages()}
    aten_add = rows[("aten::add", "CPU")]
    assert aten_add.count == 2
    assert aten_add.cpu_time_total == pytest.approx(4.0)  # µs
    assert aten_add.device_time_total == pytest.approx(10.0)
    assert aten_add.self_device_time_total == pytest.approx(10.0)
    assert rows[("add", "ember")].device_time_total == pytest.approx(10.0)
    assert rows[("gemm", "ember")].cpu_time_total == 0

    text = s.table(top=5)
    assert "data_loader at train.py:42" in text
    assert "aten::foo" in text and "gemm" in text
    assert str(s) == s.table()
    json.dumps(s.to_dict())


def test_nested_host_ops_split_self_time():
    recs = [op("outer", 0, 10000), op("inner", 2000, 6000), enq("k", 0, 1, 3000),
            kern("k", 0, 1, 3500, 5500), enq("k", 0, 2, 8000), kern("k", 0, 2, 8500, 9000)]
    rows = {r.key: r for r in summary(recs).key_averages()}
    assert rows["outer"].self_cpu_time_total == pytest.approx(6.0)
    assert rows["outer"].device_time_total == pytest.approx(2.5)
    assert rows["outer"].self_device_time_total == pytest.approx(0.5)
    assert rows["inner"].self_device_time_total == pytest.approx(2.0)
    assert validate_chrome_trace(chrome_trace(recs)) == []


def test_unmatched_ends_make_no_half_flows():
    recs = [
        enq("ran_after_stop", 0, 1, 1000),             # no kernel
        kern("enqueued_before_start", 0, 5, 0, 900),    # no enqueue
        {"kind": "event_wait", "device": 0, "stream": 1, "event_id": 3, "ts_ns": 1200},
        {"kind": "event_record", "device": 0, "stream": 0, "event_id": 9, "seq": 0,
         "ts_ns": 1300},
    ]
    trace = chrome_trace(recs)
    assert validate_chrome_trace(trace) == []
    assert events(trace, "s") == [] and events(trace, "f") == []
    assert trace["otherData"]["dropped_flows"] == 2


def test_crossing_host_spans_move_to_an_overlap_track():
    # A compile phase reported with a duration that starts before an op and ends inside it.
    recs = [op("aten::mm", 1000, 5000),
            {"kind": "compile", "name": "aot", "ts_ns": 500, "dur_ns": 2000, "thread": HOST}]
    trace = chrome_trace(recs)
    assert validate_chrome_trace(trace) == []
    names = [e["args"]["name"] for e in events(trace, "M", name="thread_name")]
    assert f"host thread {HOST} (overlap 1)" in names


def test_validator_reports_broken_traces():
    good = chrome_trace(records())

    one_ended = copy.deepcopy(good)
    drop = next(e for e in one_ended["traceEvents"] if e["ph"] == "f")
    one_ended["traceEvents"].remove(drop)
    problems = validate_chrome_trace(one_ended)
    assert len(problems) == 1 and "1 start(s) and 0 end(s)" in problems[0]

    crossing = copy.deepcopy(good)
    k = next(e for e in crossing["traceEvents"] if e["ph"] == "X" and e["name"] == "gemm")
    crossing["traceEvents"].append({**k, "name": "bad", "ts": k["ts"] + 1, "dur": k["dur"]})
    assert any("overlap without nesting" in p for p in validate_chrome_trace(crossing))

    leak = copy.deepcopy(good)
    last = [e for e in leak["traceEvents"] if e["ph"] == "C" and e["name"] == "Memory allocated"]
    last[-1]["args"]["bytes"] = 4096
    assert any("Memory allocated" in p for p in validate_chrome_trace(leak))

    stray = copy.deepcopy(good)
    s = next(e for e in stray["traceEvents"] if e["ph"] == "s")
    s["ts"] = -50.0  # before any span on its track
    assert any("is on no span" in p for p in validate_chrome_trace(stray))

    assert validate_chrome_trace({"nope": 1}) == ["no traceEvents list"]


def test_bad_records_are_rejected():
    with pytest.raises(ValueError, match="unknown kind"):
        chrome_trace([{"kind": "bogus", "ts_ns": 0}])
    with pytest.raises(ValueError, match="needs 'kind' and 'ts_ns'"):
        summary([{"kind": "kernel"}])


def test_empty_profile():
    assert validate_chrome_trace(chrome_trace([])) == []
    s = summary([])
    assert s.duration_ns == 0 and s.kernels == [] and "no kernels" in s.table()


def test_large_profile_from_many_threads_validates():
    import random

    rng = random.Random(0)
    recs, t = [], 0
    seq = {0: 0, 1: 0}
    device_free = {0: 0, 1: 0}
    for i in range(4000):
        thread = 100 + i % 3
        stream = rng.randrange(2)
        begin = t
        t += rng.randrange(1, 50)
        seq[stream] += 1
        recs.append(enq(f"k{i % 7}", stream, seq[stream], t, thread=thread))
        start = max(t + rng.randrange(0, 20), device_free[stream])
        end = start + rng.randrange(1, 100)
        device_free[stream] = end
        recs.append(kern(f"k{i % 7}", stream, seq[stream], start, end))
        t += rng.randrange(1, 50)
        recs.append(op(f"aten::op{i % 5}", begin, t, thread=thread))
    trace = chrome_trace(recs)
    assert validate_chrome_trace(trace) == []
    assert len(events(trace, "s")) == 4000
    s = summary(recs)
    assert sum(k.count for k in s.kernels) == 4000
    assert len(s.key_averages()) == 5 + 7


def test_table_names_are_short_and_bounded():
    import os

    from torch_ember.profiler._table import cell, short_paths

    lib = "/x/lib/python3.11/site-packages/transformers/models/qwen3/modeling_qwen3.py"
    assert short_paths(f"mm @ {lib}:82") == "mm @ transformers/models/qwen3/modeling_qwen3.py:82"
    assert short_paths(f"k @ {os.getcwd()}/train.py:7, /tmp/a.py:3") == "k @ train.py:7, /tmp/a.py:3"
    assert short_paths("gemm") == "gemm"
    long = "ember_k1 " + "+".join(["mul"] * 60)
    assert len(cell(long)) == 110 and cell(long).endswith("...")
