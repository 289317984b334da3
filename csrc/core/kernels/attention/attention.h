// Scaled dot-product attention, forward and backward, for the fused-attention path
// (torch.nn.functional.scaled_dot_product_attention).
//
// Shapes: q [B, Hq, Lq, D], k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv], out [B, Hq, Lq, Dv],
// lse [B, Hq, Lq] (float32: log-sum-exp of each query's scaled, masked scores, saved for the
// backward). Hq must be a multiple of Hkv (grouped-query attention: query head h reads kv head
// h / (Hq / Hkv)). Any strides, but the last dimension of q, k, v, out and grads has stride 1.
// Inputs are float32, bfloat16 or float16 (all the same); arithmetic is float32 with float32
// accumulation; outputs are stored in their own dtype.
//
// Masks: `causal` keeps key j for query i when j <= i (top-left aligned, as PyTorch's
// is_causal). `mask` (data == nullptr when absent) is broadcastable to [B, Hq, Lq, Lk] through
// its strides (0 on broadcast dims; size-1 dims broadcast too, and fewer than 4 dims align to
// the right): bool (true = attend) or a float additive bias in the inputs' dtype or float32.
// A query row with every key masked produces 0 output (and lse -inf) rather than NaN, and zero
// gradients. scale multiplies q·k (PyTorch's default is 1/sqrt(D), passed in).
//
// Work is split over (B, Hq, blocks of queries) on the pool. The backward accumulates grad_k
// and grad_v without races: each contiguous range of tasks owns the (batch, kv head) groups it
// covers, and groups split between ranges are summed afterwards in a fixed order. out, lse and
// grad_q are bitwise the same for any pool; grad_k and grad_v may differ in the last bits
// between pool sizes (not between runs with the same pool).
#pragma once

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

struct AttentionArgs {
    TensorView q, k, v;
    TensorView mask;  // optional
    bool causal = false;
    double scale = 1.0;
    TensorView out;
    TensorView lse;  // float32 [B, Hq, Lq]
};

Status attention_forward(const AttentionArgs& args, runtime::ThreadPool* pool);

struct AttentionBackwardArgs {
    TensorView grad_out;  // [B, Hq, Lq, Dv]
    TensorView q, k, v, out, lse;
    TensorView mask;  // optional, as in the forward
    bool causal = false;
    double scale = 1.0;
    TensorView grad_q;  // [B, Hq, Lq, D]
    TensorView grad_k;  // [B, Hkv, Lk, D]  (summed over the query heads of each group)
    TensorView grad_v;  // [B, Hkv, Lk, Dv]
};

Status attention_backward(const AttentionBackwardArgs& args, runtime::ThreadPool* pool);

}  // namespace ember::kernels
