"""torch.optim.SGD(fused=True) and Adagrad(fused=True) as compositions of native ops, so a fused
step runs on the device (and can be captured in a graph) instead of on the CPU fallback.

The formulas and their order are the fused kernels' (PyTorch's FusedSGDKernel / FusedAdagradKernel),
computed in the parameter's dtype, or in float32 for bfloat16 and float16 parameters and rounded
once per stored tensor, as CUDA's fused SGD does. PyTorch's CPU fused SGD leaves 16-bit tensors
of 16 or more elements unchanged, so there ember follows CUDA, not the CPU.

AMP: with grad_scale, the gradient is divided by it and written back; a step with found_inf == 1
changes nothing. Both are selected on the device, so no value is read back and a captured step
replays.

SGD, per parameter p with gradient g:
    g = -g if maximize;  g += weight_decay * p
    buf = g on the first step, else momentum * buf + (1 - dampening) * g   (momentum != 0)
    g = g + momentum * buf if nesterov else buf
    p -= lr * g
A first step skipped by found_inf leaves the new momentum buffer zero: PyTorch creates it with
empty_like and expects the kernel to write it, which a skipped step does not (uninitialized
memory would then enter every later step).

Adagrad, per parameter with its step count s (a device scalar, already incremented):
    g = -g if maximize;  g += weight_decay * p;  clr = lr / (1 + (s - 1) * lr_decay)
    state_sum += g * g;  p -= clr * g / (sqrt(state_sum) + eps)
"""
import torch

_FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _serves(dtype, device, lists, lr) -> bool:
    if dtype not in _FLOATS or device.type != "ember":
        return False
    if isinstance(lr, torch.Tensor) and lr.device not in (device, torch.device("cpu")):
        return False
    return all(t.dtype == dtype and t.device == device for ts in lists for t in ts)


def _compute_dtype(dtype):
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def _amp(found_inf):
    """store(dst, value): dst takes value (rounded to dst's dtype), unless found_inf says skip."""
    skip = None if found_inf is None else found_inf.to(torch.float32) == 1

    def store(dst, value):
        value = value.to(dst.dtype)
        dst.copy_(value if skip is None else torch.where(skip, dst, value))

    return skip, store


def _gradient(p, g, acc, grad_scale, store, maximize, weight_decay):
    """The fused kernels' common start: the gradient unscaled (and written back), negated for
    maximize, plus the weight decay; returns it and the parameter, both in `acc`."""
    gf = g.to(acc)
    if grad_scale is not None:
        gf = gf / grad_scale.to(acc)
        store(g, gf)
    if maximize:
        gf = gf.neg()
    pf = p.to(acc)
    if weight_decay != 0:
        gf = gf + pf * weight_decay
    return gf, pf


def _fused_sgd_(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening, nesterov, maximize,
                is_first_step, grad_scale=None, found_inf=None):
    if not params or len(grads) != len(params) or (momentum != 0 and len(momentum_buffer_list) != len(params)):
        return NotImplemented
    dtype, device = params[0].dtype, params[0].device
    if not _serves(dtype, device, (params, grads, momentum_buffer_list if momentum != 0 else []), lr):
        return NotImplemented
    acc = _compute_dtype(dtype)
    skip, store = _amp(found_inf)
    lr = lr.to(device=device, dtype=acc) if isinstance(lr, torch.Tensor) else lr
    for i, (p, g) in enumerate(zip(params, grads)):
        gf, pf = _gradient(p, g, acc, grad_scale, store, maximize, weight_decay)
        if momentum != 0:
            buf = momentum_buffer_list[i]
            if is_first_step:
                bf = gf
                buf.copy_((bf if skip is None else torch.where(skip, torch.zeros_like(bf), bf)).to(buf.dtype))
            else:
                bf = buf.to(acc) * momentum + gf * (1 - dampening)
                store(buf, bf)
            gf = gf + bf * momentum if nesterov else bf
        store(p, pf - gf * lr)


def _fused_adagrad_(params, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps, maximize,
                    grad_scale=None, found_inf=None):
    n = len(params)
    if not params or len(grads) != n or len(state_sums) != n or len(state_steps) != n:
        return NotImplemented
    dtype, device = params[0].dtype, params[0].device
    if not _serves(dtype, device, (params, grads, state_sums), lr) or any(
            s.device != device or s.numel() != 1 for s in state_steps):
        return NotImplemented
    acc = _compute_dtype(dtype)
    _, store = _amp(found_inf)
    lr = lr.to(device=device, dtype=torch.float64) if isinstance(lr, torch.Tensor) else lr
    for p, g, state_sum, step in zip(params, grads, state_sums, state_steps):
        gf, pf = _gradient(p, g, acc, grad_scale, store, maximize, weight_decay)
        # The CPU kernel computes the step's lr in double on the host, then rounds it.
        clr = (lr / (1.0 + (step.to(torch.float64) - 1.0) * lr_decay)).to(acc)
        total = state_sum.to(acc) + gf * gf
        store(state_sum, total)
        store(p, pf - clr * gf / (total.sqrt() + eps))


OPS = {"_fused_sgd_": _fused_sgd_, "_fused_sgd_.tensor_lr": _fused_sgd_,
       "_fused_adagrad_": _fused_adagrad_, "_fused_adagrad_.tensor_lr": _fused_adagrad_}
EAGER_ONLY = frozenset(OPS)
