"""Native copies, fills, scalar reads and storage/geometry ops of the ember device.

Nothing here should need the CPU fallback except where a test builds its expected value."""
import pytest
import torch

ASSERT_EXACT = dict(rtol=0, atol=0)

# Sources of every dtype, with values that convert exactly (or by well defined truncation).
BASE = torch.tensor([[0.0, 1.0, -2.0, 3.5], [100.0, -0.0, 7.25, 1.0], [2.0, 0.5, -1.0, 64.0]])


def _src(dtype):
    if dtype == torch.bool:
        return BASE != 1.0
    if dtype == torch.uint8:
        return BASE.abs().to(dtype)
    if dtype.is_complex:
        return torch.complex(BASE, -BASE * 2).to(dtype)
    return BASE.to(dtype)


def _strided_views(t):
    """Contiguous, transposed, stepped, offset and broadcast views of a 2-D tensor."""
    return {
        "contiguous": t,
        "transposed": t.t(),
        "step": t[:, ::2],
        "offset": t[1:, 1:],
        "expanded": t[:1].expand(3, 4),
    }


VIEW_NAMES = ["contiguous", "transposed", "step", "offset", "expanded"]
REAL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
               torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]


# --- copies in every direction -------------------------------------------------------------

@pytest.mark.parametrize("view", VIEW_NAMES)
@pytest.mark.parametrize("dtype", REAL_DTYPES + [torch.complex64, torch.complex128])
def test_cpu_to_ember_to_cpu(dtype, view):
    src = _strided_views(_src(dtype))[view]
    e = src.to("ember")
    assert e.device.type == "ember" and e.dtype == dtype and e.shape == src.shape
    torch.testing.assert_close(e.cpu(), src, **ASSERT_EXACT)


@pytest.mark.parametrize("view", VIEW_NAMES)
def test_ember_strided_to_cpu(view):
    src = _src(torch.float32)
    e = _strided_views(src.to("ember"))[view]
    torch.testing.assert_close(e.cpu(), _strided_views(src)[view], **ASSERT_EXACT)


@pytest.mark.parametrize("src_view", VIEW_NAMES)
@pytest.mark.parametrize("dst_view", ["contiguous", "transposed"])
def test_ember_to_ember_strided(src_view, dst_view):
    src_cpu = _strided_views(_src(torch.float32))[src_view]
    src = _strided_views(_src(torch.float32).to("ember"))[src_view]
    shape = src.shape
    dst_cpu = torch.zeros(shape) if dst_view == "contiguous" else torch.zeros(shape[::-1]).t()
    dst = dst_cpu.to("ember") if dst_view == "contiguous" else \
        torch.zeros(shape[::-1], device="ember").t()
    dst.copy_(src)
    dst_cpu.copy_(src_cpu)
    assert dst.stride() == dst_cpu.stride()
    torch.testing.assert_close(dst.cpu(), dst_cpu, **ASSERT_EXACT)


@pytest.mark.parametrize("dst_dtype", REAL_DTYPES)
@pytest.mark.parametrize("src_dtype", [torch.float32, torch.bfloat16, torch.float16,
                                       torch.float64, torch.int64, torch.int32, torch.int8,
                                       torch.uint8, torch.bool])
@pytest.mark.parametrize("where", ["cpu->ember", "ember->ember", "ember->cpu"])
def test_dtype_conversion(src_dtype, dst_dtype, where):
    src = _src(src_dtype)
    if dst_dtype == torch.uint8 and src_dtype.is_floating_point:
        src = src.abs()  # negative float -> uint8 is undefined behaviour in C++
    expected = src.to(dst_dtype)
    if where == "cpu->ember":
        dst = torch.empty(src.shape, dtype=dst_dtype, device="ember")
        dst.copy_(src)
    elif where == "ember->ember":
        dst = src.to("ember").to(dst_dtype)
    else:
        dst = torch.empty(src.shape, dtype=dst_dtype)
        dst.copy_(src.to("ember"))
    assert dst.dtype == dst_dtype
    torch.testing.assert_close(dst.cpu(), expected, **ASSERT_EXACT)


@pytest.mark.parametrize("src_dtype, dst_dtype", [
    (torch.complex64, torch.complex64),
    (torch.complex64, torch.complex128),
    (torch.complex128, torch.complex64),
    (torch.float32, torch.complex64),
    (torch.int32, torch.complex128),
])
def test_complex_copies(src_dtype, dst_dtype):
    src = _src(src_dtype)
    e = src.to("ember")
    out = e.to(dst_dtype)
    assert out.device.type == "ember" and out.dtype == dst_dtype
    torch.testing.assert_close(out.cpu(), src.to(dst_dtype), **ASSERT_EXACT)
    t = torch.empty(4, 3, dtype=dst_dtype, device="ember").t()
    t.copy_(e)
    torch.testing.assert_close(t.cpu(), src.to(dst_dtype), **ASSERT_EXACT)


def test_float_to_int_truncates_like_cpu():
    src = torch.tensor([-2.7, -0.5, 0.5, 2.7, 126.9])
    for dtype in (torch.int64, torch.int32, torch.int8):
        torch.testing.assert_close(src.to("ember").to(dtype).cpu(), src.to(dtype),
                                   **ASSERT_EXACT)


def test_bfloat16_and_half_rounding_matches_cpu():
    src = torch.linspace(-3, 3, 1001, dtype=torch.float32) * 1.000123
    for dtype in (torch.bfloat16, torch.float16):
        torch.testing.assert_close(src.to("ember").to(dtype).cpu(), src.to(dtype),
                                   **ASSERT_EXACT)
        # Also straight from CPU float32 into an ember tensor of the narrow dtype.
        torch.testing.assert_close(src.to("ember", dtype=dtype).cpu(), src.to(dtype),
                                   **ASSERT_EXACT)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bfloat16])
def test_to_ember_with_dtype(dtype):
    src = _src(torch.float64)
    e = src.to("ember", dtype=dtype)
    assert e.device.type == "ember" and e.dtype == dtype
    torch.testing.assert_close(e.cpu(), src.to(dtype), **ASSERT_EXACT)
    e2 = src.to(device="ember:1", dtype=dtype, copy=True)
    assert e2.device == torch.device("ember:1")
    torch.testing.assert_close(e2.cpu(), src.to(dtype), **ASSERT_EXACT)


def test_to_same_device_and_dtype_is_noop():
    e = torch.ones(3, device="ember")
    assert e.to("ember") is e
    assert e.to("ember:0", dtype=torch.float32) is e
    assert e.to("ember", copy=True) is not e


def test_broadcasting_copy():
    x = torch.zeros(4, 3, device="ember")
    x.copy_(torch.arange(3.0))
    torch.testing.assert_close(x.cpu(), torch.arange(3.0).expand(4, 3), **ASSERT_EXACT)
    x.copy_(torch.ones(3, device="ember"))
    torch.testing.assert_close(x.cpu(), torch.ones(4, 3), **ASSERT_EXACT)
    x.copy_(torch.tensor([[5.0], [6.0], [7.0], [8.0]]).to("ember"))
    torch.testing.assert_close(x.cpu(), torch.tensor([5.0, 6, 7, 8])[:, None].expand(4, 3))
    x.copy_(torch.tensor(9, dtype=torch.int64))  # 0-dim, other dtype
    torch.testing.assert_close(x.cpu(), torch.full((4, 3), 9.0))
    with pytest.raises(RuntimeError, match="must match the size|expand"):
        x.copy_(torch.ones(5))


def test_transposed_cpu_into_transposed_ember():
    src = torch.arange(20.0).reshape(4, 5)
    dst = torch.zeros(5, 4, device="ember")
    dst.t().copy_(src.t().t())  # contiguous src into transposed dst
    torch.testing.assert_close(dst.cpu(), src.t(), **ASSERT_EXACT)
    dst2 = torch.zeros(4, 5, device="ember").t()
    dst2.copy_(src.t())  # transposed src into transposed dst
    torch.testing.assert_close(dst2.cpu(), src.t(), **ASSERT_EXACT)
    assert dst2.stride() == (1, 5)


def test_ember_to_cpu_into_strided_cpu():
    src = torch.arange(12.0).reshape(3, 4)
    dst = torch.zeros(4, 3).t()
    dst.copy_(src.to("ember"))
    torch.testing.assert_close(dst, src, **ASSERT_EXACT)
    dst = torch.zeros(3, 8)[:, ::2]
    dst.copy_(src.to("ember").to(torch.float64))
    torch.testing.assert_close(dst, src, **ASSERT_EXACT)


@pytest.mark.parametrize("src_dev, dst_dev", [("ember:0", "ember:1"), ("ember:1", "ember:0")])
def test_across_devices(src_dev, dst_dev):
    cpu = torch.randn(6, 5)
    src = cpu.to(src_dev)
    moved = src.to(dst_dev)
    assert moved.device == torch.device(dst_dev)
    torch.testing.assert_close(moved.cpu(), cpu, **ASSERT_EXACT)
    dst = torch.zeros(5, 6, device=dst_dev, dtype=torch.float64).t()
    dst.copy_(src)
    torch.testing.assert_close(dst.cpu(), cpu.double(), **ASSERT_EXACT)
    src.fill_(0)  # the copy is complete and independent
    torch.testing.assert_close(moved.cpu(), cpu, **ASSERT_EXACT)


def test_across_devices_ordering_with_queued_work():
    src = torch.zeros(1000, device="ember:0")
    torch.ember._sleep(50, device=0)
    src.fill_(7)
    out = src.to("ember:1")
    torch.testing.assert_close(out.cpu(), torch.full((1000,), 7.0))


def _outcome(fn, *args):
    """fn's result, or the RuntimeError it raised."""
    try:
        return fn(*args)
    except RuntimeError as e:
        return e


@pytest.mark.parametrize("make", [
    lambda x: (x[1:], x[:-1]),
    lambda x: (x[:-1], x[1:]),
    lambda x: (x[2:8], x[0:6]),
    lambda x: (x.view(2, 5).t()[1:], x.view(2, 5).t()[:-1]),
    lambda x: (x, x),
    lambda x: (x[3:7], x[3:7]),
    lambda x: (x[:5], x[5:]),
    lambda x: (x[::2], x[1::2]),
    lambda x: (x, x.clone().flip(0)),
], ids=["shift-right", "shift-left", "middle", "2d-shift", "identical", "identical-slice",
        "disjoint-halves", "interleaved", "from-clone"])
def test_overlapping_self_copy(make):
    """Self-copies behave exactly as on CPU (and CUDA): a partial overlap is refused, an exact
    overlap is a no-op, disjoint parts of one storage copy normally."""
    def run(x):
        d, s = make(x)
        d.copy_(s)
        return x.cpu()

    cpu = _outcome(run, torch.arange(10.0))
    ember = _outcome(run, torch.arange(10.0).to("ember"))
    if isinstance(cpu, Exception):
        assert isinstance(ember, RuntimeError), f"CPU raised {cpu!r}, ember returned {ember}"
        assert "refer to a single memory location" in str(ember)
    else:
        assert not isinstance(ember, Exception), ember
        torch.testing.assert_close(ember, cpu, **ASSERT_EXACT)


def test_partial_overlap_copy_is_refused():
    x = torch.arange(10.0).to("ember")
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        x[1:].copy_(x[:-1])
    torch.testing.assert_close(x.cpu(), torch.arange(10.0), **ASSERT_EXACT)


def test_overlap_via_clone_2d():
    cpu = torch.arange(16.0).reshape(4, 4)
    ember = cpu.to("ember")
    cpu.t().copy_(cpu.clone())
    ember.t().copy_(ember.clone())
    torch.testing.assert_close(ember.cpu(), cpu, **ASSERT_EXACT)
    cpu[1:, 1:].copy_(cpu[:-1, :-1].clone())
    ember[1:, 1:].copy_(ember[:-1, :-1].clone())
    torch.testing.assert_close(ember.cpu(), cpu, **ASSERT_EXACT)


@pytest.mark.parametrize("pinned", [False, True])
def test_non_blocking_host_to_device(pinned):
    src = torch.arange(4096, dtype=torch.float32)
    if pinned:
        src = src.pin_memory()
        assert src.is_pinned()
    dst = torch.empty(4096, device="ember")
    torch.ember._sleep(20)
    dst.copy_(src, non_blocking=True)
    torch.ember.synchronize()
    torch.testing.assert_close(dst.cpu(), torch.arange(4096, dtype=torch.float32),
                               **ASSERT_EXACT)
    e = src.to("ember", non_blocking=True)
    torch.testing.assert_close(e.cpu(), torch.arange(4096, dtype=torch.float32), **ASSERT_EXACT)


@pytest.mark.parametrize("pinned", [False, True])
def test_non_blocking_device_to_host(pinned):
    src = torch.zeros(4096, device="ember")
    dst = torch.empty(4096, pin_memory=pinned)
    torch.ember._sleep(20)
    src.fill_(3.0)
    dst.copy_(src, non_blocking=True)
    torch.ember.synchronize()
    torch.testing.assert_close(dst, torch.full((4096,), 3.0), **ASSERT_EXACT)
    out = src.to("cpu", non_blocking=True)
    torch.ember.synchronize()
    torch.testing.assert_close(out, torch.full((4096,), 3.0), **ASSERT_EXACT)


def test_blocking_device_to_host_waits_for_queued_work():
    src = torch.zeros(1000, device="ember")
    torch.ember._sleep(50)
    src.fill_(5)
    torch.testing.assert_close(src.cpu(), torch.full((1000,), 5.0))  # no synchronize needed


def test_pinned_round_trip_with_conversion():
    src = torch.arange(12, dtype=torch.int32).reshape(3, 4).pin_memory()
    e = torch.empty(4, 3, device="ember").t()
    e.copy_(src, non_blocking=True)
    torch.testing.assert_close(e.cpu(), src.float(), **ASSERT_EXACT)


def test_pin_memory_rejected_on_ember():
    with pytest.raises(RuntimeError, match="only CPU tensors can be pinned"):
        torch.empty(3, device="ember", pin_memory=True)


# --- item -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, value", [
    (torch.float32, 1.5), (torch.float64, -2.25), (torch.float16, 0.5), (torch.bfloat16, 3.0),
    (torch.int64, 2**40 + 3), (torch.int32, -7), (torch.int16, 300), (torch.int8, -128),
    (torch.uint8, 255), (torch.bool, True), (torch.bool, False),
    (torch.complex64, 1 - 2j), (torch.complex128, 0.5 + 0.25j),
])
def test_item(dtype, value):
    t = torch.tensor(value, dtype=dtype).to("ember")
    got = t.item()
    assert got == value and type(got) is type(value)
    assert t.reshape(1).item() == value
    assert torch.tensor([0, value], dtype=dtype).to("ember")[1].item() == value


def test_item_of_many_elements_fails():
    with pytest.raises(RuntimeError, match="3 elements cannot be converted to Scalar"):
        torch.ones(3, device="ember").item()


def test_item_waits_for_queued_fill():
    t = torch.zeros((), device="ember")
    torch.ember._sleep(50)
    t.fill_(4)
    assert t.item() == 4.0


# --- fill_ and zero_ --------------------------------------------------------------------------

@pytest.mark.parametrize("view", ["row", "column", "transposed", "step", "diagonal", "scalar"])
@pytest.mark.parametrize("value_kind", ["python", "tensor0d-cpu", "tensor0d-ember"])
def test_fill_on_strided_views(view, value_kind):
    select = {
        "row": lambda x: x[1],
        "column": lambda x: x[:, 2],
        "transposed": lambda x: x.t()[1:3],
        "step": lambda x: x[::2, 1::2],
        "diagonal": lambda x: x.diagonal(),
        "scalar": lambda x: x[2, 3],
    }[view]
    value = {
        "python": 7.5,
        "tensor0d-cpu": torch.tensor(7.5),
        "tensor0d-ember": torch.tensor(7.5).to("ember"),
    }[value_kind]
    cpu = torch.arange(20.0).reshape(4, 5)
    ember = cpu.to("ember")
    select(cpu).fill_(value if not torch.is_tensor(value) else value.cpu())
    select(ember).fill_(value)
    torch.testing.assert_close(ember.cpu(), cpu, **ASSERT_EXACT)


@pytest.mark.parametrize("dtype, value", [
    (torch.float32, -1.25), (torch.float64, 1e300), (torch.float16, 65504.0),
    (torch.bfloat16, 3.140625), (torch.int64, 2**53 + 1), (torch.int32, -5), (torch.int8, 127),
    (torch.uint8, 200), (torch.bool, True), (torch.float32, float("inf")),
    (torch.complex64, 1 + 2j), (torch.int32, 3.7), (torch.float32, True),
])
def test_fill_dtypes(dtype, value):
    cpu = torch.zeros(3, 4, dtype=dtype)
    ember = cpu.to("ember")
    cpu[:, 1:3].fill_(value)
    ember[:, 1:3].fill_(value)
    torch.testing.assert_close(ember.cpu(), cpu, **ASSERT_EXACT)


def test_fill_nan():
    e = torch.zeros(4, device="ember")
    e[1:3].fill_(float("nan"))
    assert e.cpu().isnan().tolist() == [False, True, True, False]


def test_fill_with_non_0dim_tensor_fails():
    with pytest.raises(RuntimeError, match="only supports 0-dimension value tensor"):
        torch.zeros(3, device="ember").fill_(torch.ones(2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16,
                                   torch.complex64])
def test_zero_on_strided_views(dtype):
    cpu = (torch.arange(1, 25).reshape(4, 6) % 7).to(dtype)
    ember = cpu.to("ember")
    for select in (lambda x: x[:, ::3], lambda x: x.t()[2], lambda x: x[1:3, 1:5]):
        select(cpu).zero_()
        select(ember).zero_()
        torch.testing.assert_close(ember.cpu(), cpu, **ASSERT_EXACT)


def test_fill_is_ordered_after_queued_work():
    x = torch.zeros(10000, device="ember")
    torch.ember._sleep(30)
    x.fill_(1)
    x[::2].zero_()
    expected = torch.ones(10000)
    expected[::2] = 0
    torch.testing.assert_close(x.cpu(), expected, **ASSERT_EXACT)


# --- resize_ and set_ -------------------------------------------------------------------------

def test_resize_grow_keeps_prefix_then_shrink():
    x = torch.arange(6.0).to("ember")
    x.resize_(4, 5)
    assert x.shape == (4, 5) and x.is_contiguous()
    torch.testing.assert_close(x.cpu().flatten()[:6], torch.arange(6.0), **ASSERT_EXACT)
    assert x.untyped_storage().nbytes() >= 20 * 4
    x.resize_(2, 2)
    assert x.shape == (2, 2)
    torch.testing.assert_close(x.cpu(), torch.arange(4.0).reshape(2, 2), **ASSERT_EXACT)
    grown_storage = x.untyped_storage().nbytes()
    x.resize_(3)  # shrinking never reallocates
    assert x.untyped_storage().nbytes() == grown_storage
    torch.testing.assert_close(x.cpu(), torch.arange(3.0), **ASSERT_EXACT)


def test_resize_grow_after_queued_writes():
    x = torch.zeros(1000, device="ember")
    torch.ember._sleep(30)
    x.fill_(2)
    x.resize_(50000)
    torch.testing.assert_close(x.cpu()[:1000], torch.full((1000,), 2.0), **ASSERT_EXACT)


def test_resize_memory_format():
    x = torch.empty(0, device="ember")
    x.resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert x.stride() == torch.empty(2, 3, 4, 5, memory_format=torch.channels_last).stride()
    assert x.is_contiguous(memory_format=torch.channels_last)


def test_resize_as_and_empty_out():
    x = torch.ones(2, device="ember")
    x.resize_as_(torch.empty(3, 3))
    assert x.shape == (3, 3)
    x.resize_(0)
    assert x.numel() == 0


def test_set_to_another_tensors_storage():
    src = torch.arange(12.0).to("ember")
    x = torch.empty(0, device="ember")
    x.set_(src)
    assert x.shape == src.shape and x.data_ptr() == src.data_ptr()
    x.set_(src.untyped_storage(), 2, (2, 3), (1, 2))
    assert x.shape == (2, 3) and x.stride() == (1, 2) and x.storage_offset() == 2
    expected = torch.as_strided(torch.arange(12.0), (2, 3), (1, 2), 2)
    torch.testing.assert_close(x.cpu(), expected, **ASSERT_EXACT)
    x.fill_(-1)  # shares memory with src
    ref = torch.arange(12.0)
    ref.as_strided((2, 3), (1, 2), 2).fill_(-1)
    torch.testing.assert_close(src.cpu(), ref, **ASSERT_EXACT)
    y = torch.empty(0, device="ember")
    y.set_(src.untyped_storage())
    assert y.shape == (12,)
    torch.testing.assert_close(y.cpu(), ref, **ASSERT_EXACT)
    y.set_()
    assert y.numel() == 0


def test_set_grows_storage_when_needed():
    x = torch.empty(0, device="ember")
    s = torch.zeros(4, device="ember").untyped_storage()
    x.set_(s, 0, (8,), (1,))
    assert x.untyped_storage().nbytes() >= 32


@pytest.mark.parametrize("self_device", ["ember:0", "cpu"])
def test_set_across_devices_fails(self_device):
    # As checkSetStorage on CPU/CUDA: a tensor cannot adopt a storage on another device.
    x = torch.empty(0, device=self_device)
    with pytest.raises(RuntimeError, match="the devices must match"):
        x.set_(torch.ones(3, device="ember:1"))
    assert x.device == torch.device(self_device)


# --- creation, geometry, special sizes --------------------------------------------------------

@pytest.mark.parametrize("size, stride", [((2, 3), (1, 2)), ((3, 4), (8, 2)), ((2, 2), (0, 1)),
                                          ((4,), (3,)), ((), ())])
def test_empty_strided(size, stride):
    x = torch.empty_strided(size, stride, device="ember")
    assert x.shape == size and x.stride() == stride and x.device.type == "ember"
    cpu = torch.arange(float(x.numel())).reshape(size) if size else torch.tensor(1.0)
    if 0 not in stride:
        x.copy_(cpu)
        torch.testing.assert_close(x.cpu(), cpu, **ASSERT_EXACT)


def test_empty_channels_last():
    x = torch.empty(2, 3, 4, 5, device="ember", memory_format=torch.channels_last)
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    cpu = torch.randn(2, 3, 4, 5)
    x.copy_(cpu)
    torch.testing.assert_close(x.cpu(), cpu, **ASSERT_EXACT)
    y = cpu.to("ember", memory_format=torch.channels_last)
    assert y.stride() == x.stride()
    torch.testing.assert_close(y.cpu(), cpu, **ASSERT_EXACT)
    z = cpu.contiguous(memory_format=torch.channels_last).to("ember")  # preserve format
    assert z.stride() == x.stride()


@pytest.mark.parametrize("factory", [
    lambda: torch.empty(0, 3, device="ember"),
    lambda: torch.zeros(4, 0, device="ember"),
    lambda: torch.ones(0, device="ember", dtype=torch.int64),
    lambda: torch.tensor([], device="ember"),
    lambda: torch.empty(3, 0, device="ember").t(),
])
def test_zero_element_tensors(factory):
    x = factory()
    assert x.numel() == 0 and x.device.type == "ember"
    assert x.cpu().shape == x.shape
    x.fill_(1)
    x.zero_()
    x.copy_(torch.empty(x.shape))
    assert x.to("ember:1").shape == x.shape
    assert x.clone().shape == x.shape


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
def test_zero_dim_tensors(dtype):
    cpu = torch.tensor(3, dtype=dtype)
    e = cpu.to("ember")
    assert e.shape == () and e.dim() == 0
    torch.testing.assert_close(e.cpu(), cpu, **ASSERT_EXACT)
    e.fill_(0)
    assert e.item() == 0
    e.copy_(torch.tensor(1, dtype=torch.int32))
    assert e.item() == 1
    assert e.to("ember:1").item() == 1


@pytest.mark.parametrize("factory, expected", [
    (lambda d: torch.zeros(2, 3, device=d), torch.zeros(2, 3)),
    (lambda d: torch.ones(2, 3, device=d, dtype=torch.int8), torch.ones(2, 3, dtype=torch.int8)),
    (lambda d: torch.full((3,), 2.5, device=d), torch.full((3,), 2.5)),
    (lambda d: torch.tensor([[1, 2], [3, 4]], device=d), torch.tensor([[1, 2], [3, 4]])),
    (lambda d: torch.zeros_like(torch.empty(2, 2, device=d)), torch.zeros(2, 2)),
    (lambda d: torch.ones(2, 2, device=d).new_full((3,), 4.0), torch.full((3,), 4.0)),
])
def test_creation(factory, expected):
    x = factory("ember")
    assert x.device.type == "ember"
    torch.testing.assert_close(x.cpu(), expected, **ASSERT_EXACT)


def test_large_round_trip():
    n = 16 * 1024 * 1024
    cpu = torch.arange(n, dtype=torch.float32)
    e = cpu.to("ember")
    assert e.numel() == n
    back = e.cpu()
    assert torch.equal(back, cpu)
    e2 = torch.empty(n, dtype=torch.float16, device="ember")
    e2.copy_(e)  # on-device conversion of a large tensor
    assert torch.equal(e2.cpu(), cpu.to(torch.float16))


# --- native views -----------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda x: x.view(3, 4),
    lambda x: x.view(-1),
    lambda x: x.reshape(2, 6),
    lambda x: x.as_strided((2, 2), (1, 4), 1),
    lambda x: x.view(12).unfold(0, 4, 2),
    lambda x: x.t(),
    lambda x: x[1:, ::2],
    lambda x: x.unsqueeze(0),
    lambda x: x[:1].expand(5, 6),
    lambda x: x.diagonal(),
    lambda x: x.narrow(1, 2, 3),
    lambda x: x.permute(1, 0),
    lambda x: x.select(1, 3),
    lambda x: x.flatten(),
    lambda x: x.unbind(0)[1],
    lambda x: x.chunk(3, dim=1)[2],
    lambda x: x.split(1, dim=0)[0].squeeze(0),
], ids=["view", "view-1", "reshape", "as_strided", "unfold", "t", "slice", "unsqueeze",
        "expand", "diagonal", "narrow", "permute", "select", "flatten", "unbind", "chunk",
        "split"])
def test_views_match_cpu(make):
    cpu = torch.arange(12.0).reshape(2, 6)
    ember = cpu.to("ember")
    v_cpu, v = make(cpu), make(ember)
    assert v.shape == v_cpu.shape and v.stride() == v_cpu.stride()
    assert v.storage_offset() == v_cpu.storage_offset()
    assert v.untyped_storage().data_ptr() == ember.untyped_storage().data_ptr()
    torch.testing.assert_close(v.cpu(), v_cpu, **ASSERT_EXACT)


def test_view_as_real_and_complex():
    cpu = torch.complex(torch.arange(4.0), -torch.arange(4.0))
    e = cpu.to("ember")
    r = torch.view_as_real(e)
    assert r.shape == (4, 2) and r.dtype == torch.float32
    assert r.untyped_storage().data_ptr() == e.untyped_storage().data_ptr()
    torch.testing.assert_close(r.cpu(), torch.view_as_real(cpu), **ASSERT_EXACT)
    r[:, 1].fill_(9)
    torch.testing.assert_close(e.cpu(), torch.complex(torch.arange(4.0), torch.full((4,), 9.0)))
    c = torch.view_as_complex(r)
    assert c.dtype == torch.complex64
    torch.testing.assert_close(c.cpu(), e.cpu(), **ASSERT_EXACT)


def test_invalid_view_fails_like_cpu():
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        torch.zeros(4, 6, device="ember").t().view(24)
    with pytest.raises(RuntimeError, match="shape '\\[5\\]' is invalid for input of size 24"):
        torch.zeros(4, 6, device="ember").view(5)
