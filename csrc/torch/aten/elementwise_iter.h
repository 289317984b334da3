// Running core's elementwise kernels over a PyTorch TensorIterator: the iterator does
// broadcasting, type promotion, output allocation and the out=/in-place checks exactly as for
// CPU and CUDA; this turns its geometry into a kernels::ElementwiseLoop and queues the kernel.
#pragma once

#include <ATen/TensorIterator.h>
#include <c10/core/Scalar.h>

#include "kernels/elementwise/elementwise.h"
#include "kernels/elementwise/special.h"

namespace ember::torch_glue {

// Whether the iterator's common dtype runs natively for an op that does (or does not) support
// integer compute. Complex and, unless `allow_bool`, bool go to the CPU fallback.
bool native_compute(const at::TensorIteratorBase& iter, bool integers, bool allow_bool = false);

kernels::Scalar to_kernel_scalar(const c10::Scalar& v);
// add/sub's alpha as the CPU applies it: rounded to a float16/bfloat16 computation's dtype first.
kernels::Scalar alpha_scalar(const c10::Scalar& alpha, c10::ScalarType compute);

void queue_unary(kernels::UnaryOp op, at::TensorIteratorBase& iter);
void queue_binary(kernels::BinaryOp op, at::TensorIteratorBase& iter, const c10::Scalar& alpha = c10::Scalar(1));
// A special function (order: polygamma's n), evaluated in double and rounded to the output.
void queue_special(kernels::SpecialOp op, at::TensorIteratorBase& iter, int64_t order = 0);
// `compute` defaults to the iterator's common dtype.
void queue_ternary(kernels::TernaryOp op, at::TensorIteratorBase& iter, const c10::Scalar& value,
                   std::optional<c10::ScalarType> compute = std::nullopt);

}  // namespace ember::torch_glue
