// Fused Adam/AdamW: one pass over a parameter tensor that updates the moments and the parameter
// together (torch.optim.Adam/AdamW with fused=True, PyTorch's _fused_adam(w)_). A pass touches
// each element once, where the foreach path sweeps every parameter once per update op.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

struct AdamArgs {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double weight_decay = 0.0;
    double eps = 1e-8;
    bool amsgrad = false;
    bool maximize = false;
    bool decoupled = true;  // AdamW: decay the parameter; Adam: add decay * param to the gradient
    const float* lr_ptr = nullptr;  // a device scalar holding lr (tensor_lr form), read at run time
    const float* step = nullptr;    // the step count (a device scalar), read at run time
    // AMP (GradScaler): the gradient is divided by *grad_scale, and written back unscaled, before
    // the update; a step with *found_inf == 1 changes nothing. Either may be null.
    const float* grad_scale = nullptr;
    const float* found_inf = nullptr;
};

// param, grad, exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad; else data may be null):
// contiguous tensors of equal size and one dtype (float32, bfloat16 or float16), updated in
// place with PyTorch's fused formulas (float arithmetic, 16-bit values rounded once when stored;
// bias corrections in double as PyTorch computes them on the host).
Status adam_step(const TensorView& param, const TensorView& grad, const TensorView& exp_avg,
                 const TensorView& exp_avg_sq, const TensorView& max_exp_avg_sq, const AdamArgs& args,
                 runtime::ThreadPool* pool);

}  // namespace ember::kernels
