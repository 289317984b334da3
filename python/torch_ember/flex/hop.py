"""The ember kernels of FlexAttention's higher-order ops (flex_attention and its backward), for
eager calls and for the library steps of compiled graphs alike.

When score_mod, mask_mod and (for the backward) score_mod's gradient compile to programs
(program.py), the call runs core's fused kernels through ember::flex_attention[_backward]: the
scores of each block of queries against the key blocks the block mask lists are computed,
modified, masked and folded into an online softmax in cache; empty blocks are skipped and full
blocks skip mask_mod; captured tensors that need gradients (learned bias tables) get them from the
gradient program's scatters. Otherwise (an op the programs lack, float64 inputs) it runs PyTorch's
dense implementation, as before: the same results, more time and memory. `last_paths()` says which one the latest forward and backward took, and why.
"""
import importlib
import threading
import weakref

import torch
from torch._C import DispatchKey
from torch.amp.autocast_mode import _cast as _autocast_cast

# The module (torch._higher_order_ops re-exports the op object under the same name).
_hop = importlib.import_module("torch._higher_order_ops.flex_attention")

from . import program as _program

_traces = weakref.WeakKeyDictionary()  # mod -> {signature: traced GraphModule or Unsupported}
_lock = threading.Lock()
# The latest path of each op (the backward runs on autograd's device thread, so not thread-local).
_last = {"forward": "none", "backward": "none"}

SCORE_ROLES = ("score", "batch", "head", "query", "key")
MASK_ROLES = ("batch", "head", "query", "key")
GRAD_ROLES = ("score", "batch", "head", "query", "key", "grad")


def last_paths() -> dict:
    """{"forward": ..., "backward": ...}: "fused", or "dense (<why>)", for the latest calls."""
    return dict(_last)


def _signature(buffers):
    # A number among the buffers (a mod's closure over a window size that Dynamo turned into an
    # input after it changed) is traced as a constant, so its value belongs to the key: keyed
    # by type alone, every later window reused the program traced for the first.
    return tuple((tuple(b.shape), b.dtype, b.device.type) if isinstance(b, torch.Tensor)
                 else (type(b).__name__, b) if isinstance(b, (bool, int, float)) else type(b).__name__
                 for b in buffers)


def _trace(fn, roles, buffers, device):
    """fn traced to ATen ops on 0-d tensors, cached per function and buffer signature."""
    from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
    from torch.fx.experimental.proxy_tensor import make_fx

    key = (roles, _signature(buffers))
    with _lock:
        per_fn = _traces.setdefault(fn, {}) if _weakrefable(fn) else {}
        hit = per_fn.get(key)
    if hit is None:
        example = [torch.zeros((), dtype=torch.float32 if r in ("score", "grad") else torch.int32, device=device)
                   for r in roles]
        try:
            with TransformGetItemToIndex():
                hit = make_fx(fn, tracing_mode="fake")(*example, *buffers)
        except Exception as e:  # noqa: BLE001 - anything untraceable runs densely
            hit = _program.Unsupported(f"tracing failed: {type(e).__name__}: {e}")
        with _lock:
            per_fn[key] = hit
    if isinstance(hit, _program.Unsupported):
        raise hit
    return hit


def _weakrefable(fn):
    try:
        weakref.ref(fn)
        return True
    except TypeError:
        return False


def _compiled(fn, roles, buffers, device, traced=False):
    gm = fn if traced else _trace(fn, roles, buffers, device)
    return _program.build(gm, roles, buffers)


def _args(p):
    return [p.encoded(), p.constants, p.buffers] if p is not None else [[], [], []]


def _block_mask_args(block_mask):
    kv_num, kv_idx, full_num, full_idx = block_mask[2:6]
    q_block, kv_block = block_mask[-3], block_mask[-2]
    if not isinstance(kv_num, torch.Tensor) or not isinstance(kv_idx, torch.Tensor):
        raise _program.Unsupported("a block mask without kv_num_blocks / kv_indices")
    return [kv_num, kv_idx, full_num, full_idx, int(q_block), int(kv_block)]


def _check_inputs(query, key, value, buffers):
    if query.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise _program.Unsupported(f"{query.dtype} inputs")
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise _program.Unsupported("mixed q, k, v dtypes")
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise _program.Unsupported("inputs that are not 4-d")
    for b in buffers:
        if isinstance(b, torch.Tensor) and b.dim() > 0 and b.device.type != "ember":
            raise _program.Unsupported(f"a captured tensor on {b.device}")
        if isinstance(b, torch.SymInt):
            raise _program.Unsupported("symbolic sizes")


def _mask_program(block_mask, mask_buffers, device):
    from torch.nn.attention.flex_attention import noop_mask

    mask_mod = block_mask[-1]
    if mask_mod is None or mask_mod is noop_mask:
        return None
    return _compiled(mask_mod, MASK_ROLES, mask_buffers, device)


def _score_program(score_mod, score_buffers, device):
    from torch.nn.attention.flex_attention import _identity

    if score_mod is None or score_mod is _identity:
        return None
    return _compiled(score_mod, SCORE_ROLES, score_buffers, device)


def flex_forward(query, key, value, score_mod, block_mask, scale, kernel_options,
                 score_mod_other_buffers=(), mask_mod_other_buffers=()):
    try:
        _check_inputs(query, key, value, (*score_mod_other_buffers, *mask_mod_other_buffers))
        score = _score_program(score_mod, score_mod_other_buffers, query.device)
        mask = _mask_program(block_mask, mask_mod_other_buffers, query.device)
        mask_args = _block_mask_args(block_mask)
    except _program.Unsupported as e:
        _last["forward"] = f"dense ({e})"
        return _hop.sdpa_dense(query, key, value, score_mod, block_mask, scale, kernel_options,
                               score_mod_other_buffers, mask_mod_other_buffers)
    _last["forward"] = "fused"
    out, lse, max_scores = torch.ops.ember.flex_attention(query, key, value, *mask_args, float(scale),
                                                          *_args(score), *_args(mask))
    out = _hop._permute_strides(out.to(query.dtype), query.stride())
    return out, lse, max_scores


def flex_backward(query, key, value, out, logsumexp, grad_out, grad_logsumexp, fw_graph, joint_graph,
                  block_mask, scale, kernel_options, score_mod_other_buffers=(), mask_mod_other_buffers=()):
    dense = lambda: _hop.sdpa_dense_backward(  # noqa: E731
        query, key, value, out, logsumexp, grad_out, grad_logsumexp, fw_graph, joint_graph, block_mask, scale,
        kernel_options, score_mod_other_buffers, mask_mod_other_buffers)
    try:
        _check_inputs(query, key, value, (*score_mod_other_buffers, *mask_mod_other_buffers))
        score = _score_program(fw_graph, score_mod_other_buffers, query.device)
        grad = None
        if score is not None:
            if joint_graph is None:
                example = (query.new_zeros((), requires_grad=True),
                           *(query.new_zeros((), dtype=torch.int) for _ in range(4)))
                _, joint_graph = _hop.create_fw_bw_graph(fw_graph, example, score_mod_other_buffers)
            grad = _compiled(joint_graph, GRAD_ROLES, score_mod_other_buffers, query.device, traced=True)
        mask = _mask_program(block_mask, mask_mod_other_buffers, query.device)
        mask_args = _block_mask_args(block_mask)
    except _program.Unsupported as e:
        _last["backward"] = f"dense ({e})"
        return dense()
    _last["backward"] = "fused"
    targets = grad.scatter_targets() if grad is not None else []
    dq, dk, dv, target_grads = torch.ops.ember.flex_attention_backward(
        query, key, value, out, logsumexp, grad_out, grad_logsumexp, *mask_args, float(scale),
        *_args(score), *_args(mask), *_args(grad), grad.scatter_code() if grad is not None else [],
        [_at_least_1d(score_mod_other_buffers[t]) for t in targets])
    grads = []
    for g, like in ((dq, query), (dk, key), (dv, value)):
        grads.append(_hop._permute_strides(g.to(like.dtype), like.stride()))
    # A captured tensor's gradient where the gradient program scatters one and the tensor needs it.
    captured = [None] * len(score_mod_other_buffers)
    for t, g in zip(targets, target_grads):
        buf = score_mod_other_buffers[t]
        if isinstance(buf, torch.Tensor) and buf.requires_grad:
            captured[t] = g.to(buf.dtype).reshape(buf.shape)
    return (*grads, tuple(captured))


def _at_least_1d(t):
    # The kernel adds gradients into tensors of 1 to 4 dims; a 0-d one is scattered into at [0].
    return t.reshape(1) if isinstance(t, torch.Tensor) and t.dim() == 0 else t


def register() -> None:
    """Installs the two kernels (once)."""
    if DispatchKey.PrivateUse1 in _hop.flex_attention.py_kernels:
        return
    _hop.flex_attention.py_impl(DispatchKey.PrivateUse1)(flex_forward)
    _hop.flex_attention_backward.py_impl(DispatchKey.PrivateUse1)(flex_backward)
    _hop.flex_attention.py_impl(DispatchKey.AutocastPrivateUse1)(flex_autocast)


def flex_autocast(query, key, value, *rest):
    """Under torch.autocast("ember"): query, key and value cast to the autocast dtype, then the
    op below autocast, as PyTorch's CPU and CUDA autocast kernels for flex_attention do."""
    dtype = torch.get_autocast_dtype("ember")
    query, key, value = (_autocast_cast(t, "ember", dtype) for t in (query, key, value))
    with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(DispatchKey.AutocastPrivateUse1)):
        return _hop.flex_attention(query, key, value, *rest)
