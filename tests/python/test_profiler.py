"""The profiler on real ember work: torch_ember.profiler.profile records op calls (shapes, source
lines), kernels per stream with enqueue->execute links, copies, fallbacks, event record->wait,
synchronizes and memory; the exported Chrome trace validates; a host stall shows up as a device
idle gap; torch.profiler's PrivateUse1 activity shows ember kernels next to the CPU ops."""
import json
import time

import pytest
import torch
import torch_ember
from torch_ember.profiler import chrome_trace, profile, validate_chrome_trace


def small_step(model, opt, x):
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


@pytest.fixture
def model():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)).to("ember")
    return m, torch.optim.AdamW(m.parameters()), torch.randn(16, 32).to("ember")


def kinds(records):
    out = {}
    for r in records:
        out.setdefault(r["kind"], []).append(r)
    return out


def test_records_ops_kernels_memory_and_links(model, tmp_path):
    m, opt, x = model
    with profile(record_shapes=True, with_stack=True) as prof:
        small_step(m, opt, x)
        x.sum().item()
    k = kinds(prof.records)
    for kind in ("host_op", "enqueue", "kernel", "alloc", "free", "synchronize", "copy"):
        assert kind in k, f"no {kind} records"
    # Every kernel ran after it was queued and pairs with its enqueue record.
    enqueued = {(r["device"], r["stream"], r["seq"]) for r in k["enqueue"]}
    assert all((r["device"], r["stream"], r["seq"]) in enqueued for r in k["kernel"])
    names = {r["name"] for r in k["kernel"]}
    assert {"gemm", "gelu", "gelu_backward"} <= names
    # Op calls carry shapes and this file's line.
    addmm = [r for r in k["host_op"] if r["name"] == "aten::addmm"]
    assert addmm and "Float[16, 32]" in addmm[0]["shapes"] or "[16, 32]" in addmm[0]["shapes"]
    assert any(r["source"].endswith(f"test_profiler.py:{small_step.__code__.co_firstlineno + 1}")
               for r in k["host_op"])
    trace = chrome_trace(prof.records)
    assert validate_chrome_trace(trace) == []
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    loaded = json.loads(path.read_text())
    flows = [e for e in loaded["traceEvents"] if e.get("ph") in ("s", "f")]
    assert flows and len([e for e in flows if e["ph"] == "s"]) == len([e for e in flows if e["ph"] == "f"])
    counters = [e for e in loaded["traceEvents"] if e.get("ph") == "C"]
    assert counters, "no memory counter track"


def test_memory_returns_to_baseline():
    with profile() as prof:
        for _ in range(3):
            a = torch.randn(256, 256, device="ember")
            b = (a @ a).relu()
            del a, b
    assert validate_chrome_trace(chrome_trace(prof.records)) == []
    k = kinds(prof.records)
    assert len(k["alloc"]) == len(k["free"])
    assert k["free"][-1]["allocated"] == k["alloc"][0]["allocated"] - k["alloc"][0]["bytes"]
    assert prof.summary().peak_allocated[0] >= 256 * 256 * 4 * 2
    assert all(r["reserved"] >= r["allocated"] for r in k["alloc"] + k["free"])
    counters = {e["name"] for e in chrome_trace(prof.records)["traceEvents"] if e.get("ph") == "C"}
    assert {"Memory allocated", "Memory reserved"} <= counters


def test_host_stall_shows_as_device_idle_gap(model):
    m, opt, x = model
    small_step(m, opt, x)
    with profile() as prof:
        small_step(m, opt, x)
        torch.ember.synchronize()
        with torch.profiler.record_function("data_loader"):
            time.sleep(0.05)
        small_step(m, opt, x)
    gaps = prof.summary().biggest_gaps(1, interior_only=True)
    assert gaps and gaps[0].dur_ns >= 45e6
    assert gaps[0].host and gaps[0].host[0].name == "data_loader"
    assert "data_loader" in str(prof.summary())


def test_fallbacks_and_their_copies_are_recorded():
    x = torch.arange(6.0, device="ember")
    with profile() as prof:
        torch.nextafter((x + 1).bfloat16(), x.bfloat16()).sum().item()  # no bfloat16 kernel
    fb = [r for r in prof.records if r["kind"] == "fallback"]
    assert fb and fb[0]["name"] == "aten::nextafter" and fb[0]["bytes"] > 0 and fb[0]["bytes_to_device"] > 0
    s = prof.summary()
    assert s.fallback_share > 0 and s.fallbacks[0].name == "aten::nextafter"


def test_event_record_and_wait_are_linked():
    s1 = torch.ember.Stream()
    a = torch.randn(128, 128, device="ember")
    with profile() as prof:
        b = a @ a
        ev = torch.ember.Event()
        ev.record()
        with torch.ember.stream(s1):
            s1.wait_event(ev)
            c = b + 1
        torch.ember.synchronize()
    k = kinds(prof.records)
    assert k["event_record"] and k["event_wait"]
    assert k["event_record"][0]["event_id"] == k["event_wait"][0]["event_id"]
    trace = chrome_trace(prof.records)
    assert validate_chrome_trace(trace) == []
    streams = {r["stream"] for r in k["kernel"]}
    assert len(streams) == 2


def test_key_averages_table(model):
    m, opt, x = model
    with profile() as prof:
        small_step(m, opt, x)
    rows = prof.key_averages()
    gemm = [r for r in rows if r.key == "gemm"]
    assert gemm and gemm[0].device_type == "ember" and gemm[0].device_time_total > 0
    addmm = [r for r in rows if r.key == "aten::addmm"][0]
    assert addmm.self_device_time_total > 0  # the kernels it queued
    # Which rows make the top five depends on timing; the full table lists every key.
    assert len(rows.table(row_limit=5).splitlines()) <= 5 + 3
    assert "gemm" in rows.table()
    with pytest.raises(ValueError, match="sort_by"):
        rows.table(sort_by="nope")


def test_one_profile_at_a_time_and_errors_survive():
    with profile():
        with pytest.raises(RuntimeError, match="already running"):
            profile().start()
    # A kernel error stays stored for the program's own next synchronizing call.
    with profile():
        idx = torch.tensor([7], device="ember")
        torch.ones(3, device="ember").index_select(0, idx)
    with pytest.raises(RuntimeError, match="out of range"):
        torch.ember.synchronize()


def test_torch_profiler_shows_ember_kernels(model):
    from torch.profiler import ProfilerActivity
    m, opt, x = model
    small_step(m, opt, x)
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        small_step(m, opt, x)
        x.sum().item()
    events = prof.key_averages()
    gemm = [e for e in events if e.key == "gemm"]
    assert gemm and gemm[0].device_type == torch._C._autograd.DeviceType.PrivateUse1
    assert gemm[0].self_device_time_total > 0
    addmm = [e for e in events if e.key == "aten::addmm"][0]
    assert addmm.self_device_time_total > 0  # linked to the CPU op that queued it
    # Our own profile still works afterwards.
    with profile() as own:
        (x @ x.t()).sum().item()
    assert any(r["kind"] == "kernel" for r in own.records)


def test_torch_profiler_profile_memory_counts_ember_allocations():
    """profile_memory=True: each op's device allocations appear in the EMBER Mem columns, frees
    as negative entries, as torch.profiler shows them for CUDA."""
    from torch.profiler import ProfilerActivity
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                                profile_memory=True) as prof:
        x = torch.ones(256, 256, device="ember")
        y = x.relu()
        del y
        torch.ember.synchronize()
    events = {e.key: e for e in prof.key_averages()}
    assert events["aten::relu"].device_memory_usage == 256 * 256 * 4
    assert events["aten::ones"].device_memory_usage == 256 * 256 * 4
    assert events["aten::relu"].cpu_memory_usage == 0
    frees = [e for e in prof.events() if e.name == "[memory]" and e.device_memory_usage < 0]
    assert sum(e.device_memory_usage for e in frees) == -256 * 256 * 4  # y's block
    assert "EMBER Mem" in prof.key_averages().table(row_limit=3)


def test_ember_profile_cli(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "work.py"
    script.write_text("import sys, torch, torch_ember\n"
                      "x = torch.randn(32, 32, device='ember')\n"
                      "for _ in range(int(sys.argv[1])):\n"
                      "    x = torch.tanh(x @ x)\n"
                      "print('result', x.sum().item())\n")
    out = tmp_path / "trace.json"
    r = subprocess.run([sys.executable, "-m", "torch_ember.cli", "profile", "-o", str(out), str(script), "2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "result" in r.stdout and "Top kernels by device time" in r.stdout and "gemm" in r.stdout
    assert "work.py:" in r.stdout  # what the host was doing, with the line
    trace = json.loads(out.read_text())
    assert validate_chrome_trace(trace) == []
    sources = {e.get("args", {}).get("source", "") for e in trace["traceEvents"]}
    assert any(s.endswith("work.py:4") for s in sources)  # the matmul's op calls


@pytest.mark.skipif(not torch_ember._C._compiler_available(), reason="built without the LLVM compiler")
def test_compiled_graph_shows_fused_kernels_with_model_source_lines(tmp_path, monkeypatch):
    import torch._dynamo

    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()

    def block(x, w):
        h = x @ w
        return h * torch.sigmoid(h) + 1.0

    line = block.__code__.co_firstlineno
    compiled = torch.compile(block, backend="ember")
    x, w = torch.randn(32, 64, device="ember"), torch.randn(64, 64, device="ember")
    compiled(x, w)  # compile outside the profile
    with profile() as prof:
        compiled(x, w)
        torch.ember.synchronize()
    steps = [r for r in prof.records if r["kind"] == "step"]
    assert any(r["name"].startswith("mm @ ") and f"test_profiler.py:{line + 1}" in r["name"] for r in steps)
    fused = [r for r in steps if r["name"].startswith("ember_k")]
    assert fused and any(f"test_profiler.py:{line + 2}" in r["name"] for r in fused)
    trace = chrome_trace(prof.records)
    assert validate_chrome_trace(trace) == []
    step_events = [e for e in trace["traceEvents"] if e.get("cat") == "step"]
    assert step_events and any(e["args"]["source"].endswith(f":{line + 2}") for e in step_events)
    torch._dynamo.reset()


def test_an_op_is_one_event_in_a_profile():
    # Ops registered as out= kernels only were recorded twice (aten::gelu inside aten::gelu).
    from torch.profiler import ProfilerActivity, profile
    x = torch.randn(8, 16, device="ember", requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        y = torch.nn.functional.gelu(x) + torch.nn.functional.softplus(x) + torch.sigmoid(x) + torch.tanh(x)
        y.sum().backward()
        torch.ember.synchronize()
    nested = [e.name for e in prof.events() if e.cpu_parent is not None and e.cpu_parent.name == e.name]
    assert not nested, nested
