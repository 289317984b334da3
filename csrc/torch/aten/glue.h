// Helpers the register_<family>.cc files share: handing a call to the CPU fallback, and queueing
// a kernel that takes the device's thread pool on the current stream.
#pragma once

#include <ATen/Dispatch_v2.h>
#include <ATen/Operators.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>

#include "../context.h"
#include "../fallback.h"

namespace ember::torch_glue {

// Runs `Op` through the visible CPU fallback (counted and reported like any missing kernel).
template <class Op, class... Args>
decltype(auto) cpu(Args&&... args) {
    return at::native::call_fallback_fn<&ember_cpu_fallback, Op>::call(std::forward<Args>(args)...);
}

// The same, for ops whose schema has SymInt arguments.
template <class Op, class... Args>
decltype(auto) cpu_symint(Args&&... args) {
    return at::native::call_fallback_fn_symint<&ember_cpu_fallback, Op>::call(std::forward<Args>(args)...);
}

// Queues fn(pool) on the current stream of `like`'s device.
template <typename F>
void queue(const at::Tensor& like, const char* name, F&& fn) {
    c10::DeviceGuard guard(like.device());
    runtime::Device& dev = tensor_device(like);
    runtime::ThreadPool* pool = &dev.pool();
    enqueue(dev.current_stream(), name, [fn = std::forward<F>(fn), pool] { return fn(pool); });
}

// `t` seen as [outer, size(dim), inner] (a 0-d tensor as [1, 1, 1]). Dims fold only where memory
// allows (it is a view); pass a contiguous tensor when unsure. writable=false for an input.
inline kernels::TensorView fold3(const at::Tensor& t, int64_t dim, bool writable = true) {
    at::Tensor c = t.dim() == 0 ? t.reshape({1}) : t;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= c.size(d);
    for (int64_t d = dim + 1; d < c.dim(); ++d) inner *= c.size(d);
    at::Tensor v = c.view({outer, c.size(dim), inner});
    return writable ? view_of(v) : view_in(v);
}

// Prepares an out= tensor as PyTorch does, after the checks PyTorch makes first: it must be on an
// ember device (a CPU out= is refused before anything touches it, its size included), and for
// ops that read their inputs while writing (gather, index_select, ...) it must not overlap them.
inline void resize_out(at::Tensor& out, c10::IntArrayRef shape,
                       std::initializer_list<const at::Tensor*> inputs = {}) {
    TORCH_CHECK(out.device().type() == c10::DeviceType::PrivateUse1,
                "Expected all tensors to be on the same device, but found at least two devices, ember and ",
                out.device(), "!");
    for (const at::Tensor* in : inputs) {
        if (in != nullptr && in->defined()) at::assert_no_overlap(out, *in);
    }
    at::native::resize_output(out, shape);
    at::assert_no_internal_overlap(out);
}

// A real dtype the device has (complex types take the fallback).
inline bool plain_dtype(c10::ScalarType t) { return !at::isComplexType(t) && has_dtype(t); }

// bfloat16 or float16: the dtypes CUDA's kernels compute in float and round once.
inline bool half_float(c10::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

// Raises as the CPU does when a Python number does not fit the dtype it fills or bounds a
// tensor of ("value cannot be converted to type uint8_t without overflow"; a negative number
// still wraps into an unsigned type, as c10's checked conversion allows).
inline void check_scalar_fits(const c10::Scalar& v, c10::ScalarType dtype) {
    if (at::isComplexType(dtype) || v.isComplex()) return;
    AT_DISPATCH_V2(dtype, "ember_check_scalar", AT_WRAP([&] { (void)v.to<scalar_t>(); }),
                   AT_EXPAND(AT_ALL_TYPES), at::kHalf, at::kBFloat16, at::kBool);
}

}  // namespace ember::torch_glue
