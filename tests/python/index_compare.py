"""Comparison helpers shared by the indexing tests (test_index.py, test_scatter.py)."""
import pytest
import torch


def sample(shape, dtype, seed=0):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 3
    return (x > 0) if dtype == torch.bool else x.to(dtype)


def to_e(a):
    return a.to("ember") if isinstance(a, torch.Tensor) else a


def same_outcome(fn, *args):
    """fn on CPU and on ember give the same values, or both fail. Bounds checks run on the device,
    as on CUDA, so ember's error may be a RuntimeError at the next synchronizing call."""
    try:
        expected = fn(*args)
    except Exception as err:
        with pytest.raises((type(err), RuntimeError)):
            fn(*map(to_e, args))
            torch.ember.synchronize()
        return
    got = fn(*map(to_e, args))
    assert got.device.type == "ember" and got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected)
