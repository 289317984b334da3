"""torch.optim.SGD(fused=True) for bfloat16 and float16 parameters, computed in float and rounded
once per tensor, as CUDA's fused kernel does. PyTorch's CPU kernel (which the fallback would run)
leaves 16-bit tensors of 16 or more elements unchanged, so training would silently stop. Float32
and float64 parameters keep the CPU kernel (returns NotImplemented), whose results they match.

The update per parameter p with gradient g (the fused kernel's order): with grad_scale, g is
divided by it and written back; a step with found_inf == 1 changes nothing (selected on the
device, so no value is read back and a captured step replays); then
    g = -g if maximize;  g += weight_decay * p
    buf = g on the first step, else momentum * buf + (1 - dampening) * g   (momentum != 0)
    g = g + momentum * buf if nesterov else buf
    p -= lr * g
"""
import torch

_HALF = (torch.bfloat16, torch.float16)


def _serves(params, grads, bufs, momentum) -> bool:
    if not params or len(grads) != len(params) or (momentum != 0 and len(bufs) != len(params)):
        return False
    tensors = [*params, *grads, *(bufs if momentum != 0 else [])]
    dtype, device = params[0].dtype, params[0].device
    return dtype in _HALF and all(t.dtype == dtype and t.device == device for t in tensors)


def _fused_sgd_(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening, nesterov, maximize,
                is_first_step, grad_scale=None, found_inf=None):
    if not _serves(params, grads, momentum_buffer_list, momentum):
        return NotImplemented
    skip = None if found_inf is None else found_inf.to(torch.float32) == 1

    def store(dst, value):
        value = value.to(dst.dtype)
        dst.copy_(value if skip is None else torch.where(skip, dst, value))

    lr = lr.to(torch.float32) if isinstance(lr, torch.Tensor) else lr
    for i, (p, g) in enumerate(zip(params, grads)):
        gf = g.to(torch.float32)
        if grad_scale is not None:
            gf = gf / grad_scale.to(torch.float32)
            store(g, gf)
        if maximize:
            gf = gf.neg()
        pf = p.to(torch.float32)
        if weight_decay != 0:
            gf = gf + pf * weight_decay
        if momentum != 0:
            buf = momentum_buffer_list[i]
            bf = gf if is_first_step else buf.to(torch.float32) * momentum + gf * (1 - dampening)
            store(buf, bf)
            gf = gf + bf * momentum if nesterov else bf
        store(p, pf - gf * lr)


OPS = {"_fused_sgd_": _fused_sgd_, "_fused_sgd_.tensor_lr": _fused_sgd_}
EAGER_ONLY = frozenset(OPS)
