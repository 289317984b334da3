"""scaled_dot_product_attention over jagged nested tensors (`torch.nested`, layout=torch.jagged).

For a query of shape (batch, heads, ragged length, dim), PyTorch picks flash or memory-efficient
attention on CUDA and otherwise its math path, which converts each input to a strided nested
tensor: a layout with kernels on the CPU and CUDA only, so on ember it stopped at the first
`transpose`. For ember inputs that would take the math path, the sequences are padded instead,
attended by the dense kernel under a key-padding mask, and cut back to the query's lengths. The
padded query rows are computed and dropped; real rows see only their own sequence's keys, as on
the math path. Autograd runs through the padding and unpadding ops, and the result shares the
query's ragged structure (its offsets), so it adds to the query's residual stream. Every other
case (other devices, masks, causal attention, the dense special case) is PyTorch's own code."""
import functools

import torch
import torch.nn.functional as F


def _padded(nt: torch.Tensor) -> torch.Tensor:
    # (B, H, j, D) jagged in dim 2 -> (B, H, L_max, D) with zeros past each sequence's end.
    return nt.transpose(1, 2).to_padded_tensor(0.0).transpose(1, 2)


def _ours(query, key, value, attn_mask, is_causal) -> bool:
    from torch.nested._internal.nested_tensor import NestedTensor

    qkv = (query, key, value)
    return (all(isinstance(t, NestedTensor) and t.device.type == "ember" and t.dim() == 4
                and t._ragged_idx == 2 and t._lengths is None and t.transpose(1, 2).is_contiguous()
                for t in qkv)
            and attn_mask is None and not is_causal)


def _attention(query, key, value, dropout_p, scale, enable_gqa):
    from torch.nested._internal.nested_tensor import nested_from_padded

    q, k, v = _padded(query), _padded(key), _padded(value)
    key_lengths = key.offsets().diff()
    keep = torch.arange(k.shape[2], device=k.device) < key_lengths[:, None]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :], dropout_p=dropout_p,
                                         scale=scale, enable_gqa=enable_gqa)
    return nested_from_padded(out.transpose(1, 2), query.offsets(), min_seqlen=query._maybe_min_seqlen,
                              max_seqlen=query._maybe_max_seqlen,
                              sum_S=query.transpose(1, 2).values().shape[0]).transpose(1, 2)


def patch_jagged_attention(ops) -> None:
    from torch.nested._internal import sdpa

    original = ops.jagged_scaled_dot_product_attention

    @functools.wraps(original)
    def jagged_scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                           is_causal=False, scale=None, enable_gqa=False):
        if not _ours(query, key, value, attn_mask, is_causal):
            return original(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        query, key, value, attn_mask = sdpa._autocast(query, key, value, attn_mask)
        sdpa._validate_sdpa_input(query, key, value, attn_mask, dropout_p, is_causal, scale)
        return _attention(query, key, value, dropout_p, scale, enable_gqa)

    ops.jagged_scaled_dot_product_attention = jagged_scaled_dot_product_attention
