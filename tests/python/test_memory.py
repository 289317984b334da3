"""Device memory: the caching allocator's statistics (torch.cuda's names and keys), cache control,
pinned host memory and out-of-memory errors."""
import gc
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

KiB = 1024
MiB = 1024 * 1024


def _settle(*devices):
    """Free what Python still holds and return every cached segment, so that the numbers a test
    reads next move only with what the test itself allocates."""
    gc.collect()
    for d in devices or range(torch.ember.device_count()):
        torch.ember.synchronize(d)
    torch.ember.empty_cache()


def _format_bytes(n):
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    v, u = float(n), 0
    while v >= 1024 and u < 4:
        v /= 1024
        u += 1
    return f"{v:.0f} {units[u]}" if u == 0 else f"{v:.2f} {units[u]}"


def _stat(key, device=None):
    return torch.ember.memory_stats(device)[key]


@pytest.fixture(autouse=True)
def _no_gc_during_test():
    """Tensors from earlier tests held in reference cycles (tracebacks, frames) would otherwise be
    freed by a garbage collection at any point of a test, moving the numbers it compares."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


@pytest.fixture
def fresh_stream():
    """A new current stream: the allocator keeps one pool per stream, so nothing cached by earlier
    tests can serve this test's requests, and every segment it sees is one it caused."""
    _settle()
    s = torch.ember.Stream()
    with torch.ember.stream(s):
        yield s
    gc.collect()
    torch.ember.synchronize()


# --- statistics ------------------------------------------------------------------------------


CUDA_KEYS = [
    "allocated_bytes.all.current",
    "allocated_bytes.all.peak",
    "allocated_bytes.all.allocated",
    "allocated_bytes.all.freed",
    "allocated_bytes.small_pool.current",
    "allocated_bytes.large_pool.current",
    "reserved_bytes.all.current",
    "reserved_bytes.all.peak",
    "active_bytes.all.current",
    "requested_bytes.all.current",
    "inactive_split_bytes.all.current",
    "allocation.all.current",
    "segment.all.current",
    "segment.small_pool.current",
    "segment.large_pool.current",
    "active.all.current",
    "inactive_split.all.current",
    "num_alloc_retries",
    "num_ooms",
    "num_sync_all_streams",
    "num_device_alloc",
    "num_device_free",
]


def test_memory_stats_has_cuda_keys_and_agrees_with_the_accessors():
    x = torch.empty(1000, device="ember")
    stats = torch.ember.memory_stats()
    missing = [k for k in CUDA_KEYS if k not in stats]
    assert not missing, f"memory_stats() lacks {missing}"
    assert all(isinstance(v, int) for v in stats.values())
    assert stats["allocated_bytes.all.current"] == torch.ember.memory_allocated() > 0
    assert stats["allocated_bytes.all.peak"] == torch.ember.max_memory_allocated()
    assert stats["reserved_bytes.all.current"] == torch.ember.memory_reserved() > 0
    assert stats["reserved_bytes.all.peak"] == torch.ember.max_memory_reserved()
    # Pools partition the total.
    assert (stats["allocated_bytes.small_pool.current"] + stats["allocated_bytes.large_pool.current"]
            == stats["allocated_bytes.all.current"])
    assert (stats["reserved_bytes.small_pool.current"] + stats["reserved_bytes.large_pool.current"]
            == stats["reserved_bytes.all.current"])
    del x


@pytest.mark.parametrize(
    "nbytes, charged",
    [(1, 512), (511, 512), (512, 512), (513, 1024), (4000, 4096), (1 * MiB - 1, 1 * MiB)],
)
def test_allocations_round_up_to_512_bytes(nbytes, charged):
    a0 = torch.ember.memory_allocated()
    r0 = _stat("requested_bytes.all.current")
    n0 = _stat("allocation.all.current")
    x = torch.empty(nbytes, dtype=torch.uint8, device="ember")
    assert torch.ember.memory_allocated() - a0 == charged
    assert _stat("requested_bytes.all.current") - r0 == nbytes
    assert _stat("allocation.all.current") - n0 == 1
    del x
    assert torch.ember.memory_allocated() == a0
    assert _stat("requested_bytes.all.current") == r0
    assert _stat("allocation.all.current") == n0


def test_empty_tensor_allocates_nothing():
    a0 = torch.ember.memory_allocated()
    x = torch.empty(0, device="ember")
    assert torch.ember.memory_allocated() == a0
    assert x.numel() == 0


def test_small_allocations_share_a_2mib_segment(fresh_stream):
    r0 = torch.ember.memory_reserved()
    seg0 = _stat("segment.small_pool.current")
    first = torch.empty(1 * KiB, dtype=torch.uint8, device="ember")
    assert torch.ember.memory_reserved() - r0 == 2 * MiB
    assert _stat("segment.small_pool.current") - seg0 == 1
    # 100 more small tensors (400 KiB) fit in the same segment.
    rest = [torch.empty(4 * KiB, dtype=torch.uint8, device="ember") for _ in range(100)]
    assert torch.ember.memory_reserved() - r0 == 2 * MiB
    assert _stat("segment.small_pool.current") - seg0 == 1
    base = first.data_ptr()
    assert all(base <= t.data_ptr() < base + 2 * MiB for t in rest)
    del first, rest


def test_large_allocations_get_their_own_rounded_segment(fresh_stream):
    r0 = torch.ember.memory_reserved()
    a0 = torch.ember.memory_allocated()
    seg0 = _stat("segment.large_pool.current")
    small0 = _stat("segment.small_pool.current")
    x = torch.empty(3 * MiB + 1, dtype=torch.uint8, device="ember")
    assert torch.ember.memory_reserved() - r0 == 4 * MiB  # rounded up to a 2 MiB multiple
    assert _stat("segment.large_pool.current") - seg0 == 1
    # The 1 MiB left over is too small to split off: the tensor holds the whole block, as in
    # CUDA's allocator.
    assert torch.ember.memory_allocated() - a0 == 4 * MiB
    y = torch.empty(6 * MiB, dtype=torch.uint8, device="ember")
    assert torch.ember.memory_reserved() - r0 == 4 * MiB + 6 * MiB
    assert torch.ember.memory_allocated() - a0 == 4 * MiB + 6 * MiB
    assert _stat("segment.large_pool.current") - seg0 == 2
    z = torch.empty(1 * MiB + 1, dtype=torch.uint8, device="ember")  # just past the small pool
    assert torch.ember.memory_reserved() - r0 == 4 * MiB + 6 * MiB + 2 * MiB
    assert _stat("segment.large_pool.current") - seg0 == 3
    assert _stat("segment.small_pool.current") == small0
    del x, y, z


def test_freed_memory_stays_cached_until_empty_cache(fresh_stream):
    a0 = torch.ember.memory_allocated()
    r0 = torch.ember.memory_reserved()
    frees0 = _stat("num_device_free")
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="ember")
    ptr = x.data_ptr()
    del x
    assert torch.ember.memory_allocated() == a0
    assert torch.ember.memory_reserved() - r0 == 4 * MiB  # cached, not returned
    # The cached block serves the next request of the same size on the same stream.
    allocs0 = _stat("num_device_alloc")
    y = torch.empty(3 * MiB, dtype=torch.uint8, device="ember")
    assert y.data_ptr() == ptr
    assert _stat("num_device_alloc") == allocs0
    assert torch.ember.memory_reserved() - r0 == 4 * MiB
    del y
    torch.ember.synchronize()
    torch.ember.empty_cache()
    assert torch.ember.memory_reserved() == r0
    assert _stat("num_device_free") - frees0 == 1


def test_empty_cache_keeps_memory_of_live_tensors(fresh_stream):
    r0 = torch.ember.memory_reserved()
    x = torch.full((1 * MiB,), 7.0, device="ember")  # 4 MiB, its own segment
    torch.ember.synchronize()
    torch.ember.empty_cache()
    assert torch.ember.memory_reserved() - r0 == 4 * MiB
    torch.testing.assert_close(x.cpu(), torch.full((1 * MiB,), 7.0))
    del x


def test_empty_cache_releases_a_block_recorded_on_a_busy_stream():
    _settle()
    r0 = torch.ember.memory_reserved()
    s = torch.ember.Stream()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="ember")
    with torch.ember.stream(s):
        torch.ember._sleep(200)
        y = torch.empty(4 * MiB, dtype=torch.uint8, device="ember")
        y.copy_(x)  # s still reads x after the sleep
    x.record_stream(s)
    del x
    assert torch.ember.memory_reserved() - r0 == 8 * MiB
    torch.ember.empty_cache()  # waits for s, then x's block can go
    assert s.query()
    assert torch.ember.memory_reserved() - r0 == 4 * MiB  # y's segment stays
    del y
    torch.ember.synchronize()
    torch.ember.empty_cache()
    assert torch.ember.memory_reserved() == r0


def test_values_follow_tensor_lifetimes():
    _settle()
    a0 = torch.ember.memory_allocated()
    tensors = [torch.empty(256, 1024, device="ember") for _ in range(4)]  # 1 MiB each
    assert torch.ember.memory_allocated() - a0 == 4 * MiB
    assert torch.ember.memory_reserved() >= torch.ember.memory_allocated()
    tensors.pop()
    assert torch.ember.memory_allocated() - a0 == 3 * MiB
    view = tensors[0][1:]  # a view keeps its storage alive
    tensors.clear()
    assert torch.ember.memory_allocated() - a0 == 1 * MiB
    del view
    assert torch.ember.memory_allocated() == a0


def test_peak_statistics_and_reset():
    _settle()
    a0 = torch.ember.memory_allocated()
    torch.ember.reset_peak_memory_stats()
    assert torch.ember.max_memory_allocated() == a0
    assert torch.ember.max_memory_reserved() == torch.ember.memory_reserved()
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="ember")
    peak_reserved = torch.ember.memory_reserved()
    del x
    assert torch.ember.memory_allocated() == a0
    assert torch.ember.max_memory_allocated() == a0 + 8 * MiB
    assert _stat("allocated_bytes.all.peak") == a0 + 8 * MiB
    torch.ember.empty_cache()
    assert torch.ember.max_memory_reserved() == peak_reserved > torch.ember.memory_reserved()
    torch.ember.reset_peak_memory_stats()
    assert torch.ember.max_memory_allocated() == torch.ember.memory_allocated() == a0
    assert torch.ember.max_memory_reserved() == torch.ember.memory_reserved()


def test_reset_accumulated_memory_stats():
    x = torch.empty(1000, device="ember")
    del x
    assert _stat("allocation.all.allocated") > 0
    torch.ember.reset_accumulated_memory_stats()
    assert _stat("allocation.all.allocated") == 0
    assert _stat("allocation.all.freed") == 0
    assert _stat("num_ooms") == 0
    assert _stat("num_alloc_retries") == 0


def test_torch_accelerator_agrees():
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="ember:0")
    y = torch.empty(5 * KiB, dtype=torch.uint8, device="ember:1")
    for idx in (0, 1):
        assert torch.accelerator.memory_allocated(idx) == torch.ember.memory_allocated(idx)
        assert torch.accelerator.max_memory_allocated(idx) == torch.ember.max_memory_allocated(idx)
        assert torch.accelerator.memory_reserved(idx) == torch.ember.memory_reserved(idx)
        assert torch.accelerator.max_memory_reserved(idx) == torch.ember.max_memory_reserved(idx)
        assert torch.accelerator.memory_stats(idx) == torch.ember.memory_stats(idx)
    a0 = torch.accelerator.memory_allocated(0)
    del x
    assert a0 - torch.accelerator.memory_allocated(0) == 4 * MiB
    del y


def test_devices_have_separate_memory():
    _settle()
    a0, a1 = torch.ember.memory_allocated(0), torch.ember.memory_allocated(1)
    r0 = torch.ember.memory_reserved(0)
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="ember:1")
    assert torch.ember.memory_allocated(1) - a1 == 4 * MiB
    assert torch.ember.memory_allocated(0) == a0
    assert torch.ember.memory_reserved(0) == r0
    # The device may be named by int, string or torch.device; None means the current one.
    assert torch.ember.memory_allocated("ember:1") == torch.ember.memory_allocated(1)
    assert torch.ember.memory_allocated(torch.device("ember", 1)) == torch.ember.memory_allocated(1)
    with torch.ember.device(1):
        assert torch.ember.memory_allocated() == torch.ember.memory_allocated(1)
        y = torch.empty(2 * MiB, dtype=torch.uint8, device="ember")  # the current device: 1
    assert y.device == torch.device("ember:1")
    assert torch.ember.memory_allocated(1) - a1 == 6 * MiB
    assert torch.ember.memory_allocated(0) == a0
    del x, y
    _settle(1)
    assert torch.ember.memory_allocated(1) == a1
    assert torch.ember.memory_allocated(0) == a0


def test_mem_get_info(fresh_stream):
    free, total = torch.ember.mem_get_info()
    assert total > 0
    assert free == total - torch.ember.memory_reserved()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="ember")
    free2, total2 = torch.ember.mem_get_info()
    assert total2 == total
    assert free - free2 == 4 * MiB
    free1, total1 = torch.ember.mem_get_info(1)
    assert total1 == total
    assert free1 == total1 - torch.ember.memory_reserved(1)
    del x


def test_memory_summary_names_device_and_capacity():
    x = torch.empty(1000, device="ember")
    total = torch.ember.mem_get_info()[1]
    s0 = torch.ember.memory_summary()
    assert isinstance(s0, str)
    assert "ember:0" in s0
    assert f"capacity {_format_bytes(total)}" in s0
    for row in ("Allocated memory", "Reserved (cached) memory", "OOMs"):
        assert row in s0
    s1 = torch.ember.memory_summary(1)
    assert "ember:1" in s1 and "ember:0" not in s1
    assert torch.ember.memory_summary(torch.device("ember:1")) == s1
    del x


def test_memory_functions_take_the_device_keyword_as_torch_cuda():
    # torch.cuda.memory_allocated(device=None), memory_summary(device=None, abbreviated=False),
    # ...: code written for CUDA passes device=...
    names = ["memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
             "memory_stats", "memory_summary", "mem_get_info", "reset_peak_memory_stats",
             "reset_accumulated_memory_stats"]
    refused = []
    for name in names:
        fn = getattr(torch.ember, name)
        try:
            assert fn(device=1) == fn(1)
            assert fn(device="ember:1") == fn(1)
        except TypeError:
            refused.append(name)
    assert not refused, f"these refuse the device= keyword: {refused}"


def test_in_process_oom_raises_and_device_keeps_working():
    ooms0 = _stat("num_ooms")
    keep = torch.arange(10.0, device="ember")
    with pytest.raises(torch.OutOfMemoryError, match=r"ember:0 out of memory\. Tried to allocate"):
        torch.empty(10**13, device="ember")
    assert _stat("num_ooms") == ooms0 + 1
    assert issubclass(torch.OutOfMemoryError, RuntimeError)
    # The tensor alive before is intact, and new work runs.
    torch.testing.assert_close(keep.cpu(), torch.arange(10.0))
    y = torch.randn(64, 64)
    torch.testing.assert_close((y.to("ember") * 2 + 1).cpu(), y * 2 + 1)


# --- a device with 64 MiB, in a fresh process ------------------------------------------------

_SMALL_DEVICE_SCRIPT = textwrap.dedent(
    r"""
    import json, torch, torch_ember
    MiB = 1 << 20
    out = {}
    out["fresh"] = [torch.ember.memory_allocated(), torch.ember.memory_reserved()]
    out["mem_get_info"] = list(torch.ember.mem_get_info())

    try:
        torch.empty(80 * MiB, dtype=torch.uint8, device="ember")
        out["oom"] = None
    except torch.OutOfMemoryError as e:
        out["oom"] = str(e)
    except Exception as e:  # the wrong type
        out["oom"] = f"WRONG TYPE {type(e).__name__}: {e}"
    s = torch.ember.memory_stats()
    out["num_ooms"] = s["num_ooms"]

    # The device works after the failure.
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    y = (x.to("ember") * 3).cpu()
    out["after_oom_ok"] = bool(torch.allclose(y, x * 3))

    # A request the cache can only satisfy by releasing cached segments: 40 MiB cached,
    # 48 MiB asked, 64 MiB capacity.
    before = torch.ember.memory_reserved()
    a = torch.empty(40 * MiB, dtype=torch.uint8, device="ember")
    del a
    out["cached"] = torch.ember.memory_reserved() - before
    retries0 = torch.ember.memory_stats()["num_alloc_retries"]
    b = torch.empty(48 * MiB, dtype=torch.uint8, device="ember")
    b.fill_(1)
    out["retry"] = torch.ember.memory_stats()["num_alloc_retries"] - retries0
    out["num_ooms_after_retry"] = torch.ember.memory_stats()["num_ooms"]
    del b

    # Everything freed: empty_cache gives all memory back.
    del x, y
    torch.ember.synchronize()
    torch.ember.empty_cache()
    out["after_empty_cache"] = [torch.ember.memory_allocated(), torch.ember.memory_reserved()]
    out["free_after_empty_cache"] = torch.ember.mem_get_info()[0]
    print("RESULT" + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def small_device():
    env = {**os.environ, "EMBER_DEVICE_MEMORY": "64MiB"}
    proc = subprocess.run([sys.executable, "-c", _SMALL_DEVICE_SCRIPT], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT")]
    assert line, proc.stdout + proc.stderr
    return json.loads(line[-1][len("RESULT"):])


def test_capacity_comes_from_ember_device_memory(small_device):
    assert small_device["fresh"] == [0, 0]
    assert small_device["mem_get_info"] == [64 * MiB, 64 * MiB]


def test_oom_error_names_request_capacity_and_summary(small_device):
    msg = small_device["oom"]
    assert msg is not None, "allocating 80 MiB on a 64 MiB device did not raise"
    assert not msg.startswith("WRONG TYPE"), msg
    assert "out of memory" in msg
    assert "Tried to allocate 80.00 MiB" in msg
    assert "EMBER_DEVICE_MEMORY" in msg
    assert "ember:0 memory summary, capacity 64.00 MiB" in msg  # the summary is attached
    assert small_device["num_ooms"] == 1


def test_device_works_after_oom(small_device):
    assert small_device["after_oom_ok"]


def test_alloc_retry_frees_cached_segments(small_device):
    assert small_device["cached"] == 40 * MiB
    assert small_device["retry"] == 1
    assert small_device["num_ooms_after_retry"] == 1  # the retry succeeded: no new OOM


def test_empty_cache_returns_everything_after_freeing(small_device):
    assert small_device["after_empty_cache"] == [0, 0]
    assert small_device["free_after_empty_cache"] == 64 * MiB


# --- pinned host memory ----------------------------------------------------------------------


def test_pin_memory():
    p = torch.randn(1000).pin_memory()
    assert p.is_pinned()
    assert p.device.type == "cpu"
    assert not torch.randn(1000).is_pinned()
    assert torch.empty(10, pin_memory=True).is_pinned()
    assert not torch.empty(10, device="ember").is_pinned()


def test_ember_tensors_cannot_be_pinned():
    with pytest.raises(RuntimeError, match="only CPU tensors can be pinned"):
        torch.empty(10, device="ember", pin_memory=True)


def test_non_blocking_round_trip_through_pinned_memory():
    p = torch.randn(1000).pin_memory()
    d = p.to("ember", non_blocking=True)
    back = torch.empty(1000).pin_memory()
    back.copy_(d, non_blocking=True)
    torch.ember.synchronize()
    torch.testing.assert_close(back, p)
    # .to("cpu", non_blocking=True) gives a pinned result, as for CUDA.
    back2 = d.to("cpu", non_blocking=True)
    torch.ember.synchronize()
    assert back2.is_pinned()
    torch.testing.assert_close(back2, p)


def test_non_blocking_download_to_pinned_memory_is_queued():
    p = torch.randn(1000).pin_memory()
    d = p.to("ember")
    out = torch.zeros(1000).pin_memory()
    torch.ember._sleep(300)
    t0 = time.perf_counter()
    out.copy_(d, non_blocking=True)
    returned = time.perf_counter() - t0
    assert returned < 0.15, f"non_blocking copy to pinned memory waited {returned:.3f}s"
    torch.ember.synchronize()
    torch.testing.assert_close(out, p)


def test_pinned_block_is_not_reused_while_a_copy_from_it_is_queued():
    src = torch.full((1000,), 3.0).pin_memory()
    dst = torch.empty(1000, device="ember")
    torch.ember._sleep(200)
    dst.copy_(src, non_blocking=True)
    del src  # the queued copy still reads it
    other = torch.full((1000,), 9.0).pin_memory()  # same size: must not get src's block
    torch.ember.synchronize()
    torch.testing.assert_close(dst.cpu(), torch.full((1000,), 3.0))
    del other


def test_dataloader_pins_batches_for_ember():
    # DataLoader(pin_memory=True) pins through the current accelerator, which is ember.
    ds = torch.utils.data.TensorDataset(torch.arange(32.0).reshape(8, 4))
    dl = torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True, num_workers=1)
    total = 0.0
    for (batch,) in dl:
        assert batch.is_pinned()
        total += batch.to("ember", non_blocking=True).sum().item()
    assert total == sum(range(32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.bool])
def test_deterministic_mode_fills_uninitialized_memory_like_cpu(dtype):
    # Under use_deterministic_algorithms(True) CPU and CUDA fill new memory with NaN or the
    # integer maximum; ember returned what an earlier tensor left in the cached block.
    torch.full((4096,), 7, device="ember")
    torch.ember.synchronize()
    torch.use_deterministic_algorithms(True)
    try:
        for dev in ("cpu", "ember"):
            stale = torch.full((64,), 3, dtype=dtype, device=dev)
            del stale
        made = {dev: [torch.empty(8, dtype=dtype, device=dev),
                      torch.empty_strided((2, 3), (1, 2), dtype=dtype, device=dev),
                      torch.empty_like(torch.zeros(5, dtype=dtype, device=dev)),
                      torch.zeros(2, dtype=dtype, device=dev).resize_(6)]
                for dev in ("cpu", "ember")}
    finally:
        torch.use_deterministic_algorithms(False)
    for got, want in zip(made["ember"], made["cpu"]):
        torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=0, atol=0)
