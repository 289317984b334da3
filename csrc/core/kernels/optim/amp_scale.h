// The two kernels of AMP's dynamic loss scaling (torch.amp.GradScaler): unscale the gradients
// while looking for inf/NaN, then grow or back off the scale. Both read and write their scalars
// in device memory, so a training step never waits for the host.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

// grad *= inv_scale (float16/bfloat16/float32/float64, contiguous); true if any element of the
// gradient was inf or NaN. The caller raises found_inf: one flag covers many tensors.
StatusOr<bool> unscale_check_finite(const TensorView& grad, float inv_scale, runtime::ThreadPool* pool);

// PyTorch's _amp_update_scale_: after a step with inf/NaN the scale shrinks by backoff_factor
// and the tracker resets; after growth_interval clean steps in a row it grows by growth_factor
// (kept only if the result is finite).
void update_scale(float* scale, int32_t* growth_tracker, const float* found_inf, double growth_factor,
                  double backoff_factor, int64_t growth_interval);

}  // namespace ember::kernels
