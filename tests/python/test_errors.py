"""Errors: asynchronous kernel failures and when they surface, synchronous mode, invalid devices,
mixed-device operands and unsupported dtypes."""
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
import torch_ember

ASSERT_MSG = "Expected Tensor with single nonzero value"


def _drain():
    """Consume any error a failing test left queued, so it does not surface in the next one."""
    for i in range(torch.ember.device_count()):
        for _ in range(2):
            try:
                torch.ember.synchronize(i)
            except RuntimeError:
                pass


@pytest.fixture(autouse=True)
def _clean_state():
    yield
    torch_ember._C._set_sync_mode(False)
    _drain()
    for i in range(torch.ember.device_count()):
        torch.accelerator.set_stream(torch.ember.default_stream(i))
    torch.ember.set_device(0)


def _device_works(device="ember"):
    x = torch.randn(32, 32)
    torch.testing.assert_close((x.to(device) * 2 + 1).cpu(), x * 2 + 1)


# --- asynchronous kernel errors ----------------------------------------------------------------


def test_assert_async_returns_and_synchronize_raises():
    t = torch.tensor(0, device="ember")
    torch._assert_async(t)  # queued: no error yet
    with pytest.raises(RuntimeError, match=rf"'_assert_async'.*{ASSERT_MSG}"):
        torch.ember.synchronize()
    torch.ember.synchronize()  # reported once: the device is usable again
    _device_works()


@pytest.mark.parametrize(
    "sync",
    [
        pytest.param(lambda t: torch.ember.synchronize(), id="torch.ember.synchronize"),
        pytest.param(lambda t: t.item(), id="item"),
        pytest.param(lambda t: t.cpu(), id="cpu"),
        pytest.param(lambda t: torch.ember.current_stream().synchronize(), id="stream.synchronize"),
        pytest.param(lambda t: torch.accelerator.synchronize(), id="accelerator.synchronize"),
        # An op with no ember kernel: the fallback copies inputs to the host, which synchronizes.
        pytest.param(lambda t: torch.nextafter(t.bfloat16(), t.bfloat16()), id="fallback-op"),
    ],
)
def test_queued_error_surfaces_at_the_next_synchronizing_call(sync):
    t = torch.tensor(0, device="ember")
    torch._assert_async(t)
    with pytest.raises(RuntimeError, match=rf"_assert_async.*{ASSERT_MSG}"):
        sync(t)
    torch.ember.synchronize()
    assert torch.tensor(5, device="ember").item() == 5


def test_event_synchronize_raises_queued_error():
    torch._assert_async(torch.tensor(0, device="ember"))
    e = torch.ember.Event()
    e.record()
    with pytest.raises(RuntimeError, match=rf"_assert_async.*{ASSERT_MSG}"):
        e.synchronize()
    torch.ember.synchronize()


def test_assert_async_custom_message():
    torch._assert_async(torch.tensor(0.0, device="ember"), "custom msg")
    with pytest.raises(RuntimeError, match=r"_assert_async.*custom msg"):
        torch.ember.synchronize()
    _device_works()


@pytest.mark.parametrize(
    "value",
    [torch.tensor(1), torch.tensor(0.5), torch.tensor(True), torch.tensor(-3, dtype=torch.int8),
     torch.tensor(float("nan")), torch.tensor(1 + 0j), torch.tensor(0 + 2j)],
    ids=str,
)
def test_assert_async_passes_for_nonzero(value):
    torch._assert_async(value.to("ember"))
    torch.ember.synchronize()


@pytest.mark.parametrize(
    "value",
    [torch.tensor(0), torch.tensor(0.0), torch.tensor(-0.0), torch.tensor(False),
     torch.tensor(0j), torch.tensor(complex(-0.0, 0.0)), torch.tensor(complex(0.0, -0.0)),
     torch.tensor(0, dtype=torch.bfloat16)],
    ids=lambda v: f"{v.item()}-{v.dtype}",
)
def test_assert_async_fails_for_zero_like_cpu(value):
    with pytest.raises(RuntimeError, match=ASSERT_MSG):  # what the CPU does
        torch._assert_async(value)
    torch._assert_async(value.to("ember"))
    with pytest.raises(RuntimeError, match=ASSERT_MSG):
        torch.ember.synchronize()


def test_assert_async_checks_numel_at_the_call():
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        torch._assert_async(torch.zeros(2, device="ember"))
    with pytest.raises(RuntimeError, match="no values is ambiguous"):
        torch._assert_async(torch.zeros(0, device="ember"))


def test_assert_async_on_a_view_reads_the_viewed_element():
    t = torch.tensor([1, 0, 1], device="ember")
    torch._assert_async(t[0])
    torch._assert_async(t[2])
    torch.ember.synchronize()
    torch._assert_async(t[1])
    with pytest.raises(RuntimeError, match=ASSERT_MSG):
        torch.ember.synchronize()


def test_assert_async_sees_queued_writes():
    t = torch.ones((), device="ember")
    torch.ember._sleep(100)
    t.zero_()  # queued before the check, on the same stream
    torch._assert_async(t)
    with pytest.raises(RuntimeError, match=ASSERT_MSG):
        torch.ember.synchronize()


def test_error_on_a_side_stream():
    s = torch.ember.Stream()
    with torch.ember.stream(s):
        torch._assert_async(torch.tensor(0, device="ember"))
    with pytest.raises(RuntimeError, match=rf"_assert_async.*{ASSERT_MSG}"):
        s.synchronize()
    s.synchronize()


def test_error_belongs_to_its_device():
    torch._assert_async(torch.tensor(0, device="ember:1"))
    torch.ember.synchronize(0)  # device 0 had no failure
    with pytest.raises(RuntimeError, match=rf"ember:1.*{ASSERT_MSG}"):
        torch.ember.synchronize(1)
    torch.ember.synchronize(1)
    _device_works("ember:1")


def test_only_the_first_error_is_kept():
    t = torch.tensor(0, device="ember")
    torch._assert_async(t, "first")
    torch._assert_async(t, "second")
    with pytest.raises(RuntimeError, match="first") as info:
        torch.ember.synchronize()
    assert "second" not in str(info.value)
    torch.ember.synchronize()


# --- synchronous mode --------------------------------------------------------------------------


def test_sync_mode_toggle_raises_at_the_call():
    assert torch_ember._C._sync_mode() is False
    t = torch.tensor(0, device="ember")
    torch_ember._C._set_sync_mode(True)
    try:
        assert torch_ember._C._sync_mode() is True
        with pytest.raises(RuntimeError, match=rf"_assert_async.*{ASSERT_MSG}"):
            torch._assert_async(t)
        torch.ember.synchronize()  # nothing left over
        torch._assert_async(torch.tensor(1, device="ember"))
        _device_works()
    finally:
        torch_ember._C._set_sync_mode(False)
    assert torch_ember._C._sync_mode() is False
    torch._assert_async(t)  # asynchronous again
    with pytest.raises(RuntimeError, match=ASSERT_MSG):
        torch.ember.synchronize()


def test_ember_sync_env_raises_at_the_call():
    code = textwrap.dedent(
        """
        import torch, torch_ember
        assert torch_ember._C._sync_mode() is True
        t = torch.tensor(0, device="ember")
        try:
            torch._assert_async(t, "custom msg")
        except RuntimeError as e:
            print("RAISED_AT_CALL", e)
        else:
            print("NOT_RAISED")
        torch.ember.synchronize()  # already reported
        x = torch.randn(16)
        assert torch.equal((x.to("ember") + 1).cpu(), x + 1)
        print("DEVICE_OK")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "EMBER_SYNC": "1"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "RAISED_AT_CALL" in proc.stdout, proc.stdout
    assert "_assert_async" in proc.stdout and "custom msg" in proc.stdout
    assert "DEVICE_OK" in proc.stdout


# --- devices -----------------------------------------------------------------------------------


def _bad_index():
    return max(7, torch.ember.device_count())


def test_invalid_device_index_names_the_device_count():
    idx, n = _bad_index(), torch.ember.device_count()
    expected = rf"invalid ember device index {idx}: there are {n} ember devices"
    with pytest.raises(ValueError, match=expected):
        torch.empty(1, device=f"ember:{idx}")
    with pytest.raises(ValueError, match=expected):
        torch.ones(2).to(f"ember:{idx}")
    with pytest.raises(ValueError, match=expected):
        torch.ember.set_device(idx)
    with pytest.raises(ValueError, match=expected):
        torch.ember.Stream(device=idx)
    with pytest.raises(ValueError, match=expected):
        torch.ember.synchronize(idx)
    assert torch.ember.current_device() == 0
    _device_works()


CPU = torch.ones(2, 2)


@pytest.mark.parametrize(
    "op",
    [
        pytest.param(lambda a, c: a + c, id="add"),
        pytest.param(lambda a, c: c + a, id="cpu+ember"),
        pytest.param(lambda a, c: a * c, id="mul"),
        pytest.param(lambda a, c: a.add_(c), id="add_"),
        pytest.param(lambda a, c: torch.mm(a, c), id="mm"),
        pytest.param(lambda a, c: a @ c, id="matmul"),
        pytest.param(lambda a, c: torch.addmm(a, a, c), id="addmm"),
        pytest.param(lambda a, c: torch.bmm(a[None], c[None]), id="bmm"),
        pytest.param(lambda a, c: torch.dot(a[0], c[0]), id="dot"),
        pytest.param(lambda a, c: torch.nn.functional.linear(a, c), id="linear"),
        pytest.param(lambda a, c: torch.cat([a, c]), id="cat"),
        pytest.param(lambda a, c: torch.stack([a, c]), id="stack"),
        pytest.param(lambda a, c: torch.where(a > 0, a, c), id="where"),
        pytest.param(lambda a, c: a.index_select(0, torch.tensor([0])), id="index_select"),
    ],
)
def test_mixing_ember_and_cpu_tensors_raises(op):
    # As CPU + CUDA: a non-scalar CPU operand is an error, never a silent host computation.
    a = torch.ones(2, 2, device="ember")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        op(a, CPU)


@pytest.mark.parametrize(
    "op",
    [
        pytest.param(lambda a, b: a + b, id="add"),
        pytest.param(lambda a, b: torch.mm(a, b), id="mm"),
        pytest.param(lambda a, b: torch.cat([a, b]), id="cat"),
    ],
)
def test_mixing_ember_devices_raises(op):
    a = torch.ones(2, 2, device="ember:0")
    b = torch.ones(2, 2, device="ember:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        op(a, b)


def test_cpu_scalar_tensor_mixes_with_ember():
    # 0-dim CPU tensors are allowed with device tensors, as with CUDA.
    a = torch.arange(4.0, device="ember")
    out = a + torch.tensor(2.0)
    assert out.device == torch.device("ember:0")
    torch.testing.assert_close(out.cpu(), torch.arange(4.0) + 2)


def test_copy_between_devices_is_allowed():
    src = torch.arange(6.0, device="ember:1")
    dst = torch.zeros(6, device="ember:0")
    dst.copy_(src)
    torch.testing.assert_close(dst.cpu(), torch.arange(6.0))
    torch.testing.assert_close(torch.arange(6.0).to("ember:1").to("ember:0").cpu(),
                               torch.arange(6.0))


# --- dtypes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.complex32, torch.uint16,
                                   torch.uint32, torch.uint64])
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_storage_dtypes_work_or_fail_exactly_as_on_cpu(dtype):
    # Held and copied bit for bit; ops on them go through the CPU, which computes what it can
    # and refuses the rest with its own message.
    src = (torch.randn(6) * 4).to(dtype)
    e = src.to("ember")
    assert e.dtype == dtype and e.device.type == "ember"
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[src.element_size()]
    assert torch.equal(e.cpu().view(width), src.view(width))
    assert torch.equal(e[::2].contiguous().cpu().view(width), src[::2].contiguous().view(width))
    assert torch.equal(torch.zeros(3, dtype=dtype, device="ember").cpu().view(width),
                       torch.zeros(3, dtype=dtype).view(width))
    try:
        expected = src + src
    except Exception as err:  # noqa: BLE001 - the CPU's own refusal is the expectation
        with pytest.raises(type(err), match=re.escape(str(err).splitlines()[0][:40])):
            (e + e).cpu()
    else:
        assert torch.equal((e + e).cpu().view(width), expected.view(width))
    # Conversions into the dtype, contiguous or into a strided destination (x.t().to(dtype)
    # keeps the transposed strides), give the CPU's bits.
    f = torch.randn(4, 6) * 4
    for x in (f, f.t(), f[:, ::2]):
        assert torch.equal(x.to("ember").to(dtype).cpu().view(width), x.to(dtype).view(width))
        # and strided tensors of the dtype itself, both ways
        xs = x.to(dtype)
        back = xs.to("ember").cpu()
        assert back.shape == xs.shape and torch.equal(back.view(width), xs.view(width))
        assert torch.equal(xs.to("ember").t().cpu().view(width), xs.t().view(width))
    _device_works()


@pytest.mark.parametrize("dtype", [torch.qint8, torch.quint8, torch.qint32])
def test_quantized_dtype_is_refused(dtype):
    # As for CUDA (QuantizedCUDA), the dispatcher refuses before the backend sees the dtype:
    # the message names the Quantized<backend> dispatch key, not the dtype.
    with pytest.raises(NotImplementedError, match=r"'aten::empty\.memory_format'.*'Quantizedember'"):
        torch.empty(2, dtype=dtype, device="ember")
    _device_works()


def test_sparse_layout_is_refused():
    with pytest.raises(NotImplementedError, match="sparse tensors are not supported on ember"):
        torch.empty(2, 2, device="ember", layout=torch.sparse_coo)
    _device_works()


_REDUCTIONS_WITH_OUT = {
    "logsumexp": lambda x, o: torch.logsumexp(x, 1, True, out=o),
    "sum": lambda x, o: torch.sum(x, 1, True, out=o),
    "amax": lambda x, o: torch.amax(x, 1, True, out=o),
    "mean": lambda x, o: torch.mean(x, 1, True, out=o),
    "argmax": lambda x, o: torch.argmax(x, 1, True, out=o.long()),
    "cumsum": lambda x, o: torch.cumsum(x, 1, out=o),
    "sort": lambda x, o: torch.sort(x, 1, out=(o, o.long())),
}


@pytest.mark.parametrize("name", list(_REDUCTIONS_WITH_OUT))
def test_cpu_out_for_ember_input_is_refused_untouched(name):
    x = torch.randn(3, 4, device="ember")
    for _ in range(3):  # repeated: the refusal must leave nothing queued behind it
        out = torch.full((3, 1), 7.0)
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            _REDUCTIONS_WITH_OUT[name](x, out)
        assert out.shape == (3, 1) and bool((out == 7).all())  # not resized, not written
    _device_works()


def test_refused_cpu_out_leaves_a_clean_exit():
    code = ("import torch, torch_ember\n"
            "x = torch.randn(3, 4, device='ember')\n"
            "for _ in range(3):\n"
            "    try: torch.logsumexp(x, 1, True, out=torch.empty(3, 1))\n"
            "    except RuntimeError: pass\n"
            "print(torch.amax(x, 1).sum().item() > -100)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr[-2000:]


def test_zero_dim_ember_input_with_cpu_out():
    x = torch.tensor(2.0, device="ember")
    for fn in (lambda o: torch.amax(x, out=o), lambda o: torch.exp(x, out=o), lambda o: torch.sum(x, 0, out=o)):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            fn(torch.empty(()))


def test_cat_into_integer_out_is_refused_like_cpu():
    parts = [torch.randn(3, device="ember")] * 2
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        torch.cat(parts, out=torch.empty(6, dtype=torch.int64, device="ember"))
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        torch.stack(parts, out=torch.empty(2, 3, dtype=torch.int64, device="ember"))


def test_roll_of_zero_dim_fails_at_the_call():
    with pytest.raises(IndexError, match="Dimension specified as 0 but tensor has no dimensions"):
        torch.roll(torch.tensor(1.0, device="ember"), 1, 0)
    _device_works()  # nothing deferred to the next op


@pytest.mark.parametrize("op", ["gather", "index_select"])
def test_out_aliasing_an_input_is_refused(op):
    x = torch.randn(4, 4, device="ember")
    idx = torch.zeros(4, 4, dtype=torch.long, device="ember") if op == "gather" else \
        torch.tensor([0, 1, 2, 3], device="ember")
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        torch.gather(x, 1, idx, out=x) if op == "gather" else torch.index_select(x, 0, idx, out=x)


@pytest.mark.parametrize("call, message", [
    (lambda x: F.pad(x[0, :, 0, :3], (3, 3), mode="reflect"), "Padding size should be less than"),
    (lambda x: F.pad(x[:, :, :2, :2], (2, 2, 0, 0), mode="reflect"), "Padding size should be less than"),
    (lambda x: F.pad(x.unsqueeze(2)[..., :2, :2, :2], (0, 0, 0, 0, 2, 2), mode="reflect"),
     "Padding size should be less than"),
    (lambda x: F.pad(x[0, :, 0, :3], (-4, 1), mode="replicate"), "is too small"),
    (lambda x: F.smooth_l1_loss(x, x.flip(-1), beta=-1.0), "negative values for beta"),
    # A misspelled side searched from the left; an out-of-range sorter failed later, on the device.
    (lambda x: torch.searchsorted(x.flatten().sort()[0], x[0, 0], side="Right"), "side can only be"),
    (lambda x: torch.searchsorted(x.flatten().sort()[0], x[0, 0], side="left", right=True), "opposites"),
    (lambda x: torch.searchsorted(x[0, 0, 0], x[0, 0], sorter=torch.tensor([0, 1, 2, 4]).to(x.device)),
     "sorter index out of range"),
])
def test_decomposed_ops_check_arguments_like_cpu(call, message):
    # Reflect padding as wide as the input would wrap around instead of raising.
    x = torch.randn(1, 2, 4, 4)
    with pytest.raises(RuntimeError, match=message):
        call(x)
    with pytest.raises(RuntimeError, match=message):
        call(x.to("ember"))
    torch.testing.assert_close(F.pad(x.to("ember"), (3, 3, 2, 2), mode="reflect").cpu(),
                               F.pad(x, (3, 3, 2, 2), mode="reflect"))


def test_compiled_decompositions_check_arguments_like_cpu():
    """The compiled graph makes the CPU kernel's argument checks too, at compile time."""
    a, b = torch.randn(4), torch.randn(4)
    f = torch.compile(lambda x, y: F.smooth_l1_loss(x, y, beta=-1.0), backend="ember")
    with pytest.raises(Exception, match="smooth_l1_loss does not support negative values for beta"):
        f(a.to("ember"), b.to("ember"))
    g = torch.compile(lambda x, y: F.smooth_l1_loss(x, y, beta=0.5), backend="ember")
    torch.testing.assert_close(g(a.to("ember"), b.to("ember")).cpu(), F.smooth_l1_loss(a, b, beta=0.5))


def test_gelu_rejects_unknown_approximation_like_cpu():
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        torch.nn.functional.gelu(torch.randn(3, device="ember"), approximate="asdf")


@pytest.mark.parametrize("op", ["addmm_", "baddbmm_", "conj_physical_"])
def test_complex_in_place_ops_match_cpu(op):
    g = torch.Generator().manual_seed(0)
    c = lambda *s: torch.randn(*s, dtype=torch.complex64, generator=g)  # noqa: E731
    args = {"addmm_": ((3, 3), (3, 4), (4, 3)), "baddbmm_": ((2, 3, 3), (2, 3, 4), (2, 4, 3)),
            "conj_physical_": ((5,),)}[op]
    ts = [c(*s) for s in args]
    ref = getattr(ts[0].clone(), op)(*ts[1:])
    got = getattr(ts[0].to("ember"), op)(*[t.to("ember") for t in ts[1:]])
    torch.testing.assert_close(got.cpu(), ref)


def test_out_and_in_place_rules_match_cpu():
    # Found by `ember conformance --properties`: each case is the CPU's behaviour.
    e = "ember"
    with pytest.raises(RuntimeError, match="same device"):  # a 0-dim CPU out= is an output, not a scalar
        torch.special.erfcx(torch.tensor(1.0, device=e), out=torch.empty(()))
    with pytest.raises(RuntimeError, match="same device"):
        torch.logical_not(torch.tensor(1.0, device=e), out=torch.empty((), dtype=torch.bool))
    for f in (lambda t, o: t.logical_and_(o), lambda t, o: t.heaviside_(o), lambda t, o: t.xlogy_(o)):
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            f(torch.zeros(5, 1, device=e), torch.ones(5, device=e))
    ones = torch.ones(2, 3, dtype=torch.long)
    out = torch.empty(2, 2, dtype=torch.long, device=e)
    assert torch.equal(torch.mm(ones.to(e), ones.t().to(e), out=out).cpu(), ones @ ones.t())
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype"):
        torch.mm(torch.ones(0, 3, device=e), torch.ones(3, 2, device=e), out=torch.empty(0, 2, dtype=torch.long, device=e))
    values, indices = torch.empty((), device=e), torch.empty((), dtype=torch.long, device=e)
    torch.mode(torch.tensor([3.0, 1.0, 3.0], device=e), out=(values, indices))
    assert values.item() == 3.0 and indices.item() in (0, 2)
    with pytest.raises(RuntimeError, match="bool tensor for result"):
        torch.all(torch.ones(3, device=e), out=torch.empty((), device=e))
    b = torch.ones(3, dtype=torch.bool, device=e)
    torch.testing.assert_close(torch.add(b, b, out=torch.empty(3, device=e)).cpu(), torch.ones(3))
    with pytest.raises(RuntimeError, match="bool tensor for result"):
        torch.any(torch.ones(2, 3, device=e), dim=(0,), out=torch.empty(3, device=e))
    with pytest.raises(RuntimeError, match="same device"):
        torch.addr(torch.ones(2, 3, device=e), torch.ones(2, device=e), torch.ones(3, device=e), out=torch.empty(2, 3))
    assert torch.bucketize(torch.ones(2, device=e), torch.empty(0, device=e)).dtype == torch.int64
    assert torch.searchsorted(torch.empty(0, device=e), torch.ones(2, device=e)).dtype == torch.int64


def test_sparse_tensors_are_refused_with_the_way_out():
    # A sparse embedding's gradient, a dense-to-sparse conversion and a sparse tensor moved to
    # ember failed with the dispatcher's list of every backend it knows.
    emb = torch.nn.Embedding(5, 4, sparse=True).to("ember")
    with pytest.raises(NotImplementedError, match=r"sparse tensors are not supported on ember.*sparse=False"):
        emb(torch.tensor([[1, 2, 0]], device="ember")).sum().backward()
    with pytest.raises(NotImplementedError, match="sparse tensors are not supported on ember"):
        torch.randn(3, 3, device="ember").to_sparse()
    with pytest.raises(NotImplementedError, match="sparse tensors are not supported on ember"):
        torch.randn(3, 3).to_sparse().to("ember")
    # Compressed layouts built from ember tensors (torch_geometric's to_torch_csr_tensor does this)
    crow, col, val = (torch.tensor(v, device="ember") for v in ([0, 1, 2, 3], [1, 0, 2], [1.0, 2.0, 3.0]))
    for build in (lambda: torch.sparse_csr_tensor(crow, col, val, (3, 3)),
                  lambda: torch.sparse_csc_tensor(crow, col, val, (3, 3)),
                  lambda: torch.sparse_bsr_tensor(crow, col, val.view(3, 1, 1), (3, 3))):
        with pytest.raises(NotImplementedError, match="sparse tensors are not supported on ember"):
            build()
    cpu_csr = torch.sparse_csr_tensor(crow.cpu(), col.cpu(), val.cpu(), (3, 3))  # the CPU's are untouched
    torch.testing.assert_close(cpu_csr @ torch.ones(3, 2), torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]))
    dense = torch.nn.Embedding(5, 4).to("ember")  # the dense form trains as usual
    dense(torch.tensor([[1, 2, 0]], device="ember")).sum().backward()
    assert dense.weight.grad.layout == torch.strided


def test_argument_errors_come_at_the_call_as_on_the_cpu():
    # A wrong-sized nll_loss weight failed later, in the kernel; heaviside of mixed dtypes ran.
    logp = torch.randn(4, 3, device="ember").log_softmax(-1)
    target = torch.tensor([0, 1, 2, 1], device="ember")
    with pytest.raises(RuntimeError, match="weight tensor should be defined either for all 3 classes"):
        torch.nn.functional.nll_loss(logp, target, weight=torch.ones(4, device="ember"))
    x = torch.tensor([-1.0, 0.0, 2.0], device="ember")
    with pytest.raises(RuntimeError, match="different dtypes"):
        torch.heaviside(x, torch.tensor([0.5], dtype=torch.float64, device="ember"))
    torch.testing.assert_close(torch.heaviside(x, torch.tensor([0.5], device="ember")).cpu(),
                               torch.heaviside(x.cpu(), torch.tensor([0.5])))


def test_complex_fill_values_of_real_tensors_raise_the_cpus_errors():
    for make in (lambda x: x.index_fill_(1, torch.tensor([0], device=x.device), 1 + 2j),
                 lambda x: x.fill_(1 + 2j), lambda x: x.masked_fill_(x > 0, 1j)):
        with pytest.raises(RuntimeError) as cpu:
            make(torch.zeros(3, 4))
        with pytest.raises(RuntimeError, match=re.escape(str(cpu.value).splitlines()[0])):
            make(torch.zeros(3, 4, device="ember"))
