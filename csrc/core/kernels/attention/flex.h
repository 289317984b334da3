// FlexAttention as fused, tiled kernels: the scores of a block of queries against a block of
// keys are computed, modified by score_mod and masked by mask_mod (flex_program.h) while in
// cache, and folded into an online softmax; blocks the block mask leaves out are never computed,
// full blocks skip mask_mod, and nothing of size queries x keys is materialized. The backward
// recomputes the probabilities from the saved logsumexp, as the forward's fused kernels on GPUs
// do, and differentiates score_mod through its gradient program.
//
// Semantics are those of PyTorch's dense reference (torch/_higher_order_ops/flex_attention.py)
// over the blocks the mask lists: scores in float32, fully masked rows give zeros and a
// logsumexp of -inf, logsumexp and row maxima are returned in log2 units (the higher-order op's
// convention). GQA: query head h reads key/value head h / (Hq / Hkv); a key/value batch of 1
// broadcasts.
//
// Layout: q (B, Hq, Lq, D), k (Bkv, Hkv, Lkv, D), v (Bkv, Hkv, Lkv, Dv), out and the gradients
// contiguous float32; lse and max (B, Hq, Lq) float32. The block mask's tensors are int32 with a
// batch and head dim of their own size or 1.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/attention/flex_program.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels::flex {

struct BlockMask {
    TensorView kv_num_blocks;    // (Bm, Hm, nQ): how many partial key blocks each query block has
    TensorView kv_indices;       // (Bm, Hm, nQ, n): which, the first kv_num_blocks of each row
    TensorView full_num_blocks;  // the same for full blocks (no mask_mod); data null when absent
    TensorView full_indices;
    int64_t q_block = 128, kv_block = 128;
};

struct Problem {
    TensorView q, k, v;
    BlockMask mask;
    const Program* score_mod = nullptr;  // null or empty: scores unchanged
    const Program* mask_mod = nullptr;   // null or empty: nothing masked inside partial blocks
    double scale = 1.0;
};

struct ForwardArgs {
    Problem p;
    TensorView out, lse, max;
};

struct BackwardArgs {
    Problem p;
    TensorView out, lse, grad_out;
    TensorView grad_lse;                  // data null when absent
    // d score_mod / d score times the incoming gradient; its scatters (and `grads`, zeroed here)
    // are the gradients of captured tensors
    const Program* score_grad = nullptr;
    TensorView dq, dk, dv;                // dk, dv: (Bkv, Hkv, Lkv, D / Dv)
};

Status forward(const ForwardArgs& args, runtime::ThreadPool* pool);
Status backward(const BackwardArgs& args, runtime::ThreadPool* pool);

}  // namespace ember::kernels::flex
