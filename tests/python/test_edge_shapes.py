"""Empty and 0-d tensors through the native kernels: results, shapes and dtypes as on the CPU,
and no CPU fallback — an empty batch is a normal thing for a data loader's last step or a
masked-out MoE expert, and should not leave the device."""
import pytest
import torch
import torch.nn.functional as F

import torch_ember  # noqa: F401

E = torch.tensor([])
CASES = {
    "cat_of_legacy_empties": lambda d: torch.cat([E.to(d), E.to(d)], dim=0),
    "cat_of_legacy_empties_any_dim": lambda d: torch.cat([E.to(d), E.to(d)], dim=3),
    "gather_0d_self": lambda d: torch.gather(torch.tensor(3.0, device=d), 0, torch.tensor([0], device=d)),
    "gather_0d_self_0d_index": lambda d: torch.gather(torch.tensor(3.0, device=d), 0, torch.tensor(0, device=d)),
    "gather_empty_index_of_any_rank": lambda d: torch.gather(torch.randn(5, device=d), 0,
                                                             torch.zeros(2, 0, dtype=torch.uint8, device=d)),
    "gather_int32_index": lambda d: torch.gather(torch.arange(10.0, device=d).view(2, 5), 1,
                                                 torch.tensor([[0, 4], [1, 2]], dtype=torch.int32, device=d)),
    "avg_pool1d_empty_batch": lambda d: F.avg_pool1d(torch.ones(0, 3, 9, device=d), 3, padding=1),
    "max_pool2d_empty_batch": lambda d: F.max_pool2d(torch.ones(0, 3, 8, 8, device=d), 2),
    "adaptive_avg_pool1d_empty_batch": lambda d: F.adaptive_avg_pool1d(torch.ones(0, 8, 8, device=d), 5),
    "adaptive_max_pool2d_empty_batch": lambda d: F.adaptive_max_pool2d(torch.ones(0, 2, 8, 8, device=d), 3),
    "layer_norm_no_rows": lambda d: F.layer_norm(torch.ones(0, 4, device=d), (4,)),
    "rms_norm_no_rows": lambda d: F.rms_norm(torch.ones(0, 4, device=d), (4,)),
    "mean_of_empty_kept_dim": lambda d: torch.ones(0, 5, device=d).mean(1),
    "amin_keeping_an_empty_dim": lambda d: torch.ones(5, 0, 5, device=d).amin(0),
    "var_keeping_an_empty_dim": lambda d: torch.ones(0, 5, device=d).var(1),
    "std_mean_keeping_an_empty_dim": lambda d: torch.std_mean(torch.ones(0, 5, device=d), 1)[0],
    "searchsorted_empty": lambda d: torch.searchsorted(torch.ones(0, device=d), torch.ones(0, device=d)),
    "searchsorted_into_empty": lambda d: torch.searchsorted(torch.ones(0, device=d), torch.ones(3, device=d)),
    "searchsorted_empty_sorter": lambda d: torch.searchsorted(torch.ones(0, device=d), torch.ones(0, device=d),
                                                              sorter=torch.ones(0, dtype=torch.long, device=d)),
    "searchsorted_with_sorter": lambda d: torch.searchsorted(
        torch.tensor([[3.0, 1, 2, 5], [0, -1, 7, 4]], device=d), torch.tensor([[2.5, 0, 9], [-2, 4, 4]], device=d),
        sorter=torch.tensor([[1, 2, 0, 3], [1, 0, 3, 2]], device=d), right=True),
    "index_select_0d_self": lambda d: torch.tensor(3.0, device=d).index_select(0, torch.tensor([0], device=d)),
    "index_add_0d_self": lambda d: torch.tensor(1.0, device=d).index_add(0, torch.tensor([0], device=d),
                                                                         torch.tensor(2.0, device=d), alpha=-3),
    "index_add_0d_bool": lambda d: torch.tensor(False, device=d).index_add(0, torch.tensor([0], device=d),
                                                                           torch.tensor(True, device=d), alpha=True),
    "mean_of_empty": lambda d: torch.ones(0, 5, device=d).mean(),
    "var_of_empty": lambda d: torch.ones(0, device=d).var(),
    "std_over_an_empty_dim": lambda d: torch.ones(0, 5, device=d).std(0, keepdim=True),
    "var_mean_of_empty": lambda d: torch.stack(torch.var_mean(torch.ones(0, 5, device=d), 0)),
    "norm_over_an_empty_dim": lambda d: torch.zeros(3, 0, device=d).norm(dim=-1),
    "vector_norm_of_empty": lambda d: torch.linalg.vector_norm(torch.zeros(2, 0, 4, device=d), 0.5, (1, 2), True),
    "norm_keeping_an_empty_dim": lambda d: torch.linalg.vector_norm(torch.zeros(0, 3, device=d), 3, 1),
    "scatter_scalar_with_reduce": lambda d: torch.ones(3, 5, device=d).scatter_(
        0, torch.tensor([[0, 1, 2, 0, 1]], device=d), 2.0, reduce="multiply"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_cpu_natively(name, native_only):
    want, got = CASES[name]("cpu"), CASES[name]("ember")
    assert got.device.type == "ember" and got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)


@pytest.mark.parametrize("fn", [
    lambda d: torch.ones(0, 5, device=d).amax(0),  # a reduced dim of size 0
    lambda d: torch.linalg.vector_norm(torch.zeros(3, 0, device=d), float("inf"), -1),
    lambda d: F.avg_pool2d(torch.ones(2, 0, 8, 8, device=d), 2),  # empty channels
    lambda d: torch.gather(torch.randn(5, 3, device=d), 0, torch.zeros(2, dtype=torch.long, device=d)),
    lambda d: torch.tensor(3.0, device=d).index_select(0, torch.tensor([0, 0], device=d)),
], ids=["amax_over_empty_dim", "inf_norm_over_empty_dim", "pool_empty_channels", "gather_rank_mismatch", "index_select_0d_two_indices"])
def test_errors_stay_the_cpus(fn):
    with pytest.raises((RuntimeError, IndexError)) as cpu:
        fn("cpu")
    with pytest.raises(type(cpu.value)):
        fn("ember")


def test_empty_batch_pooling_backward(native_only):
    x = torch.ones(0, 3, 8, 8, device="ember", requires_grad=True)
    (F.avg_pool2d(x, 2).sum() + F.max_pool2d(x, 2).sum() + F.adaptive_avg_pool2d(x, 3).sum()).backward()
    assert x.grad.shape == x.shape


def test_layer_norm_of_no_rows_backward(native_only):
    grads = []
    for d in ("cpu", "ember"):
        norm = torch.nn.LayerNorm(4).to(d)
        x = torch.ones(0, 4, device=d, requires_grad=True)
        norm(x).sum().backward()
        grads.append([x.grad, norm.weight.grad, norm.bias.grad])
    for want, got in zip(*grads):
        assert got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want)


def test_no_degrees_of_freedom_warns_as_on_cpu(native_only):
    for d in ("cpu", "ember"):
        with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
            torch.ones(1, device=d).var()


@pytest.mark.parametrize("fn", [
    lambda: torch.tensor(3.0, device="ember").index_select(0, torch.tensor([1], device="ember")),
    lambda: torch.tensor(1.0, device="ember").index_add(0, torch.tensor([-1], device="ember"),
                                                        torch.tensor(2.0, device="ember")),
], ids=["index_select", "index_add"])
def test_0d_index_out_of_range_is_refused(fn):
    # The check runs on the device, like CUDA's: the error surfaces at the next synchronization.
    with pytest.raises(RuntimeError, match="out of (range|bounds)"):
        fn().cpu()


@pytest.mark.parametrize("value", [0.3, float("nan"), float("inf")])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_of_a_zero_dim_tensor_compiles(op, value):
    # softmax(x, -1) of a 0-d tensor is defined (one element); the compiler refused its dim.
    fn = getattr(torch, op)
    x = torch.tensor(value)
    torch._dynamo.reset()
    got = torch.compile(lambda t: fn(t * 2, -1), backend="ember")(x.to("ember")).cpu()
    torch.testing.assert_close(got, fn(x * 2, -1), equal_nan=True)
    if value == 0.3:
        xc, xe = x.clone().requires_grad_(), x.to("ember").requires_grad_()
        fn(xc * 2, -1).backward()
        torch.compile(lambda t: fn(t * 2, -1), backend="ember")(xe).backward()
        torch.testing.assert_close(xe.grad.cpu(), xc.grad)
