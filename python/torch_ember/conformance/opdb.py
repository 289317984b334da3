"""Which OpInfos and dtypes a run covers: PyTorch's op_db loaded, named and selected, and the ops
the harness treats specially (random outputs, ops left out). Shared by the op checks, the
property checks and the crash isolation, which all address an OpInfo by its full name."""
from __future__ import annotations

import sys
import time
import types
import unittest

import torch

# Outputs drawn from an RNG or left uninitialised: ember's stream cannot match the CPU's, so
# only shapes and dtypes are compared (and no gradients).
RANDOM_OPS = frozenset({
    "bernoulli", "cauchy", "empty", "empty_like", "empty_permuted", "empty_strided",
    "exponential", "geometric", "log_normal", "multinomial", "new_empty", "new_empty_strided",
    "nn.functional.alpha_dropout", "nn.functional.dropout", "nn.functional.dropout2d",
    "nn.functional.dropout3d", "nn.functional.feature_alpha_dropout",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
    "nn.functional.rrelu", "normal", "pca_lowrank", "rand_like", "randint", "randint_like",
    "randn", "randn_like", "svd_lowrank", "uniform",
})

# OpInfos left out (by name, or name.variant for one variant), with the reason recorded.
SKIP_OPS: dict[str, str] = {
    # Its samples are views that as_strided reads past, into the rest of the base's storage; a
    # copy to another device keeps only the view, so the CPU and ember read different memory.
    "as_strided.partial_views": "reads storage outside the input view",
}


def ensure_expecttest() -> None:
    """torch's internal test package imports `expecttest` (for expect-file tests only) from
    common_utils. Without it installed, a stand-in is enough for the harness."""
    try:
        import expecttest  # noqa: F401
    except ModuleNotFoundError:
        stub = types.ModuleType("expecttest")
        stub.TestCase, stub.ACCEPT = unittest.TestCase, False
        sys.modules["expecttest"] = stub


def load_op_db():
    ensure_expecttest()
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def full_name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def skip_reason(op) -> str | None:
    """Why `op` is left out altogether, or None."""
    return SKIP_OPS.get(full_name(op)) or SKIP_OPS.get(op.name)


def skip_before_running(op, dtype: torch.dtype, end: float) -> str | None:
    """Why (op, dtype) is not run at all: the time budget is spent (`end`, a time.monotonic()
    deadline), the op is left out, or the CPU does not support the dtype. None: run it."""
    if time.monotonic() >= end:
        return "time budget"
    if skip_reason(op):
        return skip_reason(op)
    if dtype not in op.supported_dtypes("cpu"):
        return "dtype unsupported"
    return None


def waived(op, test: str, dtype: torch.dtype) -> bool:
    """PyTorch's own OpInfo marks `test` (a TestCommon test: test_out, ...) an expected failure
    or a skip for `dtype` on the CPU or CUDA: a property PyTorch does not hold for this op, so
    ember is not held to it either."""
    from torch.testing._internal.opinfo.core import DecorateInfo

    for info in op.decorators or ():
        if not isinstance(info, DecorateInfo):
            continue
        if not any(info.is_active("TestCommon", test, device, dtype, {}) for device in ("cpu", "cuda")):
            continue
        if any(d is unittest.expectedFailure or getattr(d, "__qualname__", "").startswith("skip.")
               for d in info.decorators):
            return True
    return False


def select_ops(op_db, names=None):
    """All of op_db, or those whose name or name.variant is listed (a bare name takes every
    variant)."""
    if not names:
        return list(op_db)
    wanted = set(names)
    chosen = [op for op in op_db if op.name in wanted or full_name(op) in wanted]
    unknown = wanted - {op.name for op in chosen} - {full_name(op) for op in chosen}
    if unknown:
        raise ValueError(f"not in op_db: {', '.join(sorted(unknown))}")
    return chosen


def parse_dtype(name) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    dtype = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
