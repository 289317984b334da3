"""Events: torch.ember.Event / torch.Event on ember devices — record, query, synchronize, wait,
elapsed_time. Timing checks only ask "did the call block" with wide margins."""
import time

import pytest
import torch


@pytest.fixture(autouse=True)
def _restore_streams():
    yield
    for i in range(torch.ember.device_count()):
        torch.ember.synchronize(i)
        torch.accelerator.set_stream(torch.ember.default_stream(i))
    torch.ember.set_device(0)


def test_event_types():
    e = torch.ember.Event()
    assert isinstance(e, torch.ember.Event)
    assert isinstance(e, torch.Event)
    assert isinstance(torch.ember.Event(enable_timing=True), torch.ember.Event)
    generic = torch.Event(device="ember")
    assert isinstance(generic, torch.ember.Event)
    assert generic.device.type == "ember"
    assert not isinstance(torch.ember.Stream(), torch.ember.Event)
    assert not isinstance(e, torch.ember.Stream)


def test_unrecorded_event_is_complete():
    e = torch.ember.Event()
    assert e.query()
    e.synchronize()  # returns at once
    torch.ember.current_stream().wait_event(e)  # waits for nothing
    assert torch.ember.current_stream().query()


def test_record_query_synchronize():
    e = torch.ember.Event()
    torch.ember._sleep(200)
    e.record()
    assert not e.query()
    t0 = time.perf_counter()
    e.synchronize()
    assert time.perf_counter() - t0 > 0.1  # it blocked for the queued sleep
    assert e.query()


def test_event_marks_a_point_not_the_end_of_the_stream():
    e = torch.ember.Event()
    e.record()  # nothing queued before it
    torch.ember._sleep(200)
    assert e.query()
    assert not torch.ember.current_stream().query()


def test_record_on_an_explicit_stream():
    s = torch.ember.Stream()
    with torch.ember.stream(s):
        torch.ember._sleep(200)
    e = torch.ember.Event()
    e.record(s)  # s is not current: the event follows s's sleep, not the default stream
    assert not e.query()
    assert torch.ember.current_stream().query()
    e.synchronize()
    assert e.query() and s.query()


def test_elapsed_time_measures_queued_work():
    start = torch.ember.Event(enable_timing=True)
    end = torch.ember.Event(enable_timing=True)
    start.record()
    torch.ember._sleep(50)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert ms >= 40, f"elapsed_time around a 50 ms sleep: {ms} ms"
    assert end.elapsed_time(start) == pytest.approx(-ms)


def test_elapsed_time_with_torch_event_on_device_1():
    s = torch.ember.Stream(device=1)
    start = torch.Event(device="ember:1", enable_timing=True)
    end = torch.Event(device="ember:1", enable_timing=True)
    start.record(s)
    with torch.ember.stream(s):
        torch.ember._sleep(50)
    end.record(s)
    end.synchronize()
    assert start.device == torch.device("ember:1")
    assert start.elapsed_time(end) >= 40


def test_elapsed_time_needs_timing_enabled():
    a, b = torch.ember.Event(), torch.ember.Event()
    a.record()
    b.record()
    b.synchronize()
    with pytest.raises(ValueError, match="enable_timing=True"):
        a.elapsed_time(b)
    timed = torch.ember.Event(enable_timing=True)
    timed.record()
    timed.synchronize()
    with pytest.raises(ValueError, match="enable_timing=True"):
        timed.elapsed_time(b)


def test_elapsed_time_needs_recorded_events():
    a, b = torch.ember.Event(enable_timing=True), torch.ember.Event(enable_timing=True)
    a.record()
    with pytest.raises(ValueError, match="recorded"):
        a.elapsed_time(b)


def test_elapsed_time_needs_completed_events():
    a, b = torch.ember.Event(enable_timing=True), torch.ember.Event(enable_timing=True)
    a.record()
    torch.ember._sleep(200)
    b.record()
    with pytest.raises(RuntimeError, match="completed"):
        a.elapsed_time(b)
    b.synchronize()
    assert a.elapsed_time(b) > 0


def test_event_wait_orders_cross_stream_work():
    s1, s2 = torch.ember.Stream(), torch.ember.Stream()
    x = torch.zeros(1000, device="ember")
    z = torch.empty(1000, device="ember")
    torch.ember.synchronize()
    e = torch.ember.Event()
    with torch.ember.stream(s1):
        torch.ember._sleep(200)
        x.fill_(7)
        e.record()
    e.wait(s2)
    assert not s2.query()
    with torch.ember.stream(s2):
        z.copy_(x)
    s2.synchronize()
    torch.testing.assert_close(z.cpu(), torch.full((1000,), 7.0))


def test_event_wait_defaults_to_current_stream():
    s1, s2 = torch.ember.Stream(), torch.ember.Stream()
    x = torch.zeros(100, device="ember")
    torch.ember.synchronize()
    with torch.ember.stream(s1):
        torch.ember._sleep(200)
        x.fill_(2)
    e = torch.ember.Event()
    e.record(s1)
    with torch.ember.stream(s2):
        e.wait()
        assert not s2.query()
        y = torch.empty(100, device="ember")
        y.copy_(x)
    s2.synchronize()
    torch.testing.assert_close(y.cpu(), torch.full((100,), 2.0))


def test_stream_record_event_and_wait_event():
    s1, s2 = torch.ember.Stream(), torch.ember.Stream()
    x = torch.zeros(100, device="ember")
    out = torch.empty(100, device="ember")
    torch.ember.synchronize()
    with torch.ember.stream(s1):
        torch.ember._sleep(200)
        x.fill_(3)
    e = s1.record_event()
    assert isinstance(e, torch.ember.Event)
    assert not e.query()
    s2.wait_event(e)
    with torch.ember.stream(s2):
        out.copy_(x)
    s2.synchronize()
    assert e.query()
    torch.testing.assert_close(out.cpu(), torch.full((100,), 3.0))


def test_event_across_devices_blocks_the_waiting_stream():
    s1 = torch.ember.Stream(device=1)
    with torch.ember.stream(s1):
        torch.ember._sleep(200)
    e = torch.Event(device="ember:1")
    e.record(s1)
    s0 = torch.ember.Stream(device=0)
    e.wait(s0)
    assert not s0.query()
    s0.synchronize()
    assert s1.query()


def test_rerecord_moves_the_event():
    e = torch.ember.Event()
    e.record()
    e.synchronize()
    assert e.query()
    torch.ember._sleep(200)
    e.record()
    assert not e.query()
    e.synchronize()
    assert e.query()


def test_blocking_event_synchronizes():
    e = torch.ember.Event(blocking=True)
    torch.ember._sleep(100)
    e.record()
    e.synchronize()
    assert e.query()
    assert torch.ember.current_stream().query()


def test_torch_event_on_ember_default_device():
    e = torch.Event(device="ember", enable_timing=True)
    f = torch.Event(device="ember", enable_timing=True)
    e.record()
    torch.ember._sleep(50)
    f.record()
    f.synchronize()
    assert e.device == torch.device("ember:0")
    assert e.elapsed_time(f) >= 40


def test_cross_device_event_errors_name_both_devices():
    ev = torch.ember.Event()
    ev.record(torch.ember.current_stream(0))
    with pytest.raises(RuntimeError, match="event device 0 does not match the stream's device 1"):
        ev.record(torch.ember.current_stream(1))
    a, b = torch.ember.Event(enable_timing=True), torch.ember.Event(enable_timing=True)
    a.record(torch.ember.current_stream(1))
    b.record(torch.ember.current_stream(0))
    a.synchronize()
    b.synchronize()
    with pytest.raises(ValueError, match="same device"):  # as its other argument errors
        a.elapsed_time(b)
