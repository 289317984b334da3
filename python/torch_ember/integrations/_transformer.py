"""nn.TransformerEncoder's and nn.MultiheadAttention's inference fast paths on ember.

In eval mode with a key padding mask whose padding sits at the end of each row (left-aligned),
PyTorch packs the batch into a nested tensor, runs the layers over the real tokens only, and
unpacks with zeros at the padded positions before the final norm. Ember has no nested-tensor
kernels, so its `_nested_tensor_from_mask_left_aligned` answers False
(csrc/torch/aten/register_attention.cc) and the encoder would take its padded path, whose
padded positions hold whatever the layers computed there. For ember inputs this wrapper runs the
padded path itself when PyTorch would have nested, and gives the padded positions the nested
path's values: 0, then the final norm. Real tokens are unaffected either way: the padding is
masked out of every attention."""
import functools
import types

import torch


def _left_aligned(keep: torch.Tensor) -> bool:
    # Each row's kept positions form a prefix: `keep` never rises along the sequence.
    return keep.shape[-1] < 2 or bool((keep[:, 1:] <= keep[:, :-1]).all())


def _would_nest(enc, src, mask, pad) -> bool:
    """Whether PyTorch's TransformerEncoder.forward would convert `src` to a nested tensor (the
    conditions of torch 2.13's sparsity fast path, with the true left-alignment answer)."""
    first = enc.layers[0]
    if (not torch.backends.mha.get_fastpath_enabled() or not getattr(enc, "use_nested_tensor", False)
            or first.training or src.dim() != 3 or pad is None or mask is not None or src.is_nested
            or torch.is_autocast_enabled() or torch.compiler.is_compiling()):
        return False
    if getattr(enc, "mask_check", True) and not _left_aligned(pad.logical_not()):
        return False
    attn = first.self_attn
    params = (src, attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight, attn.out_proj.bias,
              first.norm1.weight, first.norm1.bias, first.norm2.weight, first.norm2.bias,
              first.linear1.weight, first.linear1.bias, first.linear2.weight, first.linear2.bias)
    if torch.overrides.has_torch_function(params):
        return False
    return not (torch.is_grad_enabled() and any(p.requires_grad for p in params))


def patch_encoder(module) -> None:
    original = module.TransformerEncoder.forward
    if getattr(original, "_ember", False):
        return
    F = torch.nn.functional

    @functools.wraps(original)
    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        if src.device.type != "ember" or src_key_padding_mask is None:
            return original(self, src, mask, src_key_padding_mask, is_causal)
        pad = F._canonical_mask(mask=src_key_padding_mask, mask_name="src_key_padding_mask",
                                other_type=F._none_or_dtype(mask), other_name="mask", target_type=src.dtype)
        if not _would_nest(self, src, mask, pad):
            return original(self, src, mask, src_key_padding_mask, is_causal)
        is_causal = module._detect_is_causal_mask(None, is_causal, module._get_seq_len(src, True))
        output = src
        for layer in self.layers:
            output = layer(output, src_mask=None, is_causal=is_causal, src_key_padding_mask=pad)
        output = output.masked_fill((pad != 0).unsqueeze(-1), 0.0)
        return self.norm(output) if self.norm is not None else output

    # TorchScript compiles the original's source (it follows __wrapped__) but looks its names up in
    # the wrapper's globals: give the wrapper the transformer module's names too, so
    # torch.jit.script(encoder) still finds _get_seq_len and the rest.
    forward = types.FunctionType(forward.__code__, {**original.__globals__, **forward.__globals__},
                                 forward.__name__, forward.__defaults__, forward.__closure__)
    functools.update_wrapper(forward, original)
    forward._ember = True
    module.TransformerEncoder.forward = forward


def patch_multihead_attention(module) -> None:
    """nn.MultiheadAttention's inference fast path calls `torch._native_multi_head_attention`,
    which has no ember kernel (it would run on the CPU). For ember tensors the device check that
    admits the fast path says no, so the module takes its regular path: the input projection,
    scaled_dot_product_attention (or softmax when weights are asked for) and the output
    projection, all on ember's kernels, with the same results."""
    original = module._check_arg_device
    if getattr(original, "_ember", False):
        return

    @functools.wraps(original)
    def _check_arg_device(x) -> bool:
        if x is not None and x.device.type == "ember":
            return False
        return original(x)

    _check_arg_device._ember = True
    module._check_arg_device = _check_arg_device
