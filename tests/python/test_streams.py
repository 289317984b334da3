"""Streams: creation, the current stream, asynchronous execution and cross-stream ordering.

Natively implemented ops (empty, copy_/to, fill_, zero_, views) are queued on the current stream
and return at once; every other op falls back to the CPU after synchronizing the current stream.
`torch.ember._sleep(ms)` queues a kernel that keeps the current stream busy, like
torch.cuda._sleep. Timing checks here only ask "did the call block" with wide margins."""
import threading
import time

import pytest
import torch

SLEEP_MS = 300
RETURNS_AT_ONCE = 0.15  # seconds: a queued call, far below SLEEP_MS
BLOCKED = 0.25  # seconds: a call that waited for a SLEEP_MS kernel


@pytest.fixture(autouse=True)
def _restore_streams():
    yield
    # A failing test must not leave another device or stream current for the next one.
    for i in range(torch.ember.device_count()):
        torch.ember.synchronize(i)
        torch.accelerator.set_stream(torch.ember.default_stream(i))
    torch.ember.set_device(0)


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# --- objects ---------------------------------------------------------------------------------


def test_stream_objects():
    s = torch.ember.Stream()
    assert isinstance(s, torch.Stream)
    assert isinstance(s, torch.ember.Stream)
    assert s.device == torch.device("ember:0")
    assert s.device_type == torch.ember.current_stream().device_type
    t = torch.ember.Stream()
    assert s != t and s.stream_id != t.stream_id
    assert s != torch.ember.default_stream()
    assert s.query()  # nothing queued yet


def test_stream_with_priority():
    hi = torch.ember.Stream(priority=-1)
    assert isinstance(hi, torch.ember.Stream)
    assert hi != torch.ember.default_stream()
    x = torch.zeros(100, device="ember")
    torch.ember.synchronize()  # the zero-fill ran on the default stream; hi is not ordered after it
    with torch.ember.stream(hi):
        x.fill_(2)
    hi.synchronize()
    torch.testing.assert_close(x.cpu(), torch.full((100,), 2.0))


def test_stream_on_another_device():
    s = torch.ember.Stream(device=1)
    assert s.device == torch.device("ember:1")
    assert torch.ember.Stream(device="ember:1").device_index == 1
    assert torch.ember.current_device() == 0  # creating a stream does not switch devices


def test_default_and_current_stream():
    cur = torch.ember.current_stream()
    assert cur == torch.ember.default_stream()
    assert cur.device == torch.device("ember:0")
    assert cur.stream_id == 0
    d1 = torch.ember.default_stream(1)
    assert d1.device == torch.device("ember:1")
    assert torch.ember.current_stream(1) == d1
    assert d1 != cur


# --- current stream --------------------------------------------------------------------------


def test_stream_context_sets_and_restores_current_stream():
    s = torch.ember.Stream()
    default = torch.ember.default_stream()
    with torch.ember.stream(s) as entered:
        assert entered == s
        assert torch.ember.current_stream() == s
        assert torch.accelerator.current_stream() == s
    assert torch.ember.current_stream() == default


def test_stream_contexts_nest():
    a, b = torch.ember.Stream(), torch.ember.Stream()
    with torch.ember.stream(a):
        with torch.ember.stream(b):
            assert torch.ember.current_stream() == b
        assert torch.ember.current_stream() == a
    assert torch.ember.current_stream() == torch.ember.default_stream()


def test_stream_context_restores_on_exception():
    s = torch.ember.Stream()
    with pytest.raises(KeyError):
        with torch.ember.stream(s):
            raise KeyError("boom")
    assert torch.ember.current_stream() == torch.ember.default_stream()


def test_stream_context_with_none_changes_nothing():
    with torch.ember.stream(None):
        assert torch.ember.current_stream() == torch.ember.default_stream()


def test_stream_context_on_another_device_restores_current_device():
    # torch.cuda.stream(s) with s on another device makes that device current inside the block
    # (set_stream does) and restores both the device and that device's stream on exit.
    s1 = torch.ember.Stream(device=1)
    assert torch.ember.current_device() == 0
    with torch.ember.stream(s1):
        assert torch.ember.current_stream(1) == s1
        assert torch.ember.current_stream() == s1
        x = torch.empty(3, device="ember")
    assert x.device == torch.device("ember:1")
    assert torch.ember.current_stream(1) == torch.ember.default_stream(1)
    assert torch.ember.current_device() == 0


def test_current_stream_is_per_thread():
    s = torch.ember.Stream()
    seen = {}

    def other():
        seen["stream"] = torch.ember.current_stream()

    with torch.ember.stream(s):
        th = threading.Thread(target=other)
        th.start()
        th.join()
        assert torch.ember.current_stream() == s
    assert seen["stream"] == torch.ember.default_stream()


def test_torch_accelerator_stream_interop():
    assert torch.accelerator.current_stream() == torch.ember.current_stream()
    assert torch.accelerator.current_stream(1) == torch.ember.current_stream(1)
    s = torch.ember.Stream()
    torch.accelerator.set_stream(s)
    assert torch.ember.current_stream() == s
    x = torch.zeros(10, device="ember")
    torch.ember._sleep(100)
    x.fill_(4)  # queued on s, the current stream
    assert not s.query()
    torch.accelerator.synchronize()
    assert s.query()
    torch.ember.set_stream(torch.ember.default_stream())
    assert torch.accelerator.current_stream() == torch.ember.default_stream()
    torch.testing.assert_close(x.cpu(), torch.full((10,), 4.0))


def test_set_stream_on_another_device_makes_it_current():
    # Documented for torch.accelerator.set_stream: "will set the current device index to the
    # device index of the given stream".
    s1 = torch.ember.Stream(device=1)
    torch.ember.set_stream(s1)
    assert torch.ember.current_device() == 1
    assert torch.ember.current_stream() == s1
    assert torch.empty(1, device="ember").device == torch.device("ember:1")


def test_set_stream_rejects_unknown_stream():
    bogus = torch.Stream(stream_id=10_000, device_index=0,
                         device_type=torch.ember.default_stream().device_type)
    with pytest.raises(ValueError, match="ember:0 has no stream 10000"):
        torch.ember.set_stream(bogus)
    assert torch.ember.current_stream() == torch.ember.default_stream()


# --- asynchronous execution ------------------------------------------------------------------


def test_sleep_is_queued_and_stream_synchronize_waits():
    s = torch.ember.Stream()
    with torch.ember.stream(s):
        assert _timed(lambda: torch.ember._sleep(SLEEP_MS)) < RETURNS_AT_ONCE
    assert not s.query()
    assert torch.ember.default_stream().query()  # other streams are not held up
    waited = _timed(s.synchronize)
    assert waited > BLOCKED - RETURNS_AT_ONCE
    assert s.query()


def test_native_ops_are_queued_without_blocking():
    src = torch.arange(1000.0).to("ember")
    a = torch.empty(1000, device="ember")
    b = torch.empty(1000, device="ember")
    c = torch.ones(1000, device="ember")
    torch.ember.synchronize()

    def queue():
        torch.ember._sleep(SLEEP_MS)
        a.fill_(5)
        b.copy_(src)
        c.zero_()
        a[10:20].fill_(-1)  # a view
        torch.empty(4096, device="ember")

    assert _timed(queue) < RETURNS_AT_ONCE
    assert not torch.ember.current_stream().query()
    torch.ember.synchronize()
    expect_a = torch.full((1000,), 5.0)
    expect_a[10:20] = -1
    torch.testing.assert_close(a.cpu(), expect_a)
    torch.testing.assert_close(b.cpu(), torch.arange(1000.0))
    torch.testing.assert_close(c.cpu(), torch.zeros(1000))


def test_reading_back_waits_for_queued_work():
    x = torch.zeros(1000, device="ember")
    torch.ember._sleep(SLEEP_MS)
    x.fill_(3)
    waited = []
    t0 = time.perf_counter()
    host = x.cpu()
    waited.append(time.perf_counter() - t0)
    assert waited[0] > BLOCKED - RETURNS_AT_ONCE
    torch.testing.assert_close(host, torch.full((1000,), 3.0))
    torch.ember._sleep(100)
    x.fill_(7)
    assert x[0].item() == 7.0


def test_fallback_op_sees_work_queued_on_the_current_stream():
    s = torch.ember.Stream()
    with torch.ember.stream(s):
        a = torch.ones(64, device="ember")
        torch.ember._sleep(200)
        a.fill_(3)  # still queued when the fallback op starts
        b = a * 2 + 1  # falls back to the CPU: must synchronize s first
    s.synchronize()
    torch.testing.assert_close(b.cpu(), torch.full((64,), 7.0))


def test_wait_stream_orders_work_across_streams():
    s1, s2 = torch.ember.Stream(), torch.ember.Stream()
    x = torch.zeros(1000, device="ember")
    z = torch.empty(1000, device="ember")
    torch.ember.synchronize()
    with torch.ember.stream(s1):
        torch.ember._sleep(200)
        x.fill_(5)
    s2.wait_stream(s1)
    assert not s2.query()  # s2 now waits on s1's sleep
    with torch.ember.stream(s2):
        z.copy_(x)  # without the wait this would read x before the fill
    s2.synchronize()
    assert s1.query()
    torch.testing.assert_close(z.cpu(), torch.full((1000,), 5.0))


def test_fallback_op_on_a_waiting_stream_sees_the_other_streams_work():
    s1, s2 = torch.ember.Stream(), torch.ember.Stream()
    x = torch.zeros(500, device="ember")
    torch.ember.synchronize()
    with torch.ember.stream(s1):
        torch.ember._sleep(200)
        x.fill_(5)
    with torch.ember.stream(s2):
        torch.ember.current_stream().wait_stream(s1)
        z = x * 2  # a CPU fallback: synchronizes s2, which first waits for s1
    torch.ember.synchronize()
    torch.testing.assert_close(z.cpu(), torch.full((500,), 10.0))


def test_record_stream_is_accepted():
    s = torch.ember.Stream()
    x = torch.empty(1000, device="ember")
    x.record_stream(s)


def test_record_stream_delays_reuse_of_the_block():
    # x is allocated on the default stream and read on s. After record_stream(s) and del x, the
    # allocator must not hand x's block to a new tensor on the default stream before s is done.
    s = torch.ember.Stream()
    x = torch.full((4096,), 1.0, device="ember")
    out = torch.empty(4096, device="ember")
    torch.ember.synchronize()
    ptr = x.data_ptr()
    with torch.ember.stream(s):
        torch.ember._sleep(200)
        out.copy_(x)
    x.record_stream(s)
    del x
    y = torch.empty(4096, device="ember")
    y.fill_(9.0)
    assert y.data_ptr() != ptr
    torch.ember.synchronize()
    torch.testing.assert_close(out.cpu(), torch.ones(4096))


def test_synchronize_waits_for_all_streams_of_the_device():
    s1, s2 = torch.ember.Stream(), torch.ember.Stream()
    with torch.ember.stream(s1):
        torch.ember._sleep(SLEEP_MS)
    with torch.ember.stream(s2):
        torch.ember._sleep(SLEEP_MS)
    assert torch.ember.current_stream().query()  # the current stream has nothing queued
    waited = _timed(torch.ember.synchronize)
    assert waited > BLOCKED - RETURNS_AT_ONCE, f"synchronize() returned after {waited:.3f}s"
    assert s1.query() and s2.query()


def test_synchronize_is_per_device():
    s = torch.ember.Stream(device=1)
    with torch.ember.stream(s):
        torch.ember._sleep(SLEEP_MS)
    torch.ember.set_device(0)
    assert _timed(lambda: torch.ember.synchronize(0)) < RETURNS_AT_ONCE
    assert not s.query()
    waited = _timed(lambda: torch.ember.synchronize(1))
    assert waited > BLOCKED - RETURNS_AT_ONCE
    assert s.query()


def test_synchronize_takes_the_device_keyword_as_torch_cuda():
    torch.ember.synchronize(device=1)
    torch.ember.synchronize(device="ember:0")


def test_a_failure_on_a_stream_reaches_the_streams_that_wait_on_it():
    # The consuming stream read what the failed kernel left in memory, with no error, after a
    # correct wait_stream.
    x = torch.arange(10.0, device="ember")
    s = torch.ember.Stream()
    s.wait_stream(torch.ember.current_stream())
    with torch.ember.stream(s):
        y = x[torch.tensor([20], device="ember")]
    torch.ember.current_stream().wait_stream(s)
    with pytest.raises(RuntimeError, match="index 20 is out of range"):
        y.cpu()
    with pytest.raises(RuntimeError, match="index 20 is out of range"):
        s.synchronize()  # the failing stream reports it too
    assert (x + 1).sum().item() == 55.0  # and the device keeps working
