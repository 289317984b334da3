"""Device-generic PyTorch APIs (torch.accelerator, get_device_module, autocast) on ember."""
import pytest
import torch

A = torch.accelerator


@pytest.fixture(autouse=True)
def _restore_device():
    prev = A.current_device_index()
    yield
    A.set_device_index(prev)


def test_is_available_and_current_accelerator():
    assert A.is_available()
    acc = A.current_accelerator()
    assert isinstance(acc, torch.device) and acc.type == "ember"
    assert A.current_accelerator(check_available=True).type == "ember"
    assert torch._C._get_privateuse1_backend_name() == "ember"


def test_device_count():
    assert A.device_count() == torch.ember.device_count() >= 2


def test_current_and_set_device_index():
    assert A.current_device_index() == torch.ember.current_device() == 0
    A.set_device_index(1)
    assert A.current_device_index() == 1
    assert torch.ember.current_device() == 1
    t = torch.empty(2, device="ember")
    assert t.device == torch.device("ember:1")
    A.set_device_index(torch.device("ember:0"))
    assert A.current_device_index() == 0
    assert torch.empty(2, device="ember").device == torch.device("ember:0")


def test_device_index_context():
    with A.device_index(1):
        assert A.current_device_index() == 1
        assert torch.zeros(1, device="ember").device.index == 1
    assert A.current_device_index() == 0


def test_set_invalid_device_index():
    with pytest.raises((RuntimeError, ValueError), match="invalid ember device index|device index"):
        A.set_device_index(A.device_count() + 5)
    assert A.current_device_index() == 0


def test_synchronize_waits_for_queued_work():
    x = torch.zeros(1000, device="ember")
    torch.ember._sleep(50)
    x.fill_(1)
    s = A.current_stream()
    A.synchronize()
    assert s.query()  # nothing left on the stream
    y = torch.zeros(10, device="ember:1")
    torch.ember._sleep(30, device=1)
    y.fill_(2)
    A.synchronize(1)
    assert A.current_stream(1).query()
    assert y.cpu().tolist() == [2.0] * 10


def test_current_stream():
    s = A.current_stream()
    assert isinstance(s, torch.Stream)
    assert s.device_type == torch.device("ember").type or s.device.type == "ember"
    assert s.device_index == 0
    s1 = A.current_stream(1)
    assert s1.device_index == 1
    assert A.current_stream(torch.device("ember:1")).device_index == 1
    assert s == torch.ember.current_stream()


def test_set_stream_and_stream_context():
    default = A.current_stream()
    side = torch.Stream(device="ember")
    assert side != default
    A.set_stream(side)
    try:
        assert A.current_stream() == side
    finally:
        A.set_stream(default)
    assert A.current_stream() == default
    with side:
        assert A.current_stream() == side
    assert A.current_stream() == default


def test_memory_allocated_and_empty_cache():
    A.empty_cache()
    base = A.memory_allocated()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="ember")
    assert A.memory_allocated() >= base + (1 << 20)
    assert A.memory_allocated(0) == A.memory_allocated()
    assert A.max_memory_allocated() >= A.memory_allocated()
    assert A.memory_reserved() >= A.memory_allocated()
    stats = A.memory_stats()
    assert stats["allocated_bytes.all.current"] == A.memory_allocated()
    del x
    assert A.memory_allocated() == base
    reserved = A.memory_reserved()
    A.empty_cache()
    assert A.memory_reserved() <= reserved
    assert A.memory_allocated() == base


def test_memory_allocated_per_device():
    before0, before1 = A.memory_allocated(0), A.memory_allocated(1)
    x = torch.empty(4096, device="ember:1")
    assert A.memory_allocated(1) >= before1 + 4096 * 4
    assert A.memory_allocated(0) == before0
    del x


def test_get_device_module():
    assert torch.get_device_module("ember") is torch.ember
    assert torch.get_device_module(torch.device("ember:1")) is torch.ember
    assert torch.get_device_module() is torch.ember  # the current accelerator


def test_device_module_api():
    mod = torch.get_device_module("ember")
    assert mod.is_available() and mod.device_count() == A.device_count()
    assert mod.current_device() == A.current_device_index()


def test_get_amp_supported_dtype():
    dtypes = torch.ember.get_amp_supported_dtype()
    assert torch.bfloat16 in dtypes and torch.float16 in dtypes
    assert torch.float32 not in dtypes


def test_tensor_and_module_helpers():
    x = torch.ones(2).ember()
    assert x.is_ember and x.device.type == "ember"
    assert torch.ones(2).ember(1).device == torch.device("ember:1")
    m = torch.nn.Linear(2, 2).ember()
    assert all(p.is_ember for p in m.parameters())
    assert torch.device("ember", 1) == torch.device("ember:1")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_context_enters(dtype):
    with torch.autocast(device_type="ember", dtype=dtype):
        assert torch.is_autocast_enabled("ember")
        assert torch.get_autocast_dtype("ember") == dtype
    assert not torch.is_autocast_enabled("ember")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_ops_run_and_are_finite(dtype):
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 4))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4))
    model.load_state_dict(cpu_model.state_dict())
    model = model.to("ember")
    x = torch.randn(5, 8)
    with torch.autocast(device_type="ember", dtype=dtype):
        xe = x.to("ember")  # copies inside the region work
        out = model(xe)
        s = (out * 2 + 1).sum()
    assert out.device.type == "ember"
    assert out.dtype in (torch.float32, dtype)  # no autocast policy yet: either is fine
    assert torch.isfinite(out.float()).all().item()
    assert torch.isfinite(s.float()).item()
    torch.testing.assert_close(out.float().cpu(), cpu_model(x), rtol=2e-2, atol=2e-2)
    s.backward()
    assert all(torch.isfinite(p.grad).all().item() for p in model.parameters())


def test_autocast_disabled_region():
    x = torch.randn(3, 3, device="ember")
    with torch.autocast(device_type="ember", dtype=torch.bfloat16, enabled=False):
        assert not torch.is_autocast_enabled("ember")
        y = x @ x
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu())


def test_autocast_does_not_leak_to_cpu():
    with torch.autocast(device_type="ember", dtype=torch.bfloat16):
        y = torch.ones(2, 2) @ torch.ones(2, 2)
    assert y.dtype == torch.float32
